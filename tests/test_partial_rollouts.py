"""Partial rollouts (APRIL): a round stops once enough groups are complete, and the
completions still going continue in the next round with the log-probs they were drawn with."""

from pathlib import Path

import pytest
import torch
from test_training import assert_resumes_exactly, metrics, tiny_config

from aha.config import ConfigError, TaskConfig
from aha.models import load
from aha.rollout import HFEngine, PartialRound
from aha.tasks import PromptSampler, build_task
from aha.training.logprobs import completion_logprobs
from aha.training.rl.partial import PartialRollouts

QUIET = lambda *_: None  # noqa: E731


def tiny_engine(max_new_tokens=6, batch_size=64, stop_every=None):
    """The tiny model's engine; stop_every=k makes every k-th token id a stop token, so that
    completions end at different lengths (the random tiny model almost never samples its EOS)."""
    lm = load("tiny")
    engine = HFEngine(lm.model, lm.tokenizer, max_new_tokens, batch_size=batch_size)
    if stop_every:
        engine.eos_ids = list(range(0, lm.model.config.vocab_size, stop_every))
    prompts = [lm.tokenizer.encode(text) for text in ("7*8=", "a b c", "1+1", "hello")]
    return lm, engine, prompts


def test_a_round_that_needs_every_group_samples_what_generate_samples():
    lm, engine, prompts = tiny_engine(stop_every=7)
    torch.manual_seed(0)
    plain = engine.generate(prompts, group_size=3)
    torch.manual_seed(0)
    partial = engine.generate_partial(prompts, PartialRound([3] * 4, [6] * 4, [0, 1, 2, 3], enough=4))
    for name in ("completion_ids", "completion_mask", "sampling_logprobs", "truncated", "prompt_ids", "prompt_index"):
        assert torch.equal(getattr(plain, name), getattr(partial, name)), name
    assert plain.texts == partial.texts
    assert plain.unfinished is None and not partial.unfinished.any()


def test_the_round_stops_once_enough_groups_are_complete():
    lm, engine, prompts = tiny_engine()  # no stop token in reach: rows end at their budgets
    torch.manual_seed(1)
    out = engine.generate_partial(prompts[:3], PartialRound([2, 2, 2], [2, 6, 5], [0, 1, 2], enough=1))
    assert out.completion_ids.shape == (6, 2)  # group 0 was complete after 2 tokens: the round ended there
    assert out.lengths().tolist() == [2.0] * 6
    assert out.unfinished.tolist() == [False, False, True, True, True, True]
    assert out.truncated.tolist() == [True, True, False, False, False, False]  # at its budget, no stop token


def test_prompts_of_chunks_not_needed_come_back_unstarted():
    lm, engine, prompts = tiny_engine(batch_size=2)  # one prompt of 2 copies a chunk
    out = engine.generate_partial(prompts, PartialRound([2] * 4, [3] * 4, [0, 1, 2, 3], enough=2))
    assert out.lengths().tolist() == [3.0] * 4 + [0.0] * 4
    assert out.unfinished.tolist() == [False] * 4 + [True] * 4
    assert out.texts[4:] == [""] * 4
    assert out.prompt_index.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


def test_a_group_spread_over_prompts_completes_when_all_its_rows_are_done():
    lm, engine, prompts = tiny_engine()
    # group 0: two single rows with budgets 1 and 4; group 1: one prompt of 2 copies, budget 3
    out = engine.generate_partial([prompts[0], prompts[1], prompts[2]],
                                  PartialRound([1, 1, 2], [1, 4, 3], [0, 0, 1], enough=1))
    assert out.lengths().tolist() == [1.0, 3.0, 3.0, 3.0]  # group 1 completed first, at 3 tokens
    assert out.unfinished.tolist() == [False, True, False, False]


def test_bad_plans_are_refused():
    with pytest.raises(ValueError, match="one entry a prompt"):
        PartialRound([1, 2], [3], [0, 1], 1)
    with pytest.raises(ValueError, match="at least one copy and one token"):
        PartialRound([1], [0], [0], 1)


