"""method: rft (expert iteration / rejection-sampling fine-tuning): which samples are kept, by
hand; on the tiny model, that exactly the passing completions (the engine's own tokens)
enter the SFT batch, that rationalised retries are learned without their hint, that a
round that keeps nothing trains nothing, and that a resume mid-round is exact."""

import json

import pytest
import torch
from safetensors.torch import load_file
from test_training import assert_resumes_exactly, metrics

from aha.algorithms.rejection import eligible, kept_rows, unsolved_groups
from aha.config import load_config
from aha.errors import TaskError
from aha.models import load
from aha.prompts import hinted
from aha.rewards import build_reward
from aha.rollout import HFEngine
from aha.tasks import build_task, encode_prompts
from aha.training.loop import train
from aha.training.method import Setup
from aha.training.phases import Phases
from aha.training.supervised.rft import RFTMethod

QUIET = lambda *_: None  # noqa: E731
NAN, INF = float("nan"), float("inf")


def test_eligible_needs_a_finite_total_at_the_threshold_no_failure_and_a_stop_token():
    totals = [1.0, 0.99, 1.5, NAN, INF, 1.0, 1.0]
    failed = [False, False, False, False, False, True, False]
    truncated = [False, False, False, False, False, False, True]
    assert eligible(totals, failed, truncated, 1.0) == [True, False, True, False, False, False, False]
    assert eligible([-2.0], [False], [False], -2.0) == [True]
    with pytest.raises(ValueError, match="one entry per completion, got 2, 1 and 1"):
        eligible([1.0, 1.0], [False], [False], 1.0)


def test_kept_rows_all_distinct_one_by_hand():
    # two prompts, groups of 3: prompt 0 passes rows 0 and 2 (the same text), prompt 1 rows 4 and 5
    passed = [True, False, True, False, True, True]
    texts = ["a", "b", "a", "c", "d", "e"]
    assert kept_rows(passed, texts, 3, "all") == [0, 2, 4, 5]
    assert kept_rows(passed, texts, 3, "distinct") == [0, 4, 5]
    assert kept_rows(passed, texts, 3, "one") == [0, 4]
    # a text repeated across prompts is not a duplicate: each prompt keeps its own
    assert kept_rows([True, True], ["x", "x"], 1, "distinct") == [0, 1]
    assert unsolved_groups([False, False, True, False, False, False], 3) == [1]
    with pytest.raises(ValueError, match="5 completions do not make whole groups of 2"):
        kept_rows([True] * 5, ["t"] * 5, 2, "all")
    with pytest.raises(ValueError, match="unknown keep rule 'best'"):
        kept_rows([True], ["t"], 1, "best")


def test_the_hint_shows_the_answer_in_the_question_and_the_last_user_turn():
    hint = "{prompt} (answer: {answer})"
    assert hinted({"id": 1, "prompt": "What is 2 * 3?", "answer": "6"}, hint)["prompt"] == "What is 2 * 3? (answer: 6)"
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 * 3?"}]
    shown = hinted({"prompt": chat, "answer": "6"}, hint)["prompt"]
    assert shown == [chat[0], {"role": "user", "content": "2 * 3? (answer: 6)"}]
    assert chat[1]["content"] == "2 * 3?"  # the sample itself is untouched


