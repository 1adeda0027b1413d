"""The Paddle capstone's checkpoints in one process (dist.save_state_dict and
dist.load_state_dict need no launch there): a checkpoint that does not fit the model
stops the load with what does not fit, before anything is read, and leaves its files
as they were; a save that died before its commit is never loaded. The launched runs
are in test_capstone_paddle.py."""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from ._run import SCRIPTS

paddle = pytest.importorskip("paddle")


@pytest.fixture(scope="module")
def cp():
    sys.path.insert(0, str(SCRIPTS))
    try:
        import capstone_paddle
    finally:
        sys.path.remove(str(SCRIPTS))
    paddle.set_device("cpu")
    return capstone_paddle


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def saved(cp, model, folder: Path, step: int = 2) -> Path:
    _, sched = cp.optimizer(model.parameters())
    cp.save(model, sched, step, folder, "1x1x1x1")
    return cp.complete(folder)[-1]


def test_a_checkpoint_that_does_not_fit_names_what_and_leaves_the_files(cp, tmp_path):
    other = cp.Model()
    other.head = paddle.nn.Linear(cp.WIDTH, cp.VOCAB + 1)
    del other.blocks[1]
    path = saved(cp, other, tmp_path)
    before = digests(tmp_path)
    model = cp.Model()
    _, sched = cp.optimizer(model.parameters())
    weights = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    with pytest.raises(cp.CheckpointMismatch) as e:
        cp.load(path, model, sched, "1x1x1x1")
    words = str(e.value)
    assert "does not fit this model" in words and "step-000002" in words
    assert f"head.weight is [{cp.WIDTH}, {cp.VOCAB + 1}] in the checkpoint, " \
        f"[{cp.WIDTH}, {cp.VOCAB}] in the model" in words
    assert "missing blocks.1." in words
    assert digests(tmp_path) == before
    assert all((v == model.state_dict()[k].numpy()).all() for k, v in weights.items())


def test_a_save_that_died_before_its_commit_is_never_loaded(cp, tmp_path, monkeypatch):
    """Paddle writes a checkpoint's metadata before its data: a folder with metadata may
    be half written, and only the commit (the rename) makes a checkpoint complete."""
    model = cp.Model()
    saved(cp, model, tmp_path, step=2)
    rename = cp.os.rename

    def dies(src, dst):
        if Path(dst).name.startswith("step-"):
            raise KeyboardInterrupt("the process dies before the commit")
        return rename(src, dst)

    monkeypatch.setattr(cp.os, "rename", dies)
    with pytest.raises(KeyboardInterrupt):
        saved(cp, model, tmp_path, step=4)
    monkeypatch.undo()
    assert any((tmp_path / "tmp-step-000004").glob("*.metadata"))
    assert [p.name for p in cp.complete(tmp_path)] == ["step-000002"]
    fresh = cp.Model()
    _, sched = cp.optimizer(fresh.parameters())
    assert cp.load(cp.complete(tmp_path)[-1], fresh, sched, "1x1x1x1")["step"] == 2