def rounds(engine, lm, needed=2, extra=2, count=6, group_size=3, versions=None):
    task = build_task(TaskConfig(name="arithmetic", a_max=20, num_eval=4))
    sampler = PromptSampler(task.train, seed=0)
    partial = PartialRollouts(extra, group_size, engine.max_new_tokens)
    taken, stats = [], []
    for r in range(count):
        torch.manual_seed(r)
        taken.append(partial.round(engine, task, sampler, needed, (versions or range(count))[r]))
        stats.append(partial.last_stats)
    return task, sampler, partial, taken, stats


def test_continued_completions_are_whole_and_keep_the_logprobs_they_were_drawn_with():
    lm, engine, _ = tiny_engine(max_new_tokens=8, stop_every=3)
    task, _, partial, taken, stats = rounds(engine, lm, versions=[0] * 6)  # weights never change here
    assert sum(s["partial/resumed_rows"] for s in stats) > 0  # some rounds did continue carried rows
    for chosen, ro in taken:
        assert len(chosen) == 2 and ro.prompt_index.tolist() == [0, 0, 0, 1, 1, 1]
        lengths = ro.lengths().long()
        for i in range(len(ro)):  # every row ended at a stop token or at the budget
            ids = ro.completion_ids[i, :lengths[i]].tolist()
            assert bool(ro.truncated[i]) == (ids[-1] not in engine.eos_ids)
            assert not any(t in engine.eos_ids for t in ids[:-1])
            assert not ro.truncated[i] or lengths[i] == 8  # truncated only at the budget
            assert ro.texts[i] == lm.tokenizer.decode(ids, skip_special_tokens=True)
        with torch.no_grad():  # the learner's log-probs of the stitched rows are the engine's
            learner = completion_logprobs(lm.model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                                          ro.completion_mask, 1.0)
        torch.testing.assert_close(learner, ro.sampling_logprobs, atol=1e-5, rtol=0)


def test_no_prompt_is_lost_or_trained_twice_and_carried_groups_go_first():
    lm, engine, _ = tiny_engine(max_new_tokens=8, stop_every=3)
    task, sampler, partial, taken, stats = rounds(engine, lm)
    order = PromptSampler(task.train, seed=0).next(sampler.position)
    trained = [s["prompt"] for chosen, _ in taken for s in chosen]
    carried = [g.sample["prompt"] for g in partial.carried]
    assert sorted(trained + carried) == sorted(s["prompt"] for s in order)  # each drawn prompt once
    assert len(set(trained)) == len(trained)
    assert all(s["partial/carried_groups"] <= 2 for s in stats)  # never more than the extra groups
    assert stats[-1]["partial/carried_groups"] == len(partial.carried)
    # a stale token is one drawn on an older version: only continued rows hold them
    assert any(s["partial/stale_token_frac"] > 0 for s in stats)
    assert all((s["partial/max_age"] > 0) == (s["partial/stale_token_frac"] > 0) for s in stats)


def test_carried_groups_survive_a_state_round_trip():
    lm, engine, _ = tiny_engine(max_new_tokens=8, stop_every=3)
    _, _, partial, _, _ = rounds(engine, lm, count=3)
    again = PartialRollouts(2, 3, 8)
    again.load_state(partial.state())
    assert again.carried == partial.carried


def test_a_checkpoint_holds_the_carried_groups_of_rounds_in_flight():
    lm, engine, _ = tiny_engine(max_new_tokens=8, stop_every=3)
    task, sampler, partial, _, _ = rounds(engine, lm, count=3)
    carried = [(g.sample, [len(r.tokens) for r in g.rows]) for g in partial.carried]
    assert carried and any(sum(lengths) for _, lengths in carried)
    launch = partial.launch(lm.tokenizer, task, sampler, 2)  # asynchronous RL: submitted, not landed yet
    assert partial.carried == [] and len(launch.groups) == 4
    again = PartialRollouts(2, 3, 8)
    again.load_state(partial.state([launch]))
    # the carried groups as they were, then the round's fresh prompts, not started
    saved = [(g.sample, [len(r.tokens) for r in g.rows]) for g in again.carried]
    assert saved[:len(carried)] == carried
    assert saved[len(carried):] == [(g.sample, [0, 0, 0]) for g in launch.groups[len(carried):]]


