"""Step-level search at inference (`aha eval --search`): the bookkeeping by hand (how a step
ended, keys and ties, the equal-token N), then on the tiny model: greedy_step keeps the best of
its next steps and continues from the kept token ids, beam keeps the best `width`, every
sampled token is counted, best-of-N gets the N nearest the search's tokens, and a process
reward model trained here judges partial solutions; bad settings are errors naming the key."""

import json
import typing

import pytest
import torch

from aha.algorithms.search import BUDGET, STEP, STOP, candidate_key, equal_token_n, keep_best, step_end
from aha.cli import main
from aha.config import ConfigError, EvalConfig, RolloutConfig, load_config
from aha.eval.search import SEARCHES, SearchSettings, search, separator_ids
from aha.models import load
from aha.rewards.compose import RewardResult
from aha.rollout import build_engine
from aha.rollout.hf_engine import HFEngine
from aha.tasks import build_task, encode_prompts

SEP = 3  # hand-made ids: a separator token, a stop token
EOS = 2


def test_a_step_ends_at_the_stop_token_the_separator_or_the_budget():
    assert step_end([5, 6, EOS], 10, {EOS}, {SEP}) == STOP
    assert step_end([5, SEP], 10, {EOS}, {SEP}) == STEP
    assert step_end([5, 6, 7], 3, {EOS}, {SEP}) == BUDGET
    assert step_end([5, 6, SEP], 3, {EOS}, {SEP}) == BUDGET  # on the budget's last token: no room for a next step
    assert step_end([5, EOS], 2, {EOS}, {SEP}) == STOP  # a stop on the last token is a finished answer
    with pytest.raises(ValueError, match="neither a stop nor a separator"):
        step_end([5, 6], 10, {EOS}, {SEP})


def test_keys_rank_by_the_judge_and_ties_go_to_the_earlier_candidate():
    # a judge of partial solutions: one tier, by score; a failed score (None, NaN) last
    prm = [candidate_key(s, f, True, 1.0) for s, f in [(0.4, False), (0.9, True), (None, False), (0.9, False),
                                                         (float("nan"), True), (0.1, False)]]
    assert prm == [(1, 0.4), (1, 0.9), (-1, 0.0), (1, 0.9), (-1, 0.0), (1, 0.1)]
    assert keep_best(prm, 3) == [1, 3, 0]  # 0.9 twice: candidate 1 before 3
    assert keep_best(prm, 10) == [1, 3, 0, 5, 2, 4]
    # a judge of finished answers: a pass (>= 1.0) first, then the unjudged unfinished ones, then the fails
    outcome = [candidate_key(s, f, False, 1.0) for s, f in [(0.0, True), (None, False), (1.0, True), (0.5, True),
                                                             (None, False), (None, True), (2.0, True)]]
    assert outcome == [(0, 0.0), (1, 0.0), (2, 1.0), (0, 0.5), (1, 0.0), (-1, 0.0), (2, 2.0)]
    assert keep_best(outcome, 4) == [6, 2, 1, 4]
    assert keep_best(outcome, 7) == [6, 2, 1, 4, 3, 0, 5]


def test_best_of_n_takes_the_n_whose_tokens_are_nearest_the_searchs():
    # rounds of 10, 12, 9 tokens: 1, 2, 3 samples cost 10, 22, 31
    assert equal_token_n(25, [10, 12, 9]) == 2  # |22 - 25| = 3 < |31 - 25| = 6
    assert equal_token_n(28, [10, 12, 9]) == 3  # 3 from 31 against 6 from 22
    assert equal_token_n(15, [10, 10]) == 1  # 10 and 20 are both 5 away: the smaller N
    assert equal_token_n(3, [10, 10]) == 1  # never fewer than one sample
    with pytest.raises(ValueError):
        equal_token_n(3, [])


def test_eval_search_values_are_the_registrys():
    assert typing.get_args(EvalConfig.model_fields["search"].annotation) == ("none", *SEARCHES)
    assert SEARCHES["greedy_step"](None) == 1 and SEARCHES["beam"](None) == 4 and SEARCHES["beam"](3) == 3


@pytest.mark.parametrize("overrides, message", [
    (["eval.search=beam"], "eval.search=beam needs eval.search_scorer"),
    (["eval.search=greedy_step", "eval.search_scorer={fn: numeric_answer}", "eval.search_width=3"],
     "eval.search_width (3) is for eval.search=beam"),
    (["eval.search=beam", "eval.search_scorer={fn: numeric_answer}", "env.name=try_again"],
     "eval.search searches single answers"),
    (["eval.search=sideways"], "eval.search"),
    (["eval.search_expand=0"], "eval.search_expand"),
    (["eval.search_separator="], "eval.search_separator"),
])
def test_bad_search_settings_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, ["model=tiny", *overrides])


