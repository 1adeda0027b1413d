"""GPU cells: parsed from the page, replayed with provenance, never shown as GPU results
when they ran on a CPU."""
import json
import os
import textwrap

import pytest

from grader.lab.core import gpucells

PAGE = textwrap.dedent('''\
    # A page

    ```{code-cell} ipython3
    import math
    x = 3
    ```

    ```{code-cell} ipython3
    :tags: [torch, skip-execution]
    :gpu-cell: square
    print("square", x * x)
    ```

    ```{code-cell} ipython3
    :tags: [torch, remove-input, gpu-output]
    gpu_output("page", "square", expect="it prints 9.")
    ```

    ```{code-cell} ipython3
    ---
    tags: [paddle, skip-execution]
    gpu-cell: cube
    gpus: 2
    ---
    print("cube", x ** 3)
    ```

    ```{code-cell} ipython3
    :tags: [paddle]
    raise RuntimeError("a paddle cell must not run in the torch variant")
    ```
    ''')


@pytest.fixture(autouse=True)
def outside_a_notebook(monkeypatch):
    """These tests run the cells as plain Python, as make gpu-check does: no IPython shell.
    A test run earlier in the same process can leave one behind (IPython keeps the first
    ``InteractiveShell.instance()`` for the process's life: seen in make test, where notes
    were then displayed as ``<IPython.core.display.HTML object>``), so it is hidden here."""
    import IPython

    monkeypatch.setattr(IPython, "get_ipython", lambda: None)


@pytest.fixture
def page(tmp_path):
    p = tmp_path / "page.md"
    p.write_text(PAGE)
    return p


def test_parse_page_reads_tags_and_options_in_both_spellings(page):
    cells = gpucells.parse_page(page)
    assert [c.gpu_name for c in cells] == [None, "square", None, "cube", None]
    assert cells[1].tags == ["torch", "skip-execution"] and cells[1].gpus == 1
    assert cells[3].framework == "paddle" and cells[3].gpus == 2
    assert cells[1].source == 'print("square", x * x)'


def test_an_unknown_cell_name_is_an_error_that_lists_the_names(page):
    with pytest.raises(gpucells.GpuCellError, match="square, cube"):
        gpucells.find_cell(page, "sqare")


def test_sibling_cells_of_one_experiment_are_told_apart_by_framework(tmp_path, capsys,
                                                                    monkeypatch):
    p = tmp_path / "twins.md"
    p.write_text(textwrap.dedent('''\
        ```{code-cell} ipython3
        :tags: [torch, skip-execution]
        :gpu-cell: copy
        print("torch")
        ```

        ```{code-cell} ipython3
        :tags: [paddle, skip-execution]
        :gpu-cell: copy
        print("paddle")
        ```
        '''))
    assert gpucells.find_cell(p, "copy", "paddle").source == 'print("paddle")'
    assert gpucells.find_cell(p, "copy").framework == "torch"
    with pytest.raises(gpucells.GpuCellError, match="no torch cell"):
        gpucells.find_cell(p, "cpy", "torch")
    monkeypatch.setattr(gpucells, "gpu_count", lambda fw: 0)
    gpucells.gpu_output(p, "copy", framework="paddle", directory=tmp_path)
    assert capsys.readouterr().out.startswith("This Paddle cell needs a CUDA GPU")


def test_without_a_gpu_or_a_record_it_says_what_the_cell_needs(page, tmp_path, capsys,
                                                               monkeypatch):
    monkeypatch.setattr(gpucells, "gpu_count", lambda fw: 0)
    assert gpucells.gpu_output(page, "square", "it prints 9.", directory=tmp_path) == "needs-gpu"
    out = capsys.readouterr().out
    assert "needs a CUDA GPU" in out and "it prints 9." in out
    gpucells.gpu_output(page, "cube", directory=tmp_path)
    assert "needs 2 CUDA GPUs" in capsys.readouterr().out


