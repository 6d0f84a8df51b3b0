"""pi_format: the episode model, wire protocol v1, the lake-table protocol (pi_format.lake) and
video codecs.

Everything else in pi-lake speaks these types. See format/SPEC.md.
"""

from pi_format.episode import CameraSpec, CameraVideo, Episode, EpisodeMeta
from pi_format.errors import PiFormatError, ProtocolError, QuarantineReason, VideoError
from pi_format.lake import (
    EPISODES_SCHEMA,
    QUARANTINE_RELEASES_SCHEMA,
    QUARANTINE_SCHEMA,
    RAW_SCHEMA,
    STEPS_SCHEMA,
    TABLE_SCHEMAS,
    VIDEO_SCHEMA,
    LakeLayout,
)
from pi_format.topics import (
    ACK_TOPIC,
    RAW_TOPIC,
    RAW_TOPIC_PARTITIONS,
    Ack,
    AckRoutes,
    AckStatus,
    fleet_ack_topic,
)

__all__ = [
    "ACK_TOPIC",
    "EPISODES_SCHEMA",
    "QUARANTINE_RELEASES_SCHEMA",
    "QUARANTINE_SCHEMA",
    "RAW_SCHEMA",
    "RAW_TOPIC",
    "RAW_TOPIC_PARTITIONS",
    "STEPS_SCHEMA",
    "TABLE_SCHEMAS",
    "VIDEO_SCHEMA",
    "Ack",
    "AckRoutes",
    "AckStatus",
    "CameraSpec",
    "CameraVideo",
    "Episode",
    "EpisodeMeta",
    "LakeLayout",
    "PiFormatError",
    "ProtocolError",
    "QuarantineReason",
    "VideoError",
    "fleet_ack_topic",
]
