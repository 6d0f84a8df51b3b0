"""`pilake ui` in a real browser: Debian's headless chromium, driven by Selenium, against the
`pilake ui` command run as a process. One server and one browser for the module.

Every page loads with no console error; a query renders its rows; a camera plays (its
currentTime advances) and the plot cursor follows it; a click on the plot seeks the videos; the
Episodes page filters, sorts and leads to episodes whose prev/next follow the list; the plots
name their dimensions and mark the annotations; the Dataset page draws its charts; the
Overview's axis spans hours, not years. The hostile parameters of test_episodes go through
this real server too.
Screenshots of each page go to the test's folder, and to $PILAKE_UI_SCREENSHOTS when set.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.fixtures.browser import chromium, console_errors, free_port, pilake_ui, wait_for
from tests.jobs.ui.conftest import SCRIPT, UiLake
from tests.jobs.ui.test_episodes import HOSTILE, ROBOTS, check_hostile, generated

pytestmark = pytest.mark.integration

PAGES = {
    "overview": "/",
    "query": "/query?sql=" + quote("SELECT episode_id, robot_id, task, success, step_count FROM episodes"),
    "episode": "/episode/ep-002",
    "episodes": "/episodes?sort=episode_id&order=asc",
    "dataset": "/dataset",
    "quarantine": "/quarantine",
    "pins": "/pins",
}


@pytest.fixture(scope="module")
def browser(ui_lake: UiLake, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    home = tmp_path_factory.mktemp("ui-home")
    (home / "robots.toml").write_text(ROBOTS)
    env = {
        "PILAKE_HOME": str(home),
        "PILAKE_LAKE": ui_lake.layout.root,
        "PILAKE_CATALOG": ui_lake.catalog,
        "PILAKE_ROBOTS": str(home / "robots.toml"),
    }
    with pilake_ui(env, port=free_port(), cache_dir=home / "cache") as url, chromium() as driver:
        yield driver, url


def _screenshot(driver: Any, name: str, tmp_path: Path) -> None:
    driver.save_screenshot(str(tmp_path / f"{name}.png"))
    extra = os.environ.get("PILAKE_UI_SCREENSHOTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(extra) / f"{name}.png"))


@pytest.mark.parametrize("name", list(PAGES))
def test_page_loads_without_console_errors(browser: tuple[Any, str], name: str, tmp_path: Path) -> None:
    driver, url = browser
    console_errors(driver)  # drop what earlier pages left
    driver.get(url + PAGES[name])
    wait_for(driver, "return document.readyState === 'complete'")
    if name == "overview":
        wait_for(driver, "return document.querySelector('#commits-chart canvas') !== null")
        # the fixture's commits fall within an hour or two: the axis spans hours (it spanned
        # three years for one bar), an hour either side of the bars
        span = float(driver.execute_script("return document.getElementById('commits-chart').dataset.xSpanS"))
        assert 2 * 3600 <= span <= 6 * 3600
    if name == "dataset":
        wait_for(driver, "return document.querySelector('#length-chart canvas') !== null")
    if name == "episode":
        wait_for(driver, "return document.querySelectorAll('.plot canvas').length === 2")
        wait_for(
            driver, "return Array.from(document.querySelectorAll('video')).every(v => v.readyState >= 4)"
        )
    assert driver.execute_script("return window.__pwned === undefined")  # the <script> rows stayed text
    _screenshot(driver, name, tmp_path)
    assert console_errors(driver) == []
    assert (tmp_path / f"{name}.png").stat().st_size > 5_000


def test_query_renders_rows(browser: tuple[Any, str]) -> None:
    from selenium.webdriver.common.by import By

    driver, url = browser
    driver.get(url + "/query")
    box = driver.find_element(By.ID, "sql")
    box.clear()
    box.send_keys(
        "SELECT episode_id, task FROM episodes WHERE startsWith(episode_id, 'ep-0') ORDER BY episode_id"
    )
    driver.find_element(By.ID, "run").click()
    wait_for(driver, "return document.getElementById('results') !== null")
    cells = driver.find_elements(By.CSS_SELECTOR, "#results tbody tr td:first-child a")
    assert [c.text for c in cells] == ["ep-000", "ep-001", "ep-002"]
    assert "pilake dataset create" in driver.find_element(By.ID, "pin-command").text
    cells[1].click()
    wait_for(driver, "return document.getElementById('episode-id') !== null")
    assert driver.find_element(By.ID, "episode-id").text == "ep-001"
    assert console_errors(driver) == []


def _state(driver: Any) -> dict[str, float]:
    return driver.execute_script(
        "const v = document.getElementById('video-0');"
        "return {t: v.currentTime, paused: v.paused,"
        " cursor: parseFloat(document.getElementById('plot-proprio').dataset.cursorT),"
        " cursor2: parseFloat(document.getElementById('plot-action').dataset.cursorT)};"
    )


def test_video_plays_and_the_cursor_follows(browser: tuple[Any, str]) -> None:
    driver, url = browser
    driver.get(url + "/episode/ep-002")
    wait_for(driver, "return document.getElementById('video-0').readyState >= 2")
    assert _state(driver)["t"] == 0.0
    driver.execute_script("return document.getElementById('video-0').play()")
    seen: list[dict[str, float]] = []
    for _ in range(3):  # the cursor moves with the video while it plays
        wait_for(driver, f"return document.getElementById('video-0').currentTime > {0.6 * (len(seen) + 1)}")
        seen.append(_state(driver))
    times = [s["t"] for s in seen]
    cursors = [s["cursor"] for s in seen]
    assert times == sorted(times) and times[-1] > times[0]
    assert cursors == sorted(cursors) and cursors[-1] > cursors[0] > 0
    # close behind the video while it plays (the cursor redraws each animation frame, which a
    # loaded machine delays); exact once it is paused, below
    assert all(0 <= s["t"] - s["cursor"] < 0.5 for s in seen)
    driver.execute_script("document.getElementById('video-0').pause()")
    wait_for(driver, "return document.getElementById('video-0').paused")
    final = wait_for(
        driver,
        "const v = document.getElementById('video-0');"
        "const c = parseFloat(document.getElementById('plot-proprio').dataset.cursorT);"
        "return Math.abs(c - v.currentTime) < 0.002 ? [v.currentTime, c] : null;",
    )
    assert final[0] > 1.5
    # the other camera follows the first
    assert driver.execute_script("return document.getElementById('video-1').currentTime") > 0.5
    assert console_errors(driver) == []


def test_click_on_the_plot_seeks_the_video(browser: tuple[Any, str]) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    driver, url = browser
    driver.get(url + "/episode/ep-002")
    wait_for(driver, "return document.getElementById('video-0').readyState >= 2")
    over = driver.find_element(By.CSS_SELECTOR, "#plot-action .u-over")
    width = over.size["width"]
    t_max = driver.execute_script(
        "return JSON.parse(document.getElementById('plot-data').textContent).t.at(-1)"
    )
    for fraction in (0.75, 0.25):
        # the plotting area spans the episode's first to last step time
        ActionChains(driver).move_to_element_with_offset(
            over, int(width * (fraction - 0.5)), 0
        ).click().perform()
        expected = t_max * fraction
        state = wait_for(
            driver,
            "const v = document.getElementById('video-0');"
            f"return !v.seeking && Math.abs(v.currentTime - {expected}) < 0.1 ? v.currentTime : null;",
        )
        assert abs(_state(driver)["cursor"] - expected) < 0.1
        assert abs(state - expected) < 0.1
    assert console_errors(driver) == []


def test_episodes_filter_sort_and_step_through(browser: tuple[Any, str]) -> None:
    from selenium.webdriver.common.by import By

    driver, url = browser
    driver.get(url + "/episodes")
    box = driver.find_element(By.NAME, "robot")
    box.send_keys("robot-0")
    driver.find_element(By.ID, "apply").click()
    wait_for(
        driver, "return document.getElementById('episodes-summary').textContent.startsWith('2 episodes')"
    )
    driver.find_element(By.CSS_SELECTOR, "a.sort[data-column='episode_id']").click()  # descending
    wait_for(driver, "return location.search.includes('sort=episode_id')")
    driver.find_element(By.CSS_SELECTOR, "a.sort[data-column='episode_id']").click()  # ascending
    wait_for(driver, "return location.search.includes('order=asc')")
    links = driver.find_elements(By.CSS_SELECTOR, "#episodes tbody td:first-child a")
    assert [a.text for a in links] == ["ep-000", "ep-002"]
    links[0].click()
    wait_for(driver, "return document.getElementById('episode-id') !== null")
    assert driver.find_elements(By.ID, "prev-episode") == []
    driver.find_element(By.ID, "next-episode").click()
    wait_for(driver, "return document.getElementById('episode-id').textContent === 'ep-002'")
    assert driver.find_elements(By.ID, "next-episode") == []  # the last of robot-0's
    wait_for(driver, "return document.querySelectorAll('.plot canvas').length === 2")
    legend = driver.find_element(By.CSS_SELECTOR, "#plot-proprio .u-legend").text
    assert "shoulder" in legend and "wrist" in legend and "proprio[" not in legend
    assert driver.execute_script("return document.getElementById('plot-action').dataset.marks") == "1"
    driver.find_element(By.ID, "back-to-list").click()
    wait_for(driver, "return document.getElementById('episodes-summary') !== null")
    assert "robot=robot-0" in driver.current_url
    assert console_errors(driver) == []


def test_dataset_draws_its_charts(browser: tuple[Any, str]) -> None:
    driver, url = browser
    driver.get(url + "/dataset?pin=picks")
    wait_for(driver, "return document.querySelector('#length-chart canvas') !== null")
    assert driver.execute_script("return document.getElementById('length-chart').dataset.bins") == "1"
    assert driver.execute_script("return window.__pwned === undefined")
    assert console_errors(driver) == []


def _get(url: str) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_hostile_parameters_through_the_server(browser: tuple[Any, str]) -> None:
    from urllib.parse import urlencode

    _, url = browser
    for path, params, status in HOSTILE:
        check_hostile(*_get(url + path + "?" + urlencode(params)), status)
    for path, params in generated(3636, 40):
        check_hostile(*_get(url + path + "?" + urlencode(params)), None)
    status, text = _get(url + "/episodes?sort=episode_id&order=asc")
    assert status == 200 and "4 episodes" in text and SCRIPT not in text
