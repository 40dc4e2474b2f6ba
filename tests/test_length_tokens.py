"""Length rewards measure what the policy generated (issue 29, round two, kind 3): a count of
words is cut threefold by zero-width characters between words, which cost tokens and show
nothing. The composition knows each completion's generated tokens and gives them (as
completion_tokens) to the rewards that take them: length_penalty(limit_tokens),
target_length_bonus(target_tokens), length_limit(max_tokens); without them a reward
estimates tokens from the text, and a limit in words splits words at invisible characters."""

import types

import pytest
import torch

import aha.eval.ranking as ranking
import aha.eval.runner as runner
import aha.eval.sampling as sampling
from aha.config import AlgorithmConfig, RewardSpec
from aha.eval.scoring import FunctionScorer, RewardScorer
from aha.rewards import batched, formats, shaping
from aha.rewards.compose import Component, CompositeReward, build_reward
from aha.rewards.functions import RewardError
from aha.rollout import Rollouts
from aha.training.phases import Phases
from aha.training.rl import collect

TEXT = "so the answer is clearly twelve and nothing else " * 4  # 36 words
HIDDEN = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u180e", "\u3164", "\u034f"]


def hide_spaces(text: str, char: str) -> str:
    return char.join(text.split())


# -- words: invisible characters between them join none -----------------------------------

@pytest.mark.parametrize("char", HIDDEN)
def test_invisible_characters_between_words_do_not_shorten_a_length_in_words(char):
    hidden = hide_spaces(TEXT, char)
    assert shaping.length_penalty(hidden, {}, limit_words=72) == -0.5
    assert shaping.length_penalty(TEXT, {}, limit_words=72) == -0.5
    assert formats.length_limit(hidden, {}, max_words=20) == formats.length_limit(TEXT, {}, max_words=20) == 0.0
    sample = {"answer": "12"}
    long, short = hidden + r" \boxed{12}", r"so \boxed{12}"
    assert shaping.target_length_bonus(long, sample, target_words=5) == 1.0  # correct but long: no bonus
    assert shaping.target_length_bonus(short, sample, target_words=5) == 1.5


# -- tokens: the composition's count, else an estimate that invisible characters only raise --

def test_token_limits_read_the_generated_token_count():
    assert shaping.length_penalty("short", {}, limit_tokens=100, completion_tokens=50) == -0.5
    assert shaping.length_penalty(TEXT, {}, limit_tokens=100, completion_tokens=10, coef=2.0) == pytest.approx(-0.2)
    assert formats.length_limit("short", {}, max_tokens=100, completion_tokens=101) == 0.0
    assert formats.length_limit(TEXT, {}, max_tokens=100, completion_tokens=100) == 1.0
    sample = {"answer": "12"}
    assert shaping.target_length_bonus(r"\boxed{12}", sample, target_tokens=8, completion_tokens=9) == 1.0
    assert shaping.target_length_bonus(r"\boxed{12}", sample, target_tokens=8, completion_tokens=8) == 1.5
    assert shaping.target_length_bonus(r"\boxed{13}", sample, target_tokens=8, completion_tokens=1) == 0.0


@pytest.mark.parametrize("char", HIDDEN + [""])
def test_without_a_count_the_token_estimate_cannot_be_cut_by_hiding_the_spaces(char):
    plain = shaping.estimate_tokens(TEXT)
    assert plain >= 36  # about a token a word, as a BPE vocabulary has it
    assert shaping.estimate_tokens(hide_spaces(TEXT, char)) >= plain
    assert formats.length_limit(hide_spaces(TEXT, char), {}, max_tokens=plain - 1) == 0.0
    assert shaping.length_penalty(hide_spaces(TEXT, char), {}, limit_tokens=plain) == -1.0


def test_a_length_reward_needs_one_limit():
    with pytest.raises(ValueError, match="one of limit_words or limit_tokens"):
        shaping.length_penalty("a", {}, limit_words=3, limit_tokens=3)
    with pytest.raises(ValueError, match="limit_tokens must be positive"):
        shaping.length_penalty("a", {}, limit_tokens=0)
    with pytest.raises(ValueError, match="one of target_words or target_tokens"):
        shaping.target_length_bonus("a", {}, bonus=0.5)
    with pytest.raises(ValueError, match="needs max_chars or max_words"):
        formats.length_limit("a", {})


# -- the composition gives the count, in this process, in batches and in workers -------------

def seen(completion, sample, completion_tokens=None):
    return -1.0 if completion_tokens is None else float(completion_tokens)


@batched
def seen_batch(completions, samples, completion_tokens=None):
    return [-1.0] * len(completions) if completion_tokens is None else [float(n) for n in completion_tokens]


def test_the_composition_gives_token_counts_to_the_rewards_that_take_them():
    reward = CompositeReward([Component("seen", seen), Component("batch", seen_batch, batched=True),
                              Component("plain", lambda completion, sample: 1.0)])
    result = reward.score(["a", "b"], [{}, {}], completion_tokens=[7, 30])
    assert result.components["seen"].tolist() == [7.0, 30.0]
    assert result.components["batch"].tolist() == [7.0, 30.0]
    assert result.components["plain"].tolist() == [1.0, 1.0] and not result.failed.any()
    unknown = reward.score(["a"], [{}])  # called without them: the rewards fall back
    assert unknown.components["seen"].tolist() == [-1.0] and unknown.components["batch"].tolist() == [-1.0]


