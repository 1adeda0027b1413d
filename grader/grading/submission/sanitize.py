"""Student HTML never runs script where a feedback page or the formgrader shows it.

A submitted notebook is data written by the student: markdown cells may hold raw HTML, and
outputs (made by the student's code) may be ``text/html``, ``text/markdown``, SVG or an
image whose "base64" is anything. nbconvert, as nbgrader's feedback and formgrader use it,
copies markdown HTML through untouched (nbgrader's templates render markdown cells without
nbconvert's ``sanitize_html`` switch) and so ran every ``<script>``, ``onerror=`` and
``javascript:`` link in the reader's browser: the instructor's, on the hub's origin.

Two independent layers, for every page made from a student's notebook:

1. **Sanitizing** with nh3 (the Ammonia HTML sanitizer): :func:`clean_html` keeps an
   allowlist of tags, attributes, classes and URL schemes (no script, no event handler,
   no ``javascript:``, no iframe/object/svg/form, ``data:`` only for images).
   :class:`SanitizeStudentHTML` (a preprocessor) drops output types a browser would run
   (``application/javascript``, widgets), images whose payload is not base64, output
   metadata other than an image's size, and nbgrader metadata whose grade id could break
   out of an HTML attribute; the exporter renders markdown cells, markdown outputs and
   instructors' comments through :class:`SafeMarkdown` and HTML outputs through
   :func:`clean_html` (:func:`configure` wires it into nbgrader's configuration).
2. **A Content-Security-Policy** that forbids inline script: :func:`protect` gives the
   page's own scripts (everything before ``trusted_end``, written by the template, never by
   the student) a fresh nonce and returns the policy that allows only those, plus hashes of
   the template's own inline event handlers. Feedback pages carry it as a ``<meta>``
   (:class:`FeedbackHTMLExporter`); the formgrader sends it as a header
   (:mod:`grader.grading.submission.formgrader_guard`).

The honest content still renders: headings, lists, tables, code (with its highlighting),
links, images (PNG, JPEG, SVG shown as an image, where a browser never runs its script),
HTML tables, printed text and errors, and math: drawn as MathML made at export time
(:mod:`grader.grading.submission.mathml`), so that a feedback page needs no MathJax, no
network and no file beside it. See exercises/GRADING.md, "Student HTML".
"""
from __future__ import annotations

import base64
import hashlib
import html
import re
import secrets
from urllib.parse import urlsplit

import jinja2
import nh3
from nbconvert.exporters import HTMLExporter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors import Preprocessor
from pygments.token import STANDARD_TYPES
from traitlets import Bool, Dict, List
from traitlets.config import Configurable

from grader.grading.submission.mathml import Slots, page_budget, tex_output_html

__all__ = ["clean_html", "Cleaned", "SafeMarkdown", "SanitizeStudentHTML", "protect",
           "FeedbackHTMLExporter", "configure"]

TAGS = set(nh3.ALLOWED_TAGS) | {"tfoot", "caption", "figure", "figcaption"}
# Elements whose content goes too (not only the tag): script, style, and what embeds
# another document or a vector image with its own script.
DROPPED_WITH_CONTENT = {"script", "style", "iframe", "object", "embed", "noscript", "template",
                        "svg", "math", "frameset", "frame", "title", "textarea", "select",
                        "noembed", "noframes", "xmp", "plaintext"}
ATTRIBUTES = {tag: set(v) for tag, v in nh3.ALLOWED_ATTRIBUTES.items()}
ATTRIBUTES["*"] = {"title", "lang", "dir", "style"}       # no id/name: nothing to clobber
ATTRIBUTES["img"] = {"src", "alt", "width", "height", "title"}
ATTRIBUTES["table"] = ATTRIBUTES.get("table", set()) | {"border"}
# Classes: the code highlighting's and a table's; not the page's own (``score``,
# ``tabbable``, ``nbgrader_cell``...), which the formgrader's script looks up.
CLASSES = {"highlight", "dataframe", "anchor-link", "alert", "alert-info", "alert-success",
           "alert-warning", "alert-danger", "math", *(c for c in STANDARD_TYPES.values() if c)}
