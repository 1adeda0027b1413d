"""GPU cells: code the reader copies to a GPU machine, run live there, replayed elsewhere.

A chapter writes a GPU-only experiment as a plain code cell in its framework's own API,
and names it::

    ```{code-cell} ipython3
    :tags: [torch, skip-execution]
    :gpu-cell: side-stream
    s = torch.cuda.Stream()
    ...
    ```

    ```{code-cell} ipython3
    :tags: [torch, remove-input]
    gpu_output("communication", "side-stream", framework="torch",
               expect="the copy and the product overlap on the timeline");
    ```

The build never executes a ``skip-execution`` cell. The hidden cell after it shows what
that cell does, in one of three ways, and says which:

- the build machine has the GPUs the cell needs (``:gpus: 2`` asks for two; one is the
  default): the cell's own source runs live, in the notebook's namespace;
- otherwise ``make gpu-check`` recorded the cell on a GPU: its output is printed (and its
  figures shown) under a line naming the GPU, driver, versions and date; a record made
  from an earlier version of the cell (its digest, :func:`source_digest`, differs) is not
  shown: a note says it is stale, with its date;
- otherwise one sentence says that the cell needs a GPU and what it shows there.

``make gpu-check`` (:func:`record_pages`) runs each page's framework variant top to
bottom in a plain Python namespace (no Jupyter needed on the GPU machine): every cell
tagged for that framework or for none, GPU cells included, other frameworks' cells and
``gpu-output`` replay cells left out. It stores what each GPU cell printed, its figures
and its run time in ``bench/results/gpu/cells/<page>.json`` with the machine's
provenance. The chapters' source is parsed here, so the code a page shows is the code
that ran: there is no second copy.
"""
from __future__ import annotations

import base64
import hashlib
import contextlib
import datetime
import io
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .notes import fit_width, note

ROOT = Path(__file__).resolve().parents[3]
CHAPTERS = ROOT / "chapters"
RECORDS = ROOT / "bench" / "results" / "gpu" / "cells"
FRAMEWORKS = ("torch", "paddle")

__all__ = ["Cell", "parse_page", "find_cell", "gpu_output", "load_record", "record_pages",
           "run_cells", "is_stale", "GpuCellError"]


class GpuCellError(LookupError):
    """A page or GPU cell named in a chapter does not exist (a typo the build must show)."""


@dataclass
class Cell:
    index: int
    source: str
    tags: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def framework(self) -> str | None:
        return next((t for t in self.tags if t in FRAMEWORKS), None)

    @property
    def gpu_name(self) -> str | None:
        v = self.options.get("gpu-cell")
        return str(v) if v is not None else None

    @property
    def gpus(self) -> int:
        return int(self.options.get("gpus", 1))


_FENCE = re.compile(r"^(`{3,}|~{3,})\{code-cell\}[^\n]*$")


def _parse_option(line: str) -> tuple[str, Any] | None:
    m = re.match(r"^:([\w-]+):\s*(.*)$", line)
    if not m:
        return None
    key, raw = m.group(1), m.group(2).strip()
    if raw.startswith("[") and raw.endswith("]"):
        return key, [t.strip().strip("'\"") for t in raw[1:-1].split(",") if t.strip()]
    return key, raw.strip("'\"")


