"""A reward model that keeps learning during RL (Cooper, reward[i].online): the pair selection
and the agreement measure by hand, the config's errors, and on the tiny model an RL run whose
reward model learns a verifier's labels (its pairwise accuracy rises), logs what it did, and
resumes exactly with its weights and optimizer in the checkpoint."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_reward_model import rm_config
from test_training import assert_resumes_exactly, metrics

from aha.algorithms.verified_pairs import verified_pairs, verifier_agreement
from aha.config import ConfigError, apply_override, from_dict, load_config, read_mapping
from aha.config.sections import RewardSpec
from aha.models.checkpoints import load_weights
from aha.rewards import build_reward
from aha.training.loop import train

CONFIGS = Path(__file__).parent.parent / "configs"

# four groups of four: scores, the verifier's labels, and which rows the reward model could read
SCORES = torch.tensor([0.5, 0.1, 0.9, 0.3, 0.2, 0.2, 0.0, 0.2, 1.0, 1.0, 1.0, 1.0, 0.0, 5.0, 1.0, -1.0])
RIGHT = torch.tensor([1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1, 1, 0, 1, 0], dtype=torch.bool)
USABLE = torch.tensor([1] * 12 + [0, 1, 1, 1], dtype=torch.bool)


def test_verified_pairs_take_each_groups_lowest_right_and_highest_wrong_worst_first():
    # group 0: right rows 0 (0.5), 1 (0.1) -> 1; wrong rows 2 (0.9), 3 (0.3) -> 2; margin 0.1 - 0.9 = -0.8
    # group 1: right 4, 5 tie at 0.2 -> the first, 4; wrong 6 (0.0), 7 (0.2) -> 7; margin 0.0
    # group 2: all right -> no pair
    # group 3: row 12 (right, 0.0) cannot be read -> right 14 (1.0); wrong 13 (5.0), 15 (-1.0) -> 13; margin -4.0
    assert verified_pairs(SCORES, RIGHT, USABLE, 4, limit=8) == [(14, 13), (1, 2), (4, 7)]
    assert verified_pairs(SCORES, RIGHT, USABLE, 4, limit=2) == [(14, 13), (1, 2)]
    # a group whose only wrong row cannot be read gives no pair
    only = torch.tensor([1, 1, 1, 0], dtype=torch.bool)
    assert verified_pairs(torch.zeros(4), only, torch.tensor([1, 1, 1, 0], dtype=torch.bool), 4, 8) == []
    # equal margins keep the groups' order
    assert verified_pairs(torch.tensor([0.0, 1.0, 0.0, 1.0]), torch.tensor([1, 0, 1, 0], dtype=torch.bool),
                          torch.ones(4, dtype=torch.bool), 2, 8) == [(0, 1), (2, 3)]


def test_verifier_agreement_counts_every_right_wrong_pair_within_a_group_ties_half():
    # group 0: (0,2) 0.5<0.9, (0,3) 0.5>0.3, (1,2) no, (1,3) 0.1<0.3 -> 1 of 4
    # group 1: (4,6) yes, (4,7) tie, (5,6) yes, (5,7) tie -> 3 of 4
    # group 3: (14,13) no, (14,15) yes; row 12 unread -> 1 of 2
    assert verifier_agreement(SCORES, RIGHT, USABLE, 4) == (pytest.approx(5 / 10), 10)
    assert verifier_agreement(torch.zeros(4), torch.ones(4, dtype=torch.bool), torch.ones(4, dtype=torch.bool),
                              2) == (0.0, 0)
    assert verifier_agreement(torch.zeros(4), torch.tensor([1, 0, 1, 0], dtype=torch.bool),
                              torch.ones(4, dtype=torch.bool), 2) == (0.5, 2)  # a constant model: chance
    with pytest.raises(ValueError, match="multiple of the group size 4"):
        verified_pairs(torch.zeros(6), torch.ones(6, dtype=torch.bool), torch.ones(6, dtype=torch.bool), 4, 8)


BASE = {"model": "tiny", "reward": [{"model": "runs/rm", "name": "rm", "online": {"verifier": "numeric_answer"}},
                                    {"fn": "numeric_answer", "weight": 0.0}]}


@pytest.mark.parametrize("change, message", [
    ({"reward": [{"fn": "numeric_answer", "online": {"verifier": "numeric_answer"}}]},
     "only a reward model (model: a method: rm run) learns during RL"),
    ({"method": "rm", "rm": {"data": "pairs.jsonl"}}, "updates a reward model between RL steps: method=rl only"),
    ({"reward": [{"model": "runs/rm", "online": {"verifier": "exact"}}, {"fn": "numeric_answer"}],
      "monitor": {"gold": [{"fn": "math_answer"}]}},
     "reward[0].online.verifier: no component of reward or monitor.gold is named 'exact' (there are: "
     "numeric_answer, monitor.gold: math_answer)"),
    ({"reward": [{"model": "runs/rm", "online": {"verifier": "reward_model"}}]},
     "reward[0].online.verifier names the reward model that learns"),
    ({"reward": [{"model": "runs/rm", "online": {"verifier": "judge"}}, {"model": "runs/rm2", "name": "judge"}]},
     "reward[0].online.verifier: 'judge' is a reward model; the verifier must be a rule"),
    ({"reward": [{"model": "runs/rm", "online": {"verifier": "numeric_answer"}}, {"fn": "numeric_answer"},
                 {"model": "runs/rm2", "name": "rm2", "online": {"verifier": "numeric_answer"}}]},
     "reward[0].online and reward[2].online: one reward model learns online in a run"),
    ({"monitor": {"gold": [{"model": "runs/rm", "online": {"verifier": "numeric_answer"}}]}},
     "monitor.gold[0].online: only a component of reward learns during RL"),
    ({"env": {"name": "try_again"}}, "not supported with multi-turn episodes (env.name)"),
    ({"reward": [{"model": "runs/rm", "online": {}}]}, "reward.0.online.verifier"),
])
def test_bad_online_configs_name_the_key(change, message):
    with pytest.raises(ConfigError) as err:
        from_dict({**BASE, **change})
    assert message in str(err.value)


def test_a_good_online_config_reads_and_names_its_verifier_from_the_gold_reward():
    config = from_dict({**BASE, "reward": [{"model": "runs/rm", "online": {"verifier": "numeric_answer", "every": 2}}],
                        "monitor": {"gold": [{"fn": "numeric_answer"}]}})
    assert config.reward[0].online.every == 2 and config.reward[0].online.pairs_per_update == 8
    assert isinstance(config.reward[0], RewardSpec)


@pytest.fixture(scope="module")
def rm_run(tmp_path_factory):
    """A tiny reward model trained for one step on unrelated pairs: near its initial weights."""
    tmp = tmp_path_factory.mktemp("rm")
    train(rm_config(tmp, "rm", "train.steps=1", "train.checkpoint_every=1"), echo=lambda *_: None)
    return tmp / "rm"


# the verifier: right when the completion has a digit, about half of the tiny model's random 6 characters
DIGIT = "def has_digit(completion, sample):\n    return float(any(c.isdigit() for c in completion))\n"
RL = """
model: tiny
output_dir: {out}
task: {{name: arithmetic, a_max: 20, num_eval: 4}}
rollout: {{prompts_per_step: 4, group_size: 4, max_new_tokens: 6}}
train: {{steps: 4, lr: 1.0e-6, checkpoint_every: 2, keep_checkpoints: 5, micro_batch_size: 8, report: false,
        dtype: float32}}