def test_a_separator_no_token_holds_is_an_error_naming_the_key():
    tokenizer = load("tiny").tokenizer
    assert separator_ids(tokenizer, "\n") == {tokenizer.convert_tokens_to_ids("\n")}
    with pytest.raises(ConfigError, match="eval.search_separator: no token"):
        separator_ids(tokenizer, "\n\n")  # one character a token: two never sit in one


class Lines:
    """A judge of partial solutions for the tests: how many line breaks the text has, so a
    candidate that ended its step at the separator beats one that ran on, and ties are many
    (the tie rule is exercised)."""

    def score(self, texts, samples, lengths=None):
        total = torch.tensor([float(t.count("\n")) for t in texts])
        return RewardResult(total, {}, torch.zeros(len(texts), dtype=torch.bool))


def recording_engine(monkeypatch, limit=4, budget=48):
    """The tiny model's HF engine with every generate_partial call's prompts and sampled tokens recorded."""
    tiny = load("tiny")
    engine = build_engine(RolloutConfig(engine="hf", temperature=1.0), tiny.model, tiny.tokenizer, torch.float32,
                          budget)
    calls = []
    original = HFEngine.generate_partial

    def recorded(self, prompts, plan):
        out = original(self, prompts, plan)
        calls.append((prompts, int(out.lengths().sum())))
        return out

    monkeypatch.setattr(HFEngine, "generate_partial", recorded)
    task = build_task(load_config(None, ["model=tiny"]).task)
    return engine, task, task.eval[:limit], calls


def settings(width, expand, budget=48, steps=4, partial=True):
    return SearchSettings(width, expand, steps, budget, "\n", 1.0, partial)


def test_greedy_step_keeps_the_best_next_step_and_continues_from_its_token_ids(monkeypatch):
    engine, task, problems, calls = recording_engine(monkeypatch)
    torch.manual_seed(0)
    found = search(engine, task, problems, Lines(), settings(1, 3))
    prompts = encode_prompts(engine.tokenizer, task, problems)
    ends = [c["end"] for f in found for r in f.rounds for c in r]
    assert STEP in ends and STOP in ends  # both kinds of step end happened (the test reads both)
    for prompt, f in zip(prompts, found):
        for r, children in enumerate(f.rounds):
            assert len(children) == 3 and all(c["parent"] == 0 for c in children)
            kept = [j for j, c in enumerate(children) if c["kept"]]
            best = max(c["score"] for c in children)
            assert kept == [next(j for j, c in enumerate(children) if c["score"] == best)]  # the first of the best
            assert (children[kept[0]]["end"] == STEP) == (r < len(f.rounds) - 1)  # a step until the answer finishes
        assert f.answer.steps == len(f.rounds) and f.answer.score == max(c["score"] for c in f.rounds[-1])
        # token in, token out: each call continued the problem from prompt + the kept ids, never re-tokenised
        continued = [p for ps, _ in calls for p in ps if p[:len(prompt)] == prompt]
        assert [len(p) - len(prompt) for p in continued] == [0] + [c["length"] for r in f.rounds[:-1] for c in r
                                                                   if c["kept"]]
        assert all(p == (prompt + f.answer.ids)[:len(p)] for p in continued)
    assert sum(f.tokens for f in found) == sum(n for _, n in calls)  # every sampled token, the dropped ones too


def test_beam_keeps_the_best_width_and_narrows_as_answers_finish(monkeypatch):
    engine, task, problems, calls = recording_engine(monkeypatch)
    torch.manual_seed(1)
    found = search(engine, task, problems, Lines(), settings(2, 2, steps=3))
    for f in found:
        finished = 0
        for r, children in enumerate(f.rounds):
            room = 2 - finished
            kept = [j for j, c in enumerate(children) if c["kept"]]
            keys = [(c["score"], -j) for j, c in enumerate(children)]
            assert sorted(kept, key=lambda j: keys[j], reverse=True) == \
                sorted(range(len(children)), key=lambda j: keys[j], reverse=True)[:room]
            assert len(children) == 2 * len({c["parent"] for c in children})
            finished += sum(children[j]["end"] != STEP for j in kept)
        assert finished == 2  # it ends with two answers: at the latest, the last round finishes every candidate
        if len(f.rounds) == 3:
            assert all(c["end"] != STEP for c in f.rounds[-1])
    assert sum(f.tokens for f in found) == sum(n for _, n in calls)