def parse_page(path: str | Path) -> list[Cell]:
    """The code cells of a MyST Markdown chapter, in order, with their tags and options."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    cells: list[Cell] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence = m.group(1)
        i += 1
        options: dict[str, Any] = {}
        body: list[str] = []
        in_options = True
        if i < len(lines) and lines[i].strip() == "---":  # YAML option block
            j = i + 1
            while j < len(lines) and lines[j].strip() != "---":
                key, sep, value = lines[j].strip().partition(":")
                opt = _parse_option(f":{key.strip()}: {value.strip()}") if sep else None
                if opt:
                    options[opt[0]] = opt[1]
                j += 1
            i = j + 1
            in_options = False
        while i < len(lines) and not lines[i].startswith(fence):
            line = lines[i]
            opt = _parse_option(line) if in_options else None
            if opt:
                options[opt[0]] = opt[1]
            else:
                in_options = False
                body.append(line)
            i += 1
        i += 1  # closing fence
        tags = options.pop("tags", [])
        if isinstance(tags, str):
            tags = [tags]
        cells.append(Cell(len(cells), "\n".join(body).strip("\n"), list(tags), options))
    return cells


def _page_path(page: str | Path) -> Path:
    p = Path(page)
    if p.suffix != ".md":
        p = CHAPTERS / f"{page}.md"
    if not p.exists():
        raise GpuCellError(f"no chapter {page!r} (looked for {p})")
    return p


def find_cell(page: str | Path, name: str, framework: str | None = None) -> Cell:
    """The GPU cell ``name`` of a chapter; ``framework`` picks between the sibling cells
    of one experiment that share a name (``torch:name`` and ``paddle:name`` records)."""
    path = _page_path(page)
    cells = parse_page(path)
    for cell in cells:
        if cell.gpu_name == name and framework in (None, cell.framework):
            return cell
    names = [f"{c.framework}:{c.gpu_name}" if framework else c.gpu_name
             for c in cells if c.gpu_name]
    wanted = f"{framework} cell" if framework else "cell"
    raise GpuCellError(f"{path.name} has no {wanted} with ':gpu-cell: {name}' "
                       f"(it has: {', '.join(dict.fromkeys(names)) or 'none'})")


# --- showing a GPU cell in the book -----------------------------------------------------

_SCRIPT = re.compile(r"(?<![\w/.])(scripts/[\w./-]+\.py)\b")


def source_digest(cell: Cell, read: Any = None) -> str:
    """A short digest of a GPU cell's code and of the chapter scripts it names (a
    ``!torchrun ... scripts/x.py`` cell runs that file), stored with its record: a record
    whose digest differs from today's was made from an earlier version of the code.
    ``read(relative_path)`` gives a script's text (default: today's file in chapters/)."""
    read = read or (lambda rel: (CHAPTERS / rel).read_text(encoding="utf-8"))
    h = hashlib.sha256(cell.source.encode())
    for rel in sorted(set(_SCRIPT.findall(cell.source))):
        try:
            text = read(rel)
        except (OSError, LookupError):
            text = "(missing)"
        h.update(f"\0{rel}\0{text}".encode())
    return h.hexdigest()[:16]


def gpu_count(framework: str) -> int:
    from .devices import paddle_cpu_wheel, torch_cpu_wheel
    try:
        if framework == "torch":
            if torch_cpu_wheel():   # a CPU-only wheel: no GPU, and no import (seconds
                return 0            # of CPU) in a kernel that never uses it
            import torch
            return torch.cuda.device_count() if torch.cuda.is_available() else 0
        if paddle_cpu_wheel():
            return 0
        import paddle
        if not paddle.device.is_compiled_with_cuda():
            return 0
        return paddle.device.cuda.device_count()
    except Exception:  # a framework that is not installed has no GPU to offer
        return 0


def load_record(page: str, directory: Path | None = None) -> dict | None:
    path = (directory or RECORDS) / f"{Path(page).stem}.json"
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("cells"), dict) else None


def records_summary(page: str, directory: Path | None = None) -> list[str]:
    """Lines for a page's hardware line: per framework, how many of its GPU cells this
    machine can run, and what the others show (a recorded run, with its machine, or a
    sentence that they need a GPU)."""
    cells = [c for c in parse_page(_page_path(page)) if c.gpu_name]
    rec = load_record(page, directory) or {}
    lines = []
    for fw in FRAMEWORKS:
        mine = [c for c in cells if (c.framework or "torch") == fw]
        if not mine:
            continue
        label = "PyTorch" if fw == "torch" else "Paddle"
        have = gpu_count(fw)
        live = [c for c in mine if have >= c.gpus]
        prov = rec.get("provenance", {}).get(fw, {})
        recorded = [] if not prov or prov.get("cpu_only") else [
            c for c in mine if c not in live
            and not rec["cells"].get(f"{fw}:{c.gpu_name}", {"error": "none"}).get("error")]
        stale = [c for c in recorded if is_stale(rec["cells"][f"{fw}:{c.gpu_name}"], c)]
        shown = [c for c in recorded if c not in stale]
        parts = []
        if live:
            parts.append(f"{len(live)} run live here")
        if shown:
            parts.append(f"{len(shown)} {'show' if len(shown) > 1 else 'shows'} a run recorded on {prov.get('gpu_count', '?')} x "
                         f"{prov.get('gpu_name', '?')} on {str(prov.get('date', '?'))[:10]} "
                         f"(make gpu-check)")
        if stale:
            parts.append(f"{len(stale)} {'have' if len(stale) > 1 else 'has'} a record of "
                         "an earlier version of the code, not shown")
        rest = len(mine) - len(live) - len(shown) - len(stale)
        if rest:
            parts.append(f"{rest} {'say' if rest > 1 else 'says'} what {'they need' if rest > 1 else 'it needs'}"
                         " (no run on such a GPU machine recorded yet)")
        lines.append(f"  {label} GPU cells ({len(mine)}): " + "; ".join(parts))
    return lines


def provenance_line(prov: dict, framework: str) -> str:
    fw = prov.get("versions", {}).get(framework, "?")
    cuda = prov.get("cuda", {}).get(framework) or "?"
    return (f"Recorded by make gpu-check on {prov.get('gpu_count', '?')} x "
            f"{prov.get('gpu_name', '?')} (driver {prov.get('driver') or '?'}, "
            f"{'PyTorch' if framework == 'torch' else 'Paddle'} {fw}, CUDA {cuda}, "
            f"Python {prov.get('versions', {}).get('python', '?')}) on "
            f"{str(prov.get('date', '?'))[:10]}; this machine has no GPU for it."
            + _version_gap(framework, fw))


def _version_gap(framework: str, recorded: str) -> str:
    """A sentence when the record ran on another release of the framework than this
    build has: the record's figures are that release's."""
    from importlib import metadata

    dist = "torch" if framework == "torch" else "paddlepaddle"
    try:
        here = metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""
    if recorded in ("?", "") or recorded.split("+")[0] == here.split("+")[0]:
        return ""
    label = "PyTorch" if framework == "torch" else "Paddle"
    return (f" The record ran on {label} {recorded.split('+')[0]}; this build has {label} "
            f"{here.split('+')[0]}, so its figures are the older release's.")


def _show_png(b64: str) -> None:
    try:
        from IPython.display import Image, display
    except ImportError:  # outside Jupyter there is nowhere to draw
        return
    display(Image(data=base64.b64decode(b64), format="png"))


def gpu_output(page: str, name: str, expect: str = "", *, framework: str | None = None,
               directory: Path | None = None, namespace: dict | None = None) -> str:
    """Show what the GPU cell ``name`` of chapter ``page`` does here; returns the mode
    used: ``"live"``, ``"recorded"``, ``"stale"`` (a record of an earlier version of the
    cell: not shown) or ``"needs-gpu"`` (end the cell with ``;`` so that
    Jupyter does not print it). ``framework`` names the tab when the PyTorch and Paddle
    cells of one experiment share a name."""
    cell = find_cell(page, name, framework)
    framework = cell.framework or "torch"
    label = "PyTorch" if framework == "torch" else "Paddle"
    have = gpu_count(framework)
    if have >= cell.gpus:
        if namespace is None:
            try:
                namespace = get_ipython().user_ns  # type: ignore[name-defined]  # noqa: F821
            except NameError:
                namespace = {}
        note(f"Ran live on this machine's GPU{'s' if have > 1 else ''}.")
        exec(compile(cell.source, f"<{page}:{name}>", "exec"), namespace)
        return "live"
    rec = load_record(page, directory)
    entry = (rec or {}).get("cells", {}).get(f"{framework}:{name}")
    prov = (rec or {}).get("provenance", {}).get(framework, {})
    shown = bool(entry and not entry.get("error") and prov and not prov.get("cpu_only"))
    if shown and is_stale(entry, cell):
        # The output of other code: its numbers and verdicts may be false of the code
        # above (a record said the streams "kept most of the hardware busy" after the
        # cell had changed). Not shown; the note says that a record exists, and when.
        commit = str(prov.get("commit") or "")[:10] or "an earlier commit"
        note([f"A run of an earlier version of this cell was recorded by make gpu-check "
              f"on {prov.get('gpu_count', '?')} x {prov.get('gpu_name', '?')} on "
              f"{str(prov.get('date', '?'))[:10]} (at {commit}). The code above has "
              "changed since, so that stale output is not shown; make gpu-check records "
              "it again.", f"On a GPU, {expect}" if expect else ""], kind="warning")
        return "stale"
    if shown:
        note(provenance_line(prov, framework), kind="note")
        print(fit_width(entry.get("stdout", "").rstrip()))   # to the page's width
        for png in entry.get("figures", []):
            _show_png(png)
        return "recorded"
    need = f"{cell.gpus} CUDA GPUs" if cell.gpus > 1 else "a CUDA GPU"
    why = (f"this machine has {have}" if have else "this machine has none")
    note(f"This {label} cell needs {need} ({why}), and no run of it on a GPU is "
         f"recorded yet." + (f" On a GPU, {expect}" if expect else ""), kind="note")
    return "needs-gpu"


def is_stale(entry: dict, cell: Cell) -> bool:
    """Whether a record was made from other code than ``cell``'s today (its digest, or
    none: a record that does not say which code ran cannot be shown as this code's)."""
    return entry.get("source") != source_digest(cell)


