"""pi_loader's storage: local pass-through, and s3:// through a real S3 endpoint into the disk cache.

The S3 endpoint is the session's SeaweedFS (tests/fixtures/seaweedfs.py): deltalake writes real
Delta tables to it over HTTP and pyarrow's S3 client reads them back, as they would from AWS.
moto's server (tests/fixtures/s3_server.py) stays where the test stops the store under the cache.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from pi_loader import Dataset, Loader
from pi_loader.reading._cache import CacheConfig, StorageError
from pi_loader.reading._storage import (
    LocalStorage,
    RemoteFileNotFoundError,
    RetryConfig,
    S3Options,
    S3Storage,
    Storage,
    StoreUnreachableError,
    storage_for,
)

from tests.fixtures.lake_factory import write_lake
from tests.fixtures.s3_server import s3_endpoint
from tests.fixtures.seaweedfs import SeaweedS3

FILES = 6  # one Delta commit per file


@pytest.fixture(scope="module")
def s3(seaweed: SeaweedS3) -> Iterator[SeaweedS3]:
    yield seaweed


def _batch(i: int) -> pa.Table:
    rng = np.random.default_rng(i)
    return pa.table(
        {
            "step": pa.array(np.arange(i * 500, (i + 1) * 500), pa.int64()),
            "proprio": pa.array(rng.standard_normal(500).astype(np.float32)),
            "blob": pa.array([rng.bytes(64) for _ in range(500)], pa.binary()),
        }
    )


@pytest.fixture(scope="module")
def s3_table(s3: SeaweedS3) -> tuple[str, list[str]]:
    """A Delta table of FILES data files on the S3 endpoint, and its file URIs."""
    uri = s3.uri("lake/steps")
    for i in range(FILES):
        write_deltalake(uri, _batch(i), mode="append", storage_options=s3.storage_options)
    files = DeltaTable(uri, storage_options=s3.storage_options).file_uris()
    assert len(files) == FILES and all(f.startswith("s3://") for f in files)
    return uri, files


def _direct_bytes(s3: SeaweedS3, uri: str) -> bytes:
    """The object's bytes, read straight from the endpoint without pi_loader."""
    fs = S3Options.from_storage_options(s3.storage_options).filesystem()
    with fs.open_input_stream(uri.removeprefix("s3://")) as f:
        data: bytes = f.read()
    return data


# -- options -------------------------------------------------------------------------------


def test_options_follow_deltalake_names_case_insensitively() -> None:
    opts = S3Options.from_storage_options(
        {
            "aws_access_key_id": "AKIAEXAMPLE",
            "AWS_SECRET_ACCESS_KEY": "s3cr3t",
            "Aws_Session_Token": "tok3n",
            "region": "eu-west-1",
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
            "AWS_ALLOW_HTTP": "TRUE",
            "AWS_S3_ALLOW_UNSAFE_RENAME": "true",  # a writer option: accepted, ignored
        },
        environ={},
    )
    assert opts == S3Options("AKIAEXAMPLE", "s3cr3t", "tok3n", "eu-west-1", "http://127.0.0.1:9000", True)
    assert opts.secrets() == ("AKIAEXAMPLE", "s3cr3t", "tok3n")
    text = repr(opts)
    assert "eu-west-1" in text and "127.0.0.1:9000" in text
    for secret in opts.secrets():
        assert secret not in text


def test_options_fall_back_to_the_environment_but_not_for_credentials() -> None:
    env = {
        "AWS_DEFAULT_REGION": "ap-south-1",
        "AWS_ENDPOINT_URL": "https://minio.internal:9000",
        "AWS_ACCESS_KEY_ID": "AKIAENV",
        "AWS_SECRET_ACCESS_KEY": "envsecret",
    }
    opts = S3Options.from_storage_options(None, environ=env)
    assert (opts.region, opts.endpoint_url) == ("ap-south-1", "https://minio.internal:9000")
    # Left to the AWS SDK's own chain, so they are not copied into pickled storages.
    assert opts.access_key_id is None and opts.secret_access_key is None
    explicit = S3Options.from_storage_options({"AWS_REGION": "us-west-2"}, environ=env)
    assert explicit.region == "us-west-2"


