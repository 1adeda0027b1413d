"""The grader's digest (a verdict's input) is the environment's, wherever the command runs."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_grader_digest_is_the_same_from_the_repository_and_from_elsewhere(tmp_path):
    """Run from the repository's folder, sys.path held its pdl_course.egg-info: one more
    distribution than run from elsewhere, so every stored verdict was out of date when
    make grade and the tests' second run differed in their folder (CI: test_parallel)."""
    code = "from grader.grading.run.inputs import grader_digest; print(grader_digest())"
    here, there = (subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                                  text=True, timeout=120) for cwd in (ROOT, tmp_path))
    assert here.returncode == there.returncode == 0, here.stderr + there.stderr
    assert here.stdout.strip() == there.stdout.strip() != ""