# --- running pages on a GPU machine (make gpu-check) -----------------------------------

def _glue_stub() -> None:
    """Chapters glue values into their text with myst_nb; the GPU machine need not have it."""
    try:
        import myst_nb  # noqa: F401
    except ImportError:
        import types
        mod = types.ModuleType("myst_nb")
        mod.glue = lambda *a, **k: None  # type: ignore[attr-defined]
        sys.modules["myst_nb"] = mod


def _translate(source: str, cwd: Path) -> str:
    """The two IPython spellings chapters use, as plain Python: ``%%writefile path`` and
    ``!command`` lines (run by the shell in the page's folder)."""
    lines = source.splitlines()
    if lines and lines[0].startswith("%%writefile"):
        target = lines[0].split(None, 1)[1].strip()
        body = "\n".join(lines[1:]) + "\n"
        return (f"import pathlib as _p\n_p.Path({str(cwd / target)!r}).parent.mkdir("
                f"parents=True, exist_ok=True)\n_p.Path({str(cwd / target)!r}).write_text("
                f"{body!r})\nprint('Writing {target}')\n")
    joined: list[str] = []  # IPython joins a `!command \` with its next line
    for line in lines:
        if joined and joined[-1].lstrip().startswith("!") and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1] + " " + line.strip()
        else:
            joined.append(line)
    out = []
    for line in joined:
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if stripped.startswith("!"):
            cmd = stripped[1:]
            out.append(f"{indent}__shell({cmd!r})")
        elif stripped.startswith("%"):
            out.append(f"{indent}pass  # IPython magic left out: {stripped!r}")
        else:
            out.append(line)
    return "\n".join(out)


