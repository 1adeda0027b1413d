"""The one headless Chromium of a test session (the ``chrome`` fixture, tests/conftest.py).

Starting Chromium and its driver costs seconds each time; every browser test module (the
book's framework switch, the feedback and formgrader pages, the hub) shares one, and takes it
through :func:`fresh` in its own module-scoped fixture, as a fresh browser would be.
"""
from __future__ import annotations

from pathlib import Path

# Headless, and no background connections (the machine's network is closed).
CHROME_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                "--window-size=1400,1000")


def start(chromium: tuple[str, str], profile: Path):
    """A headless Chromium (``chromium``: the browser's and chromedriver's paths) with its
    profile in ``profile``, keeping its console log."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver = chromium
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for flag in (*CHROME_FLAGS, f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=opts)


def fresh(d, page_load_timeout: float = 60, window: tuple[int, int] = (1400, 1000)):
    """``d`` as a fresh browser would be for the next module: one window on a blank page, no
    cookies of any site (cookies ignore the port: a module's hub on 127.0.0.1 would see the
    last module's), no cache, an empty console log, default timeouts, ``window`` in pixels.
    Storage (localStorage) is per origin, and each module serves its pages on a port of its
    own."""
    for handle in d.window_handles[1:]:
        d.switch_to.window(handle)
        d.close()
    d.switch_to.window(d.window_handles[0])
    d.get("about:blank")
    d.execute_cdp_cmd("Network.clearBrowserCookies", {})
    d.execute_cdp_cmd("Network.clearBrowserCache", {})
    d.set_window_size(*window)
    d.set_page_load_timeout(page_load_timeout)
    d.set_script_timeout(30)
    d.get_log("browser")          # reading the log empties it
    return d
