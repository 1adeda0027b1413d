"""Student HTML that tries to run script in a reader's browser, and honest content beside it.

Each payload, if it ran, leaves three traces a test can see: ``document.title`` becomes
``pwned:<name>``, ``window.pwned`` gets ``<name>`` and a request goes to ``<listener>/<name>``
(a local HTTP listener: :class:`Listener`). A browser test opens the page, clicks every link,
waits, and finds none of them; it also renders the same notebook without the protection
(nbconvert as nbgrader uses it out of the box) and sees them run, so the test can fail.

Markdown payloads are cells of the submission; output payloads are code cells whose
outputs autograding produces by running them (it clears a submission's own outputs).
"""
from __future__ import annotations

import base64
import http.server
import threading

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output

# A 4x4 red PNG (honest image output).
PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAQAAAAEAQMAAACTPww9AAAAA1BMVEX/AAAZ4gk3AAAAC0lEQVQI12NgQAcAABAA"
       "AdE9hvcAAAAASUVORK5CYII=")
HONEST_SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20">'
              '<rect width="40" height="20" fill="#08f"/></svg>')


def js(name: str, listener: str) -> str:
    """The script a payload runs: single quotes only, so it fits in any attribute."""
    return (f"document.title='pwned:{name}';(window.pwned=window.pwned||[]).push('{name}');"
            f"fetch('{listener}/{name}',{{mode:'no-cors'}}).catch(function(){{}})")


def markdown_payloads(listener: str) -> dict[str, str]:
    """name -> markdown cell source."""
    j = lambda n: js(n, listener)  # noqa: E731
    return {
        "md-script": f"A script tag:\n\n<script>{j('md-script')}</script>\n",
        "md-img-onerror": f'An image that fails: <img src="x" onerror="{j("md-img-onerror")}">',
        "md-svg-onload": f'<svg onload="{j("md-svg-onload")}"><circle r="5"/></svg> svg',
        "md-javascript-link": (f'<a href="javascript:{j("md-javascript-link")}">click me: html '
                               f"javascript link</a> and [click me: markdown javascript link]"
                               f"(javascript:{j('md-javascript-link-md')})"),
        "md-iframe-srcdoc": (f'<iframe srcdoc="<script>{j("md-iframe-srcdoc")};'
                             "parent.document.title='pwned:md-iframe-srcdoc';"
                             "(parent.pwned=parent.pwned||[]).push('md-iframe-srcdoc')"
                             '</script>"></iframe>'),
        "md-details-ontoggle": f'<details open ontoggle="{j("md-details-ontoggle")}">'
                               f"<summary>s</summary>d</details>",
    }


def output_payloads(listener: str) -> dict[str, str]:
    """name -> code that displays it (run by the kernel while grading)."""
    j = lambda n: js(n, listener)  # noqa: E731
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10" '
           f'onload="{j("out-svg-onload")}"><script>{j("out-svg-script")}</script>'
           f'<circle r="5"/></svg>')
    return {
        "out-html": "from IPython.display import HTML, display\n"
                    f"display(HTML({'<script>' + j('out-html-script') + '</script>'!r} + "
                    f"{'<img src=x onerror=' + chr(34) + j('out-html-img') + chr(34) + '>'!r}))",
        "out-markdown": "from IPython.display import Markdown, display\n"
                        f"display(Markdown({'<img src=x onerror=' + chr(34) + j('out-md-img') + chr(34) + '>'!r}"
                        f" + '\\n\\n' + {'<script>' + j('out-md-script') + '</script>'!r}))",
        "out-svg": "from IPython.display import SVG, display\n"
                   f"display(SVG({svg!r}))",
        "out-javascript": "from IPython.display import Javascript, display\n"
                          f"display(Javascript({j('out-javascript')!r}))",
        "out-png-breakout": "from IPython.display import display\n"
                            "display({'image/png': " + repr('"><img src=x onerror="'
                                                            + j("out-png-breakout") + '">')
                            + ", 'text/plain': 'png'}, raw=True)",
        "out-isolated-html": "from IPython.display import display\n"
                             "display({'text/html': " + repr('<script>' + j('out-isolated')
                                                             + '</script>')
                             + "}, raw=True, metadata={'text/html': {'isolated': True}})",
    }


HONEST_MARKDOWN = ("## Honest heading\n\nSome **bold honest text** and `code`.\n\n"
                   "| a | b |\n|---|---|\n| honest-table-cell | 2 |\n\n"
                   "[an honest link](https://example.org/)\n")
