"""Notes a page shows beside its outputs, as wrapped prose rather than long printed lines.

The hardware line under every chapter title, the provenance of a GPU cell's recorded
output and the sentence saying what a GPU cell needs are sentences for the reader, not
program output: printed, each was one line of 175-312 characters in a box that scrolls
sideways, and readers missed the date and what the cell needs. In a notebook (the book's
build, JupyterLab) :func:`note` displays an admonition that wraps like the page's prose;
in plain Python (``make gpu-check`` on a machine without Jupyter) it prints the text.
"""
from __future__ import annotations

import html
import textwrap

__all__ = ["note", "note_html", "fit_width", "WIDTH"]

WIDTH = 96   # characters an output line may take: a longer one is cut in an output box


def note_html(lines: list[str], title: str = "", kind: str = "note") -> str:
    """The admonition's HTML: ``title`` as its heading, then one paragraph, or a list when
    ``lines`` has more than one item. Everything is escaped: these are plain sentences."""
    body = (f"<p>{html.escape(lines[0])}</p>" if len(lines) == 1 else
            "<ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in lines) + "</ul>")
    head = f'<p class="admonition-title">{html.escape(title)}</p>' if title else ""
    return (f'<div class="admonition {kind} course-note">{head}{body}</div>')


def fit_width(text: str, width: int = WIDTH, indent: str = "    ") -> str:
    """``text`` with every line longer than ``width`` wrapped at its spaces, the rest
    of it indented by ``indent`` under its start; shorter lines, tables among them, are
    left as they are. For what a page prints but did not write: a framework's message,
    a launcher's log, a record made on a GPU machine."""
    out = []
    for line in text.expandtabs().splitlines():
        if len(line) <= width:
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip())]
        out += textwrap.wrap(line.strip(), width, initial_indent=lead,
                             subsequent_indent=lead + indent, break_on_hyphens=False)
    return "\n".join(out)


def note(lines: str | list[str], title: str = "", kind: str = "note") -> None:
    """Show ``lines`` (a sentence or a list of them) as a wrapped admonition."""
    items = [lines] if isinstance(lines, str) else [x for x in lines if x]
    try:
        from IPython import get_ipython
        from IPython.display import HTML, display
    except ImportError:
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        print("\n".join(([title] if title else []) + items))
        return
    display(HTML(note_html(items, title, kind)))
