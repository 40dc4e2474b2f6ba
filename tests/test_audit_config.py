"""Audit: the config's checks across sections that involve Ray workers and monitor.gold's
reward specs (config/__init__.py, Config._consistent), and that each error names its keys."""

import pytest

from aha.config import ConfigError, load_config

REWARD_WORKERS = ("config in command-line overrides: ray.reward_workers runs reward pools on Ray: give the slow "
                  "rewards workers: N (>= 1)")
STALENESS = ("config in command-line overrides: rollout.max_staleness > 0 (asynchronous RL) samples ahead on Ray "
             "rollout workers: set ray.rollout_workers >= 1 (and method=rl)")


def refused(*overrides) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(None, list(overrides))
    return str(err.value)


def test_reward_workers_are_accepted_when_only_a_gold_spec_has_workers():
    """Catches monitor.gold left out of the ray.reward_workers check: the held-out gold reward's
    pool runs on Ray too (training/rl.py builds it with ray=config.ray)."""
    config = load_config(None, ["ray.reward_workers=true", "reward=[{fn: numeric_answer}, {fn: exact_match}]",
                                "monitor.gold=[{fn: numeric_answer}, {fn: exact_match, workers: 2}]"])
    assert [s.workers for s in config.reward] == [0, 0] and [s.workers for s in config.monitor.gold] == [0, 2]


def test_reward_workers_are_accepted_when_one_trained_reward_has_a_single_worker():
    """Catches the check asking every spec for workers (all for any) or workers >= 2."""
    config = load_config(None, ["ray.reward_workers=true", "reward=[{fn: numeric_answer}, {fn: exact_match, workers: "
                                                           "1}]"])
    assert [s.workers for s in config.reward] == [0, 1] and config.monitor.gold == []


@pytest.mark.parametrize("overrides", [
    (),
    ("monitor.gold=[{fn: numeric_answer}]",),
    ("reward=[{fn: numeric_answer}]", "monitor.gold=[{fn: exact_match, workers: 0}]"),
])
def test_reward_workers_without_any_spec_with_workers_are_refused_naming_the_key(overrides):
    """Catches ray.reward_workers accepted with no pool to run on Ray (its message names the key)."""
    assert refused("ray.reward_workers=true", *overrides) == REWARD_WORKERS


def test_workers_without_ray_reward_workers_need_no_ray():
    """Catches the check firing on workers: N alone (local worker processes need no Ray)."""
    config = load_config(None, ["monitor.gold=[{fn: numeric_answer, workers: 2}]"])
    assert config.ray.reward_workers is False


def test_asynchronous_rl_needs_rollout_workers_and_method_rl():
    """Catches rollout.max_staleness accepted without ray.rollout_workers, or outside method=rl."""
    assert refused("rollout.max_staleness=1") == STALENESS
    assert refused("rollout.max_staleness=1", "ray.rollout_workers=1", "method=sft", "sft.data=x.jsonl") == STALENESS
    assert load_config(None, ["rollout.max_staleness=1", "ray.rollout_workers=1"]).rollout.max_staleness == 1


def test_every_cross_check_that_fails_is_reported_at_once():
    """Catches only the first problem reported: a user would fix one and meet the next."""
    assert refused("ray.reward_workers=true", "rollout.max_staleness=2") == (
        STALENESS + "; " + REWARD_WORKERS.removeprefix("config in command-line overrides: "))


@pytest.mark.parametrize("override, message", [
    ("monitor.gold=[{fn: numeric_answer}, {fn: exact_match, workers: -1}]",
     "config key 'monitor.gold.1.workers' in command-line overrides: Input should be greater than or equal to 0 (got "
     "-1)"),
    ("monitor.gold=[{fn: numeric_answer, wrkers: 2}]",
     "unknown config key 'monitor.gold.0.wrkers' in command-line overrides (did you mean monitor.gold.0.workers?)"),
    ("monitor.gold=[{fn: numeric_answer, model: runs/rm}]",
     ("config key 'monitor.gold.0' in command-line overrides: Value error, a reward needs exactly one of fn (a "
      "function) and model (a trained reward model) (got {'fn': 'numeric_answer', 'model': 'runs/rm'})")),
    ("reward=[{fn: numeric_answer, timeout_s: 0}]",
     "config key 'reward.0.timeout_s' in command-line overrides: Input should be greater than 0 (got 0)"),
])
def test_a_bad_reward_spec_is_named_by_its_section_and_index(override, message):
    """Catches errors in a list of reward specs that lose the spec's index (monitor.gold.1) or
    suggest a key without it. The key's value came from the override, so the message names it."""
    assert refused(override) == message.replace("in command-line overrides", f"in the override {override!r}")
