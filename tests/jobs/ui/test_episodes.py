"""The Episodes and Dataset pages and the Episode page's names, marks and prev/next, through
starlette's TestClient (in process). The hostile parameters of HOSTILE run here and through the
real server (`pilake ui` as a process) in test_browser.py."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlencode

import numpy as np
import pyarrow as pa
import pytest
from pi_format.stats import episode_stat_columns
from pi_jobs.ui import UiConfig, create_app
from pi_jobs.ui._dataset import _distributions, sample_ids
from pi_jobs.ui._episodes import EpisodeFilter
from pi_jobs.ui._names import DimensionNames
from starlette.testclient import TestClient

from tests.jobs.ui.conftest import HTML_EPISODE_ID, HTML_ROBOT, HTML_TASK, SCRIPT, UiLake

LOCAL = "http://127.0.0.1:8765"
ROBOTS = """
[robot_types.arm]
proprio_range = [-100, 100]
action_range = [-1e6, 1e6]
control_rate_hz = [1, 1000]
camera_fps = [1, 120]
proprio_names = ["shoulder", "elbow", "wrist"]
action_names = ["grip_open", "grip_turn"]
"""
ASC = {"sort": "episode_id", "order": "asc"}

# (path, parameters, status): every one a clear 400 naming the parameter, or a page (200) or
# 404 whose text is escaped; never a 500 or a traceback.
HOSTILE: list[tuple[str, dict[str, str], int]] = [
    ("/episodes", {"robot": "' OR 1=1 --"}, 200),
    ("/episodes", {"task": "x'); DROP TABLE episodes_index; --"}, 200),
    ("/episodes", {"annotation": "%' OR ''='"}, 200),
    ("/episodes", {"robot": "机器人-🤖-\u202e"}, 200),
    ("/episodes", {"robot": "x" * 10_240}, 400),
    ("/episodes", {"task": "a\x00b"}, 400),
    ("/episodes", {"min_steps": "-1"}, 400),
    ("/episodes", {"min_steps": "1e9999"}, 400),
    ("/episodes", {"max_steps": "9" * 40}, 400),
    ("/episodes", {"min_steps": "50", "max_steps": "10"}, 400),
    ("/episodes", {"page": "-1"}, 400),
    ("/episodes", {"page": "9" * 400}, 400),
    ("/episodes", {"page": "1000000"}, 200),
    ("/episodes", {"sort": "episode_id; DROP TABLE episodes"}, 400),
    ("/episodes", {"sort": "step_count", "order": "sideways"}, 400),
    ("/episodes", {"success": "maybe"}, 400),
    ("/episodes", {"since": "2026-13-45"}, 400),
    ("/episodes", {"since": SCRIPT}, 400),
    ("/episodes", {"until": "2020-01-01", "since": "2021-01-01"}, 400),
    ("/episode/ep-001", {"sort": "1; SELECT 1"}, 400),
    ("/episode/ep-001", {"robot": SCRIPT, "page": "3"}, 200),
    ("/dataset", {"pin": "p" * 10_000}, 400),
    ("/dataset", {"pin": SCRIPT}, 404),
    ("/dataset", {"pin": "picks", "sql": "SELECT 1"}, 400),
    ("/dataset", {"sql": "DROP TABLE episodes_index"}, 400),
    ("/dataset", {"sql": "SELECT episode_id FROM file('/etc/passwd', 'CSV', 'episode_id String')"}, 400),
    ("/dataset", {"sql": "SELECT nope FROM episodes"}, 400),
    ("/dataset", {"robot": "x" * 10_240}, 400),
    ("/dataset", {"min_steps": "-5"}, 400),
]


def generated(seed: int, n: int) -> list[tuple[str, dict[str, str]]]:
    """`n` requests whose parameter values are random mixes of SQL metacharacters, markup,
    digits, unicode and control characters (seeded)."""
    rng = random.Random(seed)
    alphabet = [*"'\";`\\%_()-*/#<>&=", "--", "/*", "0x", "\u0000", "\u00e9", "\u202e", "🤖", "١٢"]
    names = ["robot", "task", "success", "min_steps", "max_steps", "since", "until", "annotation"]
    names += ["sort", "order", "page"]
    out = []
    for _ in range(n):
        name = rng.choice(names)
        value = "".join(rng.choice(alphabet + list("abc019 ")) for _ in range(rng.randint(0, 40)))
        out.append((rng.choice(["/episodes", "/dataset", "/episode/ep-001"]), {name: value}))
    return out


def check_hostile(status: int, text: str, expected: int | None) -> None:
    assert status in (200, 400, 404), text[:500]
    if expected is not None:
        assert status == expected, text[:500]
    assert "Traceback" not in text and SCRIPT not in text
    if status == 400:
        assert re.search(r"must|refused|characters|control|is after|is above|not both|ClickHouse", text)


@pytest.fixture(scope="module")
def client(ui_lake: UiLake, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    robots = tmp_path_factory.mktemp("robots") / "robots.toml"
    robots.write_text(ROBOTS)
    config = UiConfig(
        lake_root=ui_lake.layout.root,
        catalog=ui_lake.catalog,
        cache_dir=ui_lake.cache,
        page_size=2,
        robots=str(robots),
    )
    with TestClient(create_app(config), base_url=LOCAL) as test_client:
        yield test_client


def _ok(client: TestClient, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.text[:800]
    assert SCRIPT not in response.text
    return response.text


def _ids(html: str) -> list[str]:
    body = html.split('id="episodes"', 1)[1]
    return re.findall(r'<tr><td><a href="/episode/[^"]*">([^<]*)</a>', body)


def _episodes(client: TestClient, **params: str) -> tuple[list[str], int]:
    html = _ok(client, "/episodes?" + urlencode(params))
    total = re.search(r'id="episodes-summary">([0-9,]+) episodes', html)
    assert total is not None
    return _ids(html), int(total.group(1).replace(",", ""))


def test_list_pages_and_sorts(client: TestClient) -> None:
    assert _episodes(client, **ASC) == (["ep-000", "ep-001"], 4)
    assert _episodes(client, **ASC, page="1") == (
        ["ep-002", "ep-&lt;script&gt;window.__pwned = 1&lt;/script&gt;"],
        4,
    )
    assert _episodes(client, sort="episode_id", order="desc")[0][1] == "ep-002"
    html = _ok(client, "/episodes?" + urlencode(ASC))
    assert 'href="/episodes?sort=episode_id&amp;order=asc&amp;page=1" id="next-page"' in html
    # the sorted column's header reverses the order; the others sort descending first
    assert 'href="/episodes?sort=episode_id" class="sort on"' in html
    assert 'href="/episodes?sort=step_count" class="sort"' in html
    # stored markup in robot and task shows as text
    last = _ok(client, "/episodes?" + urlencode({**ASC, "page": "1"}))
    assert "robot-&lt;script&gt;" in last and "task &#34;&#39;&lt;b&gt;&lt;script&gt;" in last


def test_filters(client: TestClient) -> None:
    assert _episodes(client, **ASC, robot="robot-0") == (["ep-000", "ep-002"], 2)
    assert _episodes(client, **ASC, task="place")[1] == 1
    assert _episodes(client, **ASC, robot=HTML_ROBOT, task=HTML_TASK)[1] == 1  # matched as values
    assert _episodes(client, **ASC, success="no")[1] == 2  # ep-000 and the catalog-only row
    assert _episodes(client, **ASC, min_steps="10", max_steps="40")[1] == 3
    assert _episodes(client, **ASC, max_steps="2")[1] == 1
    assert _episodes(client, **ASC, annotation="instruction") == (["ep-002"], 1)
    assert _episodes(client, **ASC, annotation="PICK IT") == (["ep-002"], 1)
    assert _episodes(client, **ASC, annotation="nothing like it")[1] == 0
    assert _episodes(client, **ASC, since="2000-01-01", until="2100-12-31T23:59")[1] == 4
    assert _episodes(client, **ASC, until="2000-01-01")[1] == 0
    assert _episodes(client, robot="' OR 1=1 --")[1] == 0  # a value, never SQL
    html = _ok(client, "/episodes?robot=robot-0&success=yes")
    assert 'value="robot-0"' in html and '<option value="yes" selected>' in html


def test_prev_next_follow_the_list(client: TestClient) -> None:
    html = _ok(client, "/episode/ep-001?" + urlencode(ASC))
    assert 'href="/episode/ep-000?sort=episode_id&amp;order=asc" id="prev-episode"' in html
    assert 'href="/episode/ep-002?sort=episode_id&amp;order=asc" id="next-episode"' in html
    html = _ok(client, "/episode/ep-002?" + urlencode({**ASC, "robot": "robot-0"}))
    assert 'href="/episode/ep-000?robot=robot-0&amp;sort=episode_id&amp;order=asc" id="prev-episode"' in html
    assert 'id="next-episode"' not in html
    html = _ok(client, "/episode/ep-002?sort=episode_id&order=desc")
    assert '/episode/ep-001?sort=episode_id" id="next-episode"' in html
    assert f'/episode/{quote(HTML_EPISODE_ID, safe="")}?sort=episode_id" id="prev-episode"' in html
    # newest first by default: ep-002 was committed last of the lake's three
    assert 'href="/episode/ep-001" id="next-episode"' in _ok(client, "/episode/ep-002")


def test_episode_plots_named_and_marked(client: TestClient) -> None:
    html = _ok(client, "/episode/ep-002")
    assert (
        '"names": {"action": ["grip_open", "grip_turn"], "proprio": ["shoulder", "elbow", "wrist"]}' in html
    )
    assert '"marks": [{"label": "instruction: pick it \\u003cscript' in html
    assert "<td>elbow</td>" in html  # the statistics table too


def test_names_fall_back_to_indices() -> None:
    names = DimensionNames(None)
    assert names.names("franka", "proprio", 8)[0] == "joint1"
    assert names.names("franka", "proprio", 3) == ("proprio[0]", "proprio[1]", "proprio[2]")
    assert names.names("nope", "action", 1) == ("action[0]",)
    broken = DimensionNames("/nonexistent/robots.toml")
    assert broken.names("arm", "action", 2) == ("action[0]", "action[1]")
    assert broken.problem is not None and "PILAKE_ROBOTS" in broken.problem


def test_dataset_of_a_pin_a_query_and_filters(client: TestClient) -> None:
    pin = _ok(client, "/dataset?pin=picks")
    assert 'id="d-episodes">2<' in pin and "pin picks" in pin
    query = _ok(client, "/dataset?sql=" + quote("SELECT episode_id FROM episodes WHERE success"))
    assert 'id="d-episodes">2<' in query and "100.0 %" in query
    every = _ok(client, "/dataset")
    assert 'id="d-episodes">4<' in every and "robot-&lt;script&gt;" in every
    assert "<td>shoulder</td>" in every and "sketches of 3 episodes of robot type &#39;arm&#39;" in every
    filtered = _ok(client, "/dataset?robot=robot-0")
    assert (
        'id="d-episodes">2<' in filtered
        and '"histogram": {"counts": [2.0], "edges": [40.0, 41.0]}' in filtered
    )
    assert 'href="/dataset?' in _ok(client, "/episodes?robot=robot-0")


@pytest.mark.parametrize(("path", "params", "status"), HOSTILE)
def test_hostile_parameters(client: TestClient, path: str, params: dict[str, str], status: int) -> None:
    response = client.get(path + "?" + urlencode(params))
    check_hostile(response.status_code, response.text, status)


def test_generated_parameters(client: TestClient) -> None:
    for path, params in generated(36, 60):
        response = client.get(path + "?" + urlencode(params))
        check_hostile(response.status_code, response.text, None)
    assert _episodes(client, **ASC)[1] == 4  # the catalog is as it was


def _stat_rows(robot_type: str, values: list[np.ndarray]) -> pa.Table:
    rows = []
    for i, v in enumerate(values):
        row: dict[str, object] = {
            "robot_type": robot_type,
            "step_count": len(v),
            "episode_id": f"{robot_type}-{i}",
        }
        row |= {"proprio_dim": v.shape[1], "action_dim": v.shape[1]}
        row |= episode_stat_columns("proprio", v) | episode_stat_columns("action", v[:, ::-1].copy())
        rows.append(row)
    return pa.Table.from_pylist(rows)


def test_distributions_merge_the_sketches_of_the_largest_robot_type() -> None:
    rng = np.random.default_rng(7)
    arms = [
        rng.normal(size=(int(rng.integers(150, 400)), 3)).astype(np.float32) * [1, 10, 100] for _ in range(30)
    ]
    other = [rng.normal(size=(200, 5)).astype(np.float32) for _ in range(5)]
    rows = pa.concat_tables([_stat_rows("arm", arms), _stat_rows("other", other)])
    dists, robot_type, merged = _distributions(rows, DimensionNames(None))
    assert (robot_type, merged) == ("arm", 30)
    proprio = next(d for d in dists if d.kind == "proprio")
    assert proprio.names == ("proprio[0]", "proprio[1]", "proprio[2]")
    steps = np.concatenate(arms)
    for q in (0.01, 0.5, 0.99):
        got = np.array(proprio.quantiles[f"q{round(q * 100):02d}"])
        rank = (steps <= got).mean(axis=0)
        assert np.all(np.abs(rank - q) < 0.02), (q, rank)
    assert np.allclose(proprio.mean, steps.astype(np.float64).mean(axis=0))


def test_sample_ids_are_runs_spread_over_the_selection() -> None:
    ids = pa.array([f"e{i:05d}" for i in range(10_000)][::-1])
    sample = sample_ids(ids, limit=100, runs=4).to_pylist()
    assert len(sample) == 100 and sample[:2] == ["e00000", "e00001"] and sample[25] == "e02500"
    assert sample_ids(ids[:50], limit=100).to_pylist() == sorted(ids[:50].to_pylist())


def test_annotation_filter_before_any_annotation(tmp_path: Path) -> None:
    from pi_catalog import Catalog
    from pi_jobs.ui._episodes import list_episodes

    from tests.fixtures.lake_factory import episode_rows, make_episode

    catalog = Catalog(str(tmp_path / "catalog"))  # no annotations table: none imported yet
    catalog.record_episodes(
        episode_rows([make_episode(1, steps=2, cameras=("f",), size=(8, 8), seed=0)]), episodes_version=0
    )
    assert list_episodes(catalog, EpisodeFilter(), page=0, page_size=5).total == 1
    assert list_episodes(catalog, EpisodeFilter(annotation="x"), page=0, page_size=5).total == 0
    catalog.close()
