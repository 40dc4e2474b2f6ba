"""The rubric judge behind an OpenAI-compatible endpoint: a server on 127.0.0.1 (tests/judge_server.py,
serving the real tiny model) is started and stopped inside each test. The endpoint's grades
equal the local judge's; a refused connection, a timeout and a malformed reply each fail the
samples (scored as failed) with one log line naming the URL and the cause; calls, retries and
tokens are counted."""

import logging
import math
import socket

import pytest
from judge_server import JudgeServer

from aha.config import RewardSpec
from aha.rewards import build_reward
from aha.rewards.judge import endpoint_grade, rubric_judge
from aha.rewards.judge_http import Reply, answer_probabilities, chat_completions, endpoint_metrics, parse_reply, usage

SAMPLES = [{"id": "a", "prompt": "What is 6 * 7?", "answer": "42", "rubric": "States 42."},
           {"id": "b", "prompt": "What is 3 * 4?", "answer": "12",
            "rubric": [{"criterion": "States 12.", "weight": 2}, {"criterion": "Is short.", "name": "short"}]}]
COMPLETIONS = ["6 * 7 = 42", "It is 12.\nDone."]
ALL_TOKENS = 200  # more than the tiny vocabulary: the server returns every token's log-prob


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when the block ends: nothing listens there


@pytest.mark.parametrize("mode", ["yes_no", "steps"])
def test_the_endpoint_grades_as_the_local_judge_does(mode):
    """With every token's log-prob returned, P(Yes) / (P(Yes) + P(No)) over HTTP is the local
    judge's number: same prompt, same model, same first answer token."""
    local = rubric_judge(COMPLETIONS, SAMPLES, model="tiny", mode=mode)
    with JudgeServer() as server:
        remote = rubric_judge(COMPLETIONS, SAMPLES, model="tiny", mode=mode, base_url=server.base_url,
                              top_logprobs=ALL_TOKENS, batch_size=3)
    assert remote[1].keys() == local[1].keys() if mode == "yes_no" else remote[1].ends == local[1].ends
    flat = lambda g: [g] if isinstance(g, float) else list(g.values()) if isinstance(g, dict) else list(g.values)
    assert flat(remote[0]) + flat(remote[1]) == pytest.approx(flat(local[0]) + flat(local[1]), abs=1e-5)
    # each sample's own rubric reached the endpoint, criterion by criterion
    users = [r["messages"][1]["content"] for r in server.requests]
    rubrics = {u.split("\n\nQuestion")[0] for u in users}  # requests arrive in any order (batch_size at a time)
    assert rubrics == {"Rubric:\nStates 42.", "Rubric:\nStates 12.", "Rubric:\nIs short."}
    assert all(r["model"] == "tiny" and r["temperature"] == 0.0 and r["top_logprobs"] == ALL_TOKENS
               for r in server.requests)


def test_calls_and_tokens_are_counted_and_reach_the_metrics():
    start = usage()
    with JudgeServer() as server:
        rubric_judge(COMPLETIONS, SAMPLES, model="tiny", base_url=server.base_url, max_new_tokens=2, top_logprobs=5)
    spent = endpoint_metrics(start)
    assert spent["judge_http/calls"] == 3 and spent["judge_http/failures"] == 0 == spent["judge_http/retries"]
    tokenizer = server.loaded.tokenizer
    prompt_tokens = [tokenizer.apply_chat_template(r["messages"], add_generation_prompt=True, tokenize=True,
                                                   return_dict=True)["input_ids"] for r in server.requests]
    assert spent["judge_http/prompt_tokens"] == sum(map(len, prompt_tokens)) > 600
    assert 0 < spent["judge_http/completion_tokens"] <= 6
    assert endpoint_metrics(usage()) == {}  # nothing called since


@pytest.mark.parametrize("mode, cause", [
    ("closed", "connection refused"),
    ("slow", "no answer within timeout_s=0.3"),
    ("garbage", "malformed response (not JSON"),
    ("not_chat", "malformed response (not a chat completion: KeyError: 'choices')"),
    ("error", "HTTP 500"),
])
def test_a_failing_endpoint_fails_the_samples_with_one_clear_log_line(mode, cause, caplog):
    start = usage()
    with JudgeServer(mode="ok" if mode == "closed" else mode, sleep_s=3.0) as server:
        url = f"http://127.0.0.1:{closed_port()}/v1" if mode == "closed" else server.base_url
        reward = build_reward([RewardSpec(fn="rubric_judge", name="judge", args={
            "model": "tiny", "base_url": url, "timeout_s": 0.3, "retries": 1})])
        with caplog.at_level(logging.WARNING, logger="aha.rewards.judge_http"):
            result = reward.score(COMPLETIONS, SAMPLES)
    assert result.failed.all() and result.total.tolist() == [0.0, 0.0] and result.failures == {"judge": 2}
    lines = [r.getMessage() for r in caplog.records if r.name == "aha.rewards.judge_http"]
    assert len(lines) == 1
    assert f"judge endpoint {url}/chat/completions: 3 of 3 requests failed after 2 tries: {cause}" in lines[0]
    spent = endpoint_metrics(start)
    assert (spent["judge_http/calls"], spent["judge_http/retries"], spent["judge_http/failures"]) == (6, 3, 3)


def test_retries_recover_from_a_flaky_endpoint():
    with JudgeServer(mode="flaky") as server:
        grades = rubric_judge(COMPLETIONS, SAMPLES, model="tiny", base_url=server.base_url, retries=1,
                              top_logprobs=ALL_TOKENS)
    assert len(server.requests) == 6 and all(g is not None for g in grades)
    local = rubric_judge(COMPLETIONS, SAMPLES, model="tiny")
    assert grades[0] == pytest.approx(local[0], abs=1e-5) and grades[1] == pytest.approx(local[1], abs=1e-5)


