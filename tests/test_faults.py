"""Runs that survive what disks do: a checkpoint damaged on disk is detected and the one
before it used; a full disk or a read-only run folder stops the run with a clear error and
no half-written file, and the run resumes once space is back."""

import errno
import json
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_training import metrics, tiny_config

from aha.cli import main
from aha.models.checkpoints import verify_checkpoint
from aha.training import checkpoint as checkpoint_module
from aha.training.checkpoint import CheckpointError
from aha.training.loop import train

QUIET = dict(echo=lambda *_: None)


def weights(folder: Path) -> dict:
    return load_file(folder / "model.safetensors")


def steps_logged(run: Path) -> list[int]:
    return [r["step"] for r in metrics(run) if "reward/mean" in r]


@pytest.mark.parametrize("damage", ["bit flip", "cut short", "file missing"])
def test_a_damaged_checkpoint_is_named_and_the_one_before_it_used(tmp_path, damage):
    straight = Path(train(tiny_config(tmp_path, "straight", "train.steps=6"), **QUIET).run_dir)
    train(tiny_config(tmp_path, "run"), **QUIET)  # 4 steps, checkpoints at 2 and 4
    newest = tmp_path / "run/checkpoints/step-4"
    assert verify_checkpoint(newest) is None and (newest / "manifest.json").is_file()
    target = newest / "model.safetensors"
    data = bytearray(target.read_bytes())
    if damage == "bit flip":
        data[len(data) // 2] ^= 0x10
        target.write_bytes(bytes(data))
        expected = "model.safetensors changed since it was written (its sha256 differs)"
    elif damage == "cut short":
        target.write_bytes(bytes(data[: len(data) // 2]))
        expected = f"model.safetensors has {len(data) // 2} bytes, {len(data)} when written"
    else:
        (newest / "trainer.pt").unlink()
        expected = "trainer.pt is missing"
    assert verify_checkpoint(newest) == expected
    said = []
    train(tiny_config(tmp_path, "run", "train.steps=6"), echo=said.append)
    assert any(f"step-4 is damaged ({expected})" in line and "resuming from" in line and "step-2" in line
               for line in said), said
    assert (tmp_path / "run/checkpoints/damaged-step-4").is_dir()  # kept for a look, out of the way
    assert expected in (tmp_path / "run/log.txt").read_text()
    # resumed from step 2: the same run as one never interrupted
    assert steps_logged(tmp_path / "run") == [1, 2, 3, 4, 5, 6]
    a, b = weights(straight / "checkpoints/step-6"), weights(tmp_path / "run/checkpoints/step-6")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_damaged_checkpoint_is_refused_wherever_it_is_loaded(tmp_path, capsys):
    """Evaluated (--checkpoint, --model), exported or named as `model:`, a checkpoint whose
    weights changed on disk since it was written is an error naming the damage, never a model
    with silently wrong weights."""
    run = tmp_path / "run"
    train(tiny_config(tmp_path, "run", "train.steps=2"), **QUIET)
    folder = run / "checkpoints/step-2"
    config = str(run / "config.yaml")
    (folder / "trainer.pt").unlink()  # what evaluation does not load may go (a critic, the optimizer state)
    assert main(["eval", config, "--checkpoint", str(folder)]) == 0
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-3] ^= 0x10  # inside the last tensor's values: safetensors itself loads it without a word
    (folder / "model.safetensors").write_bytes(bytes(data))
    damage = (f"checkpoint {folder} is damaged: model.safetensors changed since it was written (its sha256 differs) "
              f"(if you replaced model.safetensors on purpose, delete {folder / 'manifest.json'})")
    for argv in (["eval", config, "--checkpoint", str(folder)], ["eval", config, "--model", str(folder)],
                 ["export", str(run), str(tmp_path / "exported")], ["eval", config, f"model={folder}"]):
        assert main(argv) == 2, argv
        assert damage in capsys.readouterr().err, argv
    assert not (tmp_path / "exported").exists()


def test_no_whole_checkpoint_stops_the_run_and_moves_nothing(tmp_path, capsys):
    train(tiny_config(tmp_path, "run", "train.steps=2"), **QUIET)
    only = tmp_path / "run/checkpoints/step-2"
    (only / "state.json").write_text("{}")  # changed since written
    assert main(["train", str(tmp_path / "run.yaml")]) == 2
    err = capsys.readouterr().err
    assert "no whole checkpoint in" in err and "step-2: state.json has 2 bytes" in err and "new output_dir" in err
    assert only.is_dir()


def test_a_checkpoint_the_disk_refuses_leaves_the_previous_one_and_no_partial_folder(tmp_path, monkeypatch):
    train(tiny_config(tmp_path, "run", "train.steps=2"), **QUIET)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_module.torch, "save", full)
    message = (r"could not write checkpoint .*step-4: OSError: .*No space left on device .*MiB free\)\. "
               r"The newest whole checkpoint, .*step-2, is intact")
    with pytest.raises(CheckpointError, match=message):
        train(tiny_config(tmp_path, "run", "train.steps=4"), **QUIET)
    monkeypatch.undo()
    folders = sorted(p.name for p in (tmp_path / "run/checkpoints").iterdir())
    assert folders == ["step-2", "step-4"] or folders == ["step-2"]  # step-4 only if written whole
    assert "step-4" not in folders
    train(tiny_config(tmp_path, "run", "train.steps=4"), **QUIET)  # space is back: it goes on
    assert steps_logged(tmp_path / "run") == [1, 2, 3, 4]


def test_a_checkpoint_is_on_disk_before_its_rename_and_the_rename_before_pruning(tmp_path, monkeypatch):
    """After a power cut a renamed checkpoint must hold its files (not empty ones the page
    cache never wrote), and an older one is deleted only once the rename is on disk."""
    import os

    events = []
    real_fsync, real_replace, real_rmtree = os.fsync, os.replace, checkpoint_module.shutil.rmtree

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(checkpoint_module.os, "fsync", fsync)
    monkeypatch.setattr(checkpoint_module.os, "replace", lambda a, b: (events.append(("rename", str(a))),
                                                                       real_replace(a, b)))
    monkeypatch.setattr(checkpoint_module.shutil, "rmtree", lambda p, **kw: (events.append(("prune", str(p))),
                                                                             real_rmtree(p, **kw)))
    train(tiny_config(tmp_path, "run", "train.steps=4", "train.checkpoint_every=2", "train.keep_checkpoints=1"),
          **QUIET)
    root = str(tmp_path / "run/checkpoints")
    rename = events.index(("rename", f"{root}/.step-4.tmp"))
    synced = {path for kind, path in events[:rename] if kind == "fsync"}
    files = {f"{root}/.step-4.tmp/{p.relative_to(tmp_path / 'run/checkpoints/step-4')}"
             for p in (tmp_path / "run/checkpoints/step-4").rglob("*")}
    assert files and files | {f"{root}/.step-4.tmp"} <= synced
    prune = events.index(("prune", f"{root}/step-2"))
    assert rename < events.index(("fsync", root), rename) < prune


def test_the_best_evaluated_checkpoint_is_chosen_from_the_held_out_records():
    from aha.training.checkpoint import best_evaluated_step

    records = [{"step": 0, "eval/accuracy": 0.9}, {"step": 2, "eval/accuracy": 0.5}, {"step": 2, "reward/mean": 1.0},
               {"step": 3, "eval/accuracy": 0.75}, {"step": 4, "eval/accuracy": 0.25},
               {"step": 6, "eval/accuracy": 0.5}]
    assert best_evaluated_step(records, {2, 4}) == 2  # step 0 and 3 have no checkpoint
    assert best_evaluated_step(records, {2, 4, 6}) == 6  # a tie keeps the later one
    assert best_evaluated_step(records, {4}) == 4
    assert best_evaluated_step(records, {5, 8}) is None
    assert best_evaluated_step([{"step": 2, "reward/mean": 1.0}], {2}) is None


def _scripted_accuracy(monkeypatch, accuracies: list[float]) -> None:
    """Held-out evaluations score as scripted, in the order the run makes them."""
    import dataclasses

    from aha.eval import evaluate as real
    from aha.training import run

    script = list(accuracies)
    monkeypatch.setattr(run, "evaluate", lambda *a, **k: dataclasses.replace(real(*a, **k), accuracy=script.pop(0)))


@pytest.mark.parametrize("keep_best, resumed", [(False, False), (True, False), (True, True)])
def test_keep_best_keeps_the_best_evaluated_checkpoint_beside_the_newest(tmp_path, monkeypatch, keep_best, resumed):
    """Evaluated at steps 0 (no checkpoint), 2 (the best), 4 and 6 (after training), with one
    checkpoint kept: keep_best keeps step 2 besides step 6, also when the run stopped at step 4
    and resumed (the choice is made from metrics.jsonl)."""
    settings = ["train.checkpoint_every=2", "train.keep_checkpoints=1", "eval.every=2",
                f"train.keep_best={str(keep_best).lower()}"]
    if resumed:
        _scripted_accuracy(monkeypatch, [0.75, 0.9, 0.2])  # before, step 2, after training (step 4)
        train(tiny_config(tmp_path, "run", "train.steps=4", *settings), **QUIET)
        assert sorted(p.name for p in (tmp_path / "run/checkpoints").iterdir()) == ["step-2", "step-4"]
    _scripted_accuracy(monkeypatch, [0.3] if resumed else [0.75, 0.9, 0.2, 0.3])
    train(tiny_config(tmp_path, "run", "train.steps=6", *settings), **QUIET)
    assert [(r["step"], r["eval/accuracy"]) for r in metrics(tmp_path / "run") if "eval/accuracy" in r] == [
        (0, 0.75), (2, 0.9), (4, 0.2), (6, 0.3)]
    kept = sorted(p.name for p in (tmp_path / "run/checkpoints").iterdir())
    assert kept == (["step-2", "step-6"] if keep_best else ["step-6"])


def test_keep_best_may_be_turned_on_when_resuming_and_is_refused_where_nothing_is_evaluated(tmp_path):
    from aha.config import ConfigError, load_config

    train(tiny_config(tmp_path, "run", "train.steps=2"), **QUIET)
    train(tiny_config(tmp_path, "run", "train.steps=3", "train.keep_best=true"), **QUIET)  # bookkeeping: allowed
    assert steps_logged(tmp_path / "run") == [1, 2, 3]
    root = Path(__file__).parent.parent / "configs"
    for method in ("rm", "prm"):
        with pytest.raises(ConfigError, match=rf"train.keep_best ranks checkpoints by held-out accuracy of sampled "
                                              rf"answers, which method={method} does not measure"):
            load_config(root / f"{method}_arithmetic.yaml", ["train.keep_best=true"])


def test_a_folder_the_filesystem_cannot_flush_still_checkpoints(tmp_path, monkeypatch):
    """Some network and FUSE mounts refuse fsync on a folder (EINVAL): a folder's flush is best
    effort there; a file's flush failing is a checkpoint error."""
    import os

    real_fsync = os.fsync

    def fsync(fd, refuse_files=False):
        is_dir = os.path.isdir(os.readlink(f"/proc/self/fd/{fd}"))
        if is_dir or refuse_files:
            raise OSError(errno.EINVAL, "Invalid argument")
        real_fsync(fd)

    monkeypatch.setattr(checkpoint_module.os, "fsync", fsync)
    train(tiny_config(tmp_path, "run", "train.steps=2"), **QUIET)
    assert verify_checkpoint(tmp_path / "run/checkpoints/step-2") is None
    monkeypatch.setattr(checkpoint_module.os, "fsync", lambda fd: fsync(fd, refuse_files=True))
    with pytest.raises(CheckpointError, match=r"could not write checkpoint .*step-4: OSError: .*Invalid argument"):
        train(tiny_config(tmp_path, "run", "train.steps=4"), **QUIET)
    assert sorted(p.name for p in (tmp_path / "run/checkpoints").iterdir()) == ["step-2"]


def _tmpfs(tmp_path, size: str):
    """A tmpfs of `size` (root only; the test is skipped elsewhere), unmounted afterwards."""
    mount = tmp_path / f"disk-{size}"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.fixture
def small_disk(tmp_path):
    yield from _tmpfs(tmp_path, "8m")


@pytest.fixture
def tiny_disk(tmp_path):
    yield from _tmpfs(tmp_path, "64k")


def test_weights_the_disk_cannot_hold_are_a_checkpoint_error_and_leave_nothing(tiny_disk):
    """safetensors reports a full disk as its own error (not an OSError): still a clear error."""
    from aha.models.tiny import tiny_model
    from aha.training.checkpoint import save_checkpoint

    model = tiny_model(100)
    with pytest.raises(CheckpointError, match=r"could not write checkpoint .*step-1: .*No space left on device.*No "
                                              r"checkpoint was written: free some space"):
        save_checkpoint(tiny_disk / "checkpoints", 1, {"model": model}, {}, {}, keep=2)
    assert list((tiny_disk / "checkpoints").iterdir()) == []


def test_a_full_disk_through_the_cli_stops_clearly_and_resumes_once_space_is_back(tmp_path, small_disk, capsys):
    filler = small_disk / "filler"
    config = tmp_path / "run.yaml"
    tiny_config(tmp_path, "run")  # writes run.yaml
    text = config.read_text().replace(str(tmp_path / "run"), str(small_disk / "run"))
    config.write_text(text.replace("steps: 4", "steps: 6").replace("keep_checkpoints: 5", "keep_checkpoints: 2"))
    # leave room for the run's start but not for its checkpoints
    assert main(["train", str(config), "train.steps=1", "train.checkpoint_every=0", "eval.before=false",
                 "eval.after=false"]) == 0
    size = sum(p.stat().st_size for p in (small_disk / "run/checkpoints/step-1").iterdir())
    free = subprocess.run(["df", "-B1", "--output=avail", str(small_disk)], capture_output=True, text=True)
    filler.write_bytes(b"\0" * max(0, int(free.stdout.split()[-1]) - size // 2))
    capsys.readouterr()
    assert main(["train", str(config), "eval.before=false", "eval.after=false"]) == 2
    err = capsys.readouterr().err
    assert "aha: error: could not write" in err and "train.resume=true" in err and "Traceback" not in err
    run = small_disk / "run"
    for name in ("metrics.jsonl", "samples.jsonl"):  # every line whole
        for line in (run / name).read_text().splitlines():
            json.loads(line)
    assert not list((run / "checkpoints").glob(".*tmp"))
    filler.unlink()  # space is back
    assert main(["train", str(config), "eval.before=false", "eval.after=false"]) == 0
    assert steps_logged(run) == [1, 2, 3, 4, 5, 6]


def test_a_read_only_run_folder_is_a_clear_error(tmp_path, small_disk, capsys):
    config = tmp_path / "run.yaml"
    tiny_config(tmp_path, "run")
    config.write_text(config.read_text().replace(str(tmp_path / "run"), str(small_disk / "run")))
    assert main(["train", str(config), "train.steps=2", "eval.before=false", "eval.after=false"]) == 0
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    assert main(["train", str(config), "train.steps=4", "eval.before=false", "eval.after=false"]) == 2
    err = capsys.readouterr().err
    assert "aha: error:" in err and "Read-only file system" in err and "Traceback" not in err
    subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    assert main(["train", str(config), "train.steps=4", "eval.before=false", "eval.after=false"]) == 0
    assert steps_logged(small_disk / "run") == [1, 2, 3, 4]


def _model_folder(tmp_path) -> Path:
    from aha.models.tiny import tiny_model, tiny_tokenizer

    tokenizer = tiny_tokenizer()
    folder = tmp_path / "model"
    tiny_model(len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# damages that set one key of tokenizer_config.json: {damage: (key, value)}
TOKENIZER_SETTINGS = {
    "empty chat template": ("chat_template", "{% for message in messages %}{% endfor %}"),
    "broken chat template": ("chat_template", "{% for message in messages %}{{ message['content'] }"),
    "a text model_max_length": ("model_max_length", ""),  # loads, then fails at the first prompt
}


@pytest.mark.parametrize("damage, message", [
    ("drop a weight", r"its weights do not fit its config.json; missing: model.layers.0.mlp.up_proj.weight "
                      r"\(transformers would start them from random values\)"),
    ("reshape a weight", r"its weights do not fit its config.json; shaped otherwise: .*model.norm.weight"),
    ("no weights", r"the model cannot be loaded \(OSError"),
    ("bad config", r"the model cannot be loaded"),
    ("no tokenizer", r"its tokenizer cannot be loaded"),
    ("no config", r"has no config.json: not a Hugging Face model folder"),
    ("broken chat template", r"its tokenizer's chat template cannot write a conversation \(TemplateSyntaxError"),
    ("empty chat template", r"its tokenizer's chat template writes a conversation as no tokens"),
    ("a text model_max_length", r"tokenizer_config.json: model_max_length must be a number, not ''"),
    ("an infinite weight", r"its weights hold NaN or inf in 1 tensors \(first: model.norm.weight\)"),
])
def test_a_damaged_model_folder_is_an_error_naming_it(tmp_path, damage, message):
    """Never a model with random weights where the folder's are missing: transformers only warns."""
    from safetensors.torch import save_file

    from aha.models import load
    from aha.models.loading import ModelNotFound

    folder = _model_folder(tmp_path)
    weights = load_file(folder / "model.safetensors")
    if damage == "drop a weight":
        del weights["model.layers.0.mlp.up_proj.weight"]
        save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    elif damage == "reshape a weight":
        weights["model.norm.weight"] = torch.zeros(3)
        save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    elif damage == "no weights":
        (folder / "model.safetensors").unlink()
    elif damage == "bad config":
        (folder / "config.json").write_text('{"model_type": "llama", "hidden_size": "big"')
    elif damage == "an infinite weight":
        weights["model.norm.weight"][3] = float("inf")
        save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    elif damage in TOKENIZER_SETTINGS:
        key, value = TOKENIZER_SETTINGS[damage]
        settings = json.loads((folder / "tokenizer_config.json").read_text())
        settings[key] = value
        (folder / "tokenizer_config.json").write_text(json.dumps(settings))
        (folder / "chat_template.jinja").unlink(missing_ok=True)  # else the template file would win
    elif damage == "no tokenizer":
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (folder / name).unlink()
    else:
        (folder / "config.json").unlink()
    with pytest.raises(ModelNotFound, match=message):
        load(str(folder))
    assert load(str(_model_folder(tmp_path / "fresh"))).model is not None  # an undamaged folder loads
