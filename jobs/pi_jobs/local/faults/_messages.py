"""What the fault scenarios send: small simulated episodes, messages that must be quarantined
(corrupted, truncated, oversize, unknown version), and `kcat` garbage from an independent client.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any


def simulated(seed: int, robots: int, episodes: int) -> list[Any]:
    """Small real episodes (rendered scenes, H.264 MP4), distinct ids per seed."""
    from pi_ingest.simulator import SimulationConfig, simulate_fleet

    cfg = SimulationConfig(
        robots=robots,
        episodes_per_robot=episodes,
        duration_s=1.0,
        camera_width=160,
        camera_height=120,
        cameras=("cam_high",),
        seed=seed,
    )
    return [s.episode for s in simulate_fleet(cfg)]


def _with_version(message: bytes, version: int) -> bytes:
    return message[:4] + struct.pack(">H", version) + message[6:]


def _payload_start(message: bytes) -> int:
    id_len, stream_len = struct.unpack(">HH", message[20:24])
    return 24 + id_len + stream_len


def bad_messages(seed: int) -> tuple[list[tuple[str, bytes]], dict[str, str]]:
    """(key, value) messages that must be quarantined, and the reason expected per episode id."""
    from pi_format.wire import encode_episode

    eps = simulated(seed, robots=1, episodes=4)
    corrupt, truncated, oversize, v2 = eps
    out: list[tuple[str, bytes]] = []
    # one bit flipped in the payload of one chunk of an otherwise intact episode
    msgs = list(encode_episode(corrupt))
    i = 1
    start = _payload_start(msgs[i])
    flipped = bytearray(msgs[i])
    flipped[start + 3] ^= 0x10
    msgs[i] = bytes(flipped)
    out += [(corrupt.episode_id, m) for m in msgs]
    # chunk 0 cut inside its stream name (its episode id is still readable)
    msgs = encode_episode(truncated)
    id_len = struct.unpack(">H", msgs[0][20:22])[0]
    out.append((truncated.episode_id, msgs[0][: 24 + id_len + 2]))
    out += [(truncated.episode_id, m) for m in msgs[1:]]
    # a 1.5 MB message: a real chunk padded past the 1,000,000-byte limit
    msgs = encode_episode(oversize)
    out += [(oversize.episode_id, msgs[0] + bytes(1_500_000))]
    # a robot speaking protocol version 2
    out += [(v2.episode_id, _with_version(m, 2)) for m in encode_episode(v2)]
    expected = {
        corrupt.episode_id: "chunk_checksum",
        truncated.episode_id: "truncated",
        oversize.episode_id: "oversize",
        v2.episode_id: "unsupported_version",
    }
    return out, expected


def left_incomplete(messages: list[tuple[str, bytes]]) -> list[str]:
    """Keys of `messages` under which some message decodes: the job collects those chunks, and as
    each of these episodes also has a message that does not decode, it never completes and stays
    pending until its `incomplete_timeout_s` (format/SPEC.md 7.5, 9.4)."""
    from pi_format import ProtocolError
    from pi_format.wire import decode_chunk

    keys = set()
    for key, value in messages:
        try:
            decode_chunk(value)
        except ProtocolError:
            continue
        keys.add(key)
    return sorted(keys)


# each at least 24 bytes (a header's length) without the PIEP magic: bad_magic, no episode id
KCAT_GARBAGE = [
    b"garbage from an independent kafka client",
    b'{"not": "a pi-lake chunk", "at": "all"}',
    b"\x00\x01\x02\x03 binary junk of thirty-odd bytes",
]


def _bundled_librdkafka_dir(work: Path) -> Path | None:
    """A directory holding `librdkafka.so.1` -> the librdkafka bundled in the confluent-kafka
    wheel (None when that wheel has none)."""
    import confluent_kafka

    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    if not found:
        return None
    work.mkdir(parents=True, exist_ok=True)
    link = work / "librdkafka.so.1"
    link.unlink(missing_ok=True)
    link.symlink_to(found[0])
    return work


def kcat_produce(bootstrap: str, topic: str, lines: list[bytes], *, work: Path) -> str:
    """Write one message per line with `kcat -P` (no key), an independent Kafka client.

    Debian's kcat 1.7.1 links librdkafka 2.0.2, which cannot parse the ApiVersions v3 response
    of Tansu 0.6.0 ("Read underflow ... at 274/279"); the same kcat binary then runs against
    the newer librdkafka bundled in the confluent-kafka wheel (LD_LIBRARY_PATH). Returns which
    library was used.
    """
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        raise RuntimeError("kcat is not installed (apt-get install kcat; scripts/setup.sh installs it)")
    data = b"\n".join(lines) + b"\n"
    cmd = [kcat, "-P", "-b", bootstrap, "-t", topic]
    proc = subprocess.run(cmd, input=data, capture_output=True, timeout=60, check=False)
    used = "system librdkafka"
    if proc.returncode != 0 and b"ApiVersionRequest failed" in proc.stderr:
        lib_dir = _bundled_librdkafka_dir(work)
        if lib_dir is not None:
            env = {**os.environ, "LD_LIBRARY_PATH": str(lib_dir)}
            proc = subprocess.run(cmd, input=data, capture_output=True, timeout=60, check=False, env=env)
            used = "confluent-kafka's bundled librdkafka (system librdkafka 2.0.2 fails with Tansu)"
    if proc.returncode != 0:
        raise RuntimeError(f"kcat exited {proc.returncode}: {proc.stderr.decode(errors='replace')[-1000:]}")
    return used