def test_a_resume_with_other_settings_neither_crashes_nor_trains_misshapen_groups(caplog):
    lm, engine, _ = tiny_engine(max_new_tokens=8, stop_every=3)
    task, sampler, partial, _, _ = rounds(engine, lm, count=3)
    assert any(row.tokens and not row.done for g in partial.carried for row in g.rows)
    shorter = PartialRollouts(2, 3, 1)  # rollout.max_new_tokens lowered to 1 on resume
    shorter.load_state(partial.state())
    engine.max_new_tokens = 1
    _, ro = shorter.round(engine, task, sampler, 2, 3)
    assert ro.lengths().max() <= 8 and len(ro) == 6
    bigger = PartialRollouts(2, 4, 8)  # rollout.group_size raised on resume
    with caplog.at_level("WARNING", logger="aha.training.rl.partial"):
        bigger.load_state(partial.state())
    assert bigger.carried == [] and "2 carried groups of another group size are dropped" in caplog.text


def test_ray_shares_split_the_stop_exactly_and_cut_only_between_groups():
    import random

    from aha.rollout.ray_engine import partial_shares

    assert partial_shares(PartialRound([8] * 10, [16] * 10, list(range(10)), 8), 2) == [(0, 5, 4), (5, 10, 4)]
    rng = random.Random(0)
    for _ in range(2000):
        n = rng.randint(1, 12)
        groups = [0]
        for _ in range(n - 1):
            groups.append(groups[-1] + (rng.random() < 0.6))
        enough = rng.randint(1, groups[-1] + 1)
        plan = PartialRound([rng.randint(1, 4) for _ in range(n)], [3] * n, groups, enough)
        shares = partial_shares(plan, rng.randint(1, 5))
        assert shares[0][0] == 0 and shares[-1][1] == n and all(a[1] == b[0] for a, b in zip(shares, shares[1:]))
        assert all(start == 0 or groups[start] != groups[start - 1] for start, _, _ in shares)
        assert sum(e for _, _, e in shares) == enough
        assert all(0 <= e <= len(set(groups[start:end])) for start, end, e in shares)


@pytest.mark.parametrize("overrides, message", [
    (["method=sft"], "rollout.partial_rollouts carries completions from one RL round to the next: method=rl only"),
    (["algorithm.old_logprobs=trainer"], "rollout.partial_rollouts with algorithm.old_logprobs=trainer needs "
                                         "algorithm.tis_cap"),
])
def test_settings_it_cannot_run_with_are_refused(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config(tmp_path, "bad", "rollout.partial_rollouts=2", *overrides)


@pytest.fixture
def stops_often(monkeypatch):
    """Every 3rd token id stops a completion, so that the tiny model's rows end at different
    lengths and rounds really stop early and carry rows."""
    import aha.rollout.settings

    monkeypatch.setattr(aha.rollout.settings, "stop_ids", lambda tokenizer, model: list(range(0, 49152, 3)))


def test_a_run_with_partial_rollouts_carries_rows_and_resumes_exactly(tmp_path, stops_often):
    overrides = ("rollout.partial_rollouts=2", "rollout.max_new_tokens=10", "eval.before=false", "eval.after=false")
    assert_resumes_exactly(tmp_path, tiny_config, *overrides)
    steps = [r for r in metrics(Path(tmp_path / "straight")) if "reward/mean" in r]
    assert all(r["groups/trained"] == 3 for r in steps)
    assert any(r["partial/resumed_rows"] > 0 for r in steps)
    assert any(r["partial/stale_token_frac"] > 0 for r in steps)
