import logging
import time

import pytest
import torch

from aha.config import RewardSpec
from aha.rewards import RewardError, build_reward, extract_answer, format_reward, numeric_answer


@pytest.mark.parametrize("text, value", [
    ("7 * 8 = 56", 56.0),
    ("The answer is \\boxed{1,024}. Check: 1024", 1024.0),
    ("-3.5 then 12.", 12.0),
    ("no digits here", None),
])
def test_extract_answer(text, value):
    assert extract_answer(text) == value


def test_numeric_answer_scores_only_the_final_answer():
    sample = {"answer": "56"}
    assert numeric_answer("7 * 8 = 56", sample) == 1.0
    assert numeric_answer("56? no: 7 * 8 = 54", sample) == 0.0
    # repeating the right number early and an operand last does not score
    assert numeric_answer("56 56 56 8", sample) == 0.0
    assert numeric_answer("56.0", sample) == 1.0


def test_format_reward():
    assert format_reward("So the answer is 56.", {}) == 1.0
    assert format_reward("\\boxed{56} is it", {}) == 1.0
    assert format_reward("56 is the answer", {}) == 0.0


def test_composition_weights_and_breakdown(tmp_path):
    (tmp_path / "user_rw.py").write_text(
        "def parts(completion, sample):\n    return {'short': float(len(completion) < 5), 'has_x': float('x' in "
        "completion)}\n"
    )
    reward = build_reward([RewardSpec(fn="numeric_answer", weight=2.0), RewardSpec(fn="user_rw.py:parts", weight=0.5)],
                          tmp_path)
    result = reward.score(["56", "x 12"], [{"answer": "56"}, {"answer": "56"}])
    torch.testing.assert_close(result.total, torch.tensor([2.0 + 0.5, 0.5 * 2]))
    assert set(result.components) == {"numeric_answer", "parts/short", "parts/has_x"}
    torch.testing.assert_close(result.components["parts/has_x"], torch.tensor([0.0, 1.0]))


def test_raising_reward_fails_one_sample_and_logs_once(tmp_path, caplog):
    (tmp_path / "flaky.py").write_text(
        "def fn(completion, sample):\n    if sample['id'] == 'bad':\n        raise KeyError('boom')\n    return 1.0\n"
    )
    reward = build_reward([RewardSpec(fn="flaky.py:fn")], tmp_path)
    samples = [{"id": "ok"}, {"id": "bad"}]
    with caplog.at_level(logging.WARNING, logger="aha"):
        first = reward.score(["a", "b"], samples)
        reward.score(["a", "b"], samples)
    assert first.total.tolist() == [1.0, 0.0]
    assert first.failed.tolist() == [False, True]
    messages = [r.getMessage() for r in caplog.records if "failed on sample" in r.getMessage()]
    assert len(messages) == 1 and "sample bad" in messages[0] and "KeyError" in messages[0]


