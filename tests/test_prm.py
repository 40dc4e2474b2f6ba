"""method: prm on the tiny model: the binary cross-entropy loss and the held-out metrics are
checked against a plain forward pass read at hand-found step ends (which checks the step
boundaries), the boundaries decode to the joined steps, it learns, resumes exactly, and a
trained PRM is a reward whose min / sum / mean aggregation is exact; bad data and a missing
prm.data are errors naming what is wrong."""

import json
import math
import re
import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from test_training import assert_resumes_exactly, config_with_data, metrics

from aha.config import ConfigError, RewardSpec, load_config
from aha.models import load
from aha.models.process_reward import ProcessRewardModel, encode_steps
from aha.models.reward_model import reward_head
from aha.models.tiny import tiny_tokenizer
from aha.rewards import build_reward
from aha.tasks import TaskError, encode_prompts
from aha.tasks.base import Task
from aha.training.loop import train

STEPS_DATA = Path(__file__).parent.parent / "data/synthetic/arithmetic/steps_train.jsonl"

# a signal the tiny model can learn in a few steps: right steps say "ok", wrong ones (and every
# step after the first wrong one, the data's convention) say "no"
ROWS = [{"prompt": f"Count from {a}.", "steps": [f"{'ok' if k < wrong else 'no'} {a + k}" for k in range(3)],
         "labels": [int(k < wrong) for k in range(3)]} for a, wrong in
        [(1, 3), (2, 0), (3, 1), (4, 2), (5, 3), (6, 1), (7, 2), (8, 0)]]

PRM = """
method: prm
model: tiny
output_dir: {out}
task: {{name: arithmetic, a_max: 20, num_eval: 4}}
prm: {{data: {data}, eval_data: {data}, batch_size: 8}}
train: {{steps: 4, lr: 3.0e-3, checkpoint_every: 2, keep_checkpoints: 5, micro_batch_size: 3, report: false,
        dtype: float32}}
eval: {{before: false, after: false}}
"""


def prm_config(tmp, name="run", *overrides, rows=ROWS):
    return config_with_data(tmp, PRM, name, overrides, "steps.jsonl", rows)


def quiet(*_):
    pass


@pytest.fixture(scope="module")
def prm_run(tmp_path_factory):
    """A trained PRM shared by the tests that use one as a reward."""
    tmp = tmp_path_factory.mktemp("prm")
    train(prm_config(tmp, "run", "train.steps=6"), echo=quiet)
    return tmp / "run"


def plain_step_logits(model, tokenizer, head, row) -> torch.Tensor:
    """One plain forward pass of the chat-templated prompt + the steps joined by "\\n" + EOS,
    read at the ends found by hand: the tiny tokenizer has one token a character, so step k
    closes at its "\\n" character and the last step at the EOS after the text."""
    prompt = encode_prompts(tokenizer, Task("t", [], []), [row])[0]
    text = "\n".join(row["steps"])
    ids = prompt + tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    ends = [len(prompt) + i for i, c in enumerate(text) if c == "\n"] + [len(prompt) + len(text)]
    with torch.no_grad():
        return head(model.base_model(torch.tensor([ids])).last_hidden_state[0, ends])[:, 0]


def first_error(flags) -> int | None:
    return next((k for k, ok in enumerate(flags) if not ok), None)


def test_the_step_1_loss_and_held_out_metrics_match_a_plain_forward(tmp_path):
    # lr 0, batch = all 8 solutions: the logged loss is the starting model's over the whole data
    train(prm_config(tmp_path, "run", "train.lr=0", "train.steps=1", "eval.before=true"), echo=quiet)
    held, record = metrics(tmp_path / "run")
    tiny = load("tiny")
    head = reward_head(64, 1, seed=0)
    logits = [plain_step_logits(tiny.model, tiny.tokenizer, head, row) for row in ROWS]
    labels = [torch.tensor(row["labels"], dtype=torch.float) for row in ROWS]
    flat, y = torch.cat(logits), torch.cat(labels)
    assert record["prm/loss"] == pytest.approx(float(F.binary_cross_entropy_with_logits(flat, y)), rel=1e-5)
    assert record["prm/step_accuracy"] == pytest.approx(float(((flat > 0).float() == y).float().mean()))
    assert record["prm/steps"] == 24 and record["prm/truncated_steps"] == 0
    probs = [torch.sigmoid(row) for row in logits]
    mean = lambda xs: sum(xs) / len(xs)
    assert held["step"] == 0 and held["prm_eval/solutions"] == 8
    assert held["prm_eval/step_accuracy"] == pytest.approx(record["prm/step_accuracy"])
    assert held["prm_eval/solution_accuracy_min"] == pytest.approx(mean([bool(p.min() > 0.5) == bool(y.all()) for p,
                                                                         y in zip(probs, labels)]))
    assert held["prm_eval/solution_accuracy_sum"] == pytest.approx(mean([bool(p.mean() > 0.5) == bool(y.all()) for p,
                                                                         y in zip(probs, labels)]))
    assert held["prm_eval/first_error_accuracy"] == pytest.approx(
        mean([first_error((p > 0.5).tolist()) == first_error(y.bool().tolist()) for p, y in zip(probs, labels)]))


