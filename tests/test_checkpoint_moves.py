"""A checkpoint written before a module moved still loads: trainer.pt pickles a replay buffer's
batches by the module their class lived in (aha.training.batch before training/ was split)."""

import sys

import torch

from aha.rollout.rollouts import Rollouts
from aha.training import checkpoint
from aha.training.rl import batch as batch_module
from aha.training.rl.batch import Batch


def _rollouts() -> Rollouts:
    ids = torch.tensor([[5, 6]])
    return Rollouts(ids, torch.ones_like(ids), ids, torch.ones(1, 2), torch.zeros(1, 2),
                    torch.zeros(1, dtype=torch.long), ["x"], torch.zeros(1, dtype=torch.bool))


def test_a_batch_pickled_under_its_old_module_loads_as_today_s_class(tmp_path, monkeypatch):
    old = Batch(_rollouts(), torch.tensor([1.0]))
    monkeypatch.setitem(sys.modules, "aha.training.batch", batch_module)  # where the class lived then
    monkeypatch.setattr(Batch, "__module__", "aha.training.batch")
    torch.save({"optimizers": {}, "rng": checkpoint.rng_state(), "extra": {"replay": [old]}}, tmp_path / "trainer.pt")
    monkeypatch.undo()
    assert "aha.training.batch" not in sys.modules and b"aha.training.batch" in (tmp_path / "trainer.pt").read_bytes()
    (tmp_path / "state.json").write_text('{"step": 2}')

    state, extra = checkpoint.load_checkpoint(tmp_path, {}, {})
    loaded = extra["replay"][0]
    assert state == {"step": 2} and type(loaded) is Batch and loaded.rewards.tolist() == [1.0]


def test_every_moved_module_maps_to_one_that_exists():
    import importlib

    for new in checkpoint.MOVED_MODULES.values():
        importlib.import_module(new)
