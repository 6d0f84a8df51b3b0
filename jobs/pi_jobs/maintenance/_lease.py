"""The maintenance lock of a lake on object storage: a lease object written with conditional PUTs.

A file lock cannot serialise processes on different hosts, and S3 has no locks; what it has (AWS
since 2024, MinIO, R2, SeaweedFS) is the conditional PUT: `If-None-Match: *` creates an object
only if none exists, `If-Match: <etag>` replaces it only if nobody replaced it meanwhile. The
lease is one small JSON object beside the lake's tables, `<lake>/_pilake_maintenance.lease`:

- acquire: create it with `If-None-Match: *`. If it exists, read it: a holder whose `expires_at`
  has not passed owns the lake (MaintenanceBusyError names its operation, host and pid); an
  expired or released one is taken over with `If-Match` on the ETag just read, so of two
  contenders that read the same expired lease exactly one wins.
- renew: a background thread re-writes it with `If-Match` every `ttl_s / 3`, pushing
  `expires_at` on. A 412 means another process took it over (this one stalled past the TTL): the
  lease is marked lost, and `ensure_held` / the release raise MaintenanceLeaseLostError.
- release: re-write it as released (`expires_at` 0) with `If-Match`, never a blind DELETE (that
  could remove a lease someone else took over).

Expiry compares the holder's clock with the contender's: hosts must agree to well under the TTL
(60 s by default; NTP keeps them within milliseconds).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pi_jobs.errors import PiJobsError

log = logging.getLogger("pi_jobs.maintenance")

LEASE_NAME = "_pilake_maintenance.lease"
# 60 s: a stalled holder (a paused VM, a lost network) blocks the next operation at most this
# long, while a renewal every 20 s leaves two missed renewals of slack.
DEFAULT_LEASE_TTL_S = 60.0
_TAKEN = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "412", "409"})


class MaintenanceBusyError(PiJobsError):
    """Another compaction or GC holds the lake's maintenance lock."""


class MaintenanceLeaseLostError(PiJobsError):
    """This process's maintenance lease on an object-store lake was taken over while it ran."""


@dataclass(frozen=True, slots=True)
class LeaseHolder:
    """What a lease object says."""

    operation: str
    owner: str
    host: str
    pid: int
    expires_at: float

    def describe(self, now: float) -> str:
        left = self.expires_at - now
        return f"{self.operation} on {self.host} pid {self.pid}, lease expires in {left:.0f} s"


def split_s3_uri(uri: str) -> tuple[str, str]:
    """('bucket', 'key/prefix') of s3://bucket/key/prefix.

    Raises:
        ValueError: not an s3:// or s3a:// URI with a bucket.
    """
    scheme, sep, rest = uri.partition("://")
    bucket, _, prefix = rest.partition("/")
    if not sep or scheme not in ("s3", "s3a") or not bucket:
        raise ValueError(f"expected s3://bucket/path, got {uri!r}")
    return bucket, prefix.strip("/")


