"""The `aha eval --samples` cache is keyed by the weights' content: samples of a model
retrained (or otherwise changed) in the same folder are refused, never silently reused."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from aha.cli import main
from aha.eval.sampling import CacheMismatch, SampleCache
from aha.models import ModelNotFound
from aha.models.loading import weights_id


@pytest.fixture
def setup(scored_run):
    return scored_run(4, report=False)


def perturb(checkpoint):
    """What retraining into the same run folder does to step-2: other weights, same path."""
    weights = load_file(str(checkpoint / "model.safetensors"))
    name = next(iter(weights))
    weights[name] = weights[name] + 0.01
    save_file(weights, str(checkpoint / "model.safetensors"), metadata={"format": "pt"})


def test_changed_weights_refuse_the_cache_and_unchanged_ones_reuse_it(setup, tmp_path, capsys):
    config, checkpoint = setup
    out = tmp_path / "out"
    args = ["eval", str(config), "--samples", "2", "--model", str(checkpoint), "--out", str(out), "--json"]
    assert main(args) == 0
    [folder] = (out / "samples").iterdir()
    drawn = (folder / "samples.jsonl").read_text()
    original_id = json.loads((folder / "meta.json").read_text())["weights"]
    assert original_id == weights_id(str(checkpoint))
    # unchanged weights: reused, nothing drawn
    assert main(args) == 0
    assert (folder / "samples.jsonl").read_text() == drawn

    saved = tmp_path / "saved.safetensors"
    shutil.copy(checkpoint / "model.safetensors", saved)
    perturb(checkpoint)
    new_id = weights_id(str(checkpoint))
    assert new_id != original_id
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert str(folder) in err and original_id in err and new_id in err
    assert "--out" in err and f"delete {folder}" in err
    assert (folder / "samples.jsonl").read_text() == drawn  # nothing appended to the old samples

    # the weights back as they were: the cache is theirs again
    shutil.copy(saved, checkpoint / "model.safetensors")
    assert main(args) == 0
    assert (folder / "samples.jsonl").read_text() == drawn


def test_a_cache_from_before_weight_ids_is_refused(tmp_path):
    SampleCache(tmp_path, {"model": "m"})  # meta.json as an older aha wrote it
    with pytest.raises(CacheMismatch, match=r"before aha recorded the weights' id.*another --out or delete"):
        SampleCache(tmp_path, {"model": "m", "weights": "sha256 0123"})


def test_weights_id_is_the_model_weights_content(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        save_file({"w": torch.arange(6.0)}, str(folder / "model.safetensors"))
    assert weights_id(str(a)) == weights_id(str(b))  # content, not path
    save_file({"w": torch.ones(3)}, str(b / "reference.safetensors"))  # a checkpoint's other modules
    assert weights_id(str(a)) == weights_id(str(b))
    save_file({"w": torch.arange(6.0) * 2}, str(b / "model.safetensors"))
    assert weights_id(str(a)) != weights_id(str(b))
    assert weights_id("tiny", 0) != weights_id("tiny", 1)
    with pytest.raises(ModelNotFound, match="no model weights"):
        weights_id(str(tmp_path))
