"""Pairwise judges: win rates within a group (pure maths), the composition's group hook, the
pairwise_judge reward on the tiny model, and the judge-training data builder."""

import json
from pathlib import Path

import pytest
import torch

from aha.algorithms.pairwise import win_rates
from aha.cli import main
from aha.config import RewardSpec, load_config
from aha.errors import TaskError
from aha.rewards import build_reward, multiple_choice, regex_match
from aha.rewards.compose import Component, CompositeReward, group_rows
from aha.rewards.functions import Logged, grouped
from aha.rewards.pairwise import first_preferred, judge_messages, pairwise_judge
from aha.tasks.judge_pairs import write_judge_data
from aha.training.loop import train

ROOT = Path(__file__).parent.parent

# first[i, j]: P(i is better) with i shown first; the diagonal is never read
FIRST = torch.tensor([[9.0, 0.8, 0.6],
                      [0.4, 9.0, 0.9],
                      [0.3, 0.7, 9.0]])


def test_win_rates_by_hand():
    won = win_rates(FIRST)
    # win[0,1] = (0.8 + 1 - 0.4)/2 = 0.7, win[0,2] = (0.6 + 1 - 0.3)/2 = 0.65 -> 0.675
    # win[1,0] = 0.3, win[1,2] = (0.9 + 1 - 0.7)/2 = 0.6 -> 0.45
    # win[2,0] = 0.35, win[2,1] = 0.4 -> 0.375
    assert won.rates.tolist() == pytest.approx([0.675, 0.45, 0.375])
    assert float(won.rates.sum()) == pytest.approx(1.5)  # G / 2
    assert won.position_bias == pytest.approx((0.8 + 0.6 + 0.4 + 0.9 + 0.3 + 0.7) / 6 - 0.5)  # 0.11667
    # (0,1): 0 in both orders; (0,2): 0 in both; (1,2): 1 first, then 2 (0.7 > 0.5): 2 of 3 pairs agree
    assert won.consistency == pytest.approx(2 / 3)


@pytest.mark.parametrize("G", [2, 3, 5, 8])
def test_win_rates_sum_to_half_the_group(G):
    first = torch.rand(G, G, generator=torch.Generator().manual_seed(G))
    won = win_rates(first)
    assert float(won.rates.sum()) == pytest.approx(G / 2, abs=1e-6)
    assert bool(((won.rates >= 0) & (won.rates <= 1)).all())


def test_a_judge_that_cannot_tell_them_apart_pays_everyone_half_whatever_its_bias():
    won = win_rates(torch.full((4, 4), 0.9))  # always "the first one"
    assert won.rates.tolist() == pytest.approx([0.5] * 4)
    assert won.position_bias == pytest.approx(0.4) and won.consistency == 0.0
    alone = win_rates(torch.full((1, 1), 0.2))
    assert alone.rates.tolist() == [0.5] and alone.position_bias == 0.0 and alone.consistency == 1.0
    with pytest.raises(ValueError, match="square"):
        win_rates(torch.zeros(2, 3))


def test_a_group_reward_is_called_once_per_group_and_logged_numbers_are_not_paid():
    calls = []

    @grouped
    def rank(completions, samples):
        calls.append((completions, [s["id"] for s in samples]))
        return [Logged(float(len(c)), {"size": len(completions)}) for c in completions]

    reward = CompositeReward([Component("rank", rank, weight=2.0, batched=True, grouped=True)])
    samples = [{"id": "p", "prompt": "x"}, {"id": "q", "prompt": "y"}] * 2  # rows of two groups, interleaved
    result = reward.score(["a", "bb", "ccc", "dddd"], samples)
    assert calls == [(["a", "ccc"], ["p", "p"]), (["bb", "dddd"], ["q", "q"])]
    assert result.total.tolist() == [2.0, 4.0, 6.0, 8.0]  # 2 * value: the logged size is not in the total
    assert result.components["rank"].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert result.components["rank/size"].tolist() == [2.0] * 4
    assert group_rows([{"id": 1, "prompt": "a"}, {"id": 1, "prompt": "b"}, {"id": 1, "prompt": "a"}]) == [[0, 2], [1]]
    with pytest.raises(ValueError, match="finite"):
        Logged(float("nan"), {})


