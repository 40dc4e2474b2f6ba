"""Every training checkpoint is a model folder: `model: runs/x/checkpoints/step-N` loads
it (weights, config, tokenizer, chat template) for a new run or for `aha eval`."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from aha.cli import main
from aha.config import load_config
from aha.models import ModelNotFound, load
from aha.models.tiny import CHAT_TEMPLATE, tiny_tokenizer
from aha.training.loop import train

TINY = """
model: {model}
output_dir: {out}
task: {{name: arithmetic, a_max: 20, num_eval: 6}}
rollout: {{prompts_per_step: 2, group_size: 4, max_new_tokens: 5}}
train: {{steps: 2, lr: 1.0e-2, checkpoint_every: 2, report: false}}
algorithm: {{dynamic_sampling: false}}
reward: [{{fn: '{scorer}:has_a'}}]
eval: {{before: false, after: false, limit: 4}}
"""


def config_for(tmp_path, name, model):
    path = tmp_path / f"{name}.yaml"
    scorer = tmp_path / "score.py"  # a reward the random tiny model sometimes meets, so training moves the weights
    scorer.write_text("def has_a(completion, sample):\n    return float('a' in completion.lower())\n")
    path.write_text(TINY.format(model=model, out=tmp_path / name, scorer=scorer))
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("ckpt")
    train(load_config(config_for(tmp_path, "base", "tiny")), echo=lambda *_: None)
    return tmp_path / "base/checkpoints/step-2"


def test_a_checkpoint_loads_as_a_model_with_its_weights_and_tokenizer(checkpoint):
    saved = load_file(str(checkpoint / "model.safetensors"))
    loaded = load(str(checkpoint))
    state = loaded.model.state_dict()
    for name, tensor in saved.items():
        assert torch.equal(state[name], tensor), name
    # the tied output layer is the trained embedding, not a fresh one
    assert torch.equal(loaded.model.lm_head.weight, loaded.model.model.embed_tokens.weight)
    assert not torch.equal(state["model.embed_tokens.weight"], load("tiny").model.model.embed_tokens.weight)
    # the tokenizer is the run's: same ids, special tokens, padding and chat template
    tiny = tiny_tokenizer()
    text = "What is 3 + 4? Answer: 7"
    assert loaded.tokenizer(text)["input_ids"] == tiny(text)["input_ids"]
    assert (loaded.tokenizer.eos_token, loaded.tokenizer.pad_token_id) == ("<|im_end|>", tiny.pad_token_id)
    assert loaded.tokenizer.chat_template == CHAT_TEMPLATE
    messages = [{"role": "user", "content": "hi"}]
    assert loaded.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) == \
        tiny.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert (checkpoint / "generation_config.json").is_file()


def test_a_checkpoint_is_the_model_of_a_new_run(checkpoint, tmp_path):
    path = config_for(tmp_path, "next", checkpoint)
    config = load_config(path, ["train.steps=1", "train.checkpoint_every=1", "train.lr=0"])
    train(config, echo=lambda *_: None)
    # lr 0: the new run's weights are the checkpoint's, and its own checkpoint loads too
    before = load_file(str(checkpoint / "model.safetensors"))
    after = load_file(str(tmp_path / "next/checkpoints/step-1/model.safetensors"))
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert load(str(tmp_path / "next/checkpoints/step-1")).tokenizer.chat_template == CHAT_TEMPLATE


def test_aha_eval_on_a_checkpoint_as_model(checkpoint, tmp_path, capsys):
    path = config_for(tmp_path, "ev", "tiny")
    assert main(["eval", str(path), f"model={checkpoint}"]) == 0
    assert f"{checkpoint} on " in capsys.readouterr().out


def test_a_checkpoint_without_tokenizer_is_a_clear_error(checkpoint, tmp_path):
    old = tmp_path / "old-step-2"
    shutil.copytree(checkpoint, old)
    for name in ("tokenizer_config.json", "tokenizer.json", "special_tokens_map.json", "chat_template.jinja"):
        (old / name).unlink(missing_ok=True)
    with pytest.raises(ModelNotFound, match=r"without its tokenizer.*--checkpoint"):
        load(str(old))


def completions(path) -> list[str]:
    return [json.loads(line)["completion"] for line in path.read_text().splitlines()]


def test_aha_eval_with_model_evaluates_that_model_not_the_configs(checkpoint, tmp_path, capsys):
    path = config_for(tmp_path, "ev", "tiny")
    outs = {kind: tmp_path / f"{kind}.jsonl" for kind in ("base", "model", "checkpoint")}
    assert main(["eval", str(path), "--output", str(outs["base"])]) == 0
    assert main(["eval", str(path), "--model", str(checkpoint), "--output", str(outs["model"])]) == 0
    assert f"{checkpoint} on " in capsys.readouterr().out
    assert main(["eval", str(path), "--checkpoint", str(checkpoint), "--output", str(outs["checkpoint"])]) == 0
    # greedy: the checkpoint's completions, whichever way it is named, and not the base model's
    assert completions(outs["model"]) == completions(outs["checkpoint"]) != completions(outs["base"])


@pytest.mark.parametrize("extra, message", [(["--model", "tiny"], "needs --samples"),
                                            (["--checkpoint", "x"], "not both")])
def test_aha_eval_model_misuse_is_an_error(checkpoint, tmp_path, capsys, extra, message):
    path = config_for(tmp_path, "ev", "tiny")
    with pytest.raises(SystemExit) as exit_:
        main(["eval", str(path), "--model", str(checkpoint), *extra])
    assert exit_.value.code == 2 and message in capsys.readouterr().err
