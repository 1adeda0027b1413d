"""Reading Paddle's reshard log: sections at the scripts' markers, collectives counted,
the script's own output separated from Paddle's and Python's lines."""
from grader.lab.core import paddle_log

LOG = """\
/x/paddle/utils/cpp_extension/extension_utils.py:712: UserWarning: No ccache found.
  warnings.warn(warning_message)
======================= Modified FLAGS detected =======================
FLAGS(name='FLAGS_enable_pir_in_executor', current_value=True, default_value=False)
=======================================================================
I1130 17:04:48.329141 13681 r_to_s_reshard_function.cc:112] Call `Slice` in Resharding on CPU.
== plan forward
I1130 17:04:48.329141 13681 p_to_r_reshard_function.cc:71] Call `AllReduce` in Resharding on CPU.
== plan backward
I1130 17:04:48.329141 13681 s_to_r_reshard_function.cc:47] Call `AllGather` in Resharding on CPU.
I1130 17:04:48.329141 13681 s_to_r_reshard_function.cc:62] Call `Split` in Resharding on CPU.
[2026-11-30 17:10:50,634] [    INFO] topology.py:526 - Total 1 data comm group(s)
== plan optimizer step
result line 1
  result line 2
== plan forward
I1130 17:04:48.329141 13681 p_to_r_reshard_function.cc:71] Call `AllReduce` in Resharding on CPU.
"""


def test_sections_cut_the_log_at_the_markers_and_keep_the_first_of_each(tmp_path):
    log = tmp_path / "workerlog.0"
    log.write_text(LOG)
    got = paddle_log.sections(log)
    assert list(got) == ["plan forward", "plan backward", "plan optimizer step"]
    assert got["plan forward"] == [("p_to_r_reshard_function", "AllReduce")]
    assert [c for _, c in got["plan backward"]] == ["AllGather", "Split"]


def test_only_the_calls_that_communicate_are_counted(tmp_path):
    log = tmp_path / "workerlog.0"
    log.write_text(LOG)
    assert paddle_log.collectives(log) == {"plan forward": {"all_reduce": 1},
                                           "plan backward": {"all_gather": 1},
                                           "plan optimizer step": {}}


def test_the_scripts_output_comes_without_paddles_and_pythons_lines(tmp_path):
    log = tmp_path / "workerlog.0"
    log.write_text(LOG)
    assert paddle_log.script_output(log) == "result line 1\n  result line 2"
    lines = paddle_log.reshard_lines(log)
    assert lines[0] == "r_to_s_reshard_function.cc:112] Call `Slice` in Resharding on CPU."
    assert "== plan forward" in lines and "result line 1" in lines
    assert not any("ccache" in line or "INFO" in line for line in lines)