CLASSED = ("div", "span", "pre", "code", "table", "a", "p", "td", "th", "tr")
STYLES = {"color", "background-color", "text-align", "vertical-align", "font-weight",
          "font-style", "text-decoration", "white-space", "border", "border-collapse",
          "padding", "margin"}
SCHEMES = {"http", "https", "mailto", "data"}
_IMAGE_DATA = re.compile(r"data:image/(png|jpe?g|gif|webp|svg\+xml);base64,[A-Za-z0-9+/=\s]*\Z",
                         re.I)
_URL_ATTRS = {"href", "src", "cite", "longdesc", "action", "background", "poster"}
# grade ids the course and nbgrader use; anything else cannot be an instructor's grade cell
SAFE_ID = re.compile(r"[A-Za-z0-9_.:-]{1,200}\Z")
SAFE_OUTPUTS = {"text/plain", "text/html", "text/markdown", "text/latex", "image/png",
                "image/jpeg", "image/gif", "image/svg+xml"}
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*\Z")


def _attribute(tag: str, attr: str, value: str) -> str | None:
    """``data:`` URLs only as an image's source, and only for an image type."""
    if attr in _URL_ATTRS and value.strip().lower().startswith("data:"):
        return value if tag == "img" and attr == "src" and _IMAGE_DATA.match(value.strip()) else None
    return value


class Cleaned(str):
    """HTML this module made safe (:func:`clean_html`'s, :class:`SafeMarkdown`'s, with its
    MathML): a template that cleans it again (``markdown2html | clean_html``) keeps it as it
    is, where a second pass would drop the math. Only this module's code makes one."""


def clean_html(fragment, *, slots: Slots | None = None) -> str:
    """An HTML fragment with everything that could run script removed (nh3). With ``slots``,
    math tokens that reached an attribute get their TeX back there (:class:`Slots`)."""
    if type(fragment) is Cleaned:
        return fragment
    text = fragment.decode() if isinstance(fragment, bytes) else str(fragment)
    attributes = {tag: set(v) for tag, v in ATTRIBUTES.items()}

    def attribute(tag: str, attr: str, value: str) -> str | None:
        kept = _attribute(tag, attr, value)
        return slots.in_attribute(kept) if slots is not None and kept is not None else kept

    return nh3.clean(text, tags=TAGS, clean_content_tags=DROPPED_WITH_CONTENT,
                     attributes=attributes, attribute_filter=attribute, url_schemes=SCHEMES,
                     allowed_classes={tag: CLASSES for tag in CLASSED},
                     filter_style_properties=STYLES, strip_comments=True)


class _MathRenderer(IPythonRenderer):
    """nbconvert's markdown renderer, with each expression held aside (:class:`Slots`)
    where nbconvert writes it back as TeX for MathJax."""

    def __init__(self, slots: Slots, **kw) -> None:
        super().__init__(escape=False, **kw)
        self.slots = slots

    def inline_math(self, body: str) -> str:
        return self.slots.hold(body, False)

    def block_math(self, body: str) -> str:
        return self.slots.hold(body, True)

    def latex_environment(self, name: str, body: str) -> str:
        return self.slots.hold(f"\\begin{{{name}}}{body}\\end{{{name}}}", True)