def _shell(cwd: Path):
    # As in the book build: the running environment's own commands (torchrun, python)
    # come first on PATH, even when that environment is not activated.
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])

    def run(cmd: str) -> None:
        p = subprocess.run(cmd, shell=True, cwd=cwd, capture_output=True, text=True,
                           env=env)
        sys.stdout.write(p.stdout)
        sys.stdout.write(p.stderr)
        if p.returncode:
            print(f"(exit status {p.returncode}: {shlex.quote(cmd)})")
            # as in IPython the cell goes on; its record says the command failed
            run.failed.append(f"exit status {p.returncode}: {cmd}")
    run.failed = []
    return run


def _figures() -> list[str]:
    if "matplotlib.pyplot" not in sys.modules:
        return []
    import matplotlib.pyplot as plt
    out = []
    for num in plt.get_fignums():
        buf = io.BytesIO()
        plt.figure(num).savefig(buf, format="png", dpi=80, bbox_inches="tight")
        out.append(base64.b64encode(buf.getvalue()).decode())
    plt.close("all")
    return out


def run_cells(page: str | Path, framework: str, *, only_gpu: bool = False,
              log: Any = None) -> dict[str, dict]:
    """Run one page's ``framework`` variant top to bottom; return each GPU cell's record
    (``stdout``, ``figures``, ``seconds``, ``error``) keyed ``"<framework>:<name>"``."""
    path = _page_path(page)
    cwd = path.parent
    _glue_stub()
    backend = os.environ.get("MPLBACKEND")
    os.environ.setdefault("MPLBACKEND", "Agg")
    ns: dict[str, Any] = {"__name__": "__main__", "__shell": _shell(cwd),
                          "display": lambda *a, **k: print(*a)}
    results: dict[str, dict] = {}
    old = Path.cwd()
    os.chdir(cwd)
    try:
        for cell in parse_page(path):
            tags = set(cell.tags)
            if cell.framework not in (None, framework) or "gpu-output" in tags:
                continue
            if "skip-execution" in tags and not cell.gpu_name:
                continue
            if only_gpu and not cell.gpu_name:
                continue
            src = _translate(cell.source, cwd)
            buf = io.StringIO()
            t0 = time.perf_counter()
            error = ""
            if cell.gpu_name and cell.gpus > 1:
                have = gpu_count(framework)
                if have and have < cell.gpus:  # not run: its record says why
                    error = f"needs {cell.gpus} GPUs; this machine has {have}"
                    src = "pass"
            missing = ""  # a shared cell that needs the other framework, absent here
            ns["__shell"].failed.clear()
            with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
                try:
                    exec(compile(src, f"<{path.stem}:cell {cell.index}>", "exec"), ns)
                except BaseException as exc:  # a failing cell is recorded, not fatal
                    if isinstance(exc, KeyboardInterrupt):
                        raise
                    if (cell.framework is None and isinstance(exc, ModuleNotFoundError)
                            and (exc.name or "").split(".")[0] in FRAMEWORKS
                            and exc.name.split(".")[0] != framework):
                        # the GPU machine has no Paddle: a cell both tabs share that
                        # compares the two frameworks cannot run there, and is no error
                        # of this framework's variant
                        missing = exc.name.split(".")[0]
                    else:
                        error = "".join(traceback.format_exception(exc))[-4000:]
            if ns["__shell"].failed and not error:   # a launcher that failed fails its cell
                error = "shell command failed: " + "; ".join(ns["__shell"].failed)
            seconds = time.perf_counter() - t0
            figures = _figures()
            if log:
                status = ("error" if error else
                          f"skipped (needs {missing}, not installed here)" if missing
                          else "ok")
                print(f"  {path.stem} [{framework}] cell {cell.index}"
                      f"{' ' + cell.gpu_name if cell.gpu_name else ''}: {status} "
                      f"({seconds:.1f} s)", file=log, flush=True)
                if error:
                    print(error, file=log)
            if cell.gpu_name:
                results[f"{framework}:{cell.gpu_name}"] = {
                    "stdout": buf.getvalue()[-20000:], "figures": figures,
                    "seconds": round(seconds, 3), "error": error,
                    "source": source_digest(cell)}
    finally:
        os.chdir(old)
        if backend is None:  # the caller's environment as it was (a book build follows)
            os.environ.pop("MPLBACKEND", None)
    return results


