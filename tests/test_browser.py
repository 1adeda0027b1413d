"""The framework switch, checked in a real headless Chromium against the built book."""
import functools
import http.server
import re
import threading

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]


MISSING: list[str] = []  # paths the pages asked for and the book does not have (404)


class _Handler(http.server.SimpleHTTPRequestHandler):
    def send_error(self, code, *args, **kwargs):
        if code == 404:
            MISSING.append(self.path)
        super().send_error(code, *args, **kwargs)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site(built_book):
    handler = functools.partial(_Handler, directory=str(built_book))
    http.server.ThreadingHTTPServer.allow_reuse_address = True
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser(chrome):
    from tests.chrome import fresh

    return fresh(chrome, window=(1280, 900))


def _shown(drv, css):
    return [e for e in drv.find_elements("css selector", css) if e.is_displayed()]


def test_reader_picks_a_framework_once_and_every_page_follows(browser, site):
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{site}/chapters/toolkit.html")
    browser.execute_script("localStorage.clear()")
    browser.get(f"{site}/chapters/toolkit.html")
    wait = WebDriverWait(browser, 20)
    wait.until(lambda d: d.find_elements("css selector", ".fw-switch button"))

    # Default: PyTorch cells shown, Paddle cells hidden.
    assert _shown(browser, ".tag_torch") and not _shown(browser, ".tag_paddle")

    browser.find_element("css selector", ".fw-switch button[data-fw='paddle']").click()
    assert _shown(browser, ".tag_paddle") and not _shown(browser, ".tag_torch")
    pressed = browser.find_element("css selector", ".fw-switch button[aria-pressed='true']")
    assert pressed.get_attribute("data-fw") == "paddle"

    # Another page, reached by a link: the choice is remembered.
    browser.get(f"{site}/chapters/intro.html")
    browser.get(f"{site}/chapters/toolkit.html")
    wait.until(lambda d: d.find_elements("css selector", ".fw-switch button"))
    assert _shown(browser, ".tag_paddle") and not _shown(browser, ".tag_torch")

    # "Both" shows the two side by side.
    browser.find_element("css selector", ".fw-switch button[data-fw='both']").click()
    assert _shown(browser, ".tag_paddle") and _shown(browser, ".tag_torch")
    assert browser.execute_script("return localStorage.getItem('course-framework')") == "both"


def test_outputs_of_both_frameworks_are_in_the_page(browser, site):
    browser.get(f"{site}/chapters/toolkit.html")
    text = browser.find_element("css selector", "article").get_attribute("textContent")
    assert "PyTorch" in text and "PaddlePaddle" in text
    # what each tab's cells printed when the book was built (hidden or not, it is there):
    # a line only the PyTorch cell prints, one only the Paddle cell prints, and the timing
    # loop's result once per framework (the code's f-string has no figures in it)
    assert re.search(r"CUDA available: (True|False) \| GPUs: \d", text)
    assert re.search(r"built with CUDA: (True|False) \| GPUs: \d", text)
    assert len(re.findall(r"by hand: median \d+\.\d\d ms of \d+ runs", text)) == 2


def test_the_switch_covers_no_cell_and_notes_wrap(browser, site):
    """The switch sits in the theme's header bar: with any code cell scrolled to the top of
    the window, what is drawn at its first line is the cell, not the switch. The hardware
    line and GPU-cell notes wrap: none scrolls sideways."""
    for page in ("toolkit", "multidevice"):
        browser.get(f"{site}/chapters/{page}.html")
        browser.execute_script("localStorage.setItem('course-framework', 'torch')")
        browser.get(f"{site}/chapters/{page}.html")
        cells = [c for c in browser.find_elements("css selector", ".tag_torch .cell_input pre")
                 if c.is_displayed()][:6]
        assert cells, page
        for pre in cells:
            covered = browser.execute_script("""
                const pre = arguments[0];
                pre.scrollIntoView({block: "start"});
                const r = pre.getBoundingClientRect();
                const hit = document.elementFromPoint(r.left + 12, Math.max(r.top, 0) + 8);
                const header = document.querySelector(".bd-header-article");
                const below = header ? header.getBoundingClientRect().bottom : 0;
                // the first line is either visible below the header bar, or the cell
                return {inside: pre.contains(hit), top: r.top, below: below,
                        switch: !!(hit && hit.closest(".fw-switch"))};""", pre)
            assert not covered["switch"], (page, covered)
            assert covered["inside"] or covered["top"] >= covered["below"], (page, covered)
        notes = browser.find_elements("css selector", ".course-note")
        assert notes, f"{page}: no hardware note"
        for n in notes:
            assert browser.execute_script(
                "return arguments[0].scrollWidth <= arguments[0].clientWidth + 1", n), page


def test_no_page_declares_a_script_twice(site, built_book):
    """Jupyter Book 1.0 put sphinx-thebe's settings in every page twice ("Identifier
    'THEBE_JS_URL' has already been declared" in the console)."""
    for page in ("toolkit", "sharding", "intro"):
        html = (built_book / "chapters" / f"{page}.html").read_text()
        assert html.count("const THEBE_JS_URL") <= 1, page


def test_the_references_show_whole_urls_and_plain_labels(built_book):
    html = (built_book / "chapters" / "references.html").read_text()
    assert ">PaddlePaddle/Paddle<" not in html
    assert "blob/develop/python/paddle/distributed/auto_parallel" in html.split("URL:", 1)[1]
    assert "Dollar" not in re.sub(r"Doll.r, Piotr", "", html)


def test_a_page_asks_for_nothing_the_book_lacks(browser, site):
    """The browser's own requests included: without an icon of the book's, Chromium asks
    for /favicon.ico, which a built book does not have (a 404 on every page)."""
    MISSING.clear()
    for page in ("intro", "exercises"):
        browser.get(f"{site}/chapters/{page}.html")
        browser.execute_script("return document.readyState")
    import time
    time.sleep(1.0)        # the icon is asked for after the page has loaded
    assert not MISSING, MISSING


def test_at_800_px_the_switch_covers_neither_the_title_nor_the_text(chrome, site):
    """Review, round 3: at 800 px the sticky "Code in:" switch covered the page's title
    and body text. Scrolled to the top and with a paragraph scrolled under the header
    bar, the point at the start of the title and of the text is the page's, never the
    switch's."""
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.chrome import fresh

    drv = fresh(chrome, window=(800, 900))
    for page in ("toolkit", "tensor_parallel"):
        drv.get(f"{site}/chapters/{page}.html")
        WebDriverWait(drv, 10).until(lambda d: d.find_elements("css selector",
                                                                ".fw-switch button"))
        found = drv.execute_script("""
            const sw = document.querySelector(".fw-switch").getBoundingClientRect();
            const hits = [];
            const h1 = document.querySelector("article h1");
            const paras = [...document.querySelectorAll("article section > p")].slice(0, 4);
            for (const el of [h1, ...paras]) {
                el.scrollIntoView({block: "start"});
                const header = document.querySelector(".bd-header-article");
                const below = header ? header.getBoundingClientRect().bottom : 0;
                const r = el.getBoundingClientRect();
                const y = Math.max(r.top, below) + 4;
                const hit = document.elementFromPoint(r.left + 6, y);
                hits.push({text: el.textContent.slice(0, 30), top: r.top,
                           switch: !!(hit && hit.closest(".fw-switch"))});
            }
            return {hits: hits, height: sw.height};""")
        assert not [h for h in found["hits"] if h["switch"]], (page, found)
        assert found["height"] < 60, (page, found)   # one line, not a wrapped block