def test_step_ends_decode_to_the_joined_steps():
    tokenizer = tiny_tokenizer()
    eos = tokenizer.eos_token_id
    rows = [json.loads(line) for line in STEPS_DATA.read_text().splitlines()[:6]]
    for row in rows:
        steps = row["steps"]
        ids, ends = encode_steps(tokenizer, steps, "\n", eos)
        assert ids[:-1] == tokenizer("\n".join(steps), add_special_tokens=False)["input_ids"]  # what the policy sees
        assert len(ends) == len(steps) and ends[-1] == len(ids) - 1 and ids[-1] == eos
        for k, end in enumerate(ends[:-1]):  # step k closes at the separator after it
            assert tokenizer.decode(ids[:end + 1]) == "\n".join(steps[:k + 1]) + "\n"
        assert tokenizer.decode(ids[:ends[-1]]) == "\n".join(steps)


class MergingTokenizer:
    """Merges a newline with the spaces after it into one token, as byte-level BPE does
    ("\\n  b" -> "\\n ", " b" in SmolLM2): tokenised alone, the pieces differ from the whole."""

    def __init__(self):
        self.vocab = {}

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=False):
        found = list(re.finditer(r"\n +|\n| ?[^\n ]+| +", text))
        out = {"input_ids": [self.vocab.setdefault(m.group(), len(self.vocab)) for m in found]}
        if return_offsets_mapping:
            out["offset_mapping"] = [m.span() for m in found]
        return out


def test_a_separator_merged_into_a_token_closes_its_step_at_that_token():
    tokenizer = MergingTokenizer()
    steps = ["a = 1", "  b = 2", "c"]
    ids, ends = encode_steps(tokenizer, steps, "\n", -1)
    words = {v: k for k, v in tokenizer.vocab.items()}
    assert ids[:-1] == tokenizer("\n".join(steps))["input_ids"]  # the whole text's tokens, not the pieces'
    assert [words[ids[e]] for e in ends[:-1]] == ["\n  ", "\n"] and ends[-1] == len(ids) - 1