class RecordingEngine(HFEngine):
    """The HF engine, keeping what each generate call was asked and returned."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def generate(self, prompts, group_size=1, greedy=False, **kwargs):
        out = super().generate(prompts, group_size, greedy, **kwargs)
        self.calls.append((prompts, out))
        return out


# passes a completion of an even number of characters: about half of the tiny model's samples
EVEN = "def even(completion, sample):\n    return float(len(completion) % 2 == 0)\n"


def rft_setup(tmp_path, *overrides) -> tuple[RFTMethod, RecordingEngine]:
    (tmp_path / "even.py").write_text(EVEN)
    config = load_config(None, ["method=rft", "model=tiny", f"output_dir={tmp_path / 'run'}",
                                "task.name=arithmetic", "task.num_eval=4", "rollout.max_new_tokens=24",
                                "rft.prompts_per_round=6", "rft.samples=4",
                                f"reward=[{{fn: '{tmp_path}/even.py:even'}}]",
                                *overrides])
    lm = load("tiny", seed=config.seed)
    task = build_task(config.task, config.base_dir)
    reward = build_reward(config.reward, config.base_dir)
    engine = RecordingEngine(lm.model, lm.tokenizer, config.rollout.max_new_tokens)
    torch.manual_seed(config.seed)  # the engine samples from torch's global generator, as the loop seeds it
    setup = Setup(config, tmp_path / "run", task, reward, reward, lm.model, lm.tokenizer, engine, torch.float32)
    return RFTMethod(setup, RFTMethod.prepare(config, task, reward)), engine


@pytest.mark.parametrize("keep", ["all", "distinct", "one"])
def test_exactly_the_passing_completions_enter_the_round_as_the_engines_tokens(tmp_path, keep):
    method, engine = rft_setup(tmp_path, f"rft.keep={keep}")
    record, examples = method.step(1, Phases())
    (prompts, ro), = engine.calls
    expected = []
    for g in range(6):
        seen = set()
        for row in range(4 * g, 4 * g + 4):
            text = ro.texts[row]
            if len(text) % 2 or bool(ro.truncated[row]) or (keep == "distinct" and text in seen):
                continue
            seen.add(text)
            expected.append(row)
            if keep == "one":
                break
    assert 0 < len(expected) < 24  # the test means something: some pass, some do not
    got = method.round.sequences
    assert len(got) == len(expected) == record["rft/kept"]
    for seq, row in zip(got, expected):
        length = int(ro.completion_mask[row].sum())
        assert seq.prompt == tuple(prompts[row // 4])
        assert seq.completion == tuple(ro.completion_ids[row, :length].tolist())
        assert seq.completion[-1] == engine.tokenizer.eos_token_id
    assert record["rft/sampled"] == 24 and record["rft/kept_frac"] == len(expected) / 24
    assert all(len(e["completion"]) % 2 == 0 and e["reward"] == 1.0 for e in examples)
    assert record["sft/loss"] > 0 and record["train/nothing_to_train"] == 0.0


# fails the first 24 completions it scores (round 1's 6 prompts x 4), passes every later one:
# each prompt goes unsolved, and every retry that stops passes
LATE = "scored = []\ndef late(completion, sample):\n    scored.append(1)\n    return float(len(scored) > 24)\n"


def test_rationalised_retries_are_asked_with_the_hint_and_learned_without_it(tmp_path):
    (tmp_path / "late.py").write_text(LATE)
    method, engine = rft_setup(tmp_path, "rft.rationalize=true", "rft.hint='{prompt} Hint: {answer}.'",
                               "rollout.max_new_tokens=24", f"reward=[{{fn: '{tmp_path}/late.py:late'}}]")
    record, _ = method.step(1, Phases())
    (first_prompts, first), (retry_prompts, retry) = engine.calls
    tokenizer = engine.tokenizer
    assert record["rft/prompts_solved_frac"] == 0 and record["rft/retried"] == 24 == len(retry)
    # the retries ask the round's prompts, in order, each with its own answer in the hint
    samples = [method.setup.task.train[i] for i in method.sampler._permutation(0)[:6]]
    assert first_prompts == encode_prompts(tokenizer, method.setup.task, samples)
    assert retry_prompts == encode_prompts(tokenizer, method.setup.task,
                                           [hinted(s, "{prompt} Hint: {answer}.") for s in samples])
    assert all(f"Hint: {s['answer']}." in tokenizer.decode(p) for s, p in zip(samples, retry_prompts))
    stopped = [row for row in range(24) if not bool(retry.truncated[row])]
    distinct = {(row // 4, retry.texts[row]) for row in stopped}
    assert len(method.round.sequences) == len(distinct) == record["rft/rationalized"] == record["rft/kept"] > 0
    for seq, row in zip(method.round.sequences, method.round.rows):
        assert row["rationalized"] and "Hint" not in row["prompt"]
        assert seq.prompt in {tuple(p) for p in first_prompts}  # learned as an answer to the question without the hint
    assert record["rft/sampled"] == 48 and record["rft/kept_frac"] == len(distinct) / 48


def test_rationalize_needs_an_answer_for_every_training_prompt(tmp_path):
    data = tmp_path / "train.jsonl"
    rows = [{"prompt": "Say hi.", "answer": "hi"}, {"prompt": "Write f.", "tests": "assert f() == 1"}]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = load_config(None, ["method=rft", "rft.rationalize=true", f"task.data={data}", f"task.eval_data={data}",
                                "reward=[{fn: exact_match}]"])
    task = build_task(config.task, config.base_dir)
    with pytest.raises(TaskError, match=r"rft.rationalize shows each prompt's answer.*sample 'train.jsonl:2' has none"):
        RFTMethod.prepare(config, task, None)


def test_a_round_that_keeps_nothing_trains_nothing_and_the_next_step_samples_again(tmp_path):
    (tmp_path / "never.py").write_text("def never(completion, sample):\n    return 0.0\n")
    config = load_config(None, ["method=rft", "model=tiny", f"output_dir={tmp_path / 'run'}", "task.name=arithmetic",
                                "task.num_eval=4", "rollout.max_new_tokens=4", "rft.prompts_per_round=2",
                                "rft.samples=2", "train.steps=2", "train.checkpoint_every=2", "eval.before=false",
                                "eval.after=false", f"reward=[{{fn: '{tmp_path}/never.py:never'}}]"])
    train(config, echo=QUIET)
    records = [r for r in metrics(tmp_path / "run") if "rft/round" in r]
    assert [(r["rft/round"], r["rft/kept"], r["train/nothing_to_train"]) for r in records] == [(1, 0, 1.0), (2, 0, 1.0)]
    assert records[-1]["rft/sampled_total"] == 8
    after = load_file(tmp_path / "run/checkpoints/step-2/model.safetensors")
    before = load("tiny").model.state_dict()
    assert all(torch.equal(after[k], before[k]) for k in after)


def rft_config(tmp_path, name, *overrides):
    (tmp_path / "even.py").write_text(EVEN)
    return load_config(None, ["method=rft", "model=tiny", f"output_dir={tmp_path / name}", "task.name=arithmetic",
                              "task.num_eval=4", "rollout.max_new_tokens=6", "rft.prompts_per_round=4", "rft.samples=4",
                              "rft.steps_per_round=3", "rft.batch_size=4", "train.lr=1e-3", "train.checkpoint_every=2",
                              "train.keep_checkpoints=5", "train.report=false", "eval.before=false", "eval.after=false",
                              f"reward=[{{fn: '{tmp_path}/even.py:even'}}]", *overrides])


def test_rft_resumes_exactly_in_the_middle_of_a_round(tmp_path):
    # 3 steps a round: the checkpoint at step 2 falls inside round 1, which step 3 goes on with
    assert_resumes_exactly(tmp_path, rft_config)
    rounds = [r["rft/round"] for r in metrics(tmp_path / "resumed") if "rft/round" in r]
    assert rounds == [1, 1, 1, 2]


def test_rft_learns_what_the_reward_passes(tmp_path):
    """Ten rounds or more on the tiny model: the share of its samples that stop with an even
    number of characters rises from under 10% to over 30% (seeds 0-2 measured: 0.04-0.11 in
    the first three rounds, 0.39-0.45 in the last three)."""
    train(rft_config(tmp_path, "run", "train.steps=20", "rft.steps_per_round=2", "rft.prompts_per_round=8",
                     "train.checkpoint_every=0", "train.lr=3e-3"), echo=QUIET)
    kept = [r["rft/kept_frac"] for r in metrics(tmp_path / "run") if "rft/kept_frac" in r]
    assert len(kept) >= 10  # a round that keeps nothing is sampled again at the next step
    assert sum(kept[-3:]) / 3 > sum(kept[:3]) / 3 + 0.2, kept
