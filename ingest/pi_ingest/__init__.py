"""pi_ingest: the robot side of pi-lake — fleet simulator, durable spool and Kafka uploader.

Episodes are simulated (or recorded), spooled on disk, sent to `episodes.raw.v1` as wire
protocol v1 chunks, and dropped from the spool once the lake acknowledges them on
`episodes.ack.v1`. confluent-kafka and PyAV are imported only when used.
"""

from pi_ingest.errors import BundleError, PiIngestError, SpoolError
from pi_ingest.simulator import (
    SimulatedEpisode,
    SimulationConfig,
    simulate_episode,
    simulate_fleet,
    write_fleet,
)
from pi_ingest.spool import LedgerEvent, Spool, SpoolEntry, read_ledger
from pi_ingest.uploader import Uploader, UploaderConfig, UploadReport, upload_paths

__all__ = [
    "BundleError",
    "LedgerEvent",
    "PiIngestError",
    "SimulatedEpisode",
    "SimulationConfig",
    "Spool",
    "SpoolEntry",
    "SpoolError",
    "UploadReport",
    "Uploader",
    "UploaderConfig",
    "read_ledger",
    "simulate_episode",
    "simulate_fleet",
    "upload_paths",
    "write_fleet",
]