class SafeMarkdown(Configurable):
    """The ``markdown2html`` template filter: nbconvert's rendering (attachments,
    highlighting, the exporter's anchor settings), then :func:`clean_html`, then the math
    as MathML (grader/grading/submission/mathml.py): math shows with no script and no
    network, and the sanitizer never has to let a ``<math>`` element through."""

    jinja_pass_arg = jinja2.pass_context(lambda: None).jinja_pass_arg  # type: ignore[attr-defined]

    def __call__(self, context, source: str) -> str:
        ex = self.parent
        cell = context.get("cell", {}) if context is not None else {}
        resources = context.get("resources", {}) if context is not None else {}
        slots = Slots()
        renderer = _MathRenderer(
            slots, attachments=cell.get("attachments", {}),
            embed_images=getattr(ex, "embed_images", False),
            path=resources.get("metadata", {}).get("path", ""),
            anchor_link_text=getattr(ex, "anchor_link_text", "\u00b6"),
            exclude_anchor_links=getattr(ex, "exclude_anchor_links", False),
            **getattr(ex, "lexer_options", {}))
        rendered = MarkdownWithMath(renderer=renderer).render(source)
        return Cleaned(slots.fill(clean_html(rendered, slots=slots)))


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class SanitizeStudentHTML(Preprocessor):
    """Keep only what a browser shows without running anything (see the module docstring);
    HTML outputs are cleaned here too, so that a template that ignores nbconvert's
    ``sanitize_html`` still gets clean HTML."""

    def preprocess_cell(self, cell, resources, index):
        meta = cell.metadata.get("nbgrader")
        if isinstance(meta, dict) and not SAFE_ID.match(str(meta.get("grade_id", "x"))):
            self.log.warning("cell %s: nbgrader metadata with grade id %.60r dropped from the "
                             "page", index, meta.get("grade_id"))
            del cell.metadata["nbgrader"]
        if "attachments" in cell:
            cell.attachments = {
                name: {m: d for m, d in (bundle or {}).items() if m in ("image/png",
                       "image/jpeg", "image/gif") and isinstance(d, str) and _BASE64.match(d)}
                for name, bundle in (cell.attachments or {}).items()}
        if cell.cell_type == "raw":
            cell.source = clean_html(cell.source)
        for out in cell.get("outputs", []):
            if out.get("output_type") in ("display_data", "execute_result"):
                self._output(out)
        return cell, resources

    @staticmethod
    def _output(out) -> None:
        data = {}
        for mime, value in (out.get("data") or {}).items():
            if isinstance(value, list):
                value = "".join(map(str, value))
            if mime not in SAFE_OUTPUTS or not isinstance(value, str):
                continue
            if mime.startswith("image/") and mime != "image/svg+xml" and not _BASE64.match(value):
                continue
            data[mime] = clean_html(value) if mime == "text/html" else value
        out["data"] = data
        meta = {}
        for mime, m in (out.get("metadata") or {}).items():
            if mime.startswith("image/") and isinstance(m, dict):
                kept = {k: v for k, v in m.items() if k in ("width", "height") and _number(v)}
                if m.get("unconfined") is True:
                    kept["unconfined"] = True
                meta[mime] = kept
        out["metadata"] = meta


def _library_root(url: str) -> str:
    """Where a trusted external script may load its siblings from: its folder, or for
    MathJax (whose ``latest.js`` picks a version folder) the library's folder."""
    parts = urlsplit(url)
    path = parts.path.rsplit("/", 1)[0] + "/"
    m = re.match(r"(.*?/mathjax/)", path, re.I)
    return f"{parts.scheme}://{parts.netloc}{m.group(1) if m else path}"


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def protect(page: str, trusted_end: str, *, connect: bool = False) -> tuple[str, str]:
    """``(page, policy)``: the page with a fresh nonce on every ``<script>`` before the first
    ``trusted_end`` (the template's part; the student's content comes after it), and the
    Content-Security-Policy that lets only those scripts, and the template's own inline
    event handlers there, run. Without ``trusted_end`` in the page no script is allowed."""
    cut = page.find(trusted_end)
    cut = max(cut, 0)
    trusted, rest = page[:cut], page[cut:]
    nonce = secrets.token_urlsafe(18)
    roots: set[str] = set()

    def add_nonce(m: re.Match) -> str:
        src = re.search(r"""\ssrc\s*=\s*["']?(https?://[^"'\s>]+)""", m.group(0), re.I)
        if src:
            roots.add(_library_root(src.group(1)))
        return m.group(0)[:7] + f' nonce="{nonce}"' + m.group(0)[7:]

    trusted = re.sub(r"<script\b[^>]*>", add_nonce, trusted, flags=re.I)
    handlers = sorted({html.unescape(v) for v in
                       re.findall(r"""\son[a-z]+\s*=\s*"([^"]*)\"""", trusted, flags=re.I)})
    lib = " ".join(sorted(roots))
    script = [f"'nonce-{nonce}'", *sorted(roots)]
    if handlers:
        script += ["'unsafe-hashes'", *map(_sha256, handlers)]
    policy = "; ".join(filter(None, [
        "default-src 'none'",
        "script-src " + " ".join(script),
        f"style-src 'self' 'unsafe-inline' {lib}".strip(),
        "img-src 'self' data:",
        f"font-src 'self' data: {lib}".strip(),
        "connect-src 'self'" if connect else "",
        "base-uri 'none'", "form-action 'none'", "frame-src 'none'", "object-src 'none'",
    ]))
    return trusted + rest, policy


