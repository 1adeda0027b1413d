"""A headless Chromium that logs in to the course hub as one user at a time.

What the test does through the page (clicks, typing into the login form, reading what is
shown) goes through :class:`HubBrowser`'s Selenium methods. Requests that a page's own
JavaScript would make (the formgrader's buttons, saving a notebook) go through
:meth:`HubBrowser.api`: a ``fetch`` run inside the page, with the page's cookies and the
XSRF token Jupyter's own frontend sends, so they pass the same authentication and checks.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

_FETCH = """
const [method, url, body, ctype, done] = arguments;
const m = document.cookie.match(/(?:^|;\\s*)_xsrf=([^;]+)/);
const headers = {"X-XSRFToken": m ? decodeURIComponent(m[1]) : ""};
if (ctype) headers["Content-Type"] = ctype;
fetch(url, {method, headers, body, credentials: "same-origin"})
  .then(async r => done({status: r.status, text: await r.text()}))
  .catch(e => done({status: -1, text: String(e)}));
"""


class HubBrowser:
    def __init__(self, driver, url: str, password: str, shots: Path):
        self.d, self.url, self.password, self.shots = driver, url, password, shots
        self.user: str | None = None

    # -- waiting and reading -------------------------------------------------------------
    def wait(self, cond, timeout: float = 60, what: str = ""):
        from selenium.webdriver.support.ui import WebDriverWait

        try:
            return WebDriverWait(self.d, timeout, poll_frequency=0.25).until(cond)
        except Exception as e:
            self.screenshot(f"timeout-{what or 'wait'}")
            raise AssertionError(f"{self.user}: timed out after {timeout} s waiting for "
                                 f"{what or cond}; page {self.d.current_url}; screenshots "
                                 f"in {self.shots}") from e

    def text(self) -> str:
        return self.d.find_element("tag name", "body").text

    def xpath(self, xp: str):
        return [e for e in self.d.find_elements("xpath", xp) if e.is_displayed()]

    def click(self, xp: str, what: str, timeout: float = 60):
        el = self.wait(lambda d: (self.xpath(xp) or [None])[0], timeout, what)
        el.click()
        return el

    def screenshot(self, name: str) -> None:
        try:
            self.shots.mkdir(parents=True, exist_ok=True)
            self.d.save_screenshot(str(self.shots / f"{self.user}-{name}.png"))
        except Exception:
            pass

    # -- the hub -------------------------------------------------------------------------
    def login(self, user: str) -> None:
        """Log out whoever was in, log in as ``user`` and wait for their JupyterLab."""
        # Cookies are scoped by path (/hub/, /user/<name>/): log out through the hub, which
        # ends the hub session, then drop what is left.
        self.d.get(f"{self.url}/hub/logout")
        self.d.delete_all_cookies()
        self.user = user
        self.d.get(f"{self.url}/hub/login")
        self.wait(lambda d: d.find_elements("id", "username_input"), 30, "login form")
        self.d.find_element("id", "username_input").send_keys(user)
        self.d.find_element("id", "password_input").send_keys(self.password)
        self.d.find_element("id", "login_submit").click()
        # the hub spawns the user's server, then redirects into JupyterLab
        self.wait(lambda d: f"/user/{user}/lab" in d.current_url, 150, "server spawned")
        self.wait(lambda d: self.xpath("//div[contains(@class,'lm-MenuBar-itemLabel')]"
                                       "[normalize-space()='Nbgrader']"), 90, "JupyterLab")

    def menu(self, top: str, item: str) -> None:
        """Open JupyterLab's ``top`` menu and choose ``item``."""
        self.click(f"//div[contains(@class,'lm-MenuBar-itemLabel')][normalize-space()='{top}']",
                   f"menu {top}")
        self.click(f"//div[contains(@class,'lm-Menu-itemLabel')][normalize-space()='{item}']",
                   f"menu item {top} > {item}")

    def api(self, method: str, path: str, body=None, form: dict | None = None) -> dict | str:
        """``method`` on ``/user/<me>/<path>`` from inside the page; JSON answers are parsed."""
        ctype = None
        if form is not None:
            from urllib.parse import urlencode

            body, ctype = urlencode(form), "application/x-www-form-urlencoded"
        elif body is not None and not isinstance(body, str):
            body, ctype = json.dumps(body), "application/json"
        self.d.set_script_timeout(600)   # autograding a course notebook can take a while
        r = self.d.execute_async_script(_FETCH, method, f"/user/{self.user}/{path}", body, ctype)
        if not 200 <= r["status"] < 300:
            raise AssertionError(f"{self.user}: {method} {path} -> {r['status']}: {r['text'][:2000]}")
        try:
            return json.loads(r["text"])
        except ValueError:
            return r["text"]


def retry(fn, timeout: float = 30, every: float = 0.5):
    """``fn()`` until it returns something true (for files that appear asynchronously)."""
    deadline = time.monotonic() + timeout
    while True:
        out = fn()
        if out or time.monotonic() > deadline:
            return out
        time.sleep(every)
