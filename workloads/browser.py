"""A headless Chromium driven by Selenium: the dashboard's test and its screenshot
(scripts/dashboard_screenshot.py) open /ui in it.

Selenium is given the paths of Debian's `chromium` and `chromium-driver` (installed when
missing, as root), so it never looks for or downloads a driver.
"""

from __future__ import annotations

import os
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from workloads.debian import ensure_command

#: Debian's packages of the browser and its driver, and the commands they install.
PACKAGES = {"chromium": "chromium", "chromedriver": "chromium-driver"}


def start_chromium(profile_dir: Path, *, width: int = 1400, height: int = 1000) -> webdriver.Chrome:
    """A headless Chromium whose console messages `browser_errors` can read."""
    browser, driver_path = (ensure_command(command, package) for command, package in PACKAGES.items())
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager: never fetch anything
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # as root (the suite's CI), Chromium's sandbox will not start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--hide-scrollbars",
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
