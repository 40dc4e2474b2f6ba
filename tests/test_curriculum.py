"""Prompt selection during RL: prompts without variance are set aside and tried again later
(at once or after a second look), the variance and target curricula draw in proportion to
their weights of each prompt's estimated pass rate plus a floor, and all resume exactly."""

import math
import typing

import pytest
from test_training import assert_resumes_exactly, metrics, tiny_config

from aha.algorithms.prompt_weights import PROMPT_WEIGHTINGS, pass_rate
from aha.config import ConfigError, CurriculumConfig
from aha.tasks.curriculum import CurriculumSampler

SAMPLES = [{"id": f"p{i}", "prompt": f"q{i}", "answer": "1"} for i in range(6)]


def ids(batch):
    return [s["id"] for s in batch]


def test_a_prompt_without_variance_is_set_aside_then_tried_again():
    sampler = CurriculumSampler(SAMPLES, seed=0, filter=True, retest_after=2)
    # all right, all wrong, mixed
    sampler.observe([SAMPLES[0], SAMPLES[1], SAMPLES[2]], [4, 0, 2], group_size=4, step=1)
    # p0 and p1 sit out their next two turns (one an epoch); p2, whose group had variance, does not
    assert set(ids(sampler.next(4))) == {"p2", "p3", "p4", "p5"}
    later = [ids(sampler.next(4)) for _ in range(4)]
    assert sampler.stats() == {"curriculum/set_aside": 0, "curriculum/skipped": 4, "curriculum/seen": 3}
    assert "p0" in sum(later, []) and "p1" in sum(later, [])  # then they come again


def test_sitting_out_counts_turns_however_long_an_epoch_is():
    many = [{"id": f"q{i}", "prompt": f"q{i}", "answer": "1"} for i in range(1000)]
    sampler = CurriculumSampler(many, seed=0, filter=True, retest_after=1)
    first = sampler.next(1000)  # a whole epoch, drawn over what would be 125 steps of 8
    sampler.observe(first, [8] * 1000, group_size=8, step=1)
    second = sampler.next(10)  # the next epoch: every prompt sits out once, then they come again
    assert sampler.stats()["curriculum/skipped"] == 1000 and len(set(ids(second))) == 10


def test_when_every_prompt_is_set_aside_they_are_drawn_anyway():
    sampler = CurriculumSampler(SAMPLES, seed=0, filter=True, retest_after=100)
    sampler.observe(SAMPLES, [0] * 6, group_size=2, step=1)
    assert len(sampler.next(4)) == 4
    weighted = CurriculumSampler(SAMPLES, seed=0, filter=True, weighting="variance")
    weighted.observe(SAMPLES, [2] * 6, group_size=2, step=1)
    assert len(weighted.next(3)) == 3


def test_the_variance_curriculum_draws_in_proportion_to_p_times_one_minus_p():
    sampler = CurriculumSampler(SAMPLES[:3], seed=0, weighting="variance", floor=0.05)
    # p = (right + 1) / (tried + 2): 1/10 (8 tried, none right), 5/10, 9/10
    sampler.observe(SAMPLES[:3], [0, 4, 8], group_size=8, step=1)
    counts = dict.fromkeys(ids(SAMPLES[:3]), 0)
    draws = 20000
    for _ in range(draws):
        counts[sampler.next(1)[0]["id"]] += 1
    weights = [0.1 * 0.9 + 0.05, 0.5 * 0.5 + 0.05, 0.9 * 0.1 + 0.05]
    for (name, count), weight in zip(counts.items(), weights):
        expected = draws * weight / sum(weights)
        assert abs(count - expected) < 5 * (expected * (1 - weight / sum(weights))) ** 0.5, (name, count, expected)
    assert len(set(ids(sampler.next(3)))) == 3  # one draw holds distinct prompts


@pytest.mark.parametrize("weighting", ["uniform", "variance"])
def test_its_state_resumes_the_same_draws(weighting):
    a = CurriculumSampler(SAMPLES, seed=1, filter=True, retest_after=2, weighting=weighting)
    for step in range(1, 4):
        batch = a.next(3)
        a.observe(batch, [0, 1, 2], group_size=2, step=step)
    b = CurriculumSampler(SAMPLES, seed=1, filter=True, retest_after=2, weighting=weighting)
    b.load_state(a.state())
    assert [ids(a.next(3)) for _ in range(4)] == [ids(b.next(3)) for _ in range(4)]


