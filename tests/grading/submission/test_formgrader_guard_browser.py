"""The formgrader guard's policy holds by itself: on a formgrader page that was NOT sanitized,
no student script runs, and the formgrader's own scripts still do.

The page is nbgrader's ``formgrade`` template as it ships (no sanitizing) rendering every
payload of tests/grading/payloads.py, served by a small Tornado app at the formgrader's own
route with nbgrader's static files beside it and :mod:`grader.grading.submission.formgrader_guard`'s
transform installed, as the hub's server has it. Chromium opens it: the payloads are
refused (the browser logs each refusal), while jQuery, Backbone and ``formgrade.js`` (the
template's scripts, which carry the nonce) load and the template's inline ``onclick`` shows
the student's name. Without the guard (the control) the same page runs the payloads.
tests/hub/test_formgrader_payloads.py checks the whole thing, sanitizer included, on a hub.
"""
from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from grader.grading.submission.formgrader_guard import transform_for
from tests.grading import payloads

pytestmark = [pytest.mark.slow, pytest.mark.browser]

BASE = "/user/instructor"
SUB = "abc123"


def _stock_formgrade_page(listener: str) -> str:
    import nbgrader
    from nbconvert import HTMLExporter

    templates = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"
    ex = HTMLExporter(template_name="formgrade", extra_template_basedirs=[str(templates)])
    page, _ = ex.from_notebook_node(payloads.with_outputs(listener), resources={
        "assignment_id": "a1", "notebook_id": "a1", "submission_id": SUB, "index": 0,
        "total": 1, "base_url": BASE, "student": "mallory", "last_name": "M",
        "first_name": "Mallory", "notebook_path": "course/autograded/mallory/a1/a1.ipynb"})
    return page


class _App:
    """Tornado serving the page at the formgrader's route (guarded or not) and nbgrader's
    static files, on a free loopback port, in a thread."""

    def __init__(self, page: str, guarded: bool) -> None:
        import nbgrader
        import tornado.web

        static = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "static"

        class Page(tornado.web.RequestHandler):
            def get(self):
                self.write(page)

        ready = threading.Event()

        def serve():
            async def main():
                app = tornado.web.Application([
                    (rf"{BASE}/formgrader/submissions/{SUB}/", Page),
                    (rf"{BASE}/formgrader/static/(.*)", tornado.web.StaticFileHandler,
                     {"path": str(static)}),
                ], transforms=[transform_for(BASE)] if guarded else [])
                self.server = app.listen(0, "127.0.0.1")
                self.port = next(iter(self.server._sockets.values())).getsockname()[1]
                self.stop = asyncio.Event()
                self.loop = asyncio.get_running_loop()
                ready.set()
                await self.stop.wait()
                self.server.stop()

            asyncio.run(main())

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        ready.wait(30)
        self.url = f"http://127.0.0.1:{self.port}{BASE}/formgrader/submissions/{SUB}/"

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(10)


@pytest.fixture(scope="module")
def listener():
    lst = payloads.Listener()
    yield lst
    lst.close()


@pytest.fixture(scope="module")
def browser(chrome):
    from tests.chrome import fresh

    return fresh(chrome)


def _page_scripts_ran(d) -> dict:
    return d.execute_script(
        "return {jquery: typeof jQuery === 'function', backbone: typeof Backbone === 'object',"
        " formgrader: typeof formgrader === 'object', base_url: typeof base_url === 'string'}")


def test_the_guards_policy_alone_stops_every_payload_and_keeps_the_formgrader(browser, listener):
    page = _stock_formgrade_page(listener.url)
    results = {}
    for guarded in (True, False):
        app = _App(page, guarded)
        try:
            seen = payloads.observe(browser, app.url, listener)
            browser.get(app.url)
            scripts = _page_scripts_ran(browser)
            browser.find_element("css selector", "span.glyphicon-eye-open").click()
            shown = any(e.is_displayed() for e in
                        browser.find_elements("css selector", "a.name-shown"))
            results[guarded] = (seen, scripts, shown)
        finally:
            app.close()
    (seen, scripts, shown), (control, _, _) = results[True], results[False]
    print(f"\nunsanitized formgrader page, guarded: ran {sorted(seen['ran'])}, "
          f"{len(seen['refused'])} refusals; page scripts {scripts}, name toggle {shown}"
          f"\nthe same page unguarded (control): ran {sorted(control['ran'])}")
    assert seen["ran"] == set(), seen
    assert seen["refused"], "the browser refused the payloads"
    assert all(scripts.values()), f"the formgrader's own scripts did not run: {scripts}"
    assert shown, "the template's inline onclick (toggle_name) did not run"
    assert {"md-script", "md-img-onerror", "out-html-script", "out-md-img",
            "md-javascript-link"} <= control["ran"], control
