"""A screenshot of the dashboard (/ui) after a few syncs of the demo's students view.

Starts the demo's pieces (a legacy SQLite database of students, its agent, the service),
defines the demo's view with `auto` beside the same query with `full_ship`, runs a load and
a few rounds of changes and syncs, then opens the dashboard in a headless Chromium (Debian's
`chromium` and `chromium-driver`, installed when missing, as in the tests) and saves a PNG
of the whole page, reduced to a palette so that it stays small.

    .venv/bin/python scripts/dashboard_screenshot.py [--out docs/images/dashboard.png]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.demo import TOKEN, VIEW_SQL  # noqa: E402
from workloads.browser import browser_errors, start_chromium  # noqa: E402
from workloads.harness import Api, start_agent, start_service  # noqa: E402
from workloads.students import StudentsSource  # noqa: E402

WIDTH = 1400


def wait_for(check, within_s: float = 120.0):
    deadline = time.monotonic() + within_s
    while not (result := check()):
        if time.monotonic() > deadline:
            raise RuntimeError("the dashboard did not show its plots in time")
        time.sleep(0.25)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "dashboard.png")
    parser.add_argument("--rows", type=int, default=20_000, help="students in the legacy table")
    parser.add_argument("--rounds", type=int, default=8, help="rounds of changes and syncs after the load")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="deltasieve-screenshot-"))
    agent = service = driver = None
    try:
        db = work / "legacy.db"
        legacy = StudentsSource(db)
        legacy.create(args.rows)
        agent = start_agent(f"sqlite:///{db}", work, token=TOKEN, allow=["students"])
        service = start_service(work / "warehouse", work)
        api = Api(service.url)
        api.add_source("campus", agent.url, TOKEN)
        api.add_view("active_students", VIEW_SQL)
        api.add_view("active_students_fullship", VIEW_SQL, strategy="full_ship")
        for rnd in range(args.rounds + 1):
            if rnd:
                legacy.change()
            for view in ("active_students", "active_students_fullship"):
                sync = api.sync(view)
                if sync["status"] != "succeeded":
                    raise RuntimeError(f"sync of {view} failed: {sync['error']}")
            print(f"round {rnd} synced", flush=True)

        driver = start_chromium(work / "chromium-profile", width=WIDTH, height=1000)
        driver.get(f"{service.url}/ui#view=active_students")
        points = "return +((document.querySelector(\"svg[data-plot='{}']\") || {{}}).dataset || {{}}).points || 0"
        wait_for(lambda: driver.execute_script(points.format("bytes")) > args.rounds)
        wait_for(lambda: driver.execute_script(points.format("stats")) > 0)
        # The whole page in one picture: a viewport as tall as the document (no scroll bar).
        height = driver.execute_script("return document.documentElement.scrollHeight")
        metrics = {"width": WIDTH, "height": height, "deviceScaleFactor": 1, "mobile": False}
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
        time.sleep(1)
        errors = browser_errors(driver)
        if errors:
            raise RuntimeError(f"the browser's console has errors: {errors}")
        shot = work / "dashboard.png"
        driver.save_screenshot(str(shot))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shrink(shot, args.out)
        print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB)")
        return 0
    finally:
        if driver:
            driver.quit()
        if service:
            service.stop()
        if agent:
            agent.stop()
        shutil.rmtree(work, ignore_errors=True)


def shrink(source: Path, target: Path) -> None:
    """The screenshot with a 256-colour palette: a flat page loses nothing visible, and a third of its size."""
    from PIL import Image  # Pillow comes with matplotlib (the test extra)

    with Image.open(source) as image:
        image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(target, optimize=True)


if __name__ == "__main__":
    sys.exit(main())
