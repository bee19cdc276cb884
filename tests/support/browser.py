"""A headless Chromium driven by Selenium, for the dashboard's test and its screenshot.

Debian's `chromium` and `chromium-driver` are installed on first use when missing (as root,
tests/support/debian.py); Selenium is pointed at the system chromedriver and browser, so it
never downloads a driver.
"""

from __future__ import annotations

import os
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tests.support.debian import ensure_command


def start_chromium(profile_dir: Path, *, width: int = 1400, height: int = 1000) -> webdriver.Chrome:
    """A headless Chromium whose console messages `browser_errors` can read."""
    browser = ensure_command("chromium", "chromium")
    driver_path = ensure_command("chromedriver", "chromium-driver")
    # Selenium Manager would look for (and could fetch) drivers: both paths are given, and offline.
    os.environ.setdefault("SE_OFFLINE", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # the suite runs as root, where Chromium's sandbox will not start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--disable-extensions",
        "--no-first-run",
        f"--user-data-dir={profile_dir}",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=options, service=Service(driver_path))


def browser_errors(driver: webdriver.Chrome) -> list[dict]:
    """The SEVERE entries of the browser's console since the last call (failed loads, uncaught errors)."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
