"""TeX in a student's notebook becomes MathML when the page is made, so that feedback shows
its math with no script and no network.

nbgrader's feedback page loaded MathJax from a CDN to typeset ``$...$`` in the browser:
offline (and where release_feedback hands students only the ``.html`` file) the math stayed
raw TeX. Here every expression is converted at export time, in the grader's own process,
by latex2mathml (a pure-Python TeX parser), and browsers draw MathML Core themselves.

The TeX is the student's, so what comes out of it is built, not filtered: :func:`to_mathml`
walks latex2mathml's element tree and writes only the presentation elements and the
attributes of :data:`ELEMENTS` and :data:`ATTRIBUTES`, each value matching its own pattern
(bounded lengths, colour names, enumerated keywords), and every text escaped. What
``\\href``, ``\\style``, ``\\class`` or ``\\unicode`` make of it is an unknown attribute or
plain text; an unknown element (``maction``, ``annotation-xml``, ``mglyph``) leaves only its
children. latex2mathml's own string output is never used: it unescapes its XML and so
turns ``\\text{<script>}`` into a script tag.

Bounds keep a hostile page from taking the grader's time: an expression longer than
:data:`MAX_TEX` characters or nesting deeper than :data:`MAX_DEPTH` groups, one latex2mathml
cannot parse, and everything past :data:`PAGE_TEX` characters of TeX on one page (a
:func:`page_budget`) is shown as its TeX source instead, with the reason as its tooltip.
"""
from __future__ import annotations

import contextlib
import contextvars
import html
import re
import secrets
from dataclasses import dataclass
from xml.etree.ElementTree import Element

__all__ = ["to_mathml", "tex_output_html", "Slots", "page_budget", "MAX_TEX", "MAX_DEPTH",
           "PAGE_TEX"]

MAX_TEX = 4000          # characters of one expression (a long derivation is ~500)
MAX_DEPTH = 32          # nested { [ \left \begin groups in one expression
PAGE_TEX = 100_000      # characters of TeX converted on one page (~1.5 s on one core)

# MathML Core's presentation elements (and latex2mathml's menclose, drawn as a row where a
# browser lacks it). No maction, semantics/annotation(-xml), mglyph: they run, embed or load.
ELEMENTS = frozenset({
    "math", "mrow", "mi", "mn", "mo", "ms", "mtext", "mspace", "msup", "msub", "msubsup",
    "mfrac", "msqrt", "mroot", "mover", "munder", "munderover", "mmultiscripts",
    "mprescripts", "mtable", "mtr", "mtd", "mstyle", "mpadded", "mphantom", "merror",
    "menclose"})

# A length may size or move math by at most this many em (or 300%): a rule, a space or an
# offset stays within a few lines of its own math.
MAX_EM = 10.0
_EM = {"em": 1.0, "ex": 0.5, "pt": 1 / 12, "px": 1 / 16, "mu": 1 / 18, "": 1.0}
_ONE_LENGTH = re.compile(r"[+-]?(\d{1,4}(?:\.\d{1,4})?|\.\d{1,4})(em|ex|pt|px|mu|%)?\Z")


def _pattern(regex: str):
    compiled = re.compile(f"(?:{regex})\\Z")
    return lambda value: compiled.match(value) is not None


def _lengths(most: int):
    """Up to ``most`` space-separated lengths, each within :data:`MAX_EM`."""
    def ok(value: str) -> bool:
        parts = value.split()
        if not 1 <= len(parts) <= most:
            return False
        for part in parts:
            m = _ONE_LENGTH.match(part)
            if m is None:
                return False
            unit = m.group(2) or ""
            if float(m.group(1)) > (300 if unit == "%" else MAX_EM / _EM[unit]):
                return False
        return True
    return ok


_BOOL, _WORD, _WORDS = _pattern("true|false"), _pattern("[a-z]{1,20}"), _pattern(
    "[a-z]{1,20}( [a-z]{1,20}){0,63}")
_LENGTH, _DIGIT = _lengths(1), _pattern("[+-]?[0-9]")

