"""Red team: cross-checks of config/checks.py that no other test pinned down, each on both
sides of its rule (refused where it breaks, accepted at the edge where it holds)."""

import pytest

from aha.config import ConfigError, load_config

PREFIX = "config in command-line overrides: "


def refused(*overrides) -> str:
    with pytest.raises(ConfigError) as err:
        load_config(None, list(overrides))
    return str(err.value)


@pytest.mark.parametrize("overrides", [("algorithm.epochs=2",), ("algorithm.mini_batches=2",),
                                       ("algorithm.epochs=2", "algorithm.mini_batches=2")])
def test_pg_is_refused_with_more_than_one_epoch_or_more_than_one_mini_batch(overrides):
    """Catches the pg rule's `or` made `and`: pg with epochs=2 alone (or mini_batches=2 alone)
    would train off-policy without a ratio."""
    assert refused("algorithm.policy_loss=pg", *overrides) == PREFIX + (
        "algorithm.policy_loss=pg is on-policy only: use epochs=1 and mini_batches=1, or policy_loss=ppo")
    assert load_config(None, ["algorithm.policy_loss=pg"]).algorithm.epochs == 1


def test_an_overlong_buffer_as_long_as_max_new_tokens_is_accepted():
    """Catches the overlong rule's boundary (> made >=): a buffer of exactly max_new_tokens
    punishes from the first token on, which is allowed; one more is not."""
    config = load_config(None, ["rollout.max_new_tokens=8", "algorithm.overlong_buffer=8"])
    assert config.algorithm.overlong_buffer == 8
    assert refused("rollout.max_new_tokens=8", "algorithm.overlong_buffer=9") == PREFIX + (
        "algorithm.overlong_buffer (9) exceeds rollout.max_new_tokens (8)")


@pytest.mark.parametrize("advantage", ["grpo", "rloo", "remax"])
def test_ktae_is_accepted_with_every_sequence_level_advantage(advantage):
    """Catches remax (or another sequence-level advantage) dropped from ktae's list."""
    config = load_config(None, ["algorithm.token_weighting=ktae", f"algorithm.advantage={advantage}"])
    assert config.algorithm.advantage == advantage


@pytest.mark.parametrize("advantage", ["reinforce_pp", "gae"])
def test_ktae_is_refused_with_token_level_advantages(advantage):
    assert "algorithm.token_weighting=ktae needs a sequence-level advantage (grpo, rloo or remax)" in refused(
        "algorithm.token_weighting=ktae", f"algorithm.advantage={advantage}")


@pytest.mark.parametrize("override", ["dpo.label_smoothing=0.1", "dpo.nll_coef=0.5", "dpo.online=true"])
def test_kto_refuses_each_pair_loss_option(override):
    """Catches one of dpo.online / nll_coef / label_smoothing left out of the KTO rule."""
    message = refused("method=dpo", "dpo.loss=kto", "dpo.data=x.jsonl", override)
    assert ("dpo.loss=kto trains offline on labelled completions: dpo.online, dpo.nll_coef and dpo.label_smoothing "
            "are for the pair losses") in message


@pytest.mark.parametrize("method, data", [("rm", "rm.data=x.jsonl"), ("prm", "prm.data=x.jsonl")])
def test_keep_best_is_refused_for_methods_that_sample_no_answers(method, data):
    """Catches method=prm (or rm) dropped from the keep_best rule."""
    assert refused(f"method={method}", data, "train.keep_best=true") == PREFIX + (
        f"train.keep_best ranks checkpoints by held-out accuracy of sampled answers, which method={method} does not "
        "measure (it scores pairs or steps): drop it")


def test_as_many_temperatures_as_the_group_size_are_accepted():
    """Catches the temperatures rule's boundary (> made >=): K = group_size uses each once."""
    config = load_config(None, ["rollout.group_size=2", "rollout.temperatures=[0.5, 1.0]"])
    assert config.rollout.temperatures == [0.5, 1.0]
    assert refused("rollout.group_size=2", "rollout.temperatures=[0.5, 1.0, 1.5]") == PREFIX + (
        "rollout.temperatures lists 3 temperatures for groups of rollout.group_size=2: some would never be used")
