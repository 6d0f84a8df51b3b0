"""Exceptions of pi_format: one root, and the reason codes a rejected chunk or episode carries.

Every error raised while decoding data from the wire is a `ProtocolError` with a
`QuarantineReason`, so the stream job can write a quarantine row without parsing messages.
"""

from __future__ import annotations

import enum


class QuarantineReason(enum.StrEnum):
    """Why a chunk or an episode was quarantined. Stored as text in the quarantine table."""

    BAD_MAGIC = "bad_magic"
    UNSUPPORTED_VERSION = "unsupported_version"
    TRUNCATED = "truncated"
    OVERSIZE = "oversize"
    BAD_HEADER = "bad_header"
    CHUNK_CHECKSUM = "chunk_checksum"
    STREAM_CHECKSUM = "stream_checksum"
    COUNT_MISMATCH = "count_mismatch"
    DUPLICATE_CONFLICT = "duplicate_conflict"
    KEY_MISMATCH = "key_mismatch"
    BAD_METADATA = "bad_metadata"
    BAD_VIDEO = "bad_video"
    BAD_VALUES = "bad_values"
    BAD_TIMESTAMPS = "bad_timestamps"
    BAD_RATE = "bad_rate"
    UNKNOWN_ROBOT_TYPE = "unknown_robot_type"
    OUT_OF_RANGE = "out_of_range"
    INCOMPLETE_TIMEOUT = "incomplete_timeout"
    # a message or episode over one of the stream job's limits (`details` names the limit)
    LIMIT_EXCEEDED = "limit_exceeded"
    # the stream job's sink raised an unexpected error on this episode's data (`details`
    # carries the exception); the job carries on with the next episode
    SINK_ERROR = "sink_error"
    # stored bytes of a committed attempt no longer match their checksums (`pilake repair`
    # records each damaged attempt it handled, repaired from raw or kept aside)
    CORRUPT = "corrupt"


class PiFormatError(Exception):
    """Root of every error pi_format raises."""


class ProtocolError(PiFormatError):
    """Data from the wire violates protocol v1; `reason` says which rule.

    Example:
        >>> try:
        ...     decode_chunk(b"junk")
        ... except ProtocolError as err:
        ...     print(err.reason)
        truncated
    """

    def __init__(self, reason: QuarantineReason, message: str) -> None:
        super().__init__(f"[{reason.value}] {message}")
        self.reason = reason
        self.detail = message


class VideoError(PiFormatError):
    """A video stream or chunk cannot be encoded or decoded."""


class LakeError(PiFormatError):
    """A lake-table operation cannot be done as asked (a pin name that is taken, a pin that does
    not exist, files a rewrite needs that are gone)."""


class ChecksumError(LakeError):
    """Stored bytes do not match their checksum (a Parquet page's CRC, a video chunk's
    `chunk_crc32`): the bytes changed after they were written. The message names the file and
    where in it; `where` holds the same as fields (table, file, row_group, column, page, row).

    Example:
        >>> try:
        ...     check_chunk_crcs(video_rows)
        ... except ChecksumError as err:
        ...     print(err.where["row"])
        3
    """

    def __init__(self, message: str, where: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.where = dict(where or {})
