"""LoRA adapters on the policy (peft) and `aha export`: a LoRA run trains only its adapters,
checkpoints them in peft's format, resumes exactly, evaluates and exports with the adapter
folded in; an exported folder loads in plain transformers with the same logits."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from aha.cli import main
from aha.config import load_config
from aha.models import ModelNotFound, load
from aha.models.adapters import add_lora, has_lora, merge_lora, merged_state_dict, trainable_parameters
from aha.training.loop import train
from tests.test_checkpoint_model import config_for
from tests.test_training import assert_resumes_exactly

pytest.importorskip("peft")

LORA = ("lora.rank=4", "lora.alpha=8", "train.lr=5e-2")


def lora_config(tmp_path, name, *overrides):
    return load_config(config_for(tmp_path, name, "tiny"), [*LORA, *overrides])


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("lora")
    train(lora_config(tmp_path, "run"), echo=lambda *_: None)
    return tmp_path / "run"


def prompt_ids(tokenizer):
    return torch.tensor([tokenizer.encode("What is 7 * 8? The answer is")])


def test_adapters_train_alone_and_fold_into_the_weights_exactly():
    torch.manual_seed(0)
    model = load("tiny").model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    add_lora(model, rank=4, alpha=8)
    trainable = trainable_parameters(model)
    assert trainable and all("lora_" in name for name, p in model.named_parameters() if p.requires_grad)
    assert sum(p.numel() for p in trainable) < 0.3 * sum(p.numel() for p in model.parameters())
    for p in trainable:  # B starts at zero: move it so the adapters change the function
        torch.nn.init.normal_(p, std=0.05)
    ids = prompt_ids(load("tiny").tokenizer)
    with torch.no_grad():
        adapted = model(ids).logits
        base = load("tiny").model(ids).logits
        assert not torch.allclose(adapted, base, atol=1e-3)
        merged = merged_state_dict(model)
        assert set(merged) == set(before)  # the plain model's names
        plain = load("tiny").model
        plain.load_state_dict(merged)
        assert torch.allclose(plain(ids).logits, adapted, atol=1e-5)
        merge_lora(model)
        assert not has_lora(model) and torch.allclose(model(ids).logits, adapted, atol=1e-5)


def test_a_lora_run_checkpoints_its_adapter_in_peft_format(lora_run):
    folder = lora_run / "checkpoints/step-2"
    names = {p.name for p in folder.iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "tokenizer_config.json", "trainer.pt"} <= names
    assert "model.safetensors" not in names  # the base is the config's model, unchanged
    config = json.loads((folder / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["base_model_name_or_path"]) == (4, 8, "tiny")
    weights = load_file(str(folder / "adapter_model.safetensors"))
    assert weights and all("lora_A" in k or "lora_B" in k for k in weights)
    # training moved the adapters: B left zero
    assert any(float(v.abs().max()) > 0 for k, v in weights.items() if "lora_B" in k)
    # peft itself reads the checkpoint as an adapter of the base model
    from peft import PeftModel

    peft_model = PeftModel.from_pretrained(load("tiny").model, str(folder))
    ours = load(str(folder)).model  # aha: the base with the adapter folded in
    ids = prompt_ids(load("tiny").tokenizer)
    with torch.no_grad():
        assert torch.allclose(peft_model(ids).logits, ours(ids).logits, atol=1e-5)
        assert not torch.allclose(ours(ids).logits, load("tiny").model(ids).logits, atol=1e-4)


def test_a_lora_run_resumes_exactly(tmp_path):
    assert_resumes_exactly(tmp_path, lora_config, weights=("adapter_model",))


def test_export_writes_a_folder_plain_transformers_loads_with_the_same_logits(lora_run, tmp_path):
    out = tmp_path / "exported"
    assert main(["export", str(lora_run), str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
            "chat_template.jinja"} <= names
    assert not any(n.startswith("adapter") or n in ("trainer.pt", "state.json") for n in names)
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert not has_lora(model)
    ours = load(str(lora_run / "checkpoints/step-2"))
    ids = prompt_ids(tokenizer)
    assert ids.tolist() == prompt_ids(ours.tokenizer).tolist()
    messages = [{"role": "user", "content": "hi"}]
    theirs = tokenizer.apply_chat_template(messages, tokenize=False)
    assert theirs == ours.tokenizer.apply_chat_template(messages, tokenize=False)
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, ours.model(ids).logits, atol=1e-5)
    # bf16 weights on request; an existing folder is kept unless --overwrite
    assert main(["export", str(lora_run), str(out), "--dtype", "bfloat16"]) == 2
    assert main(["export", str(lora_run), str(out), "--dtype", "bfloat16", "--overwrite"]) == 0
    assert load_file(str(out / "model.safetensors"))["model.embed_tokens.weight"].dtype == torch.bfloat16


def test_export_of_a_full_fine_tuning_checkpoint(tmp_path):
    train(load_config(config_for(tmp_path, "full", "tiny")), echo=lambda *_: None)
    out = tmp_path / "full_export"
    assert main(["export", str(tmp_path / "full"), str(out), "--checkpoint", "2"]) == 0
    exported = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    saved = load_file(str(tmp_path / "full/checkpoints/step-2/model.safetensors"))
    state = exported.state_dict()
    assert all(torch.equal(state[k], v) for k, v in saved.items())


def test_export_errors_name_what_is_wrong(lora_run, tmp_path, capsys):
    assert main(["export", str(lora_run), str(tmp_path / "x"), "--checkpoint", "step-9"]) == 2
    assert "step-9 does not exist (checkpoints of" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "nowhere"), str(tmp_path / "y")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_an_adapter_whose_base_is_missing_is_refused_by_name(lora_run, tmp_path):
    import shutil

    folder = tmp_path / "moved"
    shutil.copytree(lora_run / "checkpoints/step-2", folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "gone")
    (folder / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(ModelNotFound, match="LoRA adapter whose base model .*gone.* cannot be loaded"):
        load(str(folder))


def test_adapters_on_a_tied_lm_head_are_refused():
    model = load("tiny").model
    assert model.config.tie_word_embeddings
    with pytest.raises(ValueError, match="ties its LM head to its embeddings"):
        add_lora(model, rank=4, target_modules=["q_proj", "lm_head"])


@pytest.mark.parametrize("where", ["run", "parent", "checkpoint"])
def test_export_never_replaces_the_run_it_reads(lora_run, capsys, where):
    out = {"run": lora_run, "parent": lora_run.parent, "checkpoint": lora_run / "checkpoints/step-2"}[where]
    assert main(["export", str(lora_run), str(out), "--overwrite"]) == 2
    assert "holds the run or checkpoint being exported" in capsys.readouterr().err
    assert (lora_run / "checkpoints/step-2/adapter_model.safetensors").is_file()


def test_a_reward_model_trains_lora_adapters_and_scores_as_a_reward(tmp_path):
    from test_reward_model import PAIRS, rm_config

    from aha.config import RewardSpec
    from aha.models.reward_model import RewardModel
    from aha.rewards import build_reward

    train(rm_config(tmp_path, "run", "train.steps=20", "lora.rank=4", "train.lr=2e-2", "eval.after=true"),
          echo=lambda *_: None)
    records = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    losses = [r["rm/loss"] for r in records if "rm/loss" in r]
    assert losses[-1] < 0.7 * losses[0]  # the adapters and the head learned the preference
    folder = tmp_path / "run/checkpoints/step-20"
    assert (folder / "adapter_model.safetensors").is_file() and (folder / "reward_head.safetensors").is_file()
    assert not (folder / "model.safetensors").exists()
    # as a reward: the base with the adapter folded in, and the trained head
    reward = build_reward([RewardSpec(model=str(tmp_path / "run"))], dtype="float32")
    rows = PAIRS[:2]
    samples = [{"prompt": r["prompt"]} for r in rows]
    got = reward.score([r["chosen"] for r in rows], samples).total
    lm = load(str(folder))
    head = torch.nn.Linear(lm.model.config.hidden_size, 1)
    from aha.models.checkpoints import load_weights

    load_weights(head, folder, "reward_head")
    direct = RewardModel(lm.model, head, lm.tokenizer.pad_token_id).eval()
    from aha.tasks import Task, encode_prompts

    prompts = encode_prompts(lm.tokenizer, Task("t", [], []), samples)
    stop = lm.tokenizer.eos_token_id
    ids = [p + lm.tokenizer(r["chosen"], add_special_tokens=False)["input_ids"] + [stop] for p, r in zip(prompts, rows)]
    with torch.no_grad():
        expected = torch.cat([direct([i], torch.float32)[:, 0] for i in ids])
        unadapted = RewardModel(load("tiny").model, head, lm.tokenizer.pad_token_id).eval()
        without = torch.cat([unadapted([i], torch.float32)[:, 0] for i in ids])
    assert torch.allclose(got, expected, atol=1e-4)
    assert not torch.allclose(got, without, atol=1e-3)  # the body's adapters are in the score


@pytest.mark.parametrize("recipe", ["prm_arithmetic", "sft_arithmetic", "dpo_arithmetic"])
def test_every_method_trains_with_lora(tmp_path, recipe):
    from test_recipes import CONFIGS, SHORT

    config = load_config(CONFIGS / f"{recipe}.yaml", SHORT + [f"output_dir={tmp_path / recipe}", "lora.rank=4",
                                                            "train.checkpoint_every=2"])
    train(config, echo=lambda *_: None)
    folder = tmp_path / recipe / "checkpoints/step-2"
    weights = load_file(str(folder / "adapter_model.safetensors"))
    assert weights and not (folder / "model.safetensors").exists()
    # the optimizer held the adapters only (and a reward model's head)
    state = torch.load(folder / "trainer.pt", weights_only=False)["optimizers"]
    (groups,) = [o["param_groups"] for o in state.values()]
    held = sum(len(g["params"]) for g in groups)
    assert held == len(weights) + (2 if recipe == "prm_arithmetic" else 0)  # + the head's weight and bias


def test_kto_trains_lora_adapters(tmp_path):
    from test_kto import kto_config

    train(kto_config(tmp_path, "kto", "lora.rank=4", "train.steps=2", "train.checkpoint_every=2"), echo=lambda *_: None)
    folder = tmp_path / "kto/checkpoints/step-2"
    weights = load_file(str(folder / "adapter_model.safetensors"))
    (groups,) = [o["param_groups"] for o in torch.load(folder / "trainer.pt",
                                                       weights_only=False)["optimizers"].values()]
    assert sum(len(g["params"]) for g in groups) == len(weights)
