"""`pilake verify --metrics-file / --pushgateway` (pi_jobs.integrity._metrics): the figures a
scrub leaves for Prometheus (PilakeVerifyFoundDamage reads pilake_verify_damaged_places), on a
real lake, clean then damaged; bad destinations are refused clearly and never hide damage."""

from __future__ import annotations

import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from pi_format import LakeLayout
from pi_jobs.integrity._metrics import METRIC_NAMES

from tests.conftest import _free_port
from tests.fixtures.raw_lake import write_raw_lake
from tests.jobs.test_integrity import _flip_steps


def _parse(text: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


@pytest.fixture(scope="module")
def clean_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("verify-metrics") / "lake"
    write_raw_lake(root, robots=1, episodes_per_robot=2)
    return root


@pytest.fixture
def lake(clean_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LakeLayout:
    shutil.copytree(clean_root, tmp_path / "lake")
    monkeypatch.setenv("PILAKE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PILAKE_LAKE", str(tmp_path / "lake"))
    return LakeLayout(str(tmp_path / "lake"))


class _Pushes(http.server.BaseHTTPRequestHandler):
    """A stand-in for the Pushgateway (no Pushgateway binary here): keeps each PUT's path and body."""

    got: ClassVar[list[tuple[str, str]]] = []

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        type(self).got.append((self.path, body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def pushgateway() -> Iterator[str]:
    _Pushes.got = []
    server = http.server.HTTPServer(("127.0.0.1", _free_port()), _Pushes)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def test_clean_then_damaged_runs_leave_their_figures(
    lake: LakeLayout, tmp_path: Path, pushgateway: str
) -> None:
    from pi_jobs.cli import main

    prom = tmp_path / "textfile" / "pilake-verify.prom"
    args = ["verify", "--no-progress", "--metrics-file", str(prom), "--pushgateway", pushgateway]
    assert main(args) == 0
    clean = _parse(prom.read_text())
    assert set(clean) == set(METRIC_NAMES)
    assert clean["pilake_verify_damaged_places"] == 0 and clean["pilake_verify_files_selected"] > 0
    _flip_steps(lake)
    assert main(args) == 2
    damaged = _parse(prom.read_text())
    assert damaged["pilake_verify_damaged_places"] == 1 and damaged["pilake_verify_corrupt_episodes"] == 1
    assert (
        damaged["pilake_verify_last_run_timestamp_seconds"]
        >= clean["pilake_verify_last_run_timestamp_seconds"]
    )
    assert [path for path, _ in _Pushes.got] == ["/metrics/job/pilake-verify"] * 2
    assert _parse(_Pushes.got[-1][1]) == damaged  # the same text to both
    assert not list(prom.parent.glob(".*tmp"))  # replaced by a rename, nothing left beside it


@pytest.mark.parametrize(
    "url",
    ["ftp://pushgateway:9091", "pushgateway:9091", "", "http://", "http://127.0.0.1:1", "http://\x00bad"],
)
def test_a_bad_pushgateway_is_refused_clearly_and_never_hides_damage(
    lake: LakeLayout, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from pi_jobs.cli import main

    if url == "":  # an empty value means no push at all
        assert main(["verify", "--no-progress", "--pushgateway", url]) == 0
        return
    assert main(["verify", "--no-progress", "--pushgateway", url]) == 1  # clean, but not exported
    err = capsys.readouterr().err
    assert "pushgateway" in err.lower() and (repr(url) in err or "cannot push" in err), err
    _flip_steps(lake)
    assert main(["verify", "--no-progress", "--pushgateway", url]) == 2  # damage still says 2


def test_an_unwritable_metrics_file_is_a_clear_error(
    lake: LakeLayout, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pi_jobs.cli import main

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert main(["verify", "--no-progress", "--metrics-file", str(blocker / "x.prom")]) == 1
    err = capsys.readouterr().err
    assert "cannot write the verify metrics file" in err and str(blocker) in err
    assert blocker.read_text() == "not a directory"