def test_option_errors_name_the_key_never_the_secret() -> None:
    with pytest.raises(ValueError, match=r"unknown storage option 'AWS_SECRET_KEY'") as info:
        S3Options.from_storage_options({"AWS_SECRET_KEY": "hunter2-secret"}, environ={})
    assert "hunter2-secret" not in str(info.value)
    with pytest.raises(ValueError, match="AWS_ACCESS_KEY_ID without its pair"):
        S3Options.from_storage_options({"AWS_ACCESS_KEY_ID": "AKIA"}, environ={})
    with pytest.raises(ValueError, match="AWS_SECRET_ACCESS_KEY without its pair") as info:
        S3Options.from_storage_options({"AWS_SECRET_ACCESS_KEY": "hunter2-secret"}, environ={})
    assert "hunter2-secret" not in str(info.value)
    with pytest.raises(ValueError, match="is plain http; set AWS_ALLOW_HTTP='true'"):
        S3Options.from_storage_options({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}, environ={})
    with pytest.raises(ValueError, match="must look like http"):
        S3Options.from_storage_options({"AWS_ENDPOINT_URL": "127.0.0.1:9000"}, environ={})
    with pytest.raises(ValueError, match="must not carry user info") as info:
        S3Options.from_storage_options({"AWS_ENDPOINT_URL": "https://me:hunter2-secret@host"}, environ={})
    assert "hunter2-secret" not in str(info.value)
    with pytest.raises(ValueError, match="AWS_ALLOW_HTTP must be 'true' or 'false', got 'maybe'"):
        S3Options.from_storage_options({"AWS_ALLOW_HTTP": "maybe"}, environ={})
    with pytest.raises(TypeError, match="keys and values must be str"):
        S3Options.from_storage_options({"AWS_REGION": 5}, environ={})  # type: ignore[dict-item]


# -- storage_for ---------------------------------------------------------------------------


def test_storage_for_local_lake_passes_paths_through(tmp_path: Path) -> None:
    table = str(tmp_path / "lake" / "steps")
    write_deltalake(table, _batch(0))
    storage = storage_for(str(tmp_path / "lake"), cache=CacheConfig(tmp_path / "cache", 10))
    assert isinstance(storage, LocalStorage) and isinstance(storage, Storage)
    (uri,) = DeltaTable(table).file_uris()
    assert storage.local_path(uri) == uri  # the file itself, no copy
    assert storage.local_path("file://" + uri) == uri
    assert not (tmp_path / "cache").exists()
    assert pq.read_table(storage.local_path(uri)).equals(_batch(0))
    assert isinstance(storage_for("file://" + str(tmp_path)), LocalStorage)
    with pytest.raises(ValueError, match="LocalStorage reads local paths only"):
        storage.local_path("s3://bucket/x.parquet")


def test_storage_for_argument_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a local disk cache: pass cache=CacheConfig"):
        storage_for("s3://bucket/lake")
    with pytest.raises(NotImplementedError, match="gs:// is not supported yet"):
        storage_for("gs://bucket/lake", cache=CacheConfig(tmp_path, 10))
    with pytest.raises(ValueError, match="non-empty path or URI"):
        storage_for("")
    with pytest.raises(TypeError, match="cache must be a CacheConfig"):
        S3Storage(S3Options(), tmp_path)  # type: ignore[arg-type]


# -- s3:// through the cache ---------------------------------------------------------------


def test_s3_files_download_once_then_hit(
    s3: SeaweedS3, s3_table: tuple[str, list[str]], tmp_path: Path
) -> None:
    table_uri, files = s3_table
    storage = storage_for(
        s3.uri("lake"), storage_options=s3.storage_options, cache=CacheConfig(tmp_path, 10**8)
    )
    assert isinstance(storage, S3Storage) and isinstance(storage, Storage)
    first = [storage.local_path(f) for f in files]
    assert len(set(first)) == FILES and all(
        p.startswith(str(tmp_path)) and p.endswith(".parquet") for p in first
    )
    for uri, path in zip(files, first, strict=True):
        assert Path(path).read_bytes() == _direct_bytes(s3, uri)
    stats = storage.stats()
    assert (stats.hits, stats.misses, stats.evictions) == (0, FILES, 0)
    assert stats.downloaded_bytes == stats.size_bytes == sum(Path(p).stat().st_size for p in first)

    assert [storage.local_path(f) for f in files] == first
    stats = storage.stats()
    assert (stats.hits, stats.misses) == (FILES, FILES)

    # The cached files are the table: read locally they equal deltalake's own read from S3.
    local = pa.concat_tables(pq.read_table(p) for p in first).sort_by("step")
    remote = DeltaTable(table_uri, storage_options=s3.storage_options).to_pyarrow_table().sort_by("step")
    assert local.equals(remote)