# attribute: the check its value must pass (an attribute not named, or a value that fails
# its check, is not written)
ATTRIBUTES = {
    "display": _pattern("block|inline"), "displaystyle": _BOOL, "scriptlevel": _DIGIT,
    "mathvariant": _WORD, "mathsize": _LENGTH,
    "mathcolor": _pattern("[A-Za-z]{1,20}|#[0-9A-Fa-f]{3,8}"),
    "mathbackground": _pattern("[A-Za-z]{1,20}|#[0-9A-Fa-f]{3,8}"),
    "stretchy": _BOOL, "fence": _BOOL, "separator": _BOOL, "accent": _BOOL,
    "accentunder": _BOOL, "movablelimits": _BOOL, "largeop": _BOOL, "symmetric": _BOOL,
    "form": _pattern("prefix|infix|postfix"),
    "lspace": _LENGTH, "rspace": _LENGTH, "minsize": _LENGTH, "maxsize": _LENGTH,
    "width": _LENGTH, "height": _LENGTH, "depth": _LENGTH, "voffset": _LENGTH,
    "linethickness": _LENGTH, "linebreak": _WORD, "notation": _WORDS,
    "columnalign": _WORDS, "rowalign": _WORDS, "columnlines": _WORDS, "rowlines": _WORDS,
    "frame": _WORD, "columnspacing": _lengths(64), "rowspacing": _lengths(64),
    "columnspan": _DIGIT, "rowspan": _DIGIT,
}

_HEX_REF = re.compile(r"&#x([0-9A-Fa-f]{1,6});")


@dataclass
class Budget:
    """Characters of TeX still to be converted on the page being made."""
    chars: int


_budget: contextvars.ContextVar[Budget | None] = contextvars.ContextVar("mathml_budget",
                                                                       default=None)


@contextlib.contextmanager
def page_budget(chars: int | None = None):
    """One page's budget (``chars``, by default :data:`PAGE_TEX`) for every
    :func:`to_mathml` inside the ``with``; without one, each call has a budget of its own."""
    token = _budget.set(Budget(PAGE_TEX if chars is None else chars))
    try:
        yield
    finally:
        _budget.reset(token)


@contextlib.contextmanager
def _own_budget():
    """The page's budget where one is set, else one for this text alone."""
    if _budget.get() is None:
        with page_budget():
            yield
    else:
        yield


def _depth(tex: str) -> int:
    depth = deepest = 0
    for m in re.finditer(r"\\begin\b|\\end\b|\\left\b|\\right\b|\\[{}\[\]]|[{}\[\]]", tex):
        t = m.group(0)
        if t.startswith("\\") and t[1] in "{}[]":
            continue
        depth += 1 if t in ("{", "[", "\\begin", "\\left") else -1
        deepest = max(deepest, depth)
    return deepest


def _text(value: str | None) -> str:
    """latex2mathml writes symbols as ``&#x...;`` in its element text: decode those, then
    escape everything, so that only text reaches the page."""
    if not value:
        return ""
    return html.escape(_HEX_REF.sub(lambda m: _char(int(m.group(1), 16)), value), quote=False)


def _char(code: int) -> str:
    return chr(code) if 0x20 <= code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else "\ufffd"


def _attributes(el: Element) -> str:
    out = []
    for name, value in sorted(el.attrib.items()):
        value = str(value).strip()
        check = ATTRIBUTES.get(name)
        if check is not None and check(value):
            out.append(f' {name}="{html.escape(value)}"')
    return "".join(out)


def _write(el: Element, out: list[str]) -> None:
    tag = el.tag if isinstance(el.tag, str) else ""
    if tag in ELEMENTS:
        out.append(f"<{tag}{_attributes(el)}>")
    out.append(_text(el.text))
    for child in el:
        _write(child, out)
        out.append(_text(child.tail))
    if tag in ELEMENTS:
        out.append(f"</{tag}>")


def _source(tex: str, display: bool, why: str) -> str:
    """The TeX as the student wrote it, as text, with why it is not drawn."""
    d = "$$" if display else "$"
    return (f'<code class="tex-source" title="{html.escape(why)}">'
            f"{html.escape(d + tex + d, quote=False)}</code>")


