"""Models named by their Hugging Face Hub id (`owner/name[@revision]`), resolved offline from a
cache laid out as the Hub client writes one: blobs named by their hash, each snapshot's files
relative symlinks to them, refs naming a commit. The policy (through the CLI), a revision, the
run's identity, a LoRA run's pinned base, a teacher, a judge and a reward model; an absent id
is one clear error naming the id and the cache."""

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from huggingface_hub import constants
from safetensors.torch import save_file

from aha.cli import main
from aha.config import Config, ConfigError, RewardSpec
from aha.config.algorithm import AlgorithmConfig
from aha.models import EMBEDDED, ModelNotFound, load
from aha.models.hub import parse
from aha.models.loading import cache_dir, lasting_name, weights_id

REPO = "aha-test/tiny"
C1, C2 = hashlib.sha1(b"first").hexdigest(), hashlib.sha1(b"second").hexdigest()
QUICK = ["train.steps=2", "rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=6",
         "task.num_eval=4", "eval.before=false", "eval.after=false", "train.checkpoint_every=0", "train.report=false",
         "algorithm.dynamic_sampling=false"]


def blob_name(file: Path) -> str:
    """As the Hub names a blob: an LFS file (weights) by its sha256, a git file by its git sha1."""
    data = file.read_bytes()
    if file.suffix == ".safetensors":
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def add_snapshot(cache: Path, repo: str, source: Path, commit: str, *refs: str) -> Path:
    """source's files as the snapshot `commit` of `repo` in the cache, with refs/<ref> naming it."""
    storage = cache / f"models--{repo.replace('/', '--')}"
    snapshot = storage / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (storage / "blobs").mkdir(exist_ok=True)
    for file in sorted(p for p in source.iterdir() if p.is_file()):
        blob = storage / "blobs" / blob_name(file)
        if not blob.exists():
            try:  # a big file is linked, not copied: the bytes are the same
                os.link(file, blob)
            except OSError:
                shutil.copyfile(file, blob)
        (snapshot / file.name).symlink_to(Path("../../blobs") / blob.name)
    for ref in refs:
        (storage / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (storage / "refs" / ref).write_text(commit)  # as the client writes it: no newline
    return snapshot


@pytest.fixture(scope="module")
def tiny_folders(tmp_path_factory) -> dict[int, Path]:
    """The tiny model of seeds 0 and 1, each saved as a Hugging Face folder."""
    folders = {}
    for seed in (0, 1):
        folders[seed] = tmp_path_factory.mktemp(f"tiny{seed}")
        loaded = load("tiny", seed=seed)
        loaded.model.save_pretrained(folders[seed])
        loaded.tokenizer.save_pretrained(folders[seed])
    return folders


@pytest.fixture
def cache(tmp_path, monkeypatch, tiny_folders) -> Path:
    """An offline Hub cache under tmp_path holding REPO: main -> C1 (seed 0), v2 -> C2 (seed 1)."""
    root = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(root))
    monkeypatch.setenv("HF_HUB_CACHE", str(root / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root / "hub"))  # read by huggingface_hub at import
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    add_snapshot(root / "hub", REPO, tiny_folders[0], C1, "main")
    add_snapshot(root / "hub", REPO, tiny_folders[1], C2, "v2")
    return root / "hub"


def same_weights(a, b) -> bool:
    theirs = dict(b.named_parameters())
    return all(torch.equal(p, theirs[name]) for name, p in a.named_parameters())


def test_hub_ids_are_told_from_names_and_folders():
    assert parse("HuggingFaceTB/SmolLM2-135M-Instruct") == ("HuggingFaceTB/SmolLM2-135M-Instruct", None)
    assert parse("owner/name@refs/pr/1") == ("owner/name", "refs/pr/1")
    for name in ["tiny", "gpt2", "./runs/x", "/abs/folder", "no/such/folder", "~/models", "a--b/c", "owner/name@"]:
        assert parse(name) is None, name


def test_a_hub_id_loads_offline_from_the_cache(cache):
    loaded = load(REPO)
    assert loaded.name == REPO
    assert same_weights(loaded.model, load("tiny", seed=0).model)
    assert loaded.tokenizer.get_vocab() == load("tiny").tokenizer.get_vocab()
    # the run's identity: the commit the id resolves to (an adapter's base, cached samples)
    assert lasting_name(REPO) == f"{REPO}@{C1}"
    assert weights_id(REPO) == weights_id(f"{REPO}@main") == f"{REPO}@{C1}"


def test_a_revision_picks_its_snapshot(cache):
    seed1 = load("tiny", seed=1).model
    for name in (f"{REPO}@v2", f"{REPO}@{C2}"):  # a branch, and a commit
        loaded = load(name)
        assert loaded.name == name and same_weights(loaded.model, seed1)
        assert weights_id(name) == f"{REPO}@{C2}" and lasting_name(name) == f"{REPO}@{C2}"
    assert same_weights(load(f"{REPO}@{C1}").model, load("tiny", seed=0).model)