@pytest.mark.parametrize("fn, message", [
    ("no_such_module_xyz:fn", "reward[0].fn: cannot import 'no_such_module_xyz'"),
    ("missing.py:fn", "reward[0].fn: cannot import 'missing.py'"),
    ("aha.rewards:nope", "reward[0].fn: module 'aha.rewards' has no function 'nope'"),
    ("just_a_name", "reward[0].fn: 'just_a_name' must be 'module:function'"),
])
def test_bad_reward_paths_name_the_key(tmp_path, fn, message):
    with pytest.raises(RewardError, match=message.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        build_reward([RewardSpec(fn=fn)], tmp_path)


def test_reward_module_with_syntax_error_names_the_key(tmp_path):
    (tmp_path / "broken.py").write_text("def fn(:\n")
    with pytest.raises(RewardError, match=r"reward\[0\]\.fn: cannot import 'broken\.py': SyntaxError"):
        build_reward([RewardSpec(fn="broken.py:fn")], tmp_path)


def test_gates_and_products_in_composition():
    from aha.config import RewardSpec
    from aha.rewards import build_reward

    reward = build_reward([
        RewardSpec(fn="numeric_answer", weight=1.0),
        RewardSpec(fn="format", weight=0.5),
        RewardSpec(fn="think_answer_format", combine="gate"),
        RewardSpec(fn="length_limit", combine="product", args={"max_words": 6}),
    ])
    completions = [
        "<think>6*7</think><answer>42</answer>",  # right and well-formed: 1 (`format` wants a closing number: +0)
        "<think>6*7</think> 42",  # right answer but the gate fails: 0
        "<think>" + "hmm " * 10 + "</think><answer>42</answer>",  # too long: product zeroes it
    ]
    result = reward.score(completions, [{"answer": "42"}] * 3)
    assert result.total.tolist() == [1.0, 0.0, 0.0]
    # every component is still logged on its own, unweighted
    assert result.components["numeric_answer"].tolist() == [1.0, 1.0, 1.0]
    assert result.components["think_answer_format"].tolist() == [1.0, 0.0, 1.0]
    assert result.components["length_limit"].tolist() == [1.0, 1.0, 0.0]


SLOW_REWARDS = """
import time

def slow(completion, sample):
    if completion == "hang":
        time.sleep(1000)
    if completion == "crash":
        import os
        os._exit(7)
    time.sleep(0.5)
    return float(len(completion))
"""


def test_worker_pool_runs_in_parallel_and_times_out_without_blocking(tmp_path, caplog):
    (tmp_path / "slow.py").write_text(SLOW_REWARDS)
    spec = RewardSpec(fn="slow.py:slow", workers=4, timeout_s=3.0)
    reward = build_reward([spec], tmp_path)
    try:
        reward.score(["warm"] * 4, [{"id": i} for i in range(4)])  # start the workers (imports) outside the timing
        texts = ["a", "bb", "hang", "ccc", "crash", "dddd", "e", "ff"]
        start = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="aha"):
            result = reward.score(texts, [{"id": t} for t in texts])
        elapsed = time.monotonic() - start
        assert result.total.tolist() == [1.0, 2.0, 0.0, 3.0, 0.0, 4.0, 1.0, 2.0]
        assert result.failed.tolist() == [False, False, True, False, True, False, False, False]
        # 6 half-second calls on 4 workers alongside one 3 s timeout: bounded by the
        # timeout plus start-up of the replacement workers, far below 6 * 0.5 + 1000 s serially
        assert elapsed < 12.0, elapsed
        messages = " ".join(r.getMessage() for r in caplog.records)
        assert "timed out after 3 s" in messages and "worker died (exit code 7)" in messages
        assert reward.score(["again"], [{"id": "x"}]).total.tolist() == [5.0]  # replaced workers still serve
    finally:
        reward.close()


def test_batched_rewards_and_clipping(tmp_path):
    (tmp_path / "judge.py").write_text(
        "from aha.rewards import batched\n\n"
        "@batched\n"
        "def lengths(completions, samples, scale=1.0):\n"
        "    return [None if c == '?' else scale * len(c) for c in completions]\n"
    )
    specs = [RewardSpec(fn="judge.py:lengths", args={"scale": 2.0}, clip_max=5.0)]
    result = build_reward(specs, tmp_path).score(["ab", "abcdef", "?"], [{}, {}, {}])
    assert result.total.tolist() == [4.0, 5.0, 0.0]  # capped at 5 in the total
    assert result.components["lengths"].tolist() == [4.0, 12.0, 0.0]  # logged as scored
    assert result.failed.tolist() == [False, False, True]
    with pytest.raises(RewardError, match=r"reward\[0\].workers: .* batched reward"):
        build_reward([RewardSpec(fn="judge.py:lengths", workers=2)], tmp_path)
    with pytest.raises(RewardError, match=r"reward\[0\].args: .*unexpected keyword argument 'scal'"):
        build_reward([RewardSpec(fn="judge.py:lengths", args={"scal": 2.0})], tmp_path)


def test_clip_bounds_are_checked():
    with pytest.raises(ValueError, match=r"clip_min \(2.0\) is above clip_max \(1.0\)"):
        RewardSpec(fn="format", clip_min=2.0, clip_max=1.0)


@pytest.mark.parametrize("ends, values", [((3, 0), (0.5, 0.5)), ((2,), (0.1, 0.2)), ((1.5,), (0.3,)), ((True,), (1.0,
        ))])
def test_step_scores_need_one_positive_integer_end_per_value(ends, values):
    from aha.rewards import StepScores

    with pytest.raises(ValueError, match="StepScores"):
        StepScores(ends, values)


def test_step_scores_take_numpy_numbers_and_refuse_values_a_float32_tensor_cannot_hold():
    import numpy as np

    from aha.rewards import StepScores

    scores = StepScores(np.array([3, 7]), np.array([0.25, 0.5], dtype=np.float32))
    assert scores.ends == (3, 7) and scores.values == (0.25, 0.5) and float(scores) == 0.75
    assert all(type(e) is int for e in scores.ends) and all(type(v) is float for v in scores.values)
    for bad in (float("nan"), float("inf"), 1e39):
        with pytest.raises(ValueError, match="finite numbers within float32's range"):
            StepScores((3,), (bad,))