def to_mathml(tex: str, display: bool = False) -> str:
    """``tex`` (without its ``$`` delimiters) as a ``<math>`` element made only of
    :data:`ELEMENTS` and :data:`ATTRIBUTES`, or, past the bounds or where latex2mathml
    cannot parse it, its source as text (see the module docstring)."""
    from latex2mathml.converter import convert_to_element

    budget = _budget.get() or Budget(PAGE_TEX)
    if len(tex) > MAX_TEX:
        return _source(tex[:200] + " ...", display,
                       f"not drawn: longer than {MAX_TEX} characters")
    if len(tex) > budget.chars:
        return _source(tex, display,
                       f"not drawn: the page holds more than {PAGE_TEX} characters of TeX")
    budget.chars -= len(tex)
    if _depth(tex) > MAX_DEPTH:
        return _source(tex, display, f"not drawn: nested deeper than {MAX_DEPTH} groups")
    try:
        tree = convert_to_element(tex, display="block" if display else "inline")
    except (Exception, RecursionError) as e:     # noqa: BLE001 (any parse error: show the TeX)
        return _source(tex, display, f"not drawn: {type(e).__name__} {str(e)[:80]}".strip())
    tree.attrib = {"display": "block" if display else "inline"}
    out: list[str] = []
    _write(tree, out)
    return "".join(out)


# Math in a text/latex output, as MathJax finds it: $$..$$, \[..\], \(..\), $..$ and
# \begin{env}..\end{env}; the rest is text.
_OUTPUT_MATH = re.compile(
    r"(?<!\\)\$\$(?P<dd>.+?)(?<!\\)\$\$|\\\[(?P<sb>.+?)\\\]|\\\((?P<rb>.+?)\\\)"
    r"|(?<![\\$])\$(?P<d>[^$]+?)(?<!\\)\$"
    r"|(?P<env>\\begin\{(?P<name>[A-Za-z]{1,20}\*?)\}.*?\\end\{(?P=name)\})", re.S)


def tex_output_html(text) -> str:
    """A ``text/latex`` output as HTML: its math as :func:`to_mathml`, the rest escaped."""
    text = "".join(map(str, text)) if isinstance(text, list) else str(text)
    out, end = [], 0
    with _own_budget():
        for m in _OUTPUT_MATH.finditer(text):
            out.append(html.escape(text[end:m.start()], quote=False))
            if m.group("env"):
                out.append(to_mathml(m.group("env"), display=True))
            else:
                inline = m.group("d") or m.group("rb")
                body = inline if inline is not None else (m.group("dd") or m.group("sb"))
                out.append(to_mathml(body, display=inline is None))
            end = m.end()
    out.append(html.escape(text[end:], quote=False))
    return "".join(out)


class Slots:
    """Math set aside while markdown is rendered and sanitized, put back after.

    The markdown renderer writes :meth:`hold`'s token where an expression was; the sanitizer
    (which drops every ``<math>`` a student writes as HTML) sees only the token, letters and
    digits with a random part no student can guess; :meth:`fill` then puts the MathML in
    its place. A token that reached an attribute (a heading's anchor) gets the TeX back
    there instead, through :meth:`in_attribute`."""

    def __init__(self) -> None:
        self._key = "mathslot" + secrets.token_hex(8)
        self._held: list[tuple[str, bool]] = []
        self._token = re.compile(self._key + r"n(\d+)x")

    def hold(self, tex: str, display: bool) -> str:
        self._held.append((tex, display))
        return f"{self._key}n{len(self._held) - 1}x"

    def _get(self, m: re.Match) -> tuple[str, bool] | None:
        i = int(m.group(1))
        return self._held[i] if i < len(self._held) else None

    def in_attribute(self, value: str) -> str:
        return self._token.sub(lambda m: (self._get(m) or ("",))[0], value)

    def fill(self, page: str) -> str:
        def put(m: re.Match) -> str:
            held = self._get(m)
            return to_mathml(*held) if held else ""
        if not self._held:
            return page
        with _own_budget():
            return self._token.sub(put, page)