HONEST_CODE = ("from IPython.display import HTML, Markdown, SVG, Image, display\n"
               "import base64\n"
               "display(HTML('<table class=\"dataframe\"><tr><td>honest-html-cell</td></tr></table>'))\n"
               "display(Markdown('**honest markdown output**'))\n"
               f"display(SVG({HONEST_SVG!r}))\n"
               f"display(Image(data=base64.b64decode({PNG!r}), format='png'))\n"
               "print('honest printed line')")
HONEST_TEXT = ["Honest heading", "bold honest text", "honest-table-cell", "an honest link",
               "honest-html-cell", "honest markdown output", "honest printed line"]


def every_name(listener: str = "http://x") -> set[str]:
    """The names a payload can leave (a payload may carry several)."""
    import re

    text = "".join(markdown_payloads(listener).values()) + "".join(output_payloads(listener).values())
    return set(re.findall(r"pwned:([a-z0-9-]+)", text))


def cells(listener: str) -> list:
    """Cells to append to a submission: the payloads and the honest content."""
    out = [new_markdown_cell(HONEST_MARKDOWN), new_code_cell(HONEST_CODE)]
    out += [new_markdown_cell(src) for src in markdown_payloads(listener).values()]
    out += [new_code_cell(src) for src in output_payloads(listener).values()]
    return out


def with_outputs(listener: str) -> nbformat.NotebookNode:
    """A notebook holding the payloads as if it had run (for tests that render directly,
    without a kernel): each code cell's outputs as IPython would have made them."""
    nb = nbformat.v4.new_notebook()
    nb.cells = cells(listener)
    ns: dict = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.outputs = _run(cell.source, ns)
    return nb


def _run(source: str, ns: dict) -> list:
    """Run ``source`` with IPython's display machinery captured into nbformat outputs."""
    import contextlib
    import io

    from IPython.core.formatters import DisplayFormatter

    outputs: list = []
    fmt = DisplayFormatter()

    def display(*objs, raw=False, metadata=None, **kw):
        for obj in objs:
            if raw:
                data, meta = obj, (metadata or {})
            else:
                data, meta = fmt.format(obj)
                data = {m: base64.b64encode(v).decode() if isinstance(v, bytes) else v
                        for m, v in data.items()}
            outputs.append(new_output("display_data", data=data, metadata=meta))

    import IPython.display as ipd

    saved = ipd.display
    ipd.display = display
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            exec(source, ns)
    finally:
        ipd.display = saved
    if buf.getvalue():
        outputs.append(new_output("stream", name="stdout", text=buf.getvalue()))
    return outputs


class Listener:
    """A local HTTP listener that records every path requested (``hits``)."""

    def __init__(self) -> None:
        hits = self.hits = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                hits.append(self.path.strip("/"))
                self.send_response(204)
                self.send_header("Access-Control-Allow-Origin", "*")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def observe(d, url: str, listener: Listener, settle: float = 1.5) -> dict:
    """Open ``url``, click every "click me" link (coming back after each), and return what
    ran: ``{"ran": names seen in the title, window.pwned or the listener, "refused":
    Content-Security-Policy refusals in the console, "text": the page's text,
    "images": how many images loaded}``."""
    import time

    listener.hits.clear()
    d.get(url)
    time.sleep(settle)
    ran: set[str] = set()

    def look() -> None:
        title = d.title or ""
        if title.startswith("pwned:"):
            ran.add(title.split(":", 1)[1])
        ran.update(d.execute_script("return window.pwned || []") or [])

    look()
    text = d.execute_script("return document.body ? document.body.innerText"
                            " : document.documentElement.textContent") or ""
    images = d.execute_script(
        "return Array.from(document.images).filter(i => i.complete && i.naturalWidth > 0).length")
    n = len(d.find_elements("partial link text", "click me"))
    for i in range(n):
        links = d.find_elements("partial link text", "click me")
        if i >= len(links):
            break
        try:
            links[i].click()
        except Exception:    # not clickable (no href): nothing to run
            continue
        time.sleep(0.5)
        look()
        if d.current_url != url:
            d.get(url)
            time.sleep(settle)
    time.sleep(0.5)
    ran.update(h for h in listener.hits if h)
    log = d.get_log("browser")
    refused = [e["message"] for e in log if "Content Security Policy" in e["message"]]
    return {"ran": ran, "refused": refused, "text": text, "images": images}


class StaticSite:
    """A folder served over HTTP on a free loopback port (how a hub serves a file)."""

    def __init__(self, folder) -> None:
        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **kw):
                super().__init__(*a, directory=str(folder), **kw)

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
