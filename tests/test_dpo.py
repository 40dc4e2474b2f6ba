"""method: dpo on the tiny model: each loss's value at the first step against a hand computation
from plain forward passes, learning, exact resume with the cached reference log-probs,
held-out preference accuracy per subset, and bad data naming its file and line."""

import json
import math
import typing

import pytest
import torch
from safetensors.torch import load_file
from test_training import assert_resumes_exactly, config_with_data, metrics

from aha.config import PreferenceConfig, load_config
from aha.models import load
from aha.tasks import TaskError, encode_prompts
from aha.tasks.base import Task
from aha.training.loop import train
from aha.training.supervised.dpo import PREFERENCE_LOSSES

PAIRS = [{"prompt": f"What is {a} * {b}?", "chosen": f"{a * b}.", "rejected": f"{a * b + d} or so, I think.",
          "subset": "near" if d < 3 else "far"} for a, b, d in [(3, 4, 1), (5, 6, 7), (7, 8, 2), (2, 9, 9), (6, 6, 1),
                                                                (4, 7, 8)]]

# dtype float32: the tests compare losses with plain fp32 forward passes at fp32 tolerances;
# tests/test_precision.py runs each method under bf16 autocast on every CPU
DPO = """
method: dpo
model: tiny
output_dir: {out}
task: {{name: arithmetic, a_max: 20, num_eval: 12}}
dpo: {{data: {data}, eval_data: {data}, batch_size: 6}}
rollout: {{max_new_tokens: 8}}
train: {{steps: 4, lr: 1.0e-2, checkpoint_every: 2, keep_checkpoints: 5, micro_batch_size: 4, report: false,
        dtype: float32}}
eval: {{before: false, after: false}}
"""


def dpo_config(tmp_path, name="run", *overrides, pairs=PAIRS):
    return config_with_data(tmp_path, DPO, name, overrides, "pairs.jsonl", pairs)


def sequence_logps(model, tokenizer, prompt: str, completion: str) -> tuple[float, int]:
    """Summed log-prob of completion + EOS after the templated prompt, and its token count."""
    ids = encode_prompts(tokenizer, Task("t", [], []), [{"prompt": prompt}])[0]
    out = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids + out])).logits[0].float(), dim=-1)
    return sum(float(logp[len(ids) + k - 1, t]) for k, t in enumerate(out)), len(out)


def test_the_config_offers_exactly_the_registered_losses_and_methods():
    from aha.config import Config
    from aha.training.methods import METHODS

    # kto learns from single labelled completions, not pairs: its step is training/kto.py's
    assert set(typing.get_args(PreferenceConfig.model_fields["loss"].annotation)) == set(PREFERENCE_LOSSES) | {"kto"}
    assert set(typing.get_args(Config.model_fields["method"].annotation)) == set(METHODS)


@pytest.mark.parametrize("loss", ["dpo", "ipo"])
def test_at_the_first_step_the_policy_is_its_reference(tmp_path, loss):
    # log pi / ref = 0 for every completion: DPO's loss is log 2, IPO's (1 / (2 beta))^2
    train(dpo_config(tmp_path, "run", f"dpo.loss={loss}", "dpo.beta=0.5", "train.steps=1"), echo=lambda *_: None)
    record = metrics(tmp_path / "run")[0]
    assert record["pref/loss"] == pytest.approx(math.log(2) if loss == "dpo" else 1.0, abs=1e-5)
    assert record["pref/margin"] == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize("loss", ["simpo", "orpo"])
def test_reference_free_losses_match_a_hand_computation(tmp_path, loss):
    train(dpo_config(tmp_path, "run", f"dpo.loss={loss}", "dpo.beta=2.0", "dpo.simpo_gamma=0.3", "train.steps=1",
                     "train.lr=0"), echo=lambda *_: None)
    tiny = load("tiny")
    expected = []
    for p in PAIRS:
        c, nc = sequence_logps(tiny.model, tiny.tokenizer, p["prompt"], p["chosen"])
        r, nr = sequence_logps(tiny.model, tiny.tokenizer, p["prompt"], p["rejected"])
        c, r = c / nc, r / nr
        if loss == "simpo":
            expected.append(-math.log(1 / (1 + math.exp(-(2.0 * (c - r) - 0.3)))))
        else:  # ORPO: NLL of chosen - beta * log sigma(log odds ratio)
            log_odds = (c - r) - (math.log(1 - math.exp(c)) - math.log(1 - math.exp(r)))
            expected.append(-c - 2.0 * math.log(1 / (1 + math.exp(-log_odds))))
    assert metrics(tmp_path / "run")[0]["pref/loss"] == pytest.approx(sum(expected) / len(expected), rel=1e-5)


def test_rpo_adds_the_chosen_completions_nll_to_dpo(tmp_path):
    train(dpo_config(tmp_path, "run", "dpo.nll_coef=0.7", "train.steps=1", "train.lr=0"), echo=lambda *_: None)
    tiny = load("tiny")
    nll = []
    for p in PAIRS:
        total, tokens = sequence_logps(tiny.model, tiny.tokenizer, p["prompt"], p["chosen"])
        nll.append(-total / tokens)
    expected = math.log(2) + 0.7 * sum(nll) / len(nll)  # DPO's term is log 2 while the policy is its reference
    assert metrics(tmp_path / "run")[0]["pref/loss"] == pytest.approx(expected, rel=1e-5)


