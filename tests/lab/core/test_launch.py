import pytest

from grader.lab.core.dist_examples import allreduce_rank, exit_on_rank, fail_on_rank, hang_on_rank
from grader.lab.core.launch import RankFailed, RankTimeout, launch

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_all_reduce_on_two_ranks(framework, tmp_path):
    result = launch(allreduce_rank, nprocs=2, framework=framework, timeout=90, tmp_dir=str(tmp_path))
    assert list(result) == [[3.0] * 4, [3.0] * 4]
    assert result.backend == "gloo"
    assert list(tmp_path.iterdir()) == []       # the run's folder is removed
    assert all(isinstance(log, str) for log in result.logs)   # the logs' text, read before


def test_a_rank_that_raises_is_named_with_its_traceback(tmp_path):
    with pytest.raises(RankFailed) as err:
        launch(fail_on_rank, nprocs=2, framework="torch", args=(1,), timeout=90,
               tmp_dir=str(tmp_path))
    assert list(tmp_path.iterdir()) == []
    assert err.value.rank == 1
    assert "ValueError: rank 1 was told to fail" in err.value.detail
    assert str(err.value).splitlines()[0] == "rank 1 raised ValueError: rank 1 was told to fail:"
    assert err.value.failure.type_name == "ValueError"


@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_a_hanging_rank_ends_the_run_within_the_timeout(framework, tmp_path):
    with pytest.raises(RankTimeout) as err:
        launch(hang_on_rank, nprocs=2, framework=framework, args=(0,), timeout=10,
               tmp_dir=str(tmp_path))
    assert list(tmp_path.iterdir()) == []           # removed on the timeout path too
    assert 0 in err.value.ranks
    assert "all ranks were stopped" in str(err.value)


def test_a_rank_that_dies_silently_is_named_with_its_exit_code():
    with pytest.raises(RankFailed) as err:
        launch(exit_on_rank, nprocs=2, framework="torch", args=(0,), timeout=90)
    assert err.value.rank == 0 and "exited with code 3" in err.value.detail


def test_notebook_lambdas_get_a_clear_error():
    with pytest.raises(TypeError, match="importable"):
        launch(lambda r, w: r, nprocs=2)


def test_a_function_defined_in_a_notebook_cell_runs_on_the_ranks():
    ns = {"__name__": "__main__"}
    exec("import os\nBASE = 10\n"
         "def rank_fn(rank, world):\n    return BASE + rank + world\n", ns)
    assert list(launch(ns["rank_fn"], nprocs=2, framework="torch", timeout=90)) == [12, 13]
