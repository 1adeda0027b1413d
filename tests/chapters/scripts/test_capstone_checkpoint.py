"""The capstone's checkpoints in one process (no launch: torch.distributed.checkpoint
saves and loads without a process group): a resumed run continues the uninterrupted
one bit for bit, and each part of the saved state is needed for that (the control:
drop one, and the losses leave the uninterrupted run's); a save interrupted before
its commit is never loaded; a checkpoint that does not fit the model stops the load
with what does not fit, before anything is read, and leaves the files as they were.
The launched runs (resharding, an elastic restart) are in test_capstone_torch.py."""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from ._run import SCRIPTS

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def ct():
    sys.path.insert(0, str(SCRIPTS))
    try:
        import capstone_torch
    finally:
        sys.path.remove(str(SCRIPTS))
    return capstone_torch


class Run:
    """The capstone's model, optimizer, schedule and data, trained in this process."""

    def __init__(self, ct, model=None) -> None:
        self.ct = ct
        self.model = model or ct.Model()
        self.opt, self.sched = ct.optimizer(self.model.parameters())
        self.data = ct.Batches()

    def steps(self, n: int) -> list[float]:
        out = []
        for _ in range(n):
            x, y = self.data.next()
            loss = self.ct.loss_fn(self.model(x), y)
            loss.backward()
            self.opt.step()
            self.opt.zero_grad()
            self.sched.step()
            out.append(loss.item())
        return out

    def save(self, folder: Path) -> None:
        self.ct.Saver(folder).save(self.state(), self.data.position)

    def state(self) -> dict:
        return self.ct.state_of(self.model, self.opt, self.sched, self.data, "1x1x1x1")

    def load(self, path: Path) -> dict:
        return self.ct.load(path, self.model, self.opt, self.sched, self.data, "1x1x1x1")


def digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def uninterrupted(ct) -> list[float]:
    return Run(ct).steps(ct.STEPS)


def test_a_resumed_run_continues_the_uninterrupted_one_bit_for_bit(ct, uninterrupted,
                                                                  tmp_path):
    first = Run(ct)
    assert first.steps(4) == uninterrupted[:4]
    first.save(tmp_path)
    (path,) = ct.complete(tmp_path)
    assert path.name == "step-000004"
    second = Run(ct)
    loaded = second.load(path)
    assert loaded["step"] == 4 and second.data.position == 4
    assert second.sched.get_last_lr() == first.sched.get_last_lr()
    assert second.steps(ct.STEPS - 4) == uninterrupted[4:]


@pytest.mark.slow                  # three more trainings, a few seconds each
@pytest.mark.parametrize("part", ["momentum", "schedule", "data position"])
def test_each_part_of_the_state_is_needed_to_continue(ct, uninterrupted, tmp_path, part):
    """The control: the same resume with one part of the state left as a fresh run has
    it leaves the uninterrupted losses, so the test above can fail."""
    first = Run(ct)
    first.steps(4)
    first.save(tmp_path)
    second = Run(ct)
    second.load(ct.complete(tmp_path)[-1])
    if part == "momentum":
        second.opt.state.clear()
    elif part == "schedule":
        second.sched.load_state_dict(Run(ct).sched.state_dict())
    else:
        second.data.load_state_dict(ct.Batches().state_dict())
    resumed = second.steps(ct.STEPS - 4)
    worst = max(abs(a - b) / b for a, b in zip(resumed, uninterrupted[4:]))
    assert worst > 1e-4, part


def test_an_interrupted_save_is_never_loaded(ct, tmp_path, monkeypatch):
    """A save whose files are all written (its metadata too) but which died before its
    commit (the rename) is passed over, as is a step folder without its metadata: the
    run resumes from the last committed checkpoint."""
    run = Run(ct)
    run.steps(2)
    run.save(tmp_path)                                   # step 2, committed
    run.steps(2)

    rename = ct.os.rename

    def dies(src, dst):            # the commit's rename, not the metadata's own
        if Path(dst).name.startswith("step-"):
            raise KeyboardInterrupt("the process dies before the commit")
        return rename(src, dst)

    monkeypatch.setattr(ct.os, "rename", dies)
    with pytest.raises(KeyboardInterrupt):
        run.save(tmp_path)                               # step 4, never committed
    monkeypatch.undo()
    assert (tmp_path / "tmp-step-000004" / ".metadata").is_file()
    (tmp_path / "step-000006").mkdir()                   # a folder without metadata
    (tmp_path / "step-000006" / "__0_0.distcp").write_bytes(b"partial")
    assert [p.name for p in ct.complete(tmp_path)] == ["step-000002"]
    fresh = Run(ct)
    assert fresh.load(ct.complete(tmp_path)[-1])["step"] == 2


def test_a_checkpoint_that_does_not_fit_names_what_and_leaves_the_files(ct, tmp_path):
    """A checkpoint of a model whose head has one output more and which lacks a block,
    loaded into the capstone's model: stopped before anything is read, with each
    difference named; the model keeps its weights and the files are unchanged."""
    other = ct.Model()
    other.head = torch.nn.Linear(ct.WIDTH, ct.VOCAB + 1)
    del other.blocks["1"]
    Run(ct, other).save(tmp_path / "a")
    before = digests(tmp_path / "a")
    run = Run(ct)
    weights = {k: v.clone() for k, v in run.model.state_dict().items()}
    with pytest.raises(ct.CheckpointMismatch) as e:
        run.load(ct.complete(tmp_path / "a")[-1])
    words = str(e.value)
    assert "does not fit this model" in words and "step-000000" in words
    assert f"model.head.weight is [{ct.VOCAB + 1}, {ct.WIDTH}] in the checkpoint, " \
        f"[{ct.VOCAB}, {ct.WIDTH}] in the model" in words
    assert "missing model.blocks.1." in words
    assert digests(tmp_path / "a") == before
    assert all(torch.equal(v, run.model.state_dict()[k]) for k, v in weights.items())
    assert run.data.position == 0


def test_a_checkpoint_with_more_than_the_model_names_what_is_left_over(ct, tmp_path):
    bigger = ct.Model()
    bigger.blocks["2"] = ct.Block()
    Run(ct, bigger).save(tmp_path)
    before = digests(tmp_path)
    with pytest.raises(ct.CheckpointMismatch, match=r"model\.blocks\.2\.\S+ is not in "
                       r"the model"):
        Run(ct).load(ct.complete(tmp_path)[-1])
    assert digests(tmp_path) == before