def _judged(completions):
    """P(first is better) for every ordered pair, asked of the tiny judge directly."""
    G = len(completions)
    pairs = [(i, j) for i in range(G) for j in range(G) if i != j]
    probs = first_preferred([judge_messages("What is 6 * 7?", completions[i], completions[j]) for i, j in pairs],
                            "tiny", batch_size=3)
    return dict(zip(pairs, probs))


def test_pairwise_judge_on_the_tiny_model_pays_win_rates_and_logs_its_position_bias():
    reward = build_reward([RewardSpec(fn="pairwise_judge", args={"model": "tiny", "batch_size": 5}, name="pair")])
    first = ["42", "6 * 7 = 42.", "41", "I don't know."]
    second = ["x", "yy"]
    samples = [{"id": "a", "prompt": "What is 6 * 7?"}] * 4 + [{"id": "b", "prompt": "What is 6 * 7?"}] * 2
    result = reward.score(first + second, samples)
    assert not result.failed.any()
    rates = result.components["pair"]
    assert float(rates[:4].sum()) == pytest.approx(2.0, abs=1e-5) and float(rates[4:].sum()) == pytest.approx(1.0)
    judged = _judged(first)
    by_hand = sum(judged.values()) / len(judged) - 0.5
    assert result.components["pair/position_bias"][:4].tolist() == pytest.approx([by_hand] * 4, abs=1e-5)
    assert by_hand != 0.0 and len(set(rates[:4].tolist())) > 1  # a random judge still prefers some answers
    expected = [sum((judged[(i, j)] + 1 - judged[(j, i)]) / 2 for j in range(4) if j != i) / 3 for i in range(4)]
    assert rates[:4].tolist() == pytest.approx(expected, abs=1e-5)
    assert result.total.tolist() == pytest.approx(rates.tolist())


def test_pairwise_judge_pays_identical_completions_half_each():
    scores = pairwise_judge(["same answer"] * 3, [{"id": "a", "prompt": "q"}] * 3, model="tiny")
    assert [float(s) for s in scores] == pytest.approx([0.5] * 3)