def test_s3_small_cache_evicts_and_stays_under_limit(
    s3: SeaweedS3, s3_table: tuple[str, list[str]], tmp_path: Path
) -> None:
    _, files = s3_table
    sizes = [len(_direct_bytes(s3, f)) for f in files]
    limit = max(sizes) * 2 + 1  # two files fit, a third evicts
    storage = storage_for(
        s3.uri("lake"), storage_options=s3.storage_options, cache=CacheConfig(tmp_path, limit)
    )
    assert isinstance(storage, S3Storage)
    for _ in range(2):
        for uri in files:
            path = storage.local_path(uri)
            assert Path(path).read_bytes() == _direct_bytes(s3, uri)
            assert storage.cache.scan_size_bytes() <= limit
    stats = storage.stats()
    assert stats.evictions >= FILES and stats.misses == 2 * FILES  # a cyclic scan defeats LRU
    assert stats.size_bytes == storage.cache.scan_size_bytes() <= limit


def test_s3_storage_pickles_without_leaking_secrets_into_repr(s3: SeaweedS3, tmp_path: Path) -> None:
    storage = storage_for(
        s3.uri("lake"), storage_options=s3.storage_options, cache=CacheConfig(tmp_path, 10**6)
    )
    assert s3.secret_access_key not in repr(storage)
    clone = pickle.loads(pickle.dumps(storage))
    assert isinstance(clone, S3Storage) and repr(clone) == repr(storage)


def test_s3_missing_object_and_dead_endpoint_are_storage_errors(
    s3: SeaweedS3, s3_table: tuple[str, list[str]], tmp_path: Path
) -> None:
    storage = storage_for(
        s3.uri("lake"), storage_options=s3.storage_options, cache=CacheConfig(tmp_path, 10**6)
    )
    missing = s3.uri("lake/steps/part-vacuumed.parquet")
    with pytest.raises(
        RemoteFileNotFoundError, match=r"is not a file on http://127\.0\.0\.1:.*was it vacuumed"
    ) as info:
        storage.local_path(missing)
    assert s3.secret_access_key not in str(info.value)
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, StorageError)
    with pytest.raises(ValueError, match="expected an s3://bucket/key URI"):
        storage.local_path("s3://bucket-only")

    dead = dict(s3.storage_options, AWS_ENDPOINT_URL="http://127.0.0.1:9")  # discard port: refused
    dead_storage = storage_for(
        s3.uri("lake"),
        storage_options=dead,
        cache=CacheConfig(tmp_path, 10**6),
        retry=RetryConfig(deadline_s=1),
    )
    with pytest.raises(
        StoreUnreachableError, match=r"127\.0\.0\.1:9 is unreachable: stat s3://"
    ) as dead_info:
        dead_storage.local_path(s3_table[1][0])
    assert not isinstance(dead_info.value, FileNotFoundError)  # unreachable is not "vacuumed"
    assert s3.secret_access_key not in str(dead_info.value) and dead_info.value.__cause__ is None


def _read_all(storage: Storage, files: list[str], out: mp.Queue) -> None:
    digests = {f: hashlib.sha256(Path(storage.local_path(f)).read_bytes()).hexdigest() for f in files}
    assert isinstance(storage, S3Storage)
    stats = storage.stats()
    out.put((digests, stats.hits, stats.misses, stats.evictions))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_s3_two_processes_fill_one_cache(
    s3: SeaweedS3, s3_table: tuple[str, list[str]], tmp_path: Path, method: str
) -> None:
    _, files = s3_table
    want = {f: hashlib.sha256(_direct_bytes(s3, f)).hexdigest() for f in files}
    limit = sum(len(_direct_bytes(s3, f)) for f in files) // 2  # half the table: evictions too
    storage = storage_for(
        s3.uri("lake"), storage_options=s3.storage_options, cache=CacheConfig(tmp_path, limit)
    )
    storage.local_path(files[0])  # the parent's S3 client exists before the fork
    ctx: Any = mp.get_context(method)
    out: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=_read_all, args=(storage, order, out)) for order in (files, files[::-1])]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    for digests, *_ in results:
        assert digests == want
    assert sum(r[1] + r[2] for r in results) == 2 * FILES
    assert isinstance(storage, S3Storage)
    assert storage.stats().size_bytes == storage.cache.scan_size_bytes() <= limit
    assert list((tmp_path / "tmp").iterdir()) == []