algorithm: {{dynamic_sampling: false}}
eval: {{before: false, after: false}}
"""


def rl_config(tmp, rm, name, *overrides, gold=True, online=None):
    """An RL run on the tiny model whose reward is the reward model `rm`, learning online from
    has_digit (a component of monitor.gold, or with gold=False of the reward at weight 0)."""
    (tmp / "digit.py").write_text(DIGIT)
    online = online or {"verifier": "has_digit", "lr": 3.0e-3, "pairs_per_update": 4, "steps": 2}
    reward = [{"model": str(rm), "name": "rm", "online": online}]
    if not gold:
        reward.append({"fn": f"{tmp / 'digit.py'}:has_digit", "weight": 0.0})
    path = tmp / f"{name}.yaml"
    path.write_text(RL.format(out=tmp / name) + "reward: " + json.dumps(reward) + "\n" +
                    (f"monitor: {{gold: [{{fn: '{tmp / 'digit.py'}:has_digit'}}]}}\n" if gold else ""))
    return load_config(path, list(overrides))


def pairwise_accuracy(reward, texts_right: list[str], texts_wrong: list[str]) -> float:
    """The share of (right, wrong) pairs of fixed texts the reward ranks right, on one prompt."""
    sample = {"id": "q", "prompt": "What is 3 * 4?", "answer": "12"}
    right = reward.score(texts_right, [sample] * len(texts_right)).total
    wrong = reward.score(texts_wrong, [sample] * len(texts_wrong)).total
    return float((right[:, None] > wrong[None, :]).float().mean())


def test_the_reward_model_learns_the_verifiers_labels_during_rl(rm_run, tmp_path):
    # the policy barely moves (train.lr 1e-6): each step is a fresh draw of the same kind of samples
    online = {"verifier": "has_digit", "lr": 1.0e-3, "pairs_per_update": 8, "steps": 2}
    train(rl_config(tmp_path, rm_run, "run", "train.steps=12", "train.checkpoint_every=12",
                    "rollout.prompts_per_step=8", online=online), echo=lambda *_: None)
    records = [r for r in metrics(tmp_path / "run") if "reward/mean" in r]
    assert len(records) == 12
    for r in records:
        assert r["rm_online/pairs"] > 0 and 0.0 <= r["rm_online/accuracy"] <= 1.0
        assert r["rm_online/loss"] > 0 and "rm_online/agreement" in r and "time/reward_model_s" in r
        assert "monitor/gold/has_digit" in r
    # each step's agreement is measured before its update, on samples the model has not seen
    # (seeds 0-2 of this test: +0.33, +0.28, +0.19 from the first four steps to the last four)
    agreement = [r["rm_online/agreement"] for r in records]
    assert sum(agreement[-4:]) / 4 > sum(agreement[:4]) / 4 + 0.1, agreement
    # on fixed texts the run never saw, the checkpoint's reward model ranks a digit above none
    # (seeds 0-2: 36% of pairs before, 100%, 91%, 81% after)
    right, wrong = ["a1b", "7", "x9z!", "42", "q3", "5pq", "zz0", "?8"], ["abc", "xyz", "!?", "hello", "q", "pq", "zz",
                                                                          "?;"]
    before = build_reward([RewardSpec(model=str(rm_run), name="rm")])
    after = build_reward([RewardSpec(model=str(rm_run), name="rm")])
    load_weights(after.components[0].fn.aha_learned.model, tmp_path / "run/checkpoints/step-12", "online_rm")
    first, last = pairwise_accuracy(before, right, wrong), pairwise_accuracy(after, right, wrong)
    assert first < 0.5 and last >= 0.75, (first, last)


def test_it_resumes_exactly_with_the_reward_models_weights_and_optimizer(rm_run, tmp_path):
    make = lambda tmp, name, *overrides: rl_config(tmp, rm_run, name, *overrides, gold=False,
                                                   online={"verifier": "has_digit", "lr": 3.0e-3, "every": 1})
    assert_resumes_exactly(tmp_path, make, weights=("model", "online_rm"))
    records = [r for r in metrics(tmp_path / "straight") if "reward/mean" in r]
    assert all("rm_online/pairs" in r for r in records)


def test_every_k_steps_only_and_a_frozen_reward_model_stays_frozen(rm_run, tmp_path):
    train(rl_config(tmp_path, rm_run, "every", online={"verifier": "has_digit", "every": 2, "lr": 3.0e-3}),
          echo=lambda *_: None)
    records = [r for r in metrics(tmp_path / "every") if "reward/mean" in r]
    assert ["rm_online/pairs" in r for r in records] == [False, True, False, True]
    assert all("rm_online/agreement" in r or "rm_online/right_frac" in r for r in records)
    a = load_file(tmp_path / "every/checkpoints/step-2/online_rm.safetensors")
    b = load_file(tmp_path / "every/checkpoints/step-4/online_rm.safetensors")
    assert any(not torch.equal(a[k], b[k]) for k in a)  # the update at step 4 moved it


def test_a_process_reward_model_cannot_learn_online(tmp_path):
    from test_prm import prm_config

    train(prm_config(tmp_path, "prm", "train.steps=1"), echo=lambda *_: None)
    with pytest.raises(ConfigError, match=r"reward\[0\].online: .* is a process reward model"):
        train(rl_config(tmp_path, tmp_path / "prm", "rl"), echo=lambda *_: None)
    assert not (tmp_path / "rl/checkpoints").exists()


def test_the_rm_online_recipe_runs_with_a_tiny_reward_model(rm_run, tmp_path):
    """The recipe as shipped, its reward model swapped for the tiny one: numeric_answer (gold)
    labels the tiny policy's random text wrong, so there are no pairs, and it says so."""
    raw = read_mapping(CONFIGS / "rm_online.yaml")
    assert raw["reward"][0]["model"] == "runs/rm_arithmetic" and raw["monitor"]["gold"] == [{"fn": "numeric_answer"}]
    raw["reward"][0]["model"] = str(rm_run)
    raw.update(model="tiny", output_dir=str(tmp_path / "run"))
    for override in ["train.steps=2", "train.checkpoint_every=0", "rollout.prompts_per_step=2", "rollout.group_size=4",
                     "rollout.max_new_tokens=6", "task.num_eval=4", "eval.before=false", "eval.after=false",
                     "algorithm.dynamic_sampling=false", "train.dtype=float32"]:
        apply_override(raw, override)
    train(from_dict(raw), echo=lambda *_: None)
    records = [r for r in metrics(tmp_path / "run") if "reward/mean" in r]
    assert [(r["rm_online/pairs"], r["rm_online/right_frac"]) for r in records] == [(0, 0.0), (0, 0.0)]
    assert all("reward/rm" in r and "monitor/gold/numeric_answer" in r for r in records)
