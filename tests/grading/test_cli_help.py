"""What ``python -m grader.grading --help`` says agrees with what the grader does."""
import os
import re

from grader.grading.__main__ import main
from grader.grading.config import default_workers


def test_the_workers_help_names_the_default_the_grader_uses(capsys):
    try:
        main(["--help"])
    except SystemExit:
        pass
    said = " ".join(capsys.readouterr().out.split())
    m = re.search(r"else (\d+) per core", said)
    assert m, said
    assert int(m.group(1)) * os.cpu_count() == default_workers()