def test_pooled_and_built_in_length_rewards_get_the_count(tmp_path):
    (tmp_path / "count.py").write_text("def seen(completion, sample, completion_tokens=None):\n"
                                       "    return -1.0 if completion_tokens is None else float(completion_tokens)\n")
    specs = [RewardSpec(fn="count.py:seen", workers=1, timeout_s=30.0),
             RewardSpec(fn="length_limit", args={"max_tokens": 20}, combine="gate"),
             RewardSpec(fn="length_penalty", args={"limit_tokens": 40}, weight=0.5)]
    reward = build_reward(specs, tmp_path)
    try:
        result = reward.score(["tiny", "tiny"], [{}, {}], completion_tokens=[10, 25])
    finally:
        reward.close()
    assert result.components["seen"].tolist() == [10.0, 25.0]
    assert result.components["length_limit"].tolist() == [1.0, 0.0]  # 25 tokens, whatever the text
    assert result.components["length_penalty"].tolist() == [-0.25, -0.625]
    assert result.total.tolist() == [10.0 - 0.125, 0.0]


def test_the_count_is_not_a_config_argument(tmp_path):
    with pytest.raises(RewardError, match=r"reward\[0\].args.completion_tokens"):
        build_reward([RewardSpec(fn="length_limit", args={"max_tokens": 3, "completion_tokens": 1})], tmp_path)


# -- the call sites count what the policy generated ------------------------------------------

def rollouts_of(texts: list[str], lengths: list[int], group: int = 1) -> Rollouts:
    """Rollouts of texts, each with lengths[i] generated tokens, `group` rows a prompt."""
    n, width = len(texts), max(lengths)
    mask = torch.tensor([[1.0] * k + [0.0] * (width - k) for k in lengths])
    ones = torch.ones(n, 1, dtype=torch.long)
    return Rollouts(ones, ones, torch.ones(n, width, dtype=torch.long), mask, torch.zeros(n, width),
                    torch.arange(n) // group, texts, torch.zeros(n, dtype=torch.bool))


def counting_reward() -> CompositeReward:
    return CompositeReward([Component("seen", seen)])


def test_an_rl_step_scores_with_the_generated_token_counts():
    rollouts = rollouts_of(["a", "b", "c"], [3, 9, 5])
    config = types.SimpleNamespace(algorithm=AlgorithmConfig(), rollout=types.SimpleNamespace(max_new_tokens=16,
                                                                                              group_size=3))
    baseline = rollouts_of(["g"], [4])  # ReMax's greedy completion
    engine = types.SimpleNamespace(generate=lambda prompts, **settings: baseline, tokenizer=None)
    parts = types.SimpleNamespace(config=config, reward=counting_reward(), engine=engine, env=None,
                                  length=None, referee=None, likelihood=None)
    round_ = collect.Round([{"id": "p"}] * 3, [[1]] * 3, rollouts)
    scored = collect.score_round(parts, round_, 0.0)
    assert scored.result.components["seen"].tolist() == [3.0, 9.0, 5.0]
    round_ = collect.Round([{"id": "p"}], [[1]], rollouts_of(["a"] * 3, [1, 1, 1]))
    assert collect.remax_baseline(parts, round_, 0.0, Phases()).tolist() == [4.0] * 3


def test_evaluation_scores_with_the_generated_token_counts(monkeypatch, tmp_path):
    monkeypatch.setattr(runner, "encode_prompts", lambda tokenizer, task, samples: [[1]] * len(samples))
    monkeypatch.setattr(sampling, "encode_prompts", lambda tokenizer, task, samples: [[1]] * len(samples))
    problems = [{"id": "p0", "prompt": "?", "answer": "1"}, {"id": "p1", "prompt": "?", "answer": "2"}]
    engine = types.SimpleNamespace(batch_size=8, tokenizer=None,
                                   generate=lambda prompts, greedy=False, max_new_tokens=None, group_size=1:
                                   rollouts_of(["x"] * len(prompts) * group_size,
                                               [4 + i for i in range(len(prompts) * group_size)], group_size))
    task = types.SimpleNamespace(eval=problems)
    threshold = RewardScorer("reward", counting_reward(), None, 5.0, "fp")  # right at 5 tokens or more
    assert [r["score"] for r in runner.evaluate(engine, task, threshold).samples] == [0.0, 1.0]
    function = FunctionScorer("count.py:seen", seen)
    result = runner.evaluate(engine, task, function)
    assert [r["score"] for r in result.samples] == [4.0, 5.0]
    assert result.metrics == {"eval/length": 4.5}  # the greedy completions' mean token count (4 and 5)
    cache = sampling.SampleCache(tmp_path / "cache", {"scorer": "seen"})
    drawn = sampling.draw_samples(engine, task, problems, function, 2, cache)
    assert [r["score"] for p in problems for r in drawn[p["id"]]] == [4.0, 5.0, 6.0, 7.0]
    assert [r["length"] for p in problems for r in drawn[p["id"]]] == [4, 5, 6, 7]
    # eval.rank_by scores the cached samples with the counts they were drawn with
    ranks = ranking.rank_scores(counting_reward(), tmp_path / "ranks.jsonl", problems, drawn)
    assert ranks == {"p0": [4.0, 5.0], "p1": [6.0, 7.0]}


@pytest.mark.parametrize("separator", ["\x00", "\x01", "\x7f", "\x80", "\U000e0080", "\u2065", "\U0001d159",
                                       "\U00016fe4", "\ue000"])
def test_control_unassigned_and_blank_characters_between_words_do_not_shorten_a_length_in_words(separator):
    from aha.rewards.shaping import count_words

    assert count_words(separator.join(["word"] * 50)) == 50
