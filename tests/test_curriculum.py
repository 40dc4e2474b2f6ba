"""Prompt selection during RL: prompts without variance are set aside and tried again later,
the variance curriculum draws in proportion to p (1 - p) + floor, and both resume exactly."""

import pytest
from test_training import assert_resumes_exactly, metrics, tiny_config

from aha.config import ConfigError
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