def test_an_rl_run_with_a_curriculum_logs_it_and_resumes_exactly(tmp_path):
    overrides = ("curriculum.filter=true", "curriculum.retest_after=1", "curriculum.weighting=variance",
                 "eval.before=false", "eval.after=false")
    assert_resumes_exactly(tmp_path, tiny_config, *overrides)
    steps = [r for r in metrics(tmp_path / "straight") if "reward/mean" in r]
    assert all("curriculum/seen" in r for r in steps) and steps[-1]["curriculum/seen"] > steps[0]["curriculum/seen"]


def test_a_curriculum_outside_rl_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="curriculum.filter / curriculum.weighting .* method=rl only"):
        tiny_config(tmp_path, "bad", "method=sft", "curriculum.filter=true")


def test_pass_rates_and_weightings_by_hand():
    assert pass_rate(3, 8) == pytest.approx(0.4)  # (3 + 1) / (8 + 2)
    assert pass_rate(3, 8, prior_mean=0.8) == pytest.approx(0.46)  # (3 + 2 * 0.8) / (8 + 2)
    assert pass_rate(0, 0, prior_mean=0.3) == pytest.approx(0.3)  # never tried: the prior's mean
    assert PROMPT_WEIGHTINGS["variance"](0.4, None, 0.15) == pytest.approx(0.24)
    target = PROMPT_WEIGHTINGS["target"]
    assert target(0.25, 0.25, 0.1) == 1.0
    assert target(0.4, 0.25, 0.15) == pytest.approx(0.6065307)  # one width away: e^-1/2
    assert target(0.55, 0.25, 0.1) == pytest.approx(0.0111090)  # three widths: e^-4.5


def test_the_weightings_are_the_configs():
    assert set(typing.get_args(CurriculumConfig.model_fields["weighting"].annotation)) == {"uniform",
                                                                                            *PROMPT_WEIGHTINGS}


def test_the_target_curriculum_draws_in_proportion_to_a_kernel_around_target_p():
    sampler = CurriculumSampler(SAMPLES[:3], seed=0, weighting="target", target_p=0.25, target_width=0.2, floor=0.05)
    sampler.observe(SAMPLES[:3], [0, 4, 8], group_size=8, step=1)  # p = 0.1, 0.5, 0.9 as above
    # exp(-(p - 0.25)^2 / (2 * 0.2^2)) + 0.05: exp(-0.28125), exp(-0.78125), exp(-5.28125)
    weights = [0.7548396 + 0.05, 0.4578334 + 0.05, 0.0050862 + 0.05]
    assert sampler.weights(SAMPLES[:3]) == pytest.approx(weights, abs=1e-6)
    counts = dict.fromkeys(ids(SAMPLES[:3]), 0)
    draws = 20000
    for _ in range(draws):
        counts[sampler.next(1)[0]["id"]] += 1
    for (name, count), weight in zip(counts.items(), weights):
        expected = draws * weight / sum(weights)
        assert abs(count - expected) < 5 * (expected * (1 - weight / sum(weights))) ** 0.5, (name, count, expected)
    assert len(set(ids(sampler.next(3)))) == 3


def test_the_pool_prior_estimates_an_untried_prompt_from_the_others():
    flat = CurriculumSampler(SAMPLES[:3], seed=0, weighting="target", target_p=0.8, target_width=0.1)
    pool = CurriculumSampler(SAMPLES[:3], seed=0, weighting="target", target_p=0.8, target_width=0.1, prior="pool")
    for sampler in (flat, pool):
        sampler.observe(SAMPLES[:2], [6, 8], group_size=8, step=1)
    assert flat.prior_mean() == 0.5 and flat.estimate(SAMPLES[2]) == 0.5
    m = (14 + 1) / (16 + 2)  # every sample of the pool so far, with Laplace's rule
    assert pool.prior_mean() == pytest.approx(m)
    assert pool.estimate(SAMPLES[2], m) == pytest.approx(m)  # untried: the pool's rate, here near the target
    assert pool.estimate(SAMPLES[0], m) == pytest.approx((6 + 2 * m) / 10)
    untried = [flat.weights(SAMPLES[2:3])[0], pool.weights(SAMPLES[2:3])[0]]
    assert untried == pytest.approx([math.exp(-0.09 / 0.02) + 0.05, math.exp(-(m - 0.8) ** 2 / 0.02) + 0.05])