def _pairs_file(tmp_path, rows):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_judge_data_has_both_orders_and_multiple_choice_reads_the_answers(tmp_path):
    path = _pairs_file(tmp_path, [{"id": "p1", "prompt": "What is 2 * 3?", "chosen": "6", "rejected": "5",
                                   "subset": "digit"},
                                  {"prompt": "What is 2 * 4?", "chosen": "8", "rejected": "9"}])
    assert main(["data", "--judge-from", str(path), "--out", str(tmp_path / "out")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "out/judge_pairs.jsonl").read_text().splitlines()]
    assert [(r["id"], r["answer"], r["order"]) for r in rows[:2]] == [("p1/chosen_first", "A", "chosen_first"),
                                                                      ("p1/chosen_second", "B", "chosen_second")]
    assert rows[0]["subset"] == "digit" and rows[2]["id"] == "pairs.jsonl:2/chosen_first"
    user = rows[1]["prompt"][1]["content"]
    assert "Response A:\n5\n\nResponse B:\n6\n" in user and user.endswith("Answer A or B.")
    assert rows[1]["prompt"] == judge_messages("What is 2 * 3?", "5", "6")  # the prompt pairwise_judge asks
    for reply, answer in [("A", "A"), ("B", "B"), ("Response B is better.", "B"), ("The answer is A.", "A")]:
        assert multiple_choice(reply, {"answer": answer}) == 1.0
    assert multiple_choice("A", {"answer": "B"}) == 0.0 and multiple_choice("A or B", {"answer": "A"}) == 0.0
    # multiple_choice settles on the last letter; the row's pattern pays the verdict the reply starts with
    assert multiple_choice("B is better than A.", {"answer": "A"}) == 1.0
    assert [regex_match(reply, rows[1]) for reply in ["B is better than A.", " B", "A, not B", "Bad", "b"]] == [
        1.0, 1.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("row, message", [
    ({"prompt": "q", "chosen": "a"}, r"pairs.jsonl:2: missing field\(s\) rejected"),
    ({"prompt": "q", "chosen": "a", "rejected": 3}, "pairs.jsonl:2: rejected must be a string"),
    ({"prompt": "q", "chosen": "a", "rejected": "a"}, "pairs.jsonl:2: chosen and rejected are the same"),
])
def test_bad_pairs_name_their_file_and_line(tmp_path, row, message):
    path = _pairs_file(tmp_path, [{"prompt": "q", "chosen": "a", "rejected": "b"}, row])
    with pytest.raises(TaskError, match=message):
        write_judge_data(path, tmp_path / "out")


CONFIGS = ROOT / "configs"
TINY_RUN = ["model=tiny", "train.steps=2", "train.checkpoint_every=0", "rollout.prompts_per_step=2",
            "rollout.group_size=4", "rollout.max_new_tokens=6", "eval.before=false", "eval.max_new_tokens=6",
            "algorithm.truncated_reward=null"]


def _steps(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def test_the_judge_training_recipe_trains_on_judge_prompts_with_multiple_choice(tmp_path):
    data = ROOT / "data/synthetic/arithmetic"
    train_rows = write_judge_data(data / "preferences_train.jsonl", tmp_path / "judge")
    eval_rows = write_judge_data(data / "preferences_eval.jsonl", tmp_path / "judge")
    config = load_config(CONFIGS / "judge_training.yaml", TINY_RUN + [
        f"output_dir={tmp_path / 'run'}", f"task.data={train_rows.path}", f"task.eval_data={eval_rows.path}",
        "eval.limit=4"])
    assert config.task.data.endswith("judge_preferences_train.jsonl") and config.reward[0].fn == "multiple_choice"
    assert (train_rows.pairs, train_rows.rows) == (272, 544)
    summary = train(config, echo=lambda *_: None)
    steps = [r for r in _steps(summary.run_dir) if "loss/total" in r]
    assert len(steps) == 2 and all("reward/multiple_choice" in r for r in steps)
    assert summary.accuracy_after is not None


def test_the_pairwise_judge_recipe_pays_win_rates_that_average_one_half(tmp_path):
    config = load_config(CONFIGS / "pairwise_judge.yaml", TINY_RUN + [
        f"output_dir={tmp_path / 'run'}", "task.num_eval=4", "eval.after=false",
        "reward=[{fn: pairwise_judge, name: win_rate, args: {model: tiny}}]"])
    summary = train(config, echo=lambda *_: None)
    steps = [r for r in _steps(summary.run_dir) if "loss/total" in r]
    assert len(steps) == 2
    for r in steps:  # every group's win rates sum to G / 2: their mean is 1/2 whatever the judge
        assert r["reward/win_rate"] == pytest.approx(0.5, abs=1e-6) and r["reward/failed"] == 0
        assert -0.5 <= r["reward/win_rate/position_bias"] <= 0.5 and 0 <= r["reward/win_rate/consistency"] <= 1
        assert "monitor/gold_mean" in r


def test_the_endpoint_judge_pays_what_the_local_judge_pays():
    """Served by a real tiny model on 127.0.0.1 with every token's log-prob returned, P(A) over
    HTTP is the local judge's: the same win rates and the same position bias."""
    from judge_server import JudgeServer

    completions, samples = ["42", "6 * 7 = 42.", "41"], [{"id": "a", "prompt": "What is 6 * 7?"}] * 3
    local = pairwise_judge(completions, samples, model="tiny")
    with JudgeServer() as server:
        remote = pairwise_judge(completions, samples, model="tiny", base_url=server.base_url, top_logprobs=200,
                                batch_size=3)
    assert len(server.requests) == 6 and all(r["max_tokens"] == 1 for r in server.requests)
    assert [float(r) for r in remote] == pytest.approx([float(r) for r in local], abs=1e-5)
    assert remote[0].logged["position_bias"] == pytest.approx(local[0].logged["position_bias"], abs=1e-5)


def test_a_refused_endpoint_fails_the_whole_group_with_one_log_line(caplog):
    import logging
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    url = f"http://127.0.0.1:{port}/v1"
    reward = build_reward([RewardSpec(fn="pairwise_judge", name="pair", args={
        "model": "tiny", "base_url": url, "retries": 0, "timeout_s": 0.5})])
    with caplog.at_level(logging.WARNING):
        result = reward.score(["a", "b", "c"], [{"id": "q", "prompt": "q"}] * 3)
    assert result.failed.all() and result.total.tolist() == [0.0] * 3 and result.failures == {"pair": 3}
    lines = [r.getMessage() for r in caplog.records if r.name == "aha.rewards.judge_http"]
    assert len(lines) == 1 and "6 of 6 requests failed after 1 tries: connection refused" in lines[0]