def test_dpo_learns_the_preferences_and_reports_them_per_subset(tmp_path):
    train(dpo_config(tmp_path, "run", "train.steps=12", "train.lr=3e-3", "eval.before=true", "eval.after=true",
                     "eval.limit=2"), echo=lambda *_: None)
    records = metrics(tmp_path / "run")
    steps = [r for r in records if "pref/loss" in r]
    assert steps[-1]["pref/loss"] < 0.5 * steps[0]["pref/loss"]
    assert steps[-1]["pref/accuracy"] == 1.0
    before, after = records[0], records[-1]
    assert before["step"] == 0 and before["pref_eval/accuracy"] == 0.0  # policy = reference: no margin yet
    assert after["pref_eval/likelier_chosen"] == 1.0
    assert after["pref_eval/accuracy"] == 1.0 and after["pref_eval/margin"] > 1.0
    assert after["pref_eval/accuracy/near"] == 1.0 and after["pref_eval/accuracy/far"] == 1.0
    assert "eval/accuracy" in after  # and the task's greedy held-out accuracy, as every method


def test_dpo_resumes_exactly_with_its_cached_reference(tmp_path):
    assert_resumes_exactly(tmp_path, dpo_config)
    # the reference is the starting model's, kept in the checkpoint, not recomputed from trained weights
    held = torch.load(tmp_path / "resumed/checkpoints/step-4/trainer.pt",
                      weights_only=False)["extra"]["reference_logps"]
    tiny = load("tiny")
    first = sequence_logps(tiny.model, tiny.tokenizer, PAIRS[0]["prompt"], PAIRS[0]["chosen"])[0]
    assert float(held["train_chosen"][0]) == pytest.approx(first, rel=1e-5)


def test_a_resume_with_another_max_length_is_refused_instead_of_reading_stale_reference_logps(tmp_path):
    train(dpo_config(tmp_path, "run", "train.steps=2"), echo=lambda *_: None)
    with pytest.raises(ValueError, match="reference log-probs in this dpo run's checkpoint were computed on other"):
        train(dpo_config(tmp_path, "run", "train.steps=4", "dpo.max_length=38", "train.allow_config_change=true"),
              echo=lambda *_: None)


@pytest.mark.parametrize("line, message", [
    ('{"prompt": "What is 2 * 3?", "chosen": "6"}', r"pairs.jsonl:2: missing field\(s\) rejected"),
    ('{"prompt": "What is 2 * 3?", "chosen": "6", "rejected": 5}',
     "pairs.jsonl:2: rejected must be a non-empty string"),
])
def test_bad_pairs_name_file_and_line(tmp_path, line, message):
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps(PAIRS[0]) + "\n" + line + "\n")
    with pytest.raises(TaskError, match=message):
        train(dpo_config(tmp_path, "run"), echo=lambda *_: None)
    assert not (tmp_path / "run").exists()


def test_dpo_without_data_is_a_config_error(tmp_path):
    from aha.config import ConfigError

    with pytest.raises(ConfigError, match="method=dpo needs dpo.data"):
        load_config(None, ["method=dpo"])


VOWELS = "def vowels(completion, sample):\n    return sum(c in 'aeiou' for c in completion) / max(len(completion), 1)\n"


def online_config(tmp_path, name, *overrides):
    (tmp_path / "vowels.py").write_text(VOWELS)
    return load_config(None, ["method=dpo", "dpo.online=true", "model=tiny", f"output_dir={tmp_path / name}",
                              "task.name=arithmetic", "task.a_max=20", "task.num_eval=12", "dpo.batch_size=4",
                              "dpo.online_samples=4", "rollout.max_new_tokens=12", "train.steps=4", "train.lr=1e-2",
                              "train.checkpoint_every=2", "train.keep_checkpoints=5", "train.report=false",
                              "eval.before=false", "eval.after=false",
                              f"reward=[{{fn: '{tmp_path / 'vowels.py'}:vowels'}}]",
                              *overrides])


def test_online_dpo_pairs_the_best_and_worst_samples_against_the_starting_weights(tmp_path):
    train(online_config(tmp_path, "run", "train.steps=1"), echo=lambda *_: None)
    record = metrics(tmp_path / "run")[0]
    assert record["online/prompts"] == 4 and 1 <= record["online/pairs"] <= 4
    assert record["pref/loss"] == pytest.approx(math.log(2), abs=1e-5)  # the policy is still its reference
    samples = [json.loads(line) for line in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    vowels = lambda text: sum(c in "aeiou" for c in text) / max(len(text), 1)
    assert all(vowels(s["chosen"]) > vowels(s["rejected"]) for s in samples)


def test_online_dpo_resumes_exactly(tmp_path):
    train(online_config(tmp_path, "straight"), echo=lambda *_: None)
    train(online_config(tmp_path, "resumed", "train.steps=2"), echo=lambda *_: None)
    train(online_config(tmp_path, "resumed", "train.allow_config_change=true"), echo=lambda *_: None)
    a = load_file(tmp_path / "straight/checkpoints/step-4/model.safetensors")
    b = load_file(tmp_path / "resumed/checkpoints/step-4/model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_online_dpo_refuses_a_pair_file(tmp_path):
    from aha.config import ConfigError

    with pytest.raises(ConfigError, match="dpo.data is not used with dpo.online=true"):
        load_config(None, ["method=dpo", "dpo.online=true", "dpo.data=x.jsonl"])


def test_an_online_step_without_a_pair_trains_nothing_and_says_so(tmp_path):
    # a reward that scores every sample the same: no prompt has a best and a worst
    (tmp_path / "flat.py").write_text("def flat(completion, sample):\n    return 1.0\n")
    train(online_config(tmp_path, "run", "train.steps=2", f"reward=[{{fn: '{tmp_path / 'flat.py'}:flat'}}]"),
          echo=lambda *_: None)
    records = metrics(tmp_path / "run")
    assert [(r["online/pairs"], r["train/nothing_to_train"]) for r in records] == [(0, 1.0), (0, 1.0)]
    a = load_file(tmp_path / "run/checkpoints/step-2/model.safetensors")
    b = load("tiny").model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)  # no update
