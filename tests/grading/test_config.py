"""exercises/course.toml: the one place for the course id, limits, isolation and the gradebook URL."""
from __future__ import annotations

from pathlib import Path

import pytest

from grader.grading.config import (DEFAULT_COURSE_ID, Limits, SubmissionLimits, load,
                                   with_overrides)

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_course_file_loads_with_every_limit_set():
    cfg = load(ROOT / "exercises")
    text = (ROOT / "exercises" / "course.toml").read_text()
    for name in [*Limits.__dataclass_fields__, *SubmissionLimits.__dataclass_fields__]:
        assert f"{name} =" in text, f"{name} is not documented in course.toml"
    assert cfg.limits == Limits() and cfg.submission == SubmissionLimits()
    assert cfg.db_url == "sqlite:///" + str(ROOT / "exercises" / "gradebook.db")
    assert cfg.workers >= 1 and cfg.sandbox.mode == "auto"


def test_missing_file_means_defaults_and_a_url_is_taken_as_is(tmp_path):
    assert load(tmp_path).limits == Limits()
    (tmp_path / "course.toml").write_text('[gradebook]\nurl = "postgresql://g@db/c"\n[grading]\nworkers = 3\n')
    cfg = load(tmp_path)
    assert (cfg.db_url, cfg.workers) == ("postgresql://g@db/c", 3)


@pytest.mark.parametrize("text, words", [
    ("[limits]\nmemory_gigs = 2\n", "unknown key(s) ['memory_gigs'] in [limits]"),
    ('[limits]\ncpu_seconds = "lots"\n', "cpu_seconds = 'lots' should be a int"),
    ("[limit]\n", "unknown section(s) ['limit']"),
    ('[sandbox]\nmode = "docker"\n', 'mode must be "auto", "bwrap" or "none"'),
    ("[limits]\nkernel_threads = 0\n", "kernel_threads = 0 should be more than 0"),
    ("[limits]\nmemory_gb = -1\n", "memory_gb = -1.0 should be more than 0"),
    ("[limits]\ncell_timeout_s = 0\n", "cell_timeout_s = 0 should be more than 0"),
    ("[limits]\ncell_timeout_s = true\n", "cell_timeout_s = True should be a int"),
    ("[submission]\nmax_files = -5\n", "[submission] max_files = -5 should be more than 0"),
    ("[grading]\nworkers = -3\n", "workers = -3 should be a whole number"),
    ('[grading]\nworkers = "4"\n', "workers = '4' should be a whole number"),
    ("[grading]\nworker = 4\n", "unknown key(s) ['worker'] in [grading]"),
    ("[sandbox]\nuid_base = 0\n", "uid_base = 0 should be between 1000"),
    ("[limits\n", "not valid TOML"),
])
def test_a_mistake_in_the_file_is_an_error_that_names_it(tmp_path, text, words):
    (tmp_path / "course.toml").write_text(text)
    with pytest.raises(ValueError) as e:
        load(tmp_path)
    assert words in str(e.value) and "course.toml" in str(e.value)


def test_command_line_values_override_single_limits(tmp_path):
    cfg = with_overrides(load(tmp_path), memory_gb=2.5, cell_timeout_s=None, workers=5, sandbox_mode="none")
    assert cfg.limits.memory_gb == 2.5 and cfg.limits.cell_timeout_s == Limits().cell_timeout_s
    assert cfg.workers == 5 and cfg.sandbox.mode == "none"


def test_submission_limits_are_read_and_overridden(tmp_path):
    (tmp_path / "course.toml").write_text("[submission]\nmax_files = 3\nmax_notebook_mb = 1\n")
    cfg = load(tmp_path)
    assert (cfg.submission.max_files, cfg.submission.max_notebook_mb) == (3, 1.0)
    assert with_overrides(cfg, max_files=7).submission.max_files == 7


def test_the_course_id_is_read_from_course_toml_by_nbgrader_the_hub_and_the_pipeline(tmp_path):
    from traitlets.config.loader import PyFileConfigLoader

    from hub.run import course_id_of

    course_id = load(ROOT / "exercises").course_id
    assert course_id and course_id != DEFAULT_COURSE_ID
    nbgrader = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT / "exercises")).load_config()
    assert nbgrader.CourseDirectory.course_id == course_id == course_id_of(ROOT / "exercises")
    assert load(tmp_path).course_id == DEFAULT_COURSE_ID          # no course.toml
    (tmp_path / "course.toml").write_text('[gradebook]\ncourse_id = "c1"\n')
    assert load(tmp_path).course_id == "c1"
    (tmp_path / "course.toml").write_text('[gradebook]\ncourse = "c1"\n')
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['course'\] in \[gradebook\]"):
        load(tmp_path)