def test_filter_after_sets_a_prompt_aside_only_after_that_many_flat_groups_in_a_row():
    once = CurriculumSampler(SAMPLES, seed=0, filter=True, retest_after=1)
    twice = CurriculumSampler(SAMPLES, seed=0, filter=True, retest_after=1, filter_after=2)
    aside = lambda s: {x["id"] for x in SAMPLES if s._aside(x)}  # noqa: E731
    for sampler in (once, twice):
        sampler.observe(SAMPLES[:3], [4, 0, 2], group_size=4, step=1)  # all right, all wrong, mixed
    assert aside(once) == {"p0", "p1"} and aside(twice) == set()  # the first look sets aside only without filter_after
    twice.observe(SAMPLES[:3], [0, 2, 4], group_size=4, step=2)
    assert aside(twice) == {"p0"}  # flat twice in a row (right, then wrong); p1's mixed group broke its run
    twice.observe(SAMPLES[1:3], [4, 3], group_size=4, step=3)
    assert aside(twice) == {"p0"}  # p1 flat once since; p2's run broken
    assert set(ids(twice.next(5))) == {"p1", "p2", "p3", "p4", "p5"}  # p0 sits out its one turn
    assert aside(twice) == set() and twice.stats()["curriculum/skipped"] == 1
    twice.observe(SAMPLES[:1], [0], group_size=4, step=4)
    assert aside(twice) == set()  # counted afresh after sitting out: one flat group is not two
    twice.observe(SAMPLES[:1], [0], group_size=4, step=5)
    assert aside(twice) == {"p0"}


def test_a_checkpoint_from_before_filter_after_loads():
    sampler = CurriculumSampler(SAMPLES, seed=0, filter=True, filter_after=2)
    sampler.load_state({"epoch": 0, "position": 0, "records": {"p0": [0, 4, 0]}, "draws": 0, "skipped": 0})
    sampler.observe(SAMPLES[:1], [0], group_size=4, step=1)
    assert sampler.records["p0"] == [0, 8, 0, 1]


def test_an_rl_run_with_the_target_curriculum_and_a_second_look_resumes_exactly(tmp_path):
    overrides = ("curriculum.weighting=target", "curriculum.target_p=0.3", "curriculum.prior=pool",
                 "curriculum.filter=true", "curriculum.filter_after=2", "curriculum.retest_after=1",
                 "eval.before=false", "eval.after=false")
    assert_resumes_exactly(tmp_path, tiny_config, *overrides)
    steps = [r for r in metrics(tmp_path / "straight") if "reward/mean" in r]
    assert [r["curriculum/seen"] for r in steps][-1] > steps[0]["curriculum/seen"]


@pytest.mark.parametrize("overrides, problem", [
    (["curriculum.weighting=target"], "curriculum.weighting=target needs curriculum.target_p"),
    (["curriculum.target_p=0.4"], "curriculum.target_p is read by curriculum.weighting=target only"),
    (["curriculum.filter_after=2"], "curriculum.filter_after .* set curriculum.filter=true"),
    (["curriculum.target_p=1.5", "curriculum.weighting=target"], "curriculum.target_p"),
    (["curriculum.difficulty_max=3"], "curriculum.difficulty_max schedules task.difficulty, which only the "
                                      "procedural tasks have .* task.name is arithmetic"),
    (["task.name=sorting", "task.difficulty=2", "curriculum.difficulty_max=2"],
     r"curriculum.difficulty_max \(2\) must be above task.difficulty \(2\)"),
    (["task.name=sorting", "method=sft", "curriculum.difficulty_max=3"], "curriculum.difficulty_max .* method=rl only"),
])
def test_bad_curriculum_settings_are_refused_naming_the_key(tmp_path, overrides, problem):
    with pytest.raises(ConfigError, match=problem):
        tiny_config(tmp_path, "bad", *overrides)