def write_judge(tmp_path):
    (tmp_path / "judge.py").write_text("def even(completion, sample):\n    return float(len(completion) % 2 == 0)\n\n"
                                       "def vowels(completion, sample):\n"
                                       "    return float(sum(c in 'aeiou' for c in completion))\n")
    return tmp_path / "judge.py"


def test_aha_eval_search_with_a_verifier_against_best_of_n_at_equal_tokens(tmp_path, monkeypatch, capsys):
    judge = write_judge(tmp_path)
    drawn, sampled = [], []
    original_generate, original_partial = HFEngine.generate, HFEngine.generate_partial

    def generate(self, prompts, group_size=1, **kw):
        out = original_generate(self, prompts, group_size=group_size, **kw)
        lengths = out.lengths().long().tolist()
        drawn.extend(sum(lengths[j::group_size]) for j in range(group_size))  # one round a sample of each
        return out

    def partial(self, prompts, plan):
        out = original_partial(self, prompts, plan)
        sampled.append(int(out.lengths().sum()))
        return out

    monkeypatch.setattr(HFEngine, "generate", generate)
    monkeypatch.setattr(HFEngine, "generate_partial", partial)
    output = tmp_path / "search.jsonl"
    assert main(["eval", "model=tiny", "eval.limit=5", "eval.max_new_tokens=40", "rollout.engine=hf",
                 f"eval.search_scorer={{fn: '{judge}:even'}}", f"eval.scorer={judge}:vowels", "eval.search_expand=3",
                 "--search", "greedy_step", "--output", str(output), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert report["judges"] == "finished answers" and report["problems"] == 5 and report["width"] == 1
    assert report["tokens"] == sum(sampled) == sum(r["tokens"] for r in records)
    bon = report["best_of_n"]
    assert bon["n"] == equal_token_n(report["tokens"], drawn) and bon["tokens"] == sum(drawn[:bon["n"]])
    assert sum(drawn) >= report["tokens"]  # drawn until they reached the search's tokens
    vowels = lambda text: float(sum(c in "aeiou" for c in text))  # noqa: E731
    assert report["accuracy"] == pytest.approx(sum(vowels(r["completion"]) for r in records) / 5)
    assert bon["accuracy"] == pytest.approx(sum(vowels(r["best_of_n"]["completion"]) for r in records) / 5)
    for r in records:
        for children in r["rounds"]:
            for c in children:  # the verifier judges finished answers only
                assert (c["score"] is None) == (c["end"] == STEP)
            keys = [candidate_key(c["score"], c["end"] != STEP, False, 1.0) for c in children]
            assert [c["kept"] for c in children] == [j == keep_best(keys, 1)[0] for j in range(len(children))]
        assert r["judge"] == float(len(r["completion"]) % 2 == 0)


def test_a_process_reward_model_judges_every_partial_solution(tmp_path, capsys):
    from test_prm import prm_config

    from aha.config import RewardSpec
    from aha.rewards import build_reward
    from aha.training.loop import train

    train(prm_config(tmp_path, "prm", "train.steps=1"), echo=lambda *_: None)
    spec = f"eval.search_scorer={{model: '{tmp_path / 'prm'}', name: prm}}"
    output = tmp_path / "search.jsonl"
    assert main(["eval", "model=tiny", "eval.limit=3", "eval.max_new_tokens=40", "rollout.engine=hf", spec,
                 "eval.scorer=numeric_answer", "eval.search_width=2", "eval.search_expand=2", "eval.search_max_steps=3",
                 "--search", "beam", "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "beam 2 x 2 next steps by prm (steps)" in printed and "best-of-" in printed
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert all(c["score"] is not None for r in records for children in r["rounds"] for c in children)
    prm = build_reward([RewardSpec(model=str(tmp_path / "prm"))])
    problems = build_task(load_config(None, ["model=tiny"]).task).eval[:3]
    again = prm.score([r["completion"] for r in records], problems).total.tolist()
    assert [r["judge"] for r in records] == pytest.approx(again, rel=1e-5)  # the PRM scored the answer's text
    # a PRM reads steps at the separator it was trained with: another one is an error naming both
    assert main(["eval", "model=tiny", "eval.limit=1", spec, "eval.search_separator=;", "--search", "beam"]) == 2
    assert "eval.search_separator is ';', but the process reward model" in capsys.readouterr().err