def test_the_key_comes_from_the_named_environment_variable(monkeypatch, caplog):
    monkeypatch.setenv("AHA_TEST_JUDGE_KEY", "s3cret")
    with JudgeServer() as server:
        rubric_judge(COMPLETIONS[:1], SAMPLES[:1], model="tiny", base_url=server.base_url,
                     api_key_env="AHA_TEST_JUDGE_KEY")
    assert [r["authorization"] for r in server.requests] == ["Bearer s3cret"]
    assert "s3cret" not in caplog.text
    monkeypatch.delenv("AHA_TEST_JUDGE_KEY")
    with pytest.raises(ValueError, match="api_key_env: the environment variable 'AHA_TEST_JUDGE_KEY' is not set"):
        rubric_judge(COMPLETIONS[:1], SAMPLES[:1], model="tiny", base_url="http://127.0.0.1:9/v1",
                     api_key_env="AHA_TEST_JUDGE_KEY")
    with pytest.raises(ValueError, match="base_url must be an http:// or https:// URL"):
        chat_completions("127.0.0.1:8000", "m", [[{"role": "user", "content": "hi"}]])


def test_grades_read_from_replies_by_hand():
    log = math.log
    # yes_no: " No" spells "No" whole (leading space stripped), so "N" does not count; nothing spells
    # "Yes" whole, so "Y", which starts it, does; "x" and " " start neither
    reply = Reply("Maybe", {"Y": log(0.3), " No": log(0.1), "N": log(0.05), "x": log(0.5), " ": log(0.05)})
    assert answer_probabilities(reply, ["Yes", "No"]) == pytest.approx([0.3, 0.1])
    assert endpoint_grade(reply, "yes_no", 9) == pytest.approx(0.3 / 0.4)
    # a word's own token, where it came back, is read alone: SmolLM2-135M's reply to a judge prompt
    # (No 0.3205, Yes 0.0864, Y 0.0086) grades 0.2123 as the local judge does, not 0.2287
    smol = Reply("No", {"No": log(0.3205), "Yes": log(0.0864), "Y": log(0.0086), " The": log(0.1)})
    assert endpoint_grade(smol, "yes_no", 9) == pytest.approx(0.0864 / (0.0864 + 0.3205))
    # " Yes" is "Yes" with its space; "N" counts for "No" because no token spells "No" whole
    assert answer_probabilities(Reply("x", {"Yes": log(0.2), " Yes": log(0.1), "Y": log(0.1), "N": log(0.3)}),
                                ["Yes", "No"]) == pytest.approx([0.3, 0.3])
    # no log-probs: the word it wrote, or no grade
    assert endpoint_grade(Reply(" Yes, it does.", {}), "yes_no", 9) == 1.0
    assert endpoint_grade(Reply("No.", {}), "steps", 9) == 0.0
    assert endpoint_grade(Reply("yes", {}), "yes_no", 9) is None and endpoint_grade(None, "yes_no", 9) is None
    # expected: digits weighted by probability (renormalised); without them, the number it wrote
    digits = Reply("3", {"3": log(0.2), "6": log(0.6), "a": log(0.2)})
    assert endpoint_grade(digits, "expected", 9) == pytest.approx((0.25 * 3 + 0.75 * 6) / 9)
    assert endpoint_grade(Reply("Score: 7", {}), "expected", 9) == pytest.approx(7 / 9)
    assert endpoint_grade(Reply("Score: 7", {"6": 0.0}), "generate", 9) == pytest.approx(7 / 9)
    # the chat completion format, logprobs or not
    data = {"choices": [{"message": {"content": "Yes"}, "logprobs": {"content": [
        {"token": "Yes", "logprob": -0.1, "top_logprobs": [{"token": "No", "logprob": -2.5}]}]}}]}
    assert parse_reply(data) == Reply("Yes", {"Yes": -0.1, "No": -2.5})
    assert parse_reply({"choices": [{"message": {"content": "7"}}]}) == Reply("7", {})
    with pytest.raises(ValueError, match="malformed response"):
        parse_reply({"choices": [{"message": {"content": None}}]})


def test_a_run_judged_by_an_endpoint_logs_its_calls_and_tokens(tmp_path):
    import json
    from pathlib import Path

    from aha.config import load_config
    from aha.training.loop import train

    configs = Path(__file__).parent.parent / "configs"
    with JudgeServer() as server:
        config = load_config(configs / "rubric_checklist.yaml", [
            "model=tiny", "train.steps=2", "train.checkpoint_every=0", "rollout.prompts_per_step=2",
            "rollout.group_size=2", "rollout.max_new_tokens=4", "eval.before=false", "eval.after=false",
            "algorithm.truncated_reward=null", "algorithm.dynamic_sampling=false", f"output_dir={tmp_path / 'run'}"])
        config.reward[0].args.update(model="tiny", base_url=server.base_url, max_new_tokens=1, top_logprobs=ALL_TOKENS)
        summary = train(config, echo=lambda *_: None)
    steps = [json.loads(line) for line in (Path(summary.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2 and len(server.requests) == 2 * 4 * 2  # steps x completions x criteria
    for r in steps:
        assert r["judge_http/calls"] == 8 and r["judge_http/failures"] == 0 and r["judge_http/prompt_tokens"] > 8 * 100
        assert r["reward/failed"] == 0 and 0 < r["reward/judge/correct"] < 2 / 3
