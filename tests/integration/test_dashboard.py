"""The dashboard at /ui, in a real headless Chromium against the session's service and real agents.

DASHBOARD_SCREENSHOT=PATH saves a screenshot of the page at the end of the module.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By

from workloads.browser import browser_errors, start_chromium
from workloads.harness import start_agent

pytestmark = pytest.mark.integration

#: Generous: the page refreshes every few seconds, and the machine may be slow and busy.
WAIT_S = 120
ROWS = 3_000
#: The slow agent's read rate: its scan of the paced view (about 2,300 rows) takes about 15 s,
#: well beyond the page's idle refresh (3 s) and a refresh itself, so the page sees the sync
#: queued or running even on a slow machine.
SLOW_ROWS_PER_S = 150


def wait_for(what: str, check: Callable[[], object], within_s: float = WAIT_S):
    """Poll `check` until it returns something true; fail with `what` after `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"after {within_s} s the dashboard still does not show {what}")
        time.sleep(0.25)


@pytest.fixture(scope="module")
def shop(tmp_path_factory, logs_dir, api):
    """A SQLite shop read by two agents: one at full speed, one paced to make its syncs last."""
    db = tmp_path_factory.mktemp("dash") / "shop.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, stock INTEGER)")
        c.executemany(
            "INSERT INTO items VALUES (?, ?, ?, ?)", [(i, f"item {i}", i * 1.25, i % 13) for i in range(ROWS)]
        )
    fast = start_agent(f"sqlite:///{db}", logs_dir)
    slow = start_agent(f"sqlite:///{db}", logs_dir, extra=["--max-rows-per-s", str(SLOW_ROWS_PER_S)])
    api.add_source("dash_shop", fast.url)
    api.add_source("dash_slow", slow.url)
    api.add_view("dash_items", "SELECT i.id, i.name, i.price, i.stock FROM dash_shop.items i")
    api.add_view("dash_paced", "SELECT i.id, i.price FROM dash_slow.items i WHERE i.stock > 2")
    yield db
    fast.stop()
    slow.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory, service):
    driver = start_chromium(tmp_path_factory.mktemp("chromium-profile"))  # installed when missing
    driver.set_page_load_timeout(WAIT_S)
    yield driver
    path = os.environ.get("DASHBOARD_SCREENSHOT")
    if path:
        driver.save_screenshot(path)
    driver.quit()


def change(db, round_: int) -> None:
    with sqlite3.connect(db) as c:
        c.execute("UPDATE items SET price = price + 1 WHERE id % 40 = ?", (round_,))
        c.execute("DELETE FROM items WHERE id = ?", (ROWS - 1 - round_,))
        c.execute("INSERT INTO items VALUES (?, 'new', 1.0, 5)", (ROWS + round_,))


def points(driver, plot: str) -> int:
    found = driver.find_elements(By.CSS_SELECTOR, f"svg[data-plot='{plot}']")
    return int(found[0].get_attribute("data-points")) if found else 0


def cell_text(driver, selector: str) -> str:
    """The text of the first element `selector` finds now ('' if none, or if the page redrew it meanwhile)."""
    try:
        found = driver.find_elements(By.CSS_SELECTOR, selector)
        return found[0].text if found else ""
    except StaleElementReferenceException:
        return ""


def test_the_page_lists_the_views_and_plots_their_syncs(api, service, shop, browser):
    assert api.sync("dash_items")["status"] == "succeeded"
    change(shop, 0)
    assert api.sync("dash_items")["status"] == "succeeded"

    browser.get(f"{service.url}/ui#view=dash_items")
    wait_for("the page loaded", lambda: browser.find_elements(By.CSS_SELECTOR, "body[data-loaded='true']"))
    rows = wait_for("the views", lambda: browser.find_elements(By.CSS_SELECTOR, "#views tr[data-view]"))
    names = {r.get_attribute("data-view") for r in rows}
    assert {"dash_items", "dash_paced"} <= names
    assert wait_for(
        "the sources", lambda: browser.find_elements(By.CSS_SELECTOR, "#sources tr[data-source='dash_shop']")
    )
    # the source's health is its agent's last answer (its view's syncs), not a view's last sync
    health = "#sources tr[data-source='dash_shop'] .source-health[data-status='ok']"
    assert "since" in wait_for("the source's health", lambda: cell_text(browser, health))
    # the data's age beside the last attempt: since the last succeeded sync's start; none before one
    assert "ago" in wait_for("the data's age", lambda: cell_text(browser, "tr[data-view='dash_items'] td.data-age"))
    wait_for(
        "no data for a view never synced",
        lambda: cell_text(browser, "tr[data-view='dash_paced'] td.data-age") == "no data",
    )

    # both syncs are points of the bytes plot (moved bytes, plus the second's estimates)
    wait_for("two syncs in the bytes plot", lambda: points(browser, "bytes") >= 2)
    wait_for("the sync times", lambda: points(browser, "time") >= 2)
    wait_for("the rows changed", lambda: points(browser, "rows") >= 2)
    wait_for("the update-probability histogram", lambda: points(browser, "stats") >= 1)
    moved = browser.find_elements(By.CSS_SELECTOR, "svg[data-plot='bytes'] .s-moved circle.point")
    syncs = api.http.get("/v1/views/dash_items/syncs").json()
    shown = sorted(float(c.get_attribute("data-value")) for c in moved)
    assert shown == sorted(float(s["metrics"]["bytes_to_agent"] + s["metrics"]["bytes_from_agent"]) for s in syncs)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#syncs tr[data-status='succeeded']")) == 2

    # the page's own button starts a sync (no API key on this service), which then shows up
    button = browser.find_element(By.CSS_SELECTOR, "#views tr[data-view='dash_items'] button.sync-now")
    button.click()
    wait_for(
        "the sync its button started",
        lambda: len(browser.find_elements(By.CSS_SELECTOR, "#syncs tr[data-status='succeeded']")) == 3,
    )
    assert browser_errors(browser) == []


def test_the_page_follows_a_sync_started_elsewhere(api, service, shop, browser):
    browser.get(f"{service.url}/ui#view=dash_paced")
    wait_for("the paced view", lambda: browser.find_elements(By.CSS_SELECTOR, "#view-detail[data-view='dash_paced']"))
    assert browser.find_elements(By.CSS_SELECTOR, "#syncs tr[data-sync]") == []

    started = api.http.post("/v1/views/dash_paced/syncs")
    assert started.status_code == 202, started.text
    sync_id = started.json()["id"]

    progress = f"#progress[data-sync='{sync_id}']"
    box = wait_for("the sync's progress", lambda: browser.find_elements(By.CSS_SELECTOR, progress))[0]
    assert box.get_attribute("data-status") in ("queued", "running")
    assert sync_id[:8] in box.text
    # while it runs, the box shows how far it got (a phase, once the sync reports one)
    wait_for(
        "the sync's phase or its end",
        lambda: "phase" in box.text or not browser.find_elements(By.CSS_SELECTOR, progress),
    )

    row = f"#syncs tr[data-sync='{sync_id}'][data-status='succeeded']"
    wait_for("the finished sync in the list", lambda: browser.find_elements(By.CSS_SELECTOR, row))
    wait_for("the progress box gone", lambda: not browser.find_element(By.ID, "progress").is_displayed())
    assert browser.find_elements(By.CSS_SELECTOR, "#views tr[data-view='dash_paced'] [data-status='succeeded']")
    assert api.http.get(f"/v1/views/dash_paced/syncs/{sync_id}").json()["status"] == "succeeded"
    assert browser_errors(browser) == []


def test_assets_are_served_and_nothing_else(api):
    page = api.http.get("/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/ui/app.js" in page.text and "http" not in page.text.replace("http://www.w3.org", "")
    for asset, kind in (("app.js", "javascript"), ("style.css", "css")):
        r = api.http.get(f"/ui/{asset}")
        assert r.status_code == 200 and kind in r.headers["content-type"]
        assert "https://" not in r.text and "//cdn" not in r.text  # nothing fetched from elsewhere
    assert api.http.get("/ui/").status_code == 200
    for missing in ("nope.js", "..%2Fapp.py", "index.html.bak"):
        assert api.http.get(f"/ui/{missing}").status_code == 404
