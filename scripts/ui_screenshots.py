"""Screenshots of every `pilake ui` page on the lake the settings name (the README's docs/ui/*.png).

    PILAKE_HOME=... .venv/bin/python scripts/ui_screenshots.py docs/ui

Starts `pilake ui` as a user would, drives Debian's headless chromium (tests/fixtures/browser.py,
the same as the browser tests), and writes overview.png, episodes.png, query.png, dataset.png,
episode.png (opened from the Episodes page, a camera played to ~40% with the plot cursor on
it), quarantine.png and pins.png. Fails on a console error.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.browser import chromium, console_errors, free_port, pilake_ui, wait_for

QUERY = "SELECT episode_id, robot_id, task, success, step_count, duration_s FROM episodes ORDER BY episode_id"


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pilake-ui-shots-") as tmp:
        env = {k: v for k, v in os.environ.items() if k.startswith("PILAKE_")}
        with pilake_ui(env, port=free_port(), cache_dir=Path(tmp) / "cache") as url, chromium() as driver:
            driver.set_window_size(1280, 1000)
            shots = [
                ("overview", "/"),
                ("episodes", "/episodes?sort=episode_id&order=asc"),
                ("dataset", "/dataset"),
                ("query", "/query?sql=" + quote(QUERY)),
                ("quarantine", "/quarantine"),
                ("pins", "/pins"),
            ]
            for name, path in shots:
                # the Dataset page's distributions sit below its histogram and tables
                driver.set_window_size(1280, 1700 if name == "dataset" else 1000)
                driver.get(url + path)
                wait_for(driver, "return document.readyState === 'complete'")
                driver.save_screenshot(str(out / f"{name}.png"))
                if name == "episodes":  # the episode page with the list's prev/next
                    episode = driver.execute_script(
                        "const a = document.querySelectorAll('#episodes tbody a')[1];"
                        "return a && a.getAttribute('href');"
                    )
            if not episode:
                raise SystemExit("the lake has no episodes to show (run `pilake demo` first)")
            driver.set_window_size(1280, 1250)
            driver.get(url + episode)
            wait_for(
                driver, "return Array.from(document.querySelectorAll('video')).every(v => v.readyState >= 4)"
            )
            t = driver.execute_script(
                "const v = document.getElementById('video-0'); return v.duration * 0.4;"
            )
            driver.execute_script(f"for (const v of document.querySelectorAll('video')) v.currentTime = {t};")
            wait_for(
                driver,
                "const c = parseFloat(document.getElementById('plot-proprio').dataset.cursorT);"
                f"return Math.abs(c - {t}) < 0.05",
            )
            wait_for(
                driver,
                "const vs = Array.from(document.querySelectorAll('video'));"
                "return vs.every(v => !v.seeking && v.readyState >= 2)",
            )
            driver.save_screenshot(str(out / "episode.png"))
            errors = console_errors(driver)
            if errors:
                raise SystemExit(f"console errors: {errors}")
    print(f"screenshots in {out}: {sorted(p.name for p in out.glob('*.png'))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/ui")))
