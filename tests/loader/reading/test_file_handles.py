"""Kept file descriptors for ranged reads (pi_loader.reading._file_handles): the bytes a `pread` returns,
descriptor reuse and the LRU bound, vacuumed and replaced files, forked children, threads."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pi_loader.reading import _file_handles


@pytest.fixture(autouse=True)
def _fresh_handles() -> Iterator[None]:
    """Every test starts and ends with no kept descriptor: counts do not depend on test order,
    and no test leaks descriptors of its tmp_path files into the next."""
    _file_handles._close_inherited()
    yield
    _file_handles._close_inherited()


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _content(i: int, size: int = 4096) -> bytes:
    """Bytes that differ per file and per offset, so a read from the wrong file or offset shows."""
    return bytes((i * 31 + k * 7 + (k >> 8)) % 256 for k in range(size))


def test_reads_return_the_bytes_at_their_offsets(tmp_path: Path) -> None:
    data = _content(1, 1000)
    path = _write(tmp_path / "a.bin", data)
    assert _file_handles.pread(path, 0, 4) == data[:4]
    assert _file_handles.pread(path, 123, 200) == data[123:323]
    assert _file_handles.pread(path, 990, 50) == data[990:]  # short read: only what the file holds
    assert _file_handles.pread(path, 1000, 8) == b""  # at the end: nothing, not an error
    assert _file_handles.pread(path, 5, 0) == b""


def test_a_second_read_reuses_the_descriptor(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.bin", _content(2))
    _file_handles.pread(path, 0, 10)
    assert _file_handles.open_count() == 1
    fd = _file_handles._open[path].fd
    for offset in range(0, 4000, 400):
        assert _file_handles.pread(path, offset, 16) == _content(2)[offset : offset + 16]
    assert _file_handles.open_count() == 1
    assert _file_handles._open[path].fd == fd  # the same descriptor, not one reopened


def test_open_descriptors_stay_within_max_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_file_handles, "MAX_OPEN", 3)
    paths = [_write(tmp_path / f"{i}.bin", _content(i)) for i in range(8)]
    for i, path in enumerate(paths):
        assert _file_handles.pread(path, 100, 50) == _content(i)[100:150]
        assert _file_handles.open_count() <= 3
    assert list(_file_handles._open) == paths[-3:]  # the least recently used were closed first
    # Evicted files open again on their next read, and still read right.
    for i, path in enumerate(paths):
        assert _file_handles.pread(path, 7, 9) == _content(i)[7:16]
        assert _file_handles.open_count() <= 3


def test_a_missing_file_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        _file_handles.pread(str(tmp_path / "absent.bin"), 0, 4)
    assert _file_handles.open_count() == 0


def test_a_file_deleted_while_kept_reads_its_old_bytes(tmp_path: Path) -> None:
    # A vacuum deletes a file a reader pinned to an older snapshot still reads: documented to work
    # for as long as the descriptor is kept.
    data = _content(3)
    path = _write(tmp_path / "a.bin", data)
    assert _file_handles.pread(path, 0, 8) == data[:8]
    os.remove(path)
    assert _file_handles.pread(path, 100, 30) == data[100:130]
    _file_handles._close_inherited()  # once the descriptor is gone, so is the file
    with pytest.raises(FileNotFoundError):
        _file_handles.pread(path, 0, 8)


def test_a_key_tells_a_replaced_file_from_its_predecessor(tmp_path: Path) -> None:
    old, new = b"old content of the index", b"NEW CONTENT OF THE INDEX, longer"
    path = _write(tmp_path / "index.bin", old)
    first = ("k", os.stat(path).st_ino)
    assert _file_handles.pread(path, 0, 64, key=first) == old
    replacement = _write(tmp_path / "index.tmp", new)
    os.replace(replacement, path)  # how a host index is rebuilt: never rewritten in place
    second = ("k", os.stat(path).st_ino)
    assert second != first
    assert _file_handles.pread(path, 0, 64, key=second) == new
    # The old key still names the old descriptor: its own (replaced) bytes.
    assert _file_handles.pread(path, 0, 64, key=first) == old
    assert _file_handles.open_count() == 2


def test_a_forked_child_closes_the_descriptors_it_inherited(tmp_path: Path) -> None:
    data = _content(4)
    paths = [_write(tmp_path / f"{i}.bin", _content(4 + i)) for i in range(3)]
    for path in paths:
        _file_handles.pread(path, 0, 1)
    assert _file_handles.open_count() == 3
    pid = os.fork()
    if pid == 0:  # the child: report through the exit code only, never return into pytest
        code = 1
        try:
            if _file_handles.open_count() != 0:
                code = 2
            elif _file_handles.pread(paths[0], 10, 20) != data[10:30]:
                code = 3
            elif _file_handles.open_count() != 1:
                code = 4
            else:
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status)
    assert os.WEXITSTATUS(status) == 0, "child: 2 = kept inherited handles, 3 = wrong bytes, 4 = not kept"
    assert _file_handles.open_count() == 3  # the parent's handles are its own, untouched
    assert _file_handles.pread(paths[1], 0, 16) == _content(5)[:16]


def test_threads_read_right_bytes_while_others_evict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 20 files through 4 descriptors: handles are evicted while other threads read through them,
    # which must neither close a descriptor under a read nor hand a read another file's bytes.
    monkeypatch.setattr(_file_handles, "MAX_OPEN", 4)
    files = [(_write(tmp_path / f"{i}.bin", _content(i)), _content(i)) for i in range(20)]
    errors: list[str] = []
    start = threading.Barrier(8)

    def reader(t: int) -> None:
        start.wait()
        for n in range(200):
            index = (t * 7 + n * 3) % len(files)
            offset, size = (n * 97 + t * 13) % 4000, 1 + (n * 31) % 120
            path, data = files[index]
            try:
                got = _file_handles.pread(path, offset, size)
            except OSError as err:
                errors.append(f"thread {t} read {n}: {err!r}")
                continue
            if got != data[offset : offset + size]:
                errors.append(f"thread {t} read {n}: wrong bytes from file {index} at {offset}")

    threads = [threading.Thread(target=reader, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert _file_handles.open_count() <= 4
    # Every handle still kept is open and reads its own file.
    for name, handle in list(_file_handles._open.items()):
        assert isinstance(name, str)
        assert os.pread(handle.fd, 16, 0) == dict(files)[name][:16]
