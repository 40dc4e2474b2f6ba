"""A custom task with text answers: held-out accuracy by the run's own reward (eval.scorer:
reward, the default), and a scorer that cannot score a sample stops with a clear error."""

import json
import math
from pathlib import Path

import pytest

from aha.cli import main
from aha.config import load_config
from aha.eval.scoring import ScorerError, build_scorer
from aha.rewards import RewardError

WORDS = ["gif", "cat", "dog", "sun", "map", "pen", "cup", "box", "hat", "jar", "kit", "log", "mud", "net", "owl", "pig"]

REWARDS = '''
def reversed_word(completion, sample):
    """1 for the word backwards first thing in the answer; letters of it, partial credit below 1."""
    word = sample["answer"]
    text = completion.strip().lower()
    if text.split()[:1] == [word]:
        return 1.0
    return sum(c in text for c in word) / (3 * len(word))


def brevity(completion, sample):
    return 0.5 if len(completion.split()) <= 3 else 0.0


def graded(completion, sample):
    return {"right": float(completion.strip() == sample["answer"]), "close": 0.25}


def picky(completion, sample):
    if "?" in completion:
        raise ValueError("cannot read a question")
    return 1.0


def nothing(completion, sample):
    return None if completion == "fig" else 1.0


def not_finite(completion, sample):
    return float("nan") if completion == "nan" else 1.0


def a_word(completion, sample):
    return "yes" if completion == "fig" else 1.0
'''

CONFIG = """
model: tiny
output_dir: {run}
task: {{data: train.jsonl, eval_data: test.jsonl}}
reward: [{{fn: 'rewards.py:reversed_word'}}]
rollout: {{prompts_per_step: 2, group_size: 4, max_new_tokens: 5, batch_size: 16}}
train: {{steps: 2, lr: 1.0e-3, checkpoint_every: 2, micro_batch_size: 8, dtype: float32}}
algorithm: {{dynamic_sampling: false}}
eval: {{before: true, after: true}}
"""


