"""The book build's execution cache is cleared when what chapters run changes."""
from grader.build import code_fingerprint


def _tree(root):
    (root / "grader").mkdir()
    (root / "grader" / "lab.py").write_text("x = 1\n")
    (root / "chapters" / "scripts").mkdir(parents=True)
    (root / "chapters" / "scripts" / "ddp_torch.py").write_text("print('train')\n")
    (root / "constraints.txt").write_text("torch==2.13.0\n")


def test_a_change_to_a_script_a_chapter_launches_changes_the_fingerprint(tmp_path):
    _tree(tmp_path)
    before = code_fingerprint(tmp_path)
    assert code_fingerprint(tmp_path) == before                      # stable
    (tmp_path / "chapters" / "scripts" / "ddp_torch.py").write_text("print('other')\n")
    assert code_fingerprint(tmp_path) != before


def test_a_change_to_the_grader_package_changes_the_fingerprint(tmp_path):
    _tree(tmp_path)
    before = code_fingerprint(tmp_path)
    (tmp_path / "grader" / "lab.py").write_text("x = 2\n")
    assert code_fingerprint(tmp_path) != before