def meta_policy(page: str, trusted_end: str = "</head>") -> str:
    """A whole page made safe to open anywhere (a file, a static server): :func:`protect`,
    and the policy as the first element of ``<head>``."""
    page, policy = protect(page, trusted_end)
    tag = f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
    out, n = re.subn(r"<head\b[^>]*>", lambda m: m.group(0) + "\n" + tag, page, count=1,
                     flags=re.I)
    return out if n else tag + page


# The feedback page holds everything it shows: no MathJax (nbconvert's macro loads it from a
# CDN, which an offline reader, or a student given only the .html, never reaches), and
# text/latex outputs drawn as MathML like the markdown's math.
_NO_MATHJAX = "{%- macro mathjax(url='') -%}{%- endmacro %}"
_OFFLINE_LATEX = """{%- extends feedback_template -%}
{% block data_latex scoped %}
<div class="output_latex output_subarea {{ extra_class }}">
{{ output.data['text/latex'] | tex_output_html }}
</div>
{%- endblock data_latex %}"""


class FeedbackHTMLExporter(HTMLExporter):
    """nbgrader's feedback exporter, sanitized, self-contained (math as MathML, no script
    from anywhere) and with a Content-Security-Policy ``<meta>``
    (``GenerateFeedback.exporter_class``). Safe by its own defaults, whatever the config."""

    sanitize_html = Bool(True, help="always: the notebook is a student's").tag(config=True)
    filters = Dict({"markdown2html": SafeMarkdown, "clean_html": clean_html}).tag(
        config=True, affects_environment=True)
    preprocessors = List([SanitizeStudentHTML]).tag(config=True)
    # tried before the template folders: nbconvert's mathjax.html.j2 is never loaded
    extra_loaders = List([jinja2.DictLoader({"mathjax.html.j2": _NO_MATHJAX})]).tag(
        affects_environment=True)

    def default_filters(self):
        yield from super().default_filters()
        yield ("tex_output_html", tex_output_html)

    def _load_template(self):
        """The configured template (nbgrader's feedback), with text/latex as MathML."""
        configured = super()._load_template()
        return self.environment.from_string(_OFFLINE_LATEX,
                                            globals={"feedback_template": configured})

    def from_notebook_node(self, nb, resources=None, **kw):
        with page_budget():
            page, resources = super().from_notebook_node(nb, resources, **kw)
        return meta_policy(page), resources


def configure(c) -> None:
    """Wire the sanitizer into an nbgrader configuration ``c``: every ``HTMLExporter`` (the
    formgrader's view of a submission) and the feedback's exporter."""
    c.HTMLExporter.sanitize_html = True
    c.HTMLExporter.filters = {"markdown2html": SafeMarkdown, "clean_html": clean_html}
    c.HTMLExporter.preprocessors = [SanitizeStudentHTML]
    c.GenerateFeedback.exporter_class = FeedbackHTMLExporter