def test_the_cell_time_limit_reaches_nbgrader_from_course_toml_and_from_the_command_line(tmp_path):
    """One route: course.toml (or an override) -> GradingConfig -> autograde_config ->
    nbgrader's Execute.timeout, for nbgrader run by hand and for the grading worker."""
    import shutil

    from traitlets.config.loader import PyFileConfigLoader

    from grader.grading.run.item import _executor_config

    shutil.copy(ROOT / "exercises" / "nbgrader_config.py", tmp_path)
    (tmp_path / "course.toml").write_text("[limits]\ncell_timeout_s = 17\n")
    by_hand = PyFileConfigLoader("nbgrader_config.py", path=str(tmp_path)).load_config()
    assert by_hand.Execute.timeout == 17
    cfg = with_overrides(load(tmp_path), cell_timeout_s=5)      # make grade --cell-timeout 5
    worker = _executor_config(tmp_path / "trace", [], cfg, tmp_path / "staged")
    by_hand.merge(worker)                                       # as item.api merges them
    assert by_hand.Execute.timeout == 5
    assert by_hand.CourseDirectory.submitted_directory == str(tmp_path / "staged")


@pytest.mark.parametrize("option, value, words", [
    ("memory_gb", -1.0, "memory_gb = -1.0 should be more than 0"),
    ("cell_timeout", 0, "cell_timeout_s = 0 should be more than 0"),
    ("workers", -3, "workers = -3 should be 1 or more"),
])
def test_a_bad_command_line_value_stops_grading_before_anything_is_graded(tmp_path, option, value, words):
    """memory_gb = -1 once scored a correct notebook 0 ("crashed": bwrap refused its size)."""
    import shutil

    from grader.grading.run.pipeline import grade_course

    shutil.copy(ROOT / "exercises" / "course.toml", tmp_path)
    (tmp_path / "source").mkdir()
    with pytest.raises(ValueError) as e:
        grade_course(tmp_path, verbose=False, **{option: value})
    assert words in str(e.value) and "command line" in str(e.value), str(e.value)
    assert not (tmp_path / "reports" / "grades.csv").exists()


@pytest.mark.parametrize("framework", ["torch", "paddle"])
def test_a_memory_limit_too_small_for_the_framework_is_refused_in_one_line_naming_the_minimum(
        tmp_path, monkeypatch, framework):
    """Issue 37: at a memory_gb too small to import the framework, every correct answer
    scored 0 (the feedback blamed an ImportError). Refused when the course is loaded, in
    one line that names the measured minimum; ``mode = "none"`` has no memory limit."""
    from grader.grading import config

    monkeypatch.setenv("COURSE_FRAMEWORK", framework)
    need = config.MIN_MEMORY_GB[framework]
    (tmp_path / "course.toml").write_text(f"[limits]\nmemory_gb = {need / 2}\n")
    with pytest.raises(ValueError) as e:
        load(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and f"{need:g} GB" in msg and framework in msg, msg
    (tmp_path / "course.toml").write_text(f"[limits]\nmemory_gb = {need}\n")
    assert load(tmp_path).limits.memory_gb == need
    (tmp_path / "course.toml").write_text(f'[limits]\nmemory_gb = {need / 2}\n[sandbox]\nmode = "none"\n')
    assert load(tmp_path).limits.memory_gb == need / 2


def test_workers_times_memory_must_fit_the_machine_and_the_default_fits(tmp_path, monkeypatch):
    """Issue 37: jobs of memory_gb each, as many as there are workers, must fit in the
    machine's memory, or the machine's out-of-memory killer ends someone's kernel."""
    from grader.grading import config

    monkeypatch.setattr(config, "machine_memory_gb", lambda: 10.0)
    (tmp_path / "course.toml").write_text("[grading]\nworkers = 4\n[limits]\nmemory_gb = 4.0\n")
    with pytest.raises(ValueError) as e:
        load(tmp_path)
    assert "4 x 4 GB" in str(e.value) and "workers to 2 or fewer" in str(e.value), str(e.value)
    (tmp_path / "course.toml").write_text("[grading]\nworkers = 0\n[limits]\nmemory_gb = 4.0\n")
    assert load(tmp_path).workers == min(2, config.default_workers())   # as many as fit
    bigger = with_overrides(load(tmp_path), memory_gb=6.0)   # make grade --memory-gb 6
    assert "workers to 1 or fewer" in config.check(bigger)
