"""Step rewards for every estimator: the step transforms (clip, delta, clip_delta, PURE's
min_form) and the step-level group advantages (DeepSeekMath's process supervision for grpo,
PRIME's leave-one-out for rloo) against numbers computed by hand; a verifier's share and the
steps adding up in the RL step; a PRM's args.transform; the config's errors; and a tiny run
whose totals tie but whose steps differ."""

import math
from pathlib import Path

import pytest
import torch
from test_prm import prm_run, quiet  # noqa: F401 - prm_run is a fixture
from test_training import metrics, tiny_config
from test_wiring import lengths_mask, mask_rollouts

from aha.algorithms import flat_step_groups, step_group_advantages, transform_step_rewards
from aha.config import AlgorithmConfig, ConfigError, RewardSpec, load_config
from aha.models.process_reward import ProcessRewardModel
from aha.models.tiny import tiny_tokenizer
from aha.rewards import RewardError, StepScores, build_reward, transform_steps
from aha.training.loop import train
from aha.training.rl.batch import Batch
from aha.training.rl.estimate import estimate_advantages

R3 = 1 / math.sqrt(3)


def close(actual: torch.Tensor, expected) -> None:
    torch.testing.assert_close(actual, torch.tensor(expected, dtype=actual.dtype), atol=1e-5, rtol=1e-5)


def test_step_transforms_by_hand():
    r = torch.tensor([0.9, 0.3, 0.6])
    close(transform_step_rewards(r, "none"), [0.9, 0.3, 0.6])
    close(transform_step_rewards(r, "clip", threshold=0.5), [0.0, -0.2, 0.0])  # min(r - 0.5, 0)
    delta = transform_step_rewards(r, "delta")
    close(delta, [0.9 - 0.3, 0.3 - 0.6, 0.6])  # r_k - r_{k+1}, the last kept
    assert float(delta.sum()) == pytest.approx(0.9)  # the completion collects r_1 whatever follows
    close(transform_step_rewards(r, "clip_delta", threshold=0.5), [0.2, -0.2, 0.0])  # delta of [0, -0.2, 0]
    # softmin weights: [0, 1] at temperature 1 -> w = [1, e^-1] / (1 + e^-1)
    close(transform_step_rewards(torch.tensor([0.0, 1.0]), "min_form", temperature=1.0),
          [0.0, math.exp(-1) / (1 + math.exp(-1))])
    soft = transform_step_rewards(torch.tensor([0.2, 0.8]), "min_form", temperature=0.1)
    w = 1 / (1 + math.exp(-6))  # the worst step's weight, exp(-2) / (exp(-2) + exp(-8))
    close(soft, [w * 0.2, (1 - w) * 0.8])
    assert float(soft.sum()) == pytest.approx(0.2, abs=2e-3)  # about the minimum
    assert transform_step_rewards(torch.tensor([]), "delta").numel() == 0
    with pytest.raises(ValueError, match="unknown step transform 'cut'"):
        transform_step_rewards(r, "cut")
    with pytest.raises(ValueError, match="temperature > 0"):
        transform_step_rewards(r, "min_form", temperature=0.0)
    scores = transform_steps(StepScores((3, 7, 9), (0.9, 0.3, 0.6)), "clip", threshold=0.5)
    assert scores.ends == (3, 7, 9) and scores.values == pytest.approx((0.0, -0.2, 0.0))


