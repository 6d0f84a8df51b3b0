"""How pi_loader reaches S3 (or an S3-compatible store): `S3Options`, from deltalake-style
`storage_options` and the environment; the secrets never appear in a repr or a message.

Example:
    >>> S3Options.from_storage_options({"AWS_ENDPOINT_URL": "http://127.0.0.1:8333",
    ...                                 "AWS_ALLOW_HTTP": "true"}).endpoint
    'http://127.0.0.1:8333'
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from pi_loader.reading._retry import RetryConfig

__all__ = ["S3Options"]

# deltalake option name (upper-cased) -> S3Options field. Aliases as delta-rs accepts them.
_S3_KEYS = {
    "AWS_ACCESS_KEY_ID": "access_key_id",
    "ACCESS_KEY_ID": "access_key_id",
    "AWS_SECRET_ACCESS_KEY": "secret_access_key",
    "SECRET_ACCESS_KEY": "secret_access_key",
    "AWS_SESSION_TOKEN": "session_token",
    "SESSION_TOKEN": "session_token",
    "AWS_TOKEN": "session_token",
    "TOKEN": "session_token",
    "AWS_REGION": "region",
    "REGION": "region",
    "AWS_DEFAULT_REGION": "region",
    "AWS_ENDPOINT_URL": "endpoint_url",
    "AWS_ENDPOINT": "endpoint_url",
    "ENDPOINT_URL": "endpoint_url",
    "ENDPOINT": "endpoint_url",
    "AWS_ALLOW_HTTP": "allow_http",
    "ALLOW_HTTP": "allow_http",
    "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "virtual_hosted_style",
    "VIRTUAL_HOSTED_STYLE_REQUEST": "virtual_hosted_style",
}
# Options that only matter to deltalake writers and its commit locking: accepted, not needed to read.
_S3_WRITER_KEYS = frozenset(
    {
        "AWS_S3_ALLOW_UNSAFE_RENAME",
        "AWS_S3_LOCKING_PROVIDER",
        "DELTA_DYNAMO_TABLE_NAME",
        "AWS_CONDITIONAL_PUT",
        "CONDITIONAL_PUT",
        "AWS_COPY_IF_NOT_EXISTS",
    }
)
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off", ""})


@dataclass(frozen=True, slots=True)
class S3Options:
    """How to reach S3 (or an S3-compatible store); the secrets never appear in repr.

    Built by `S3Options.from_storage_options` from deltalake-style options; fields left None are
    found by the AWS SDK's usual chain (environment, ~/.aws files, instance metadata).
    """

    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    region: str | None = None
    endpoint_url: str | None = None
    allow_http: bool = False
    virtual_hosted_style: bool = False

    def __post_init__(self) -> None:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            given = "AWS_ACCESS_KEY_ID" if self.access_key_id is not None else "AWS_SECRET_ACCESS_KEY"
            raise ValueError(
                f"storage_options has {given} without its pair; pass both AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or neither to use the environment's credentials"
            )
        if self.endpoint_url is not None:
            parts = urlsplit(self.endpoint_url)
            if parts.username is not None or parts.password is not None:
                # The URL is not echoed: its user info may be a credential.
                raise ValueError(
                    "AWS_ENDPOINT_URL must not carry user info; pass keys as AWS_ACCESS_KEY_ID etc."
                )
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(
                    f"AWS_ENDPOINT_URL must look like http(s)://host[:port], got {self.endpoint_url!r}"
                )
            if parts.scheme == "http" and not self.allow_http:
                raise ValueError(
                    f"AWS_ENDPOINT_URL {self.endpoint_url!r} is plain http; set AWS_ALLOW_HTTP='true' "
                    "to allow it (as deltalake requires too)"
                )

    @classmethod
    def from_storage_options(
        cls, storage_options: Mapping[str, str] | None, environ: Mapping[str, str] | None = None
    ) -> S3Options:
        """Options from deltalake-style `storage_options`, with region/endpoint/http from `environ`.

        Keys are case-insensitive. Keys only deltalake writers need (AWS_S3_ALLOW_UNSAFE_RENAME,
        locking) are accepted and ignored; any other unknown key is a ValueError.

        Example:
            >>> S3Options.from_storage_options({"AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
            ...                                 "AWS_ALLOW_HTTP": "true"})
        """
        env = os.environ if environ is None else environ
        values: dict[str, str] = {}
        for raw_key, value in (storage_options or {}).items():
            if not isinstance(raw_key, str) or not isinstance(value, str):
                raise TypeError(
                    f"storage_options keys and values must be str, got key {raw_key!r} with a "
                    f"{type(value).__name__} value"
                )
            key = raw_key.upper()
            if key in _S3_WRITER_KEYS:
                continue
            name = _S3_KEYS.get(key)
            if name is None:
                raise ValueError(
                    f"unknown storage option {raw_key!r} for s3://; the loader understands "
                    f"{sorted(set(_S3_KEYS) | _S3_WRITER_KEYS)}"
                )
            values[name] = value
        # Like deltalake, fall back to the environment for what the options leave out. Credentials
        # are left to the AWS SDK's own chain so that they are not copied into pickles needlessly.
        for env_key in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ALLOW_HTTP"):
            if env_key in env and _S3_KEYS[env_key] not in values:
                values[_S3_KEYS[env_key]] = env[env_key]
        return cls(
            access_key_id=values.get("access_key_id"),
            secret_access_key=values.get("secret_access_key"),
            session_token=values.get("session_token"),
            region=values.get("region"),
            endpoint_url=values.get("endpoint_url"),
            allow_http=_flag("AWS_ALLOW_HTTP", values.get("allow_http", "false")),
            virtual_hosted_style=_flag(
                "AWS_VIRTUAL_HOSTED_STYLE_REQUEST", values.get("virtual_hosted_style", "false")
            ),
        )

    def secrets(self) -> tuple[str, ...]:
        """The secret values, for scrubbing them out of messages from lower layers."""
        return tuple(s for s in (self.access_key_id, self.secret_access_key, self.session_token) if s)

    def filesystem(self, retry: RetryConfig | None = None) -> Any:
        """A new pyarrow.fs.S3FileSystem for these options; with `retry`, its timeouts and one
        try per call (`retrying` does the retries, counted, under one deadline)."""
        import pyarrow.fs as pafs

        kwargs: dict[str, Any] = {
            "access_key": self.access_key_id,
            "secret_key": self.secret_access_key,
            "session_token": self.session_token,
            "region": self.region,
            "force_virtual_addressing": self.virtual_hosted_style,
        }
        if self.endpoint_url is not None:
            parts = urlsplit(self.endpoint_url)
            kwargs["scheme"] = parts.scheme
            kwargs["endpoint_override"] = parts.netloc + parts.path.rstrip("/")
        if retry is not None:
            kwargs["connect_timeout"] = retry.connect_timeout_s
            kwargs["request_timeout"] = retry.request_timeout_s
            kwargs["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(max_attempts=1)
        return pafs.S3FileSystem(**kwargs)

    @property
    def endpoint(self) -> str:
        """The endpoint as errors name it."""
        return self.endpoint_url or f"AWS S3 ({self.region or 'default region'})"


def _flag(name: str, value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"{name} must be 'true' or 'false', got {value!r}")