def test_an_absent_id_is_one_clear_error(cache, tmp_path, capsys):
    with pytest.raises(ModelNotFound) as err:
        load("aha-test/absent")
    message = str(err.value)
    for part in ["'aha-test/absent'", "revision main", str(cache), "HF_HUB_OFFLINE=1", "hf download aha-test/absent",
                 "HF_HOME"]:
        assert part in message, part
    with pytest.raises(ModelNotFound, match=r"revision nope\) is not in the cache .*--revision nope"):
        load(f"{REPO}@nope")
    assert main(["eval", "configs/quickstart.yaml", "model=aha-test/absent", f"output_dir={tmp_path / 'r'}",
                 "eval.limit=2"]) == 2
    err_text = capsys.readouterr().err.strip()
    assert err_text.startswith("aha: error: model 'aha-test/absent'") and "\n" not in err_text
    assert str(cache) in err_text


def test_online_an_unreachable_hub_leaves_the_cache_to_answer(cache, monkeypatch):
    import httpx2
    from huggingface_hub import HfApi

    def unreachable(*args, **kwargs):
        raise httpx2.ConnectError("no route to the Hub")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(HfApi, "repo_info", unreachable)
    monkeypatch.setattr(HfApi, "list_repo_tree", unreachable)
    assert same_weights(load(f"{REPO}@v2").model, load("tiny", seed=1).model)
    with pytest.raises(ModelNotFound, match=rf"not in the cache {cache} \(the Hub cannot be reached: ConnectError\)"):
        load("aha-test/absent")


def test_a_run_trains_a_hub_model_through_the_cli(cache, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "configs/quickstart.yaml", f"model={REPO}", f"output_dir={run}", *QUICK]) == 0
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len([r for r in steps if "loss/total" in r]) == 2
    capsys.readouterr()
    # the same run folder with another revision of the model is refused: its weights are another model's
    assert main(["train", "configs/quickstart.yaml", f"model={REPO}@v2", f"output_dir={run}", *QUICK,
                 "train.steps=3"]) == 2
    assert f'model: "{REPO}" -> "{REPO}@v2"' in capsys.readouterr().err


def test_a_lora_run_pins_its_hub_base_to_a_commit(cache, tmp_path, capsys):
    run = tmp_path / "lora"
    args = ["train", "configs/quickstart.yaml", f"model={REPO}", f"output_dir={run}", *QUICK, "train.steps=1",
            "train.checkpoint_every=1", "lora.rank=2"]
    assert main(args) == 0
    step = run / "checkpoints" / "step-1"
    adapter = json.loads((step / "adapter_config.json").read_text())
    assert (adapter["base_model_name_or_path"], adapter["revision"]) == (REPO, C1)  # as peft records a revision
    assert load(str(step)).name == str(step)  # base at C1, adapter folded in
    # main moves on the Hub: the resume would train the adapters on other base weights
    (cache / f"models--{REPO.replace('/', '--')}" / "refs" / "main").write_text(C2)
    capsys.readouterr()
    assert main(args[:-3] + ["train.steps=2", "train.checkpoint_every=1", "lora.rank=2"]) == 2
    assert f"trained on the Hub model {REPO}@{C1}" in capsys.readouterr().err


def test_a_teacher_a_judge_and_a_reward_model_by_hub_id(cache, tmp_path, tiny_folders):
    from aha.rewards import build_reward
    from aha.rewards.judge import judge_model
    from aha.training.rl.teacher import load_teacher

    config = Config(model="tiny", algorithm=AlgorithmConfig(teacher=f"{REPO}@v2"))
    teacher = load_teacher(config)
    assert teacher.name == f"{REPO}@v2" and same_weights(teacher.model, load("tiny", seed=1).model)
    assert not any(p.requires_grad for p in teacher.model.parameters())
    with pytest.raises(ConfigError, match=rf"algorithm.teacher: model 'aha-test/none' .* cache {cache}"):
        load_teacher(Config(model="tiny", algorithm=AlgorithmConfig(teacher="aha-test/none")))
    assert judge_model(REPO).tokenizer.chat_template
    # a reward model checkpoint uploaded as a repository: the tiny body, a head that pays 2.5 to anything
    rm = tmp_path / "rm"
    shutil.copytree(tiny_folders[0], rm)
    about = {"method": "rm", "heads": 1, "score": "mean", "k": 1.0, "max_length": 64, "system_prompt": None,
             "few_shot": [], "base_model": "tiny"}
    (rm / "reward_model.json").write_text(json.dumps(about))
    save_file({"weight": torch.zeros(1, 64), "bias": torch.tensor([2.5])}, str(rm / "reward_head.safetensors"))
    add_snapshot(cache, "aha-test/rm", rm, C1, "main")
    shutil.rmtree(rm)  # the cache alone holds it
    result = build_reward([RewardSpec(model="aha-test/rm")]).score(["yes", "no"], [{"id": "a", "prompt": "Is it?"}] * 2)
    assert result.total.tolist() == pytest.approx([2.5, 2.5])


def test_the_embedded_model_by_its_hub_id(cache):
    """SmolLM2-135M-Instruct as the Hub serves it: the embedded model's safetensors folder."""
    folder = cache_dir() / EMBEDDED
    if not (folder / "model.safetensors").is_file():
        load(EMBEDDED)  # writes it once (about 15-40 s)
    add_snapshot(cache, "HuggingFaceTB/SmolLM2-135M-Instruct", folder, C1, "main")
    loaded = load("HuggingFaceTB/SmolLM2-135M-Instruct")
    assert type(loaded.model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in loaded.model.parameters()) == 134_515_008
    assert "<|im_start|>assistant" in loaded.tokenizer.apply_chat_template(
        [{"role": "user", "content": "2 + 2?"}], add_generation_prompt=True, tokenize=False)
