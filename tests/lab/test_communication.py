import sys
from pathlib import Path

import networkx as nx
import pytest

from grader.lab import communication as comm
from grader.lab.core.gpucells import parse_page

CHAPTER = Path(__file__).resolve().parents[2] / "chapters" / "communication.md"


def test_launcher_names_resolve_to_this_environment():
    assert comm._resolve(["python", "-m", "x"])[0] == sys.executable
    torchrun = comm._resolve(["torchrun", "--nproc-per-node", "2", "s.py"])
    assert torchrun[-3:] == ["--nproc-per-node", "2", "s.py"]
    assert torchrun[0].endswith("torchrun") or torchrun[1:3] == ["-m", "torch.distributed.run"]


def test_a_launcher_prints_its_command_and_returns_its_output(capsys):
    out = comm.run_launcher(["python", "-c", "print('hello from the job')"],
                            env={"OMP_NUM_THREADS": "1"})
    assert "hello from the job" in out
    assert capsys.readouterr().out.startswith("$ OMP_NUM_THREADS=1 python -c")


def test_a_failing_launcher_raises_with_the_end_of_its_output():
    with pytest.raises(comm.LauncherFailed, match=r"status 3(.|\n)*the reason"):
        comm.run_launcher(["python", "-c", "import sys; print('the reason'); sys.exit(3)"])


def test_missing_rank_results_are_named(tmp_path):
    (tmp_path / "rank0.json").write_text('{"rank": 0, "world": 2, "records": []}')
    with pytest.raises(FileNotFoundError, match="1 rank result"):
        comm.read_ranks(tmp_path)


def _rank(rank, comm_start_ms, inside=False, overlapped_s=0.3):
    ms = 1_000_000
    return {"rank": rank, "world": 2, "sequential_s": 0.4, "overlapped_s": overlapped_s,
            "ran_inside_the_call": inside,
            "records": [("sequential", "compute", "chunk 0", 0, 100 * ms),
                        ("sequential", "comm", "all-reduce 0", 100 * ms, 200 * ms),
                        ("overlapped", "compute", "chunk 0", 0, 100 * ms),
                        ("overlapped", "comm", "all-reduce 0", comm_start_ms * ms,
                         (comm_start_ms + 100) * ms)]}


def test_rank_timelines_measure_the_overlap_of_each_phase():
    ranks = [_rank(0, 50, overlapped_s=0.36), _rank(1, 50, overlapped_s=0.36)]
    t = comm.comm_timelines(ranks, "x")
    assert t.overlap_s["sequential"] == pytest.approx(0.0)
    assert t.overlap_s["overlapped"] == pytest.approx(0.05)
    assert t.overlapped.rows == ["rank 0 compute", "rank 0 comm", "rank 1 compute",
                                 "rank 1 comm"]
    assert "overlapping saved time" in comm.overlap_verdict(ranks, t)


def test_a_collective_that_ran_inside_the_call_is_not_called_overlap():
    ranks = [_rank(0, 100, inside=True), _rank(1, 100, inside=True)]
    verdict = comm.overlap_verdict(ranks, comm.comm_timelines(ranks, "x"))
    assert "nothing to overlap" in verdict and "saved" not in verdict