def test_a_recorded_run_is_shown_with_its_provenance(page, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(gpucells, "gpu_count", lambda fw: 0)
    digest = gpucells.source_digest(gpucells.find_cell(page, "square"))
    rec = {"provenance": {"torch": {"gpu_name": "NVIDIA H200", "gpu_count": 1,
                                    "driver": "580.1", "date": "2026-11-30T10:00:00+00:00",
                                    "versions": {"torch": "2.11.0", "python": "3.12.3"},
                                    "cuda": {"torch": "13.0"}, "cpu_only": False}},
           "cells": {"torch:square": {"stdout": "square 9\n" + "word " * 40, "figures": [],
                                      "error": "", "source": digest}}}
    (tmp_path / "page.json").write_text(json.dumps(rec))
    assert gpucells.gpu_output(page, "square", directory=tmp_path) == "recorded"
    out = capsys.readouterr().out
    assert "NVIDIA H200" in out and "2026-11-30" in out and "square 9" in out
    printed = [line for line in out.splitlines() if "word" in line]
    assert len(printed) > 1 and max(map(len, printed)) <= 100   # a long line is wrapped
    # a record that does not say which code ran is not shown as today's code's
    del rec["cells"]["torch:square"]["source"]
    (tmp_path / "page.json").write_text(json.dumps(rec))
    assert gpucells.gpu_output(page, "square", directory=tmp_path) == "stale"
    assert "square 9" not in capsys.readouterr().out


def test_a_record_of_an_earlier_version_of_the_cell_is_not_shown(page, tmp_path, capsys,
                                                                 monkeypatch):
    """Its output is another code's: a note says a stale record exists, with its date and
    commit, and what the cell shows on a GPU; the recorded output is not printed."""
    monkeypatch.setattr(gpucells, "gpu_count", lambda fw: 0)
    written = gpucells.record_pages([page], ("torch",), tmp_path, allow_cpu=True, log=None)
    rec = json.loads(written["page"].read_text())
    rec["provenance"]["torch"].update(cpu_only=False, commit="0123456789abcdef",
                                      gpu_name="NVIDIA H100", gpu_count=1)
    (tmp_path / "page.json").write_text(json.dumps(rec))
    assert gpucells.gpu_output(page, "square", directory=tmp_path) == "recorded"
    out = capsys.readouterr().out
    assert "square 9" in out and "stale" not in out   # the same code
    date = rec["provenance"]["torch"]["date"][:10]
    assert gpucells.records_summary(page, tmp_path) == [
        f"  PyTorch GPU cells (1): 1 shows a run recorded on 1 x NVIDIA H100 on {date} "
        "(make gpu-check)",
        "  Paddle GPU cells (1): 1 says what it needs (no run on such a GPU machine recorded yet)"]
    page.write_text(PAGE.replace('print("square", x * x)', 'print("square!", x * x)'))
    assert gpucells.gpu_output(page, "square", "it prints 9.", directory=tmp_path) == "stale"
    out = capsys.readouterr().out
    assert "square 9" not in out
    assert "earlier version of this cell" in out and "0123456789" in out and date in out
    assert "stale output is not shown" in out and "it prints 9." in out
    assert gpucells.records_summary(page, tmp_path) == [
        "  PyTorch GPU cells (1): 1 has a record of an earlier version of the code, not shown",
        "  Paddle GPU cells (1): 1 says what it needs (no run on such a GPU machine recorded yet)"]


def test_the_committed_records_are_gpu_runs_of_cells_on_the_pages():
    """What bench/results/gpu/cells holds came from a GPU, names cells that exist, and
    says which code ran (commit and digest), whatever machine reads it."""
    records = sorted(gpucells.RECORDS.glob("*.json"))
    assert records, "no GPU records committed"
    for path in records:
        rec = gpucells.load_record(path.stem)
        assert rec, path
        for key, entry in rec["cells"].items():
            framework, name = key.split(":", 1)
            cell = gpucells.find_cell(path.stem, name, framework)   # raises if gone
            prov = rec["provenance"][framework]
            assert prov["cpu_only"] is False and prov["gpu_count"] >= 1, (path, key)
            assert prov["gpu_name"] not in ("", "none") and prov["date"][:4] >= "2026"
            assert len(prov["commit"]) == 40, (path, key)
            assert len(entry["source"]) == 16, (path, key)
            if entry["error"]:   # only a cell that needs more GPUs than the machine had
                assert entry["error"] == (f"needs {cell.gpus} GPUs; this machine has "
                                          f"{prov['gpu_count']}"), (path, key)


def test_a_cpu_smoke_record_is_never_shown_as_a_gpu_result(page, tmp_path, capsys,
                                                           monkeypatch):
    monkeypatch.setattr(gpucells, "gpu_count", lambda fw: 0)
    written = gpucells.record_pages([page], ("torch",), tmp_path, allow_cpu=True, log=None)
    rec = json.loads(written["page"].read_text())
    assert rec["cells"]["torch:square"]["stdout"] == "square 9\n"
    assert rec["provenance"]["torch"]["cpu_only"] is True
    assert gpucells.gpu_output(page, "square", directory=tmp_path) == "needs-gpu"


def test_a_page_variant_skips_other_frameworks_and_keeps_their_earlier_records(
        page, tmp_path, monkeypatch):
    monkeypatch.setattr(gpucells, "gpu_count", lambda fw: 0)
    earlier = {"provenance": {"paddle": {"gpu_name": "A100", "cpu_only": False}},
               "cells": {"paddle:cube": {"stdout": "cube 27\n", "figures": [], "error": ""}}}
    (tmp_path / "page.json").write_text(json.dumps(earlier))
    gpucells.record_pages([page], ("torch",), tmp_path, allow_cpu=True, log=None)
    rec = json.loads((tmp_path / "page.json").read_text())
    assert rec["cells"]["paddle:cube"]["stdout"] == "cube 27\n"
    assert rec["provenance"]["paddle"]["gpu_name"] == "A100"
    assert "torch:square" in rec["cells"]


def test_live_mode_runs_the_cells_own_source(page, capsys, monkeypatch):
    monkeypatch.setattr(gpucells, "gpu_count", lambda fw: 1)
    ns = {"x": 4}
    assert gpucells.gpu_output(page, "square", namespace=ns) == "live"
    assert "square 16" in capsys.readouterr().out


def test_shell_lines_and_writefile_cells_run_without_ipython(tmp_path):
    p = tmp_path / "s.md"
    p.write_text(textwrap.dedent('''\
        ```{code-cell} ipython3
        %%writefile hello.py
        print("hello from a script")
        ```

        ```{code-cell} ipython3
        :tags: [torch, skip-execution]
        :gpu-cell: run
        !python3 hello.py
        ```
        '''))
    res = gpucells.run_cells(p, "torch")
    assert res["torch:run"]["error"] == ""
    assert "hello from a script" in res["torch:run"]["stdout"]


def test_running_a_page_leaves_the_plotting_backend_as_it_was(tmp_path, monkeypatch):
    """run_cells draws with "Agg" while it runs; a book built afterwards in the same
    process must still get its kernels' inline figures."""
    monkeypatch.delenv("MPLBACKEND", raising=False)
    p = tmp_path / "b.md"
    p.write_text("```{code-cell} ipython3\n:tags: [torch, skip-execution]\n:gpu-cell: b\n"
                 "import os\nprint(os.environ['MPLBACKEND'])\n```\n")
    res = gpucells.run_cells(p, "torch")
    assert res["torch:b"]["stdout"].strip() == "Agg"
    assert "MPLBACKEND" not in os.environ


def test_a_shell_command_continued_with_a_backslash_is_one_command(tmp_path):
    p = tmp_path / "c.md"
    p.write_text(textwrap.dedent('''\
        ```{code-cell} ipython3
        :tags: [torch, skip-execution]
        :gpu-cell: run
        !echo one \\
            two
        print("after")
        ```
        '''))
    res = gpucells.run_cells(p, "torch")
    assert res["torch:run"]["error"] == ""
    assert res["torch:run"]["stdout"].split() == ["one", "two", "after"]


def test_a_failing_shell_command_fails_its_cell_after_the_rest_of_it_ran(tmp_path):
    p = tmp_path / "f.md"
    p.write_text(textwrap.dedent('''\
        ```{code-cell} ipython3
        :tags: [torch, skip-execution]
        :gpu-cell: bad
        !exit 3
        print("after")
        ```

        ```{code-cell} ipython3
        :tags: [torch, skip-execution]
        :gpu-cell: good
        !true
        ```
        '''))
    res = gpucells.run_cells(p, "torch")
    assert "exit status 3" in res["torch:bad"]["error"]
    assert "after" in res["torch:bad"]["stdout"]
    assert res["torch:good"]["error"] == ""


def test_shell_commands_find_the_running_environments_own_programs(tmp_path):
    p = tmp_path / "e.md"
    p.write_text(textwrap.dedent('''\
        ```{code-cell} ipython3
        :tags: [torch, skip-execution]
        :gpu-cell: run
        !command -v python
        ```
        '''))
    import sys
    from pathlib import Path

    res = gpucells.run_cells(p, "torch")
    found = Path(res["torch:run"]["stdout"].strip())
    assert found.parent == Path(sys.executable).parent


def test_a_shared_cell_needing_the_absent_other_framework_is_skipped_not_an_error(
        tmp_path, monkeypatch):
    # the GPU machine has no Paddle: the torch variant still runs a page whose shared
    # cell compares both frameworks, says it skipped that cell, and goes on
    import io
    import sys

    monkeypatch.setitem(sys.modules, "paddle", None)  # `import paddle` fails here
    p = tmp_path / "s.md"
    p.write_text(textwrap.dedent('''\
        ```{code-cell} ipython3
        x = 1
        import paddle
        ```

        ```{code-cell} ipython3
        :tags: [torch]
        import paddle_is_not_a_framework
        ```

        ```{code-cell} ipython3
        :tags: [torch, skip-execution]
        :gpu-cell: run
        print(x + 1)
        ```
        '''))
    log = io.StringIO()
    res = gpucells.run_cells(p, "torch", log=log)
    lines = log.getvalue()
    assert "cell 0: skipped (needs paddle, not installed here)" in lines
    assert "cell 1: error" in lines  # a torch cell's missing module is still an error
    assert res["torch:run"]["error"] == "" and res["torch:run"]["stdout"] == "2\n"


def test_a_cell_needing_more_gpus_than_the_machine_has_is_not_run_and_says_why(
        tmp_path, monkeypatch):
    # the GPU machine of `make gpu-check` may have one GPU; a two-GPU cell is not run
    # there (its own check would only raise) and its record names the shortfall
    monkeypatch.setattr(gpucells, "gpu_count", lambda framework: 1)
    p = tmp_path / "g.md"
    p.write_text(textwrap.dedent('''\
        ```{code-cell} ipython3
        :tags: [torch, skip-execution]
        :gpu-cell: two
        :gpus: 2
        print("ran")
        ```

        ```{code-cell} ipython3
        :tags: [torch, skip-execution]
        :gpu-cell: one
        print("ran")
        ```
        '''))
    res = gpucells.run_cells(p, "torch")
    assert res["torch:two"]["error"] == "needs 2 GPUs; this machine has 1"
    assert res["torch:two"]["stdout"] == ""
    assert res["torch:one"]["error"] == "" and res["torch:one"]["stdout"] == "ran\n"


def test_the_hardware_line_counts_what_the_gpu_cells_show(page, tmp_path, monkeypatch):
    monkeypatch.setattr(gpucells, "gpu_count", lambda fw: 0)
    assert gpucells.records_summary(page, tmp_path) == [
        "  PyTorch GPU cells (1): 1 says what it needs (no run on such a GPU machine "
        "recorded yet)",
        "  Paddle GPU cells (1): 1 says what it needs (no run on such a GPU machine "
        "recorded yet)"]
    written = gpucells.record_pages([page], ("torch",), tmp_path, allow_cpu=True, log=None)
    rec = json.loads(written["page"].read_text())   # a CPU smoke run is not counted
    assert gpucells.records_summary(page, tmp_path)[0].endswith("recorded yet)")
    rec["provenance"]["torch"].update(cpu_only=False, gpu_name="NVIDIA H200", gpu_count=1,
                                      date="2026-11-30T23:14:01+00:00")
    (tmp_path / "page.json").write_text(json.dumps(rec))
    assert gpucells.records_summary(page, tmp_path)[0] == (
        "  PyTorch GPU cells (1): 1 shows a run recorded on 1 x NVIDIA H200 on 2026-11-30 "
        "(make gpu-check)")
    monkeypatch.setattr(gpucells, "gpu_count", lambda fw: 1)   # square needs one: live
    assert gpucells.records_summary(page, tmp_path) == [
        "  PyTorch GPU cells (1): 1 run live here",
        "  Paddle GPU cells (1): 1 says what it needs (no run on such a GPU machine "
        "recorded yet)"]


def test_the_digest_covers_the_scripts_a_cell_launches():
    cell = gpucells.Cell(0, "!torchrun --nproc_per_node gpu scripts/ddp_torch.py --x 1")
    v1 = gpucells.source_digest(cell, {"scripts/ddp_torch.py": "print(1)"}.__getitem__)
    v2 = gpucells.source_digest(cell, {"scripts/ddp_torch.py": "print(2)"}.__getitem__)
    assert v1 != v2
    assert v1 == gpucells.source_digest(cell, {"scripts/ddp_torch.py": "print(1)"}.__getitem__)
    missing = gpucells.source_digest(cell, {}.__getitem__)   # a script that is gone
    assert missing not in (v1, v2)
    # today's files by default: the chapters' own script
    assert gpucells.source_digest(cell) == gpucells.source_digest(
        cell, lambda rel: (gpucells.CHAPTERS / rel).read_text(encoding="utf-8"))


def test_notes_are_wrapped_prose_in_a_notebook_and_plain_text_outside(capsys):
    from grader.lab.core.notes import note, note_html

    html = note_html(["Recorded by make gpu-check on 1 x NVIDIA H200 <b>"], "Where")
    assert html.startswith('<div class="admonition note course-note">')
    assert "&lt;b&gt;" in html and "<b>" not in html      # sentences, escaped
    assert note_html(["a", "b"]).count("<li>") == 2
    note(["one", "two"], title="T")                         # no kernel here: printed
    assert capsys.readouterr().out == "T\none\ntwo\n"


def test_a_record_of_another_release_says_which_it_ran_on():
    from grader.lab.core.gpucells import provenance_line
    from importlib import metadata

    here = metadata.version("torch").split("+")[0]
    prov = {"versions": {"torch": "2.11.0+cu130", "python": "3.12.3"}, "gpu_count": 1,
            "gpu_name": "NVIDIA H200", "date": "2026-11-30"}
    line = provenance_line(prov, "torch")
    assert f"The record ran on PyTorch 2.11.0; this build has PyTorch {here}" in line
    prov["versions"]["torch"] = here
    assert "The record ran on" not in provenance_line(prov, "torch")