def provenance(frameworks: tuple[str, ...]) -> dict:
    versions = {"python": platform.python_version()}
    cuda: dict[str, str] = {}
    name, count = "none", 0
    for fw in frameworks:
        try:
            if fw == "torch":
                import torch
                versions["torch"] = torch.__version__
                cuda["torch"] = torch.version.cuda or ""
                if torch.cuda.is_available():
                    count = max(count, torch.cuda.device_count())
                    name = torch.cuda.get_device_name(0)
            else:
                import paddle
                versions["paddle"] = paddle.__version__
                cuda["paddle"] = paddle.version.cuda()
        except Exception as exc:  # not installed on this machine
            versions[fw] = f"not installed ({type(exc).__name__})"
    driver = ""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20)
        driver = out.stdout.strip().splitlines()[0] if out.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired, IndexError):
        pass
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "gpu_name": name, "gpu_count": count, "driver": driver, "cuda": cuda,
            "versions": versions, "platform": platform.platform(),
            "commit": os.environ.get("COURSE_COMMIT", "")}


def pages_with_gpu_cells(chapters: Path = CHAPTERS) -> list[Path]:
    return [p for p in sorted(chapters.glob("*.md"))
            if any(c.gpu_name for c in parse_page(p))]


def record_pages(pages: list[Path] | None = None, frameworks: tuple[str, ...] = FRAMEWORKS,
                 out_dir: Path | None = None, allow_cpu: bool = False,
                 log: Any = sys.stderr) -> dict[str, Path]:
    """Run every page that has GPU cells in each framework with a GPU (all frameworks
    with ``allow_cpu``, a smoke test that is marked as such) and write one record per
    page; returns the files written."""
    out_dir = out_dir or RECORDS
    usable = tuple(fw for fw in frameworks if allow_cpu or gpu_count(fw))
    prov = provenance(frameworks)
    written: dict[str, Path] = {}
    for page in pages or pages_with_gpu_cells():
        cells: dict[str, dict] = {}
        for fw in usable:
            print(f"gpu-check: {page.stem} [{fw}]", file=log, flush=True)
            cells.update(run_cells(page, fw, log=log))
        if not cells:
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / f"{page.stem}.json"
        previous = load_record(page.stem, out_dir) or {}
        # A framework that could not run here keeps what an earlier machine recorded.
        kept = {k: v for k, v in previous.get("cells", {}).items()
                if k.split(":", 1)[0] not in usable}
        provs = {fw: v for fw, v in previous.get("provenance", {}).items()
                 if fw not in usable}
        for fw in usable:
            # a CPU smoke run is never shown as a GPU result (gpu_output checks this)
            provs[fw] = {**prov, "cpu_only": gpu_count(fw) == 0}
        rec = {"provenance": provs, "cells": {**kept, **cells}}
        target.write_text(json.dumps(rec, indent=1) + "\n")
        written[page.stem] = target
    return written