def _run_graph_cell(framework):
    """The chapter's own cell that walks the recorded backward graph."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    cell = next(c for c in parse_page(CHAPTER)
                if c.framework == framework and "next_functions" in c.source)
    ns = {"plt": plt, "__name__": "__main__"}
    if framework == "paddle":
        from grader.lab.core.backends import get_backend
        get_backend("paddle")
        import paddle
        ns["paddle"] = paddle
    exec(compile(cell.source, "<graph cell>", "exec"), ns)
    plt.close("all")
    return ns["g"]


@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_the_step_graph_comes_from_the_recorded_backward_graph(framework, capsys):
    g = _run_graph_cell(framework)
    out = capsys.readouterr().out
    assert ("AccumulateGrad" not in out) and "0.weight" in out      # parameters by name
    on = {d: [n for n, a in g.nodes(data=True) if a["device"] == d] for d in ("gpu:0", "gpu:1")}
    assert len(on["gpu:0"]) == len(on["gpu:1"]) > 10
    # the two devices' passes are independent until the gradients are summed
    assert not any(nx.has_path(g, a, b) for a in on["gpu:0"] for b in on["gpu:1"]
                   if not b.startswith("update"))
    # the last layer's gradient may be summed while the first layer's backward runs
    first_bwd = [n for n in on["gpu:0"] if n.startswith("bwd ") and n.endswith(" 1 @gpu:0")]
    assert first_bwd
    red = "all-reduce 2.bias"
    assert all(not nx.has_path(g, red, b) and not nx.has_path(g, b, red) for b in first_bwd)
    for p in ("0.weight", "0.bias", "2.weight", "2.bias"):
        assert nx.has_path(g, f"grad {p} @gpu:1", f"update {p} @gpu:0")
    assert "share no edge before the all-reduces" in out


def test_operations_are_numbered_in_forward_order():
    g = _run_graph_cell("torch")
    assert nx.has_path(g, "fwd Addmm 1 @gpu:0", "fwd Addmm 2 @gpu:0")
    assert nx.has_path(g, "bwd Addmm 2 @gpu:0", "bwd Addmm 1 @gpu:0")
    assert nx.has_path(g, "send half @gpu:0", "fwd Addmm 1 @gpu:0")


def test_a_graph_that_is_not_a_backward_graph_is_refused():
    with pytest.raises(ValueError, match="no edges"):
        comm.training_step_graph([], {}, [])
    with pytest.raises(ValueError, match="no name"):
        comm.training_step_graph([("a", "b")], {"a": "MulBackward0"}, [])
    with pytest.raises(ValueError):
        comm.training_step_graph([("a", "b"), ("b", "a")],
                                 {"a": "MulBackward0", "b": "AddBackward0"}, [])


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_the_pages_scripts_sum_right_under_their_launchers(framework, tmp_path):
    """The scripts the chapter shows, started the way it starts them."""
    script = str(CHAPTER.parent / "scripts" / f"comm_overlap_{framework}.py")
    args = ["--out", str(tmp_path), "--size", "64", "--chunks", "3", "--numel", "1000"]
    if framework == "torch":
        comm.run_launcher(["torchrun", "--nproc-per-node", "2", script, *args])
    else:
        comm.run_launcher(["python", "-m", "paddle.distributed.launch", "--nproc_per_node",
                           "2", "--log_dir", str(tmp_path / "log"), script, *args],
                          env={"OMP_NUM_THREADS": "1"})
    ranks = comm.read_ranks(tmp_path)
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["sums_correct"] for r in ranks)
    t = comm.comm_timelines(ranks, framework)
    assert len(t.sequential.intervals) == len(t.overlapped.intervals) == 2 * 2 * 3
    # sequential: every all-reduce starts after that rank's last chunk of compute
    for r in (0, 1):
        last = max(e for s, e in t.sequential.busy(f"rank {r} compute"))
        assert min(s for s, e in t.sequential.busy(f"rank {r} comm")) >= last


def test_a_faster_run_without_any_overlap_is_not_credited_to_overlap():
    # comm starts when compute ends: nothing ran at the same time, yet 0.3 s < 0.4 s
    ranks = [_rank(0, 100), _rank(1, 100)]
    verdict = comm.overlap_verdict(ranks, comm.comm_timelines(ranks, "x"))
    assert "saved" not in verdict and "not because anything overlapped" in verdict


def test_a_saving_larger_than_the_overlap_is_not_all_credited_to_overlap():
    # 50 ms side by side can save at most 50 ms; the run was 100 ms faster
    ranks = [_rank(0, 50), _rank(1, 50)]
    verdict = comm.overlap_verdict(ranks, comm.comm_timelines(ranks, "x"))
    assert "at most 50.0 ms of the 100.0 ms" in verdict
    assert "overlapping saved time" not in verdict


@pytest.mark.parametrize("overlapped_s, said", [
    (0.392, "only 8.0 ms (2%) faster"),          # faster, but by less than 5 %
    (0.41, "the run was no faster")])            # slower
def test_a_small_saving_is_named_and_a_slower_run_is_not_called_faster(overlapped_s,
                                                                       said):
    ranks = [_rank(r, 50, overlapped_s=overlapped_s) for r in (0, 1)]
    verdict = comm.overlap_verdict(ranks, comm.comm_timelines(ranks, "x"))
    assert said in verdict and "saved time" not in verdict