# one group of two: row 0 has steps worth 0.2 (closing at token 1) and 0.8 (token 3), row 1 one
# step worth 0.2 (token 2) and three valid tokens
STEPS = torch.tensor([[0.0, 0.2, 0.0, 0.8], [0.0, 0.0, 0.2, 0.0]])
ENDS = torch.tensor([[0.0, 1.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
MASK = lengths_mask([4, 3], 4)


def test_process_supervised_grpo_normalises_every_step_of_the_group():
    # R = {0.2, 0.8, 0.2}: mean 0.4, unbiased std sqrt(0.24 / 2) = 0.3464 -> -1/sqrt3, 2/sqrt3, -1/sqrt3;
    # a token's advantage is the sum over its step and the later ones
    adv = step_group_advantages(STEPS, ENDS, MASK, 2, "mean", "std", eps=0.0)
    close(adv, [[R3, R3, 2 * R3, 2 * R3], [-R3, -R3, -R3, 0.0]])
    centred = step_group_advantages(STEPS, ENDS, MASK, 2, "mean", "none")  # Dr. GRPO: -0.2, 0.4, -0.2
    close(centred, [[0.2, 0.2, 0.4, 0.4], [-0.2, -0.2, -0.2, 0.0]])
    # a step worth exactly 0 is still a step: R = {0, 1} -> -1/sqrt2, 1/sqrt2
    zero = step_group_advantages(torch.tensor([[0.0, 0.0], [0.0, 1.0]]), torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
                                 torch.ones(2, 2), 2, eps=0.0)
    close(zero, [[-1 / math.sqrt(2), 0.0], [1 / math.sqrt(2), 1 / math.sqrt(2)]])


def test_prime_leave_one_out_takes_the_other_completions_mean_step_reward():
    # a third row without a step is in no baseline; row 0's mean step 0.5, row 1's 0.2:
    # row 0: 0.2 - 0.2, 0.8 - 0.2; row 1: 0.2 - 0.5
    steps, ends = torch.cat([STEPS, torch.zeros(1, 4)]), torch.cat([ENDS, torch.zeros(1, 4)])
    adv = step_group_advantages(steps, ends, torch.cat([MASK, torch.ones(1, 4)]), 3, "loo")
    close(adv, [[0.6, 0.6, 0.6, 0.6], [-0.3, -0.3, -0.3, 0.0], [0.0] * 4])


def test_tied_steps_give_zero_and_a_nonfinite_row_is_left_out():
    tied = torch.tensor([[0.3, 0.0, 0.3], [0.0, 0.3, 0.0]])
    tied_ends = (tied != 0).float()
    for baseline in ("mean", "loo"):
        assert step_group_advantages(tied, tied_ends, torch.ones(2, 3), 2, baseline).abs().max() == 0
    assert flat_step_groups(tied, tied_ends, 2).tolist() == [True]
    assert flat_step_groups(STEPS, ENDS, 2).tolist() == [False]
    assert flat_step_groups(torch.zeros(2, 3), torch.zeros(2, 3), 2).tolist() == [True]  # no step at all
    # a third row (its reward not finite) with a huge step changes nothing and gets 0
    steps, ends = torch.cat([STEPS, torch.tensor([[9.0, 0, 0, 0]])]), torch.cat([ENDS, torch.tensor([[1.0, 0, 0, 0]])])
    adv = step_group_advantages(steps, ends, torch.cat([MASK, torch.ones(1, 4)]), 3, eps=0.0,
                                rows=torch.tensor([True, True, False]))
    close(adv, [[R3, R3, 2 * R3, 2 * R3], [-R3, -R3, -R3, 0.0], [0.0] * 4])


@pytest.mark.parametrize("advantage, expected", [
    # outcome parts 0.1 and 0 -> grpo +-1/sqrt2; the steps as in the grpo test above
    ("grpo", [[R3 + 2 ** -0.5, R3 + 2 ** -0.5, 2 * R3 + 2 ** -0.5, 2 * R3 + 2 ** -0.5],
              [-R3 - 2 ** -0.5] * 3 + [0.0]]),
    # rloo: outcome +-0.1; steps as in the PRIME test
    ("rloo", [[0.7] * 4, [-0.4, -0.4, -0.4, 0.0]]),
])
def test_a_verifier_share_and_the_steps_each_get_their_baseline_and_add_up(advantage, expected):
    # the totals hold the steps plus 0.1 * a verifier (row 0 right, row 1 wrong), paid at the last token
    rewards = torch.tensor([0.2 + 0.8 + 0.1, 0.2 + 0.0])
    batch = Batch(mask_rollouts(MASK), rewards, step_rewards=STEPS.clone(), step_ends=ENDS.clone())
    estimate_advantages(batch, AlgorithmConfig(advantage=advantage, step_advantages=True), 2)
    close(batch.advantages, expected)
    # without step_ends the non-zero step rewards are the steps: the same here
    again = Batch(mask_rollouts(MASK), rewards, step_rewards=STEPS.clone())
    estimate_advantages(again, AlgorithmConfig(advantage=advantage, step_advantages=True), 2)
    close(again.advantages, expected)


def test_config_errors_name_the_keys():
    with pytest.raises(ConfigError, match="algorithm.step_advantages needs advantage=grpo or rloo"):
        load_config(None, ["model=tiny", "algorithm.step_advantages=true", "algorithm.advantage=reinforce_pp"])
    with pytest.raises(ConfigError, match="algorithm.step_advantages does not work with algorithm.token_weighting"):
        load_config(None, ["model=tiny", "algorithm.step_advantages=true", "algorithm.token_weighting=ktae"])


def test_a_prms_transform_applies_to_its_steps_and_bad_args_name_the_key(prm_run, monkeypatch):  # noqa: F811
    samples = [{"id": "a", "prompt": "Count."}]
    tokenizer = tiny_tokenizer()

    def by_last_digit(self, sequences, ends, dtype=torch.float32):  # logit = the step's last digit - 5
        return torch.tensor([float(tokenizer.decode([seq[e - 1]])) - 5 for seq, row in zip(sequences, ends)
                             for e in row])

    monkeypatch.setattr(ProcessRewardModel, "forward", by_last_digit)
    sig = lambda x: 1 / (1 + math.exp(-x))
    p = [sig(4), sig(-4), sig(0)]  # "a9\nb1\nc5"
    spec = lambda **args: RewardSpec(model=str(prm_run), name="prm", args=args)
    delta = build_reward([spec(aggregate="dense", transform="delta")]).score(["a9\nb1\nc5"], samples)
    assert [v for _, v in delta.steps[0]] == pytest.approx([p[0] - p[1], p[1] - p[2], p[2]], rel=1e-5)
    assert float(delta.total[0]) == pytest.approx(p[0], rel=1e-5)
    clipped = build_reward([spec(aggregate="sum", transform="clip", threshold=0.6)]).score(["a9\nb1\nc5"], samples)
    assert float(clipped.total[0]) == pytest.approx(min(p[1] - 0.6, 0) + min(p[2] - 0.6, 0), rel=1e-5)
    for args, message in [({"transform": "cut"}, r"reward\[0\].args.transform must be one of none, clip"),
                          ({"transform": "min_form", "temperature": 0}, r"reward\[0\].args.temperature must be > 0"),
                          ({"threshold": "high"}, r"reward\[0\].args.threshold must be a number")]:
        with pytest.raises(RewardError, match=message):
            build_reward([spec(**args)])


WHERE = """from aha.rewards import StepScores
def where(completion, sample):
    # every completion is worth 1.0 in total, its first or its second step paying it
    if len(completion) < 2:
        return 1.0
    return StepScores((1, len(completion)), (1.0, 0.0) if len(completion) % 2 else (0.0, 1.0))
"""


def test_step_level_grpo_trains_a_group_whose_totals_tie_but_whose_steps_differ(tmp_path):
    (tmp_path / "where.py").write_text(WHERE)
    common = [f"reward=[{{fn: '{tmp_path / 'where.py'}:where'}}, {{fn: numeric_answer, weight: 0.0}}]",
              "algorithm.dynamic_sampling=true", "algorithm.max_rounds=1", "eval.before=false", "eval.after=false",
              "train.steps=2"]
    steps = metrics(Path(train(tiny_config(tmp_path, "steps", *common, "algorithm.step_advantages=true"),
                               echo=quiet).run_dir))
    assert all(r["groups/zero_variance_frac"] == 1.0 for r in steps)  # the totals tie...
    assert sum(r["groups/trained"] for r in steps) > 0
    assert all(r["grad_norm"] > 0 and r["advantage/abs_mean"] > 0 for r in steps if r["groups/trained"])
    plain = metrics(Path(train(tiny_config(tmp_path, "plain", *common), echo=quiet).run_dir))
    assert all(r["groups/trained"] == 0 for r in plain)  # ...so without step advantages nothing trains


def test_the_prm_grpo_steps_recipe_runs_with_a_tiny_prm(prm_run, tmp_path):  # noqa: F811
    """The recipe as shipped, its PRM a tiny one: dense min-form steps and 10% of the verifier."""
    recipe = Path(__file__).parent.parent / "configs/prm_grpo_steps.yaml"
    text = recipe.read_text()
    assert "model: runs/prm_arithmetic" in text
    (tmp_path / "recipe.yaml").write_text(text.replace("runs/prm_arithmetic", str(prm_run)))
    config = load_config(tmp_path / "recipe.yaml", [
        "model=tiny", f"output_dir={tmp_path / 'run'}", "train.steps=2", "train.checkpoint_every=0", "task.a_max=20",
        "task.num_eval=4", "rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=8",
        "eval.max_new_tokens=4", "algorithm.dynamic_sampling=false"])
    assert config.algorithm.step_advantages and config.reward[0].args["transform"] == "min_form"
    records = metrics(Path(train(config, echo=quiet).run_dir))
    assert [r["step"] for r in records if "time/step_s" in r] == [1, 2]
    assert all("reward/prm" in r and "reward/numeric_answer" in r and r["reward/failed"] == 0
               for r in records if "time/step_s" in r)


def test_an_episodes_turns_are_its_steps():
    from types import SimpleNamespace

    from aha.training.rl.score import turn_ends

    # two episodes: turns closing at tokens 1 and 3 (the second worth 0), and one turn with no token
    episodes = SimpleNamespace(turn_rewards=torch.tensor([[0.0, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]),
                               episodes=[SimpleNamespace(turn_ends=[1, 3]), SimpleNamespace(turn_ends=[-1])])
    assert turn_ends(episodes).tolist() == [[0.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]


def test_a_cut_completion_is_one_step_worth_its_reward_and_weighs_against_the_steps():
    from dataclasses import replace

    from aha.training.rl.score import cut_to_one_step

    # row 0 has a step worth 0.8 at token 1; row 1 was cut at the limit (truncated_reward 0) after a step worth 0.9
    mask = lengths_mask([2, 3], 3)
    ro = replace(mask_rollouts(mask), truncated=torch.tensor([False, True]))
    steps, ends = torch.tensor([[0.0, 0.8, 0.0], [0.9, 0.0, 0.0]]), torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    rewards = torch.tensor([0.8, 0.0])
    cut_to_one_step(steps, ends, ro, rewards)
    assert steps.tolist() == [[0.0, pytest.approx(0.8), 0.0], [0.0, 0.0, 0.0]]
    assert ends.tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]  # its reward, 0, as a step at its last token
    # R = {0.8, 0}: +-1/sqrt2; left out, the cut row got 0 and rambling to the limit escaped every bad step
    batch = Batch(ro, rewards, step_rewards=steps, step_ends=ends)
    estimate_advantages(batch, AlgorithmConfig(advantage="grpo", step_advantages=True), 2)
    close(batch.advantages, [[2 ** -0.5, 2 ** -0.5, 0.0], [-(2 ** -0.5)] * 3])
    # a token-level estimator is paid exactly as before: 0 on the cut row's last token either way
    plain = Batch(ro, rewards, step_rewards=torch.tensor([[0.0, 0.8, 0.0], [0.0, 0.0, 0.0]]))
    for b in (batch, plain):
        estimate_advantages(b, AlgorithmConfig(advantage="reinforce_pp", group_baseline=False), 2)
    close(batch.advantages, plain.advantages.tolist())