def write_task(tmp_path: Path) -> Path:
    """Reverse-a-word JSONL files (no number anywhere), the reward file and a config."""
    def rows(words):
        return "".join(json.dumps({"prompt": f"Write '{w}' backwards", "answer": w[::-1]}) + "\n" for w in words)

    (tmp_path / "train.jsonl").write_text(rows(WORDS[4:]))
    (tmp_path / "test.jsonl").write_text(rows(WORDS[:4]))
    (tmp_path / "rewards.py").write_text(REWARDS)
    path = tmp_path / "text.yaml"
    path.write_text(CONFIG.format(run=tmp_path / "run"))
    return path


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_text_answers_train_and_evaluate_by_the_runs_reward(tmp_path, capsys):
    config = write_task(tmp_path)
    assert main(["train", str(config)]) == 0
    run = tmp_path / "run"
    evals = [r for r in records(run / "metrics.jsonl") if "eval/accuracy" in r]
    assert [(r["step"], r["eval/n"]) for r in evals] == [(0, 4), (2, 4)]
    assert all(0.0 <= r["eval/accuracy"] <= 1.0 for r in evals)
    held_out = [r for r in records(run / "samples.jsonl") if r["split"] == "eval"]
    assert {r["answer"] for r in held_out} == {"fig", "tac", "god", "nus"}
    assert {r["score"] for r in held_out} <= {0.0, 1.0}  # right or wrong: the reward's total against 1.0
    assert (run / "report.html").is_file() and (run / "checkpoints/step-2").is_dir()

    out = tmp_path / "eval.jsonl"
    capsys.readouterr()
    assert main(["eval", str(config), "--checkpoint", str(run / "checkpoints/step-2"), "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert " on test: held-out greedy accuracy " in printed  # named by the held-out file, not train.jsonl
    assert "4 problems; right: total reward >= 1" in printed
    assert [r["score"] in (0.0, 1.0) for r in records(out)] == [True] * 4

    assert main(["eval", str(config), "--samples", "2", "--model", "tiny", "--out", str(tmp_path / "study"),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["task"] == "test" and report["models"]["tiny"]["problems"] == 4
    assert 0.0 <= report["models"]["tiny"]["curves"]["pass@k"]["mean"][-1] <= 1.0
    meta = json.loads((tmp_path / "study/samples/tiny/meta.json").read_text())
    assert meta["scorer"].startswith("reward >= 1 (reward ")  # the cache is keyed by the reward that scored it


def scorer_for(tmp_path, *overrides):
    write_task(tmp_path)
    return build_scorer(load_config(tmp_path / "text.yaml", list(overrides)))


GIF = {"id": "test.jsonl:1", "prompt": "Write 'gif' backwards", "answer": "fig"}


def test_a_total_of_at_least_the_threshold_is_right(tmp_path):
    both = "reward=[{fn: 'rewards.py:reversed_word'}, {fn: 'rewards.py:brevity'}]"
    completions = ["fig", "gif", "fig is the word backwards, as asked"]
    # totals 1 + 0.5, 1/3 (its letters) + 0.5 (short), 1 + 0: a bonus below 1 never makes a wrong answer right
    assert scorer_for(tmp_path, both).score(completions, [GIF] * 3) == [1.0, 0.0, 1.0]
    assert scorer_for(tmp_path, both, "eval.correct_threshold=0.8").score(completions, [GIF] * 3) == [1.0, 1.0, 1.0]
    # one component, unweighted, whatever the others say
    named = scorer_for(tmp_path, both, "eval.scorer=reward.brevity", "eval.correct_threshold=0.5")
    assert named.score(completions, [GIF] * 3) == [1.0, 1.0, 0.0]
    assert named.describe == "reward 'brevity' >= 0.5"
    # one part of a dict-valued reward
    graded = scorer_for(tmp_path, "reward=[{fn: 'rewards.py:graded'}]", "eval.scorer=reward.graded/right")
    assert graded.score(["fig", "gif"], [GIF] * 2) == [1.0, 0.0]
    # a function scorer's value is the score, as before
    assert scorer_for(tmp_path, "eval.scorer=rewards.py:brevity").score(completions, [GIF] * 3) == [0.5, 0.5, 0.0]


def test_cache_keys_name_what_scored(tmp_path):
    key = scorer_for(tmp_path).key
    assert key == scorer_for(tmp_path).key and key.startswith("reward >= 1 (reward ")
    assert scorer_for(tmp_path, "eval.correct_threshold=0.5").key != key
    assert scorer_for(tmp_path, "reward=[{fn: 'rewards.py:reversed_word', weight: 2.0}]").key != key
    # a function scorer keeps its name as the key, so caches drawn before 'reward' existed still match
    assert scorer_for(tmp_path, "eval.scorer=aha.rewards:numeric_answer").key == "aha.rewards:numeric_answer"


@pytest.mark.parametrize("scorer, reward, completion, reason", [
    ("numeric_answer", "picky", "fig", "ValueError: reference answer 'fig'"),
    ("rewards.py:nothing", "picky", "fig", "returned None, not a finite number"),
    ("rewards.py:not_finite", "picky", "nan", "returned nan, not a finite number"),
    ("rewards.py:a_word", "picky", "fig", "returned 'yes', not a finite number"),
    ("reward", "picky", "fig?", "reward 'picky' failed: ValueError: cannot read a question"),
    ("reward", "a_word", "fig", "reward 'a_word' returned 'yes', not a number or dict of numbers"),
    ("reward", "not_finite", "nan", "reward 'not_finite' returned nan, not a finite number"),
])
def test_a_sample_the_scorer_cannot_score_is_an_error_naming_it(tmp_path, scorer, reward, completion, reason):
    s = scorer_for(tmp_path, f"eval.scorer={scorer}", f"reward=[{{fn: 'rewards.py:{reward}'}}]")
    first = {"id": "test.jsonl:2", "prompt": "Write '01' backwards", "answer": "10"}  # scored without trouble
    with pytest.raises(ScorerError) as caught:
        s.score(["10", completion], [first, GIF])
    message = str(caught.value)
    assert message.startswith(f"eval.scorer {scorer!r} cannot score held-out sample test.jsonl:1 "
                              "(\"Write 'gif' backwards\"): ")
    assert reason in message and "not computed over fewer samples" in message


def test_bad_scorer_names_fail_before_any_model_loads(tmp_path):
    with pytest.raises(RewardError, match="'rewards' is neither 'reward', 'reward.<component>'"):
        scorer_for(tmp_path, "eval.scorer=rewards")
    with pytest.raises(RewardError, match="'reward.speed' names no component of the reward; its components: "
                                          "'reversed_word'"):
        scorer_for(tmp_path, "eval.scorer=reward.speed")
    with pytest.raises(RewardError, match="the config's reward list is empty"):
        scorer_for(tmp_path, "reward=[]")


def test_a_key_of_a_builtin_that_returns_a_number_is_a_config_error(tmp_path):
    """Found when the scorer is built, before any model loads, not at the first held-out evaluation."""
    with pytest.raises(RewardError) as caught:
        scorer_for(tmp_path, "reward=[{fn: exact_match, name: exact}]", "eval.scorer=reward.exact/right")
    assert str(caught.value).startswith("eval.scorer: 'reward.exact/right' names the key 'right' of reward 'exact', "
                                        "but exact_match returns a number, not a dict")
    assert "eval.scorer=reward.exact" in str(caught.value)


def test_a_key_the_reward_did_not_return_is_named_with_the_keys_it_did(tmp_path):
    """A user function shows what it returns only when it runs: the error is about the key, not a sample."""
    typo = scorer_for(tmp_path, "reward=[{fn: 'rewards.py:graded'}]", "eval.scorer=reward.graded/rite")
    with pytest.raises(ScorerError) as caught:
        typo.score(["fig", "gif"], [GIF] * 2)
    message = str(caught.value)
    assert message.startswith("eval.scorer 'reward.graded/rite': reward 'graded' returned no key 'rite' "
                              "(the keys it returned: 'close', 'right')")
    assert "held-out sample" not in message and "test.jsonl:1" not in message
    number = scorer_for(tmp_path, "reward=[{fn: 'rewards.py:brevity'}]", "eval.scorer=reward.brevity/short")
    with pytest.raises(ScorerError, match=r"^eval.scorer 'reward.brevity/short': reward 'brevity' returned a number, "
                                          r"not a dict with the key 'short'"):
        number.score(["fig"], [GIF])


def test_a_numeric_scorer_on_text_answers_stops_the_run_and_keeps_what_it_wrote(tmp_path, capsys):
    """The issue's crash: numeric_answer on 'fig'. The run stops at its first held-out eval
    with the key and the sample named; its checkpoint and metrics stay, and a resume with a
    scorer that fits evaluates without training again."""
    config = write_task(tmp_path)
    run = tmp_path / "run"
    assert main(["train", str(config), "eval.scorer=numeric_answer", "eval.before=false"]) == 2
    err = capsys.readouterr().err
    assert ("aha: error: eval.scorer 'numeric_answer' cannot score held-out sample test.jsonl:1 "
            "(\"Write 'gif' backwards\"): ValueError: reference answer 'fig'") in err
    assert "The run stopped at the held-out evaluation after training (step 2)" in err and "Traceback" not in err
    assert "held-out evaluation at step 2 stopped" in (run / "log.txt").read_text()
    steps = records(run / "metrics.jsonl")
    assert [r["step"] for r in steps] == [1, 2] and (run / "checkpoints/step-2").is_dir()

    assert main(["eval", str(config), "eval.scorer=numeric_answer"]) == 2
    assert "eval.scorer 'numeric_answer' cannot score held-out sample test.jsonl:1" in capsys.readouterr().err

    assert main(["train", str(config), "eval.before=false"]) == 0  # train.resume: from step-2, only the eval is left
    after = records(run / "metrics.jsonl")
    assert after[:2] == steps and [r["step"] for r in after[2:]] == [2] and math.isfinite(after[2]["eval/accuracy"])
