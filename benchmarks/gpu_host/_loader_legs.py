"""The Loader end to end with decoder="nvdec" vs "cpu" (issue 35 item 3), for
`benchmarks.gpu_host.decode`: what a trainer on a GPU host gets per second, reading a real lake.

1. A lake per size: one simulated episode featurized by the stream job's code at that frame
   size (intra-only H.264, the writer's settings; `benchmarks.steps_window.run.template`),
   committed `episodes` times under new ids (the same chunks, so the lake is written in seconds
   at 480 px too).
2. Legs, interleaved repeat after repeat (`benchmarks._figures.interleaved`), at each batch size:
   - `loader_cpu`: `Loader(decoder="cpu")`, its workers decoding with FFmpeg, and each batch's
     images copied to the GPU (`.to("cuda")`, synchronised) where there is one: the CPU path's
     batch is not on the GPU until then (on a host without a GPU: the Loader alone);
   - `loader_nvdec`: `Loader(decoder="nvdec")`, its workers sending the frames' access units,
     NVDEC decoding them into CUDA tensors in this process, synchronised (only where a GPU,
     a CUDA torch and PyNvVideoCodec are present; otherwise skipped, the reason named).
   Each timed run makes its Loader (global shuffle, `workers` workers), takes `workers`
   batches to warm up (workers started, caches filled), then counts samples over `measure_s`;
   the Loader is closed after it, so no leg prefetches while another is timed.
3. `nvdec_over_cpu`: the per-repeat ratio of samples/s, median and spread; NVDEC wins a (batch,
   height) only where the whole spread is above 1 (`judge`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from benchmarks._figures import interleaved, judge, ratio, spread


def write_size_lake(root: Path, px: int, episodes: int, duration_s: float) -> Path:
    """A lake of `episodes` copies of one simulated episode with px x px video; returns its root."""
    from benchmarks.steps_window.run import template, write_lake

    lake = root / f"lake_{px}"
    if not (lake / "episodes").exists():
        write_lake(lake, template(duration_s, px, seed=5), episodes, 64)
    return lake


def _timed_run(
    lake: Path, kind: str, batch: int, workers: int, measure_s: float, gpu: bool
) -> tuple[float, int]:
    """(samples/s, samples) of one Loader run after its warm-up."""
    from pi_loader import Dataset, Loader, SampleSpec

    ds = Dataset(str(lake), spec=SampleSpec(action_horizon=8), seed=batch)
    loader = Loader(ds, batch_size=batch, num_workers=workers, decoder=kind, drop_last=True)
    sync: Any = None
    if gpu:
        import torch

        sync = torch.cuda.synchronize

    def land(batch_: dict[str, Any]) -> None:
        if not gpu:
            return
        for key, value in batch_.items():
            if key.startswith("observation.images.") and not hasattr(value, "is_cuda"):
                import torch

                torch.from_numpy(value).to("cuda", non_blocking=False)
        sync()

    try:
        stream = _cycle(loader)
        for _ in range(max(workers, 1)):
            land(next(stream))
        started, samples = time.perf_counter(), 0
        while True:
            got = next(stream)
            land(got)
            samples += len(got["step"])
            elapsed = time.perf_counter() - started
            if elapsed >= measure_s and samples >= 3 * batch:
                return samples / elapsed, samples
    finally:
        loader.close()


def _cycle(loader: Any) -> Any:
    while True:
        yield from loader


def measure_loader(
    *,
    root: Path,
    sizes: list[int],
    batches: list[int],
    workers: int,
    repeats: int,
    measure_s: float,
    episodes: int,
    duration_s: float,
    gpu_missing: str | None,
) -> dict[str, Any]:
    """The `loader` object of gpu_decode.json: per size and batch, each leg's samples/s and
    NVDEC's ratio to the CPU path."""
    kinds = ("cpu",) if gpu_missing is not None else ("cpu", "nvdec")
    out: dict[str, Any] = {
        "settings": {
            "sizes_px": sizes,
            "batches": batches,
            "workers": workers,
            "episodes": episodes,
            "episode_s": duration_s,
            "repeats": repeats,
            "measure_s": measure_s,
            "cpu_leg": "Loader(decoder='cpu')" + (" + images .to('cuda')" if gpu_missing is None else ""),
        },
        "nvdec": "measured" if gpu_missing is None else f"skipped: {gpu_missing}",
        "legs": {},
        "nvdec_wins": [],
    }
    for px in sizes:
        t = time.monotonic()
        lake = write_size_lake(root, px, episodes, duration_s)
        print(f"[gpu_decode loader] {px}x{px} lake in {time.monotonic() - t:.1f} s", flush=True)
        legs = [(kind, b) for b in batches for kind in kinds]
        values: dict[tuple[str, int], list[float]] = {leg: [] for leg in legs}
        for repeat, (kind, b) in interleaved(legs, repeats):
            rate, samples = _timed_run(lake, kind, b, workers, measure_s, gpu_missing is None)
            values[(kind, b)].append(rate)
            print(
                f"[gpu_decode loader] repeat {repeat} {px}px b{b:<4d} {kind:6s} {rate:9.0f} samples/s "
                f"({samples} samples)",
                flush=True,
            )
        for b in batches:
            key = f"{px}x{px}_b{b}"
            entry: dict[str, Any] = {"px": px, "batch": b}
            for kind in kinds:
                entry[f"loader_{kind}_samples_per_s"] = spread(
                    values[(kind, b)], what=f"{key} {kind}"
                ).to_json()
            if "nvdec" in kinds:
                figure = ratio(values[("nvdec", b)], values[("cpu", b)], what=f"{key} nvdec/cpu")
                entry["nvdec_over_cpu"] = figure.to_json()
                entry["nvdec_wins"] = judge(figure, 1.0)
                if entry["nvdec_wins"]["met"]:
                    out["nvdec_wins"].append([b, px])
            out["legs"][key] = entry
    return out
