"""Difficulty-aware length shaping by hand: LASER-D's buckets, targets and bonus, A-DLP's
coefficient per prompt, the shaped reward they give, and the state that learns them."""

import pytest
import torch

from aha.algorithms import (
    adapt_prompt_coefs,
    difficulty_buckets,
    ecr_target,
    fewest_right,
    laser_bonus,
    laser_d_targets,
    row_targets,
)
from aha.config import AlgorithmConfig
from aha.rollout import Rollouts
from aha.training.rl.length import LengthShaping, build_length_shaping
from aha.training.rl.score import shaped_rewards


def rollouts_of(lengths: list[int], group: int) -> Rollouts:
    """Rollouts whose row i generated lengths[i] tokens, `group` rows a prompt."""
    n, width = len(lengths), max(lengths)
    mask = torch.tensor([[1.0] * k + [0.0] * (width - k) for k in lengths])
    ones = torch.ones(n, 1, dtype=torch.long)
    return Rollouts(ones, ones, torch.ones(n, width, dtype=torch.long), mask, torch.zeros(n, width),
                    torch.arange(n) // group, [""] * n, torch.zeros(n, dtype=torch.bool))


def test_buckets_follow_the_groups_pass_rate_with_exact_thirds():
    # G = 6: pass rates 1, 4/6, 3/6, 2/6, 1/6, 0; exactly 2/3 is easy and exactly 1/3 is medium
    assert difficulty_buckets(torch.tensor([6, 4, 3, 2, 1, 0]), 6).tolist() == [0, 0, 1, 1, 2, 2]
    assert difficulty_buckets(torch.tensor([2, 1, 0]), 3).tolist() == [0, 1, 2]
    # G = 8: 5/8 = 0.625 is below 2/3 (medium), 3/8 = 0.375 above 1/3 (medium), 2/8 hard
    assert difficulty_buckets(torch.tensor([6, 5, 3, 2]), 8).tolist() == [0, 1, 1, 2]


def test_fewest_right_answers_of_a_bucket():
    # easy: ceil(2G/3); medium: ceil(G/3); hard: 1 by the paper's convention
    assert [fewest_right(b, 8) for b in range(3)] == [6, 3, 1]
    assert [fewest_right(b, 4) for b in range(3)] == [3, 2, 1]
    assert [fewest_right(b, 2) for b in range(3)] == [2, 1, 1]
    assert [fewest_right(b, 3) for b in range(3)] == [2, 1, 1]


def test_ecr_target_is_the_shortest_length_expecting_enough_correct_answers():
    lengths = torch.tensor([60, 10, 40, 20, 50, 30])
    # fewest 3: at l=20 coverage 2/6, ECR = 2/6 * 3 = 1 >= 1; at l=10, 1/6 * 3 = 0.5 < 1
    assert ecr_target(lengths, fewest=3, expected=1, max_len=64) == 20
    assert ecr_target(lengths, fewest=6, expected=1, max_len=64) == 10  # 1/6 * 6 = 1
    assert ecr_target(lengths, fewest=1, expected=1, max_len=64) == 60  # needs every completion: the longest
    assert ecr_target(lengths, fewest=3, expected=2, max_len=64) == 40  # 4/6 * 3 = 2
    assert ecr_target(lengths, fewest=1, expected=2, max_len=64) == 64  # even all of them expect 1 < 2: no limit
    # 7 lengths, fewest 3: coverage must reach 1/3, i.e. 3 of 7 (2/7 * 3 = 0.86 < 1)
    assert ecr_target(torch.tensor([7, 1, 6, 2, 5, 3, 4]), fewest=3, expected=1, max_len=9) == 3
    assert ecr_target(torch.tensor([], dtype=torch.long), fewest=3, expected=1, max_len=9) == 9


def test_laser_d_targets_per_bucket_and_a_bucket_without_groups_keeps_its_target():
    right = torch.tensor([4, 3, 2, 0])  # G = 4: easy, easy (3/4), medium (2/4), hard
    lengths = torch.tensor([[5, 9, 12, 20], [6, 7, 15, 30], [10, 11, 40, 44], [48, 48, 30, 25]])
    # easy: 8 lengths, fewest ceil(8/3) = 3, so 8/3 -> 3 of them: sorted 5 6 7 ... -> 7
    # medium: 4 lengths, fewest ceil(4/3) = 2, so 2 of them: 10 11 -> 11; hard: all -> 48
    assert laser_d_targets(right, lengths, [48, 48, 48], expected=1, max_len=48) == [7, 11, 48]
    assert laser_d_targets(right[:2], lengths[:2], [40, 33, 44], expected=1, max_len=48) == [7, 33, 44]


def test_row_targets_and_the_bonus_only_for_correct_answers_within_their_target():
    correct = torch.tensor([[True, True, True], [True, False, False], [False, False, False]])  # easy, medium, hard
    assert row_targets(correct, [5, 8, 12]).tolist() == [5, 5, 5, 8, 8, 8, 12, 12, 12]
    bonus = laser_bonus(torch.tensor([True, True, False, True]), torch.tensor([5, 10, 3, 12]),
                        torch.tensor([10, 10, 10, 11]), 0.5)
    assert bonus.tolist() == [0.5, 0.5, 0.0, 0.0]  # short and wrong earns nothing; right but too long neither


def test_prompt_coefficients_each_follow_their_own_groups_accuracy():
    coefs = {"a": 0.2}
    # target 0.5, rate 0.2: a (4/4 right): 0.2 + 0.2 * 0.5 = 0.3; b first seen at 0.1 (1/4): 0.1 - 0.05 = 0.05;
    # a again (0/4): 0.3 - 0.1 = 0.2; c (0/4) from 0.1: 0.0 (floor at 0)
    out = adapt_prompt_coefs(coefs, ["a", "b", "a", "c"], [4, 1, 0, 0], 4, start=0.1, target=0.5, rate=0.2,
                             max_coef=1.0)
    assert out == pytest.approx({"a": 0.2, "b": 0.05, "c": 0.0})
    assert coefs == {"a": 0.2}  # the caller's dict is not changed
    assert adapt_prompt_coefs({}, ["a"], [4], 4, start=0.9, target=0.5, rate=0.4, max_coef=1.0) == {"a": 1.0}


def test_shaped_rewards_with_a_coefficient_per_row_and_laser_d_targets():
    ro = rollouts_of([2, 4, 6, 8], group=2)
    algo = AlgorithmConfig(laser_bonus=0.5)
    total = torch.tensor([1.0, 1.0, 0.0, 1.0])
    # per-row coefficients: the correct ones pay coef * length / 8; then the bonus within target 4
    got = shaped_rewards(total, ro, algo, 8, torch.tensor([0.4, 0.4, 0.8, 0.8]), torch.tensor([4, 4, 4, 4]))
    assert got.tolist() == pytest.approx([1.0 - 0.1 + 0.5, 1.0 - 0.2 + 0.5, 0.0, 1.0 - 0.8])
    # truncated_reward still has the last word on a cut completion
    ro.truncated[3] = True
    algo = AlgorithmConfig(truncated_reward=0.0)
    assert shaped_rewards(total, ro, algo, 8, 0.0, torch.tensor([8, 8, 8, 8])).tolist() == [1.5, 1.5, 0.0, 0.0]


def test_length_state_shapes_a_step_alike_and_learns_at_its_end():
    algo = AlgorithmConfig(length_shaping="laser_d", length_adaptive=True, length_adaptive_per="prompt",
                           length_coef=0.2, length_coef_rate=0.1, length_target_acc=0.5)
    state = build_length_shaping(algo, max_new_tokens=16, group_size=2)
    assert build_length_shaping(AlgorithmConfig(), 16, 2) is None
    chosen = [{"id": "p"}, {"id": 7}]
    correct = torch.tensor([True, True, False, True])  # p: easy (2/2), 7: medium (1/2)
    assert state.row_targets(correct).tolist() == [16] * 4  # no limit before any group
    assert state.coef(chosen, 0.0).tolist() == pytest.approx([0.2, 0.2])
    state.observe(chosen, correct, torch.tensor([3, 9, 12, 5]))
    assert state.row_targets(correct).tolist() == [16] * 4  # unchanged until the step ends
    stats = state.update()
    assert stats["length/penalty_coef"] == pytest.approx(0.2)  # the coefficients the step was shaped with
    assert stats["length/prompts_tracked"] == 2
    assert (stats["laser/groups_easy"], stats["laser/groups_medium"], stats["laser/groups_hard"]) == (1, 1, 0)
    assert stats["laser/length_easy"] == 6.0 and stats["laser/length_medium"] == 8.5
    assert "laser/length_hard" not in stats and stats["laser/bonus_frac"] == 0.75 and stats["laser/target_mean"] == 16
    # p: 0.2 + 0.1 * (1 - 0.5) = 0.25; 7: 0.2 + 0.1 * (0.5 - 0.5) = 0.2
    assert state.coefs == pytest.approx({"p": 0.25, "7": 0.2})
    # easy (G = 2, fewest 2): 1 of 2 lengths -> 3; medium (fewest 1): both -> 12; hard keeps 16
    assert state.targets == [3, 12, 16]
    again = LengthShaping(algo, 16, 2)
    again.load_state(state.state())
    assert again.coefs == state.coefs and again.targets == state.targets
    assert state.update() == {}  # a step that observed nothing changes nothing