# -- Dataset over s3:// ---------------------------------------------------------------------


def test_dataset_on_s3_equals_the_local_dataset(s3: SeaweedS3, tmp_path: Path) -> None:
    lake = write_lake(tmp_path / "lake", episodes=2, steps=6, cameras=("front", "wrist"), size=(48, 32))
    # Delta logs name data files relative to the table root, so a copied lake is the same lake.
    s3fs = S3Options.from_storage_options(s3.storage_options).filesystem()
    # (pyarrow.fs.copy_files hangs here with pyarrow 16.1 and an S3 destination: upload one by one.)
    for path in sorted((tmp_path / "lake").rglob("*")):
        if path.is_file():
            key = f"{s3.bucket}/copied-lake/{path.relative_to(tmp_path / 'lake').as_posix()}"
            with s3fs.open_output_stream(key) as out:
                out.write(path.read_bytes())

    local = Dataset(str(tmp_path / "lake"), episode_ids=lake.episode_ids, seed=5, action_horizon=4)
    remote = Dataset(
        s3.uri("copied-lake"),
        episode_ids=lake.episode_ids,
        seed=5,
        action_horizon=4,
        storage_options=s3.storage_options,
        cache=CacheConfig(tmp_path / "cache", 10**8),
    )
    assert len(remote) == len(local) > 0
    for i in range(len(local)):
        a, b = local[i], remote[i]
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(a[key], np.ndarray):
                np.testing.assert_array_equal(np.asarray(a[key]), np.asarray(b[key]), err_msg=key)
            else:
                assert a[key] == b[key], key
    assert any((tmp_path / "cache" / "objects").rglob("*.parquet"))  # it read through the cache

    # Worker processes (forked after the parent's S3 client exists, and spawned) fill a fresh cache.
    for method in ("fork", "spawn"):
        fresh = Dataset(
            s3.uri("copied-lake"),
            episode_ids=lake.episode_ids,
            seed=5,
            action_horizon=4,
            storage_options=s3.storage_options,
            cache=CacheConfig(tmp_path / f"cache-{method}", 10**8),
        )
        cached_at_open = len(list((tmp_path / f"cache-{method}").rglob("*.r*-*")))
        want = list(Loader(local, batch_size=4, num_workers=0))
        got = list(Loader(fresh, batch_size=4, num_workers=2, mp_context=method))
        # byte ranges of the video and steps files were fetched by the workers, into the host cache
        assert len(list((tmp_path / f"cache-{method}").rglob("*.r*-*"))) > cached_at_open, method
        assert len(got) == len(want) > 1, method
        for want_batch, got_batch in zip(want, got, strict=True):
            assert want_batch.keys() == got_batch.keys()
            for key in want_batch:
                np.testing.assert_array_equal(
                    np.asarray(want_batch[key]), np.asarray(got_batch[key]), err_msg=f"{method} {key}"
                )


def test_s3_hits_need_no_request_to_the_store(tmp_path: Path) -> None:
    with s3_endpoint(bucket="short-lived") as endpoint:
        uri = endpoint.uri("lake/steps")
        write_deltalake(uri, _batch(3), storage_options=endpoint.storage_options)
        (file_uri,) = DeltaTable(uri, storage_options=endpoint.storage_options).file_uris()
        storage = storage_for(
            endpoint.uri("lake"),
            storage_options=endpoint.storage_options,
            cache=CacheConfig(tmp_path, 10**6),
            retry=RetryConfig(deadline_s=1),
        )
        path = storage.local_path(file_uri)
    # The store is gone: a hit is served from the disk alone (no HEAD request per hit either).
    assert storage.local_path(file_uri) == path
    assert pq.read_table(path).equals(_batch(3))
    with pytest.raises(StoreUnreachableError, match="unreachable: stat s3://"):
        storage.local_path(file_uri.replace("part-", "other-part-"))