def test_it_learns_the_step_labels_and_reports_held_out_accuracy(tmp_path):
    train(prm_config(tmp_path, "run", "train.steps=30", "eval.before=true", "eval.after=true"), echo=quiet)
    records = metrics(tmp_path / "run")
    held = [r for r in records if "prm_eval/step_accuracy" in r]
    assert [r["step"] for r in held] == [0, 30]
    assert set(held[-1]) == {"step", "prm_eval/step_accuracy", "prm_eval/loss", "prm_eval/solution_accuracy_min",
                             "prm_eval/solution_accuracy_sum", "prm_eval/first_error_accuracy", "prm_eval/solutions"}
    assert held[-1]["prm_eval/step_accuracy"] > 0.9 and held[-1]["prm_eval/loss"] < held[0]["prm_eval/loss"]
    steps = [r for r in records if "prm/loss" in r]
    assert steps[-1]["prm/step_accuracy"] > 0.9 and steps[-1]["prm/loss"] < 0.5 * steps[0]["prm/loss"]
    assert not any("eval/accuracy" in r for r in records)  # no greedy generation for a reward model
    samples = [json.loads(line) for line in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    assert all(len(s["step_probs"]) == len(s["steps"]) == len(s["labels"]) for s in samples)


def test_it_resumes_exactly(tmp_path):
    extra = ["prm.batch_size=3"]  # 8 solutions: the resume falls inside an epoch and the run crosses one
    assert_resumes_exactly(tmp_path, prm_config, *extra, weights=("model", "reward_head"))
    about = json.loads((tmp_path / "straight/checkpoints/step-4/process_reward_model.json").read_text())
    assert about["method"] == "prm" and about["separator"] == "\n" and about["max_length"] == 512


def test_min_sum_and_mean_aggregate_the_step_probabilities(prm_run, tmp_path, monkeypatch):
    samples = [{"id": "a", "prompt": "Count."}] * 4
    completions = ["a1\nb9\n\nc5\n", "x3", "", "\n \n"]  # blank pieces are not steps; no step at all scores 0
    # a hand-set head first: weight 0, bias 1, so every step has probability sigmoid(1)
    checkpoint = tmp_path / "prm"
    shutil.copytree(prm_run / "checkpoints/step-6", checkpoint)
    save_file({"weight": torch.zeros(1, 64), "bias": torch.tensor([1.0])}, checkpoint / "reward_head.safetensors")
    (checkpoint / "manifest.json").unlink()  # hand-edited: no longer the checkpoint its manifest describes
    s1 = 1 / (1 + math.exp(-1))
    result = build_reward([RewardSpec(model=str(checkpoint), args={"aggregate": "sum"})]).score(completions, samples)
    assert result.total.tolist() == pytest.approx([3 * s1, s1, 0.0, 0.0]) and not result.failed.any()

    # then step scores set by the step's last character: digit d -> logit d - 5
    tokenizer = tiny_tokenizer()

    def by_last_digit(self, sequences, ends, dtype=torch.float32):
        return torch.tensor([float(tokenizer.decode([seq[e - 1]])) - 5 for seq,
                             row in zip(sequences, ends) for e in row])

    monkeypatch.setattr(ProcessRewardModel, "forward", by_last_digit)
    sig = lambda x: 1 / (1 + math.exp(-x))
    expected = {"min": [sig(-4), sig(-2)], "sum": [sig(-4) + sig(4) + 0.5, sig(-2)], "mean": [0.5, sig(-2)]}
    for how, values in expected.items():
        reward = build_reward([RewardSpec(model=str(checkpoint), args={"aggregate": how})])
        assert reward.score(completions[:2], samples[:2]).total.tolist() == pytest.approx(values, rel=1e-6)


def test_dense_gives_each_step_its_probability_where_the_step_ends(prm_run, tmp_path, monkeypatch):
    samples = [{"id": "a", "prompt": "Count."}] * 3
    completions = ["a1\nb9\n\nc5\n", "x3", "\n \n"]
    tokenizer = tiny_tokenizer()

    def by_last_digit(self, sequences, ends, dtype=torch.float32):
        return torch.tensor([float(tokenizer.decode([seq[e - 1]])) - 5 for seq,
                             row in zip(sequences, ends) for e in row])

    monkeypatch.setattr(ProcessRewardModel, "forward", by_last_digit)
    sig = lambda x: 1 / (1 + math.exp(-x))
    spec = lambda how, **more: RewardSpec(model=str(prm_run), name="prm", args={"aggregate": how}, **more)
    dense = build_reward([spec("dense", weight=2.0)]).score(completions, samples)
    summed = build_reward([spec("sum", weight=2.0)]).score(completions, samples)
    # each step ends after its separator: "a1\n" (3), "a1\nb9\n" (6), then "\nc5\n" ends at 10
    assert [e for e, _ in dense.steps[0]] == [3, 6, 10] and dense.steps[2] == []
    assert [v for _, v in dense.steps[0]] == pytest.approx([2 * sig(-4), 2 * sig(4), 2 * sig(0)], rel=1e-6)
    assert dense.steps[1] == [(2, pytest.approx(2 * sig(-2), rel=1e-6))]
    assert dense.total.tolist() == pytest.approx(summed.total.tolist(), rel=1e-6)  # the number is the sum form
    # a gate scales the steps with the total; a clip that bites turns the steps into an outcome
    (tmp_path / "gate.py").write_text("def gate(completion, sample):\n    return float(completion != 'x3')\n")
    gated = build_reward([spec("dense"), RewardSpec(fn=f"{tmp_path / 'gate.py'}:gate", combine="gate")])
    result = gated.score(completions, samples)
    assert result.steps[1] == [(2, 0.0)] and result.total[1] == 0.0
    clipped = build_reward([spec("dense", clip_max=1.0)]).score(completions, samples)
    assert clipped.steps[0] == [] and clipped.total[0] == pytest.approx(1.0)
    assert clipped.steps[1] == [(2, pytest.approx(sig(-2), rel=1e-6))]  # under the clip: kept


def test_dense_prm_rewards_train_a_token_level_estimator(prm_run, tmp_path):
    rl = load_config(None, [f"output_dir={tmp_path / 'rl'}", "model=tiny", "train.steps=2",
                            "rollout.prompts_per_step=2",
                            "rollout.group_size=2", "rollout.max_new_tokens=8", "eval.before=false", "eval.after=false",
                            "train.report=false", "task.name=arithmetic", "task.a_max=20", "task.num_eval=4",
                            "algorithm.dynamic_sampling=false", "algorithm.advantage=reinforce_pp",
                            f"reward=[{{model: {prm_run}, args: {{aggregate: dense}}, name: prm}}]"])
    train(rl, echo=quiet)
    records = metrics(tmp_path / "rl")
    assert [r["step"] for r in records] == [1, 2] and all(r["reward/failed"] == 0 for r in records)
    assert all(r["advantage/abs_mean"] > 0 for r in records)


def test_a_prm_is_the_reward_of_an_rl_run(prm_run, tmp_path):
    # the reward's score of a training solution is its min step probability from a plain forward
    row = ROWS[3]
    reward = build_reward([RewardSpec(model=str(prm_run), name="prm")], dtype="float32")  # default aggregate: min
    scored = reward.score(["\n".join(row["steps"])], [row]).components["prm"]
    lm = load(str(prm_run / "checkpoints/step-6"))
    head = reward_head(64, 1, seed=0)
    head.load_state_dict(load_file(prm_run / "checkpoints/step-6/reward_head.safetensors"))
    by_hand = torch.sigmoid(plain_step_logits(lm.model, lm.tokenizer, head, row)).min()
    assert float(scored[0]) == pytest.approx(float(by_hand), rel=1e-5)

    rl = load_config(None, [f"output_dir={tmp_path / 'rl'}", "model=tiny", "train.steps=1",
                            "rollout.prompts_per_step=2",
                            "rollout.group_size=2", "rollout.max_new_tokens=6", "eval.before=false", "eval.after=false",
                            "train.report=false", "task.name=arithmetic", "task.a_max=20", "task.num_eval=4",
                            "algorithm.dynamic_sampling=false",
                            f"reward=[{{model: {prm_run}, args: {{aggregate: mean}}, name: prm}}]"])
    train(rl, echo=quiet)
    record = metrics(tmp_path / "rl")[0]
    assert "reward/prm" in record and record["reward/failed"] == 0
    samples = [json.loads(line) for line in (tmp_path / "rl/samples.jsonl").read_text().splitlines()]
    assert all(0.0 <= s["prm"] <= 1.0 and s["reward"] == pytest.approx(s["prm"]) for s in samples)


@pytest.mark.parametrize("row, message", [
    ({"prompt": "Hi", "steps": ["a", "b"], "labels": [1]}, "steps.jsonl:2: labels must be a list with one 0/1 label a "
                                                           "step"),
    ({"prompt": "Hi", "steps": ["a", "b"], "labels": [1, 2]}, "steps.jsonl:2: labels.1. must be 0 or 1, got 2"),
    ({"prompt": "Hi", "steps": ["a"], "labels": [True]}, "steps.jsonl:2: labels.0. must be 0 or 1, got True"),
    ({"prompt": "Hi", "steps": [], "labels": []}, "steps.jsonl:2: steps must be a non-empty list"),
    ({"prompt": "Hi", "steps": ["a", " "], "labels": [1, 1]}, "steps.jsonl:2: steps.1. must be a non-empty string"),
    ({"prompt": "Hi", "steps": ["a\nb"], "labels": [1]}, "steps.jsonl:2: steps.0. holds the step separator"),
    ({"prompt": "Hi", "steps": ["a"]}, "steps.jsonl:2: labels must be a list"),
])
def test_bad_solutions_name_file_and_line_and_leave_no_run_folder(tmp_path, row, message):
    (tmp_path / "steps.jsonl").write_text(json.dumps(ROWS[0]) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(TaskError, match=message):
        train(prm_config(tmp_path, "run"), echo=quiet)
    assert not (tmp_path / "run").exists()


def test_method_prm_needs_prm_data():
    with pytest.raises(ConfigError, match="method=prm needs prm.data"):
        load_config(None, ["method=prm"])