def s3_client(storage_options: Mapping[str, str] | None = None) -> Any:
    """A boto3 S3 client from deltalake-style options, falling back to the environment (AWS_*
    variables, ~/.aws, instance roles: boto3's own chain), like the lake's writers."""
    try:
        import boto3
        import botocore.config
    except ImportError as err:
        raise PiJobsError(
            "the maintenance lease of an s3:// lake needs boto3: pip install 'pi-lake[jobs]'"
        ) from err
    opts = {k.upper(): v for k, v in (storage_options or {}).items()}
    env = os.environ

    def pick(*names: str) -> str | None:
        for name in names:
            value = opts.get(name) or env.get(name)
            if value:
                return value
        return None

    return boto3.client(
        "s3",
        endpoint_url=pick("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
        region_name=pick("AWS_REGION", "AWS_DEFAULT_REGION") or "us-east-1",
        aws_access_key_id=opts.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=opts.get("AWS_SECRET_ACCESS_KEY"),
        aws_session_token=opts.get("AWS_SESSION_TOKEN"),
        config=botocore.config.Config(
            connect_timeout=5, read_timeout=10, retries={"max_attempts": 3, "mode": "standard"}
        ),
    )


def _error_code(err: Exception) -> frozenset[str]:
    """The S3 error code and HTTP status of a botocore ClientError (empty for other errors)."""
    response = getattr(err, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = str(response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
    return frozenset({code, status} - {""})


def _taken(err: Exception) -> bool:
    """412 (the condition failed) or 409 (a concurrent conditional write won)."""
    return bool(_error_code(err) & _TAKEN)


class S3Lease:
    """The lease of one maintenance operation on one object-store lake (see the module doc).

    Example:
        >>> lease = S3Lease("s3://pilake/lake", "gc")
        >>> lease.acquire()
        >>> try:
        ...     run_gc(); lease.ensure_held()
        ... finally:
        ...     lease.release()
    """

    def __init__(
        self,
        lake_uri: str,
        operation: str,
        *,
        ttl_s: float = DEFAULT_LEASE_TTL_S,
        client: Any = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        if not 0.5 <= ttl_s <= 3600:
            raise ValueError(f"ttl_s must be in [0.5, 3600] seconds, got {ttl_s}")
        bucket, prefix = split_s3_uri(lake_uri)
        self.bucket = bucket
        self.key = f"{prefix}/{LEASE_NAME}" if prefix else LEASE_NAME
        self.uri = f"s3://{bucket}/{self.key}"
        self.operation = operation
        self.ttl_s = ttl_s
        self.owner = uuid.uuid4().hex
        self._client = client if client is not None else s3_client(storage_options)
        self._etag: str | None = None
        self._expires_at = 0.0
        self._lost = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._io = threading.Lock()  # the renewer and release never write at once

    # -- the object ---------------------------------------------------------------------------
    def _body(self, expires_at: float) -> bytes:
        doc = {
            "operation": self.operation,
            "owner": self.owner,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "expires_at": expires_at,
        }
        return json.dumps(doc).encode()

    def _put(self, expires_at: float, **condition: str) -> str:
        response = self._client.put_object(
            Bucket=self.bucket, Key=self.key, Body=self._body(expires_at), **condition
        )
        return str(response["ETag"])

    def read(self) -> tuple[LeaseHolder, str] | None:
        """The lease object as it is now and its ETag; None when there is none."""
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=self.key)
        except Exception as err:
            if _error_code(err) & {"NoSuchKey", "404"}:
                return None
            raise
        doc = json.loads(response["Body"].read())
        holder = LeaseHolder(
            str(doc.get("operation", "?")),
            str(doc.get("owner", "")),
            str(doc.get("host", "?")),
            int(doc.get("pid", 0)),
            float(doc.get("expires_at", 0.0)),
        )
        return holder, str(response["ETag"])

    # -- the protocol -------------------------------------------------------------------------
    def acquire(self) -> None:
        """Take the lease, or raise MaintenanceBusyError naming the live holder.

        Raises:
            MaintenanceBusyError: another operation holds an unexpired lease, or won the race
                for an expired one.
        """
        for _ in range(3):  # a lease that vanishes between our create and our read: try again
            expires_at = time.time() + self.ttl_s
            try:
                self._etag = self._put(expires_at, IfNoneMatch="*")
                self._expires_at = expires_at
                break
            except Exception as err:
                if not _taken(err):
                    raise
            found = self.read()
            if found is None:
                continue
            holder, etag = found
            now = time.time()
            if holder.expires_at > now:
                raise MaintenanceBusyError(
                    f"cannot run {self.operation}: another maintenance operation holds {self.uri} "
                    f"({holder.describe(now)}); wait for it to finish (compaction and GC run one at "
                    "a time per lake)"
                )
            expires_at = now + self.ttl_s
            try:  # expired or released: take it over, unless another contender just did
                self._etag = self._put(expires_at, IfMatch=etag)
                self._expires_at = expires_at
                if holder.expires_at > 0:
                    log.warning("maintenance lease %s: took over the expired lease of %s", self.uri, holder)
                break
            except Exception as err:
                if not _taken(err):
                    raise
                raise MaintenanceBusyError(
                    f"cannot run {self.operation}: another maintenance operation took the lease "
                    f"{self.uri} at the same moment; wait for it to finish"
                ) from err
        else:
            raise MaintenanceBusyError(f"cannot run {self.operation}: the lease {self.uri} keeps changing")
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew_loop, name="pilake-lease", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self.renew()
            except MaintenanceLeaseLostError:
                return
            except Exception as err:  # the store is unreachable: try again; expiry may pass
                log.warning("maintenance lease %s: renewal failed (%s); retrying", self.uri, err)

    def renew(self) -> None:
        """Push the expiry on by `ttl_s`.

        Raises:
            MaintenanceLeaseLostError: another process replaced the lease.
        """
        with self._io:
            if self._lost or self._etag is None:
                raise MaintenanceLeaseLostError(self._lost or f"{self.uri} is not held")
            expires_at = time.time() + self.ttl_s
            try:
                self._etag = self._put(expires_at, IfMatch=self._etag)
                self._expires_at = expires_at
            except Exception as err:
                if not _taken(err):
                    raise
                self._lost = (
                    f"{self.operation} lost its maintenance lease {self.uri}: another process took it "
                    f"over (this one stalled past the {self.ttl_s:.0f} s lease); its work may overlap "
                    "another compaction or GC: run `pilake audit`"
                )
                raise MaintenanceLeaseLostError(self._lost) from err

    def ensure_held(self) -> None:
        """Raise MaintenanceLeaseLostError unless the lease is still ours and unexpired."""
        if self._lost:
            raise MaintenanceLeaseLostError(self._lost)
        if time.time() >= self._expires_at:
            raise MaintenanceLeaseLostError(
                f"{self.operation}'s maintenance lease {self.uri} expired (not renewed in time: the "
                "object store was unreachable); stop before deleting anything"
            )

    def release(self) -> None:
        """Mark the lease released (conditional on it still being ours); stop renewing.

        Raises:
            MaintenanceLeaseLostError: it was taken over while held.
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._io:
            if self._lost:
                raise MaintenanceLeaseLostError(self._lost)
            if self._etag is None:
                return
            try:
                self._put(0.0, IfMatch=self._etag)
            except Exception as err:
                if _taken(err):
                    raise MaintenanceLeaseLostError(
                        f"{self.operation}'s maintenance lease {self.uri} was taken over before release"
                    ) from err
                # unreachable store: the lease simply expires after ttl_s
                log.warning("maintenance lease %s: release failed (%s); it expires by itself", self.uri, err)
            finally:
                self._etag = None
