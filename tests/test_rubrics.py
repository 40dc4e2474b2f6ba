"""Per-prompt rubrics and the step judge: a sample's own rubric (a string or a checklist of
weighted criteria) reaches the judge, each criterion is graded in one batched pass, and
`mode: steps` grades each step as a process reward model splits it."""

from pathlib import Path

import pytest

import aha.rewards.judge as judge
from aha.config import RewardSpec
from aha.models import load
from aha.rewards import StepScores, build_reward
from aha.rewards.rubrics import Criterion, Job, criteria, split_steps

CONFIGS = Path(__file__).parent.parent / "configs"
CHECKLIST = [{"criterion": "The response states the correct product.", "weight": 3, "name": "correct"},
             {"criterion": "The response is one short sentence.", "weight": 1, "name": "concise"}]
SAMPLES = [
    {"id": "q1", "prompt": "What is 6 * 7?", "answer": "42", "rubric": CHECKLIST},
    {"id": "q2", "prompt": "What is 3 * 4?", "answer": "12", "rubric": "The response says twelve, in digits."},
    {"id": "q3", "prompt": "What is 9 * 2?", "answer": "18",
     "rubric": [{"criterion": "Mentions 18."}, "Names both factors, 9 and 2."]},
]
COMPLETIONS = ["6 * 7 = 42.", "It is 12.", "9 times 2 is 18, I think."]


def spied(monkeypatch):
    """The prompts (decoded) the tiny judge grades, through a spy on the real grading."""
    seen, real = [], judge._expected_grades

    def spy(model, tokenizer, prompts, mode, scale):
        seen.extend(tokenizer.decode(p) for p in prompts)
        return real(model, tokenizer, prompts, mode, scale)

    monkeypatch.setattr(judge, "_expected_grades", spy)
    return seen


def test_each_sample_s_rubric_reaches_the_judge_prompt(monkeypatch):
    seen = spied(monkeypatch)
    grades = judge.rubric_judge(COMPLETIONS, SAMPLES, model="tiny")
    # one question per criterion: 2 + 1 + 2, completion by completion
    assert len(seen) == 5
    expected = [(CHECKLIST[0]["criterion"], COMPLETIONS[0]), (CHECKLIST[1]["criterion"], COMPLETIONS[0]),
                (SAMPLES[1]["rubric"], COMPLETIONS[1]), ("Mentions 18.", COMPLETIONS[2]),
                ("Names both factors, 9 and 2.", COMPLETIONS[2])]
    for prompt, (rubric, completion) in zip(seen, expected):
        # (the tiny tokenizer reads a blank line as one unknown token)
        assert f"Rubric:\n{rubric}<unk>" in prompt and f"Response:\n{completion}<unk>" in prompt
    assert sorted(grades[0]) == ["concise", "correct"] and isinstance(grades[1], float)
    assert sorted(grades[2]) == ["c1", "c2"]  # unnamed criteria are numbered
    # a sample without a rubric takes args.rubric; args.rubric never overrides a sample's own
    seen.clear()
    judge.rubric_judge(COMPLETIONS[1:], [{"prompt": "p", "answer": "1"}, SAMPLES[1]], rubric="Default.", model="tiny")
    assert "Rubric:\nDefault.<unk>" in seen[0] and f"Rubric:\n{SAMPLES[1]['rubric']}<unk>" in seen[1]


def test_a_checklist_pays_the_weighted_fraction_of_its_criteria():
    """Each part is weight / total weight x that criterion's own grade (the grade the judge
    gives it as a one-criterion rubric), so the parts sum to the weighted fraction."""
    parts = judge.rubric_judge(COMPLETIONS[:1], SAMPLES[:1], model="tiny")[0]
    alone = [judge.rubric_judge(COMPLETIONS[:1], [{**SAMPLES[0], "rubric": c["criterion"]}], model="tiny")[0]
             for c in CHECKLIST]
    assert parts["correct"] == pytest.approx(0.75 * alone[0], abs=1e-6)
    assert parts["concise"] == pytest.approx(0.25 * alone[1], abs=1e-6)
    reward = build_reward([RewardSpec(fn="rubric_judge", name="judge", args={"model": "tiny"})])
    result = reward.score(COMPLETIONS, SAMPLES)
    assert result.components["judge/correct"][0] == pytest.approx(parts["correct"], abs=1e-6)
    assert float(result.total[0]) == pytest.approx(parts["correct"] + parts["concise"], abs=1e-6)
    assert float(result.total[1]) == pytest.approx(float(result.components["judge"][1]), abs=1e-6)
    assert not result.failed.any()


@pytest.mark.parametrize("mode", ["yes_no", "expected", "steps"])
def test_checklist_grades_do_not_depend_on_batching(mode):
    completions, samples = [c.replace(" ", "\n", 1) for c in COMPLETIONS] * 3, SAMPLES * 3  # two steps each
    one = judge.rubric_judge(completions, samples, model="tiny", mode=mode, batch_size=1)
    many = judge.rubric_judge(completions, samples, model="tiny", mode=mode, batch_size=16)
    flat = lambda grades: [v for g in grades for v in (g.values if isinstance(g, StepScores) else
                                                          g.values() if isinstance(g, dict) else [g])]
    assert flat(many) == pytest.approx(flat(one), abs=1e-5)
    assert len(set(round(v, 6) for v in flat(one))) > 3  # the grades read the completion and the criterion


@pytest.mark.parametrize("rubric, message", [
    (5, r"sample 'q9': field 'rubric' must be a non-empty string or a non-empty list"),
    ([], r"sample 'q9': field 'rubric' must be a non-empty string or a non-empty list"),
    ("  ", r"sample 'q9': field 'rubric' is blank"),
    ([{"criterion": ""}], r"sample 'q9': field 'rubric'\[0\].criterion must be a non-empty string"),
    (["ok", {"criterion": "x", "weight": -1}], r"sample 'q9': field 'rubric'\[1\].weight must be a positive number"),
    ([{"criterion": "x", "weight": True}], r"field 'rubric'\[0\].weight must be a positive number"),
    ([{"criterion": "x", "wieght": 2}], r"field 'rubric'\[0\] takes the keys criterion, weight, name; unknown: wieght"),
    ([3], r"field 'rubric'\[0\] must be a string or \{criterion, weight\}, got int"),
    (["a", {"criterion": "b", "name": "c1"}], r"two criteria are named alike"),
])
def test_bad_rubric_shapes_name_the_sample_and_field(rubric, message):
    with pytest.raises(ValueError, match=message):
        judge.rubric_judge(["x"], [{"id": "q9", "prompt": "p", "rubric": rubric}], model="tiny")


def test_a_missing_rubric_fails_the_batch_naming_the_sample_and_field():
    with pytest.raises(ValueError, match=r"sample 'q4' has no field 'checklist' and the reward sets no args.rubric"):
        judge.rubric_judge(["x"], [{"id": "q4", "prompt": "p", "rubric": "unused"}], model="tiny",
                           rubric_field="checklist")
    with pytest.raises(ValueError, match=r"args.rubric\[0\].weight must be a positive number"):
        judge.rubric_judge(["x"], [{"id": "q4"}], rubric=[{"criterion": "x", "weight": 0}], model="tiny")
    # in a run, the composition scores the batch as failed and its first error names them
    reward = build_reward([RewardSpec(fn="rubric_judge", name="judge", args={"model": "tiny"})])
    result = reward.score(["x", "y"], [{"id": "q5", "prompt": "p"}, SAMPLES[1]])
    assert result.failed.all()
    assert "sample 'q5' has no field 'rubric'" in reward.first_errors["judge"]


def test_steps_split_as_the_process_reward_model_splits_them():
    # "a\n\nb\n": steps "a" (closed by its separator at 2) and "b" (at 5); blank pieces are no steps
    assert split_steps("a\n\nb\n", "\n") == [(1, 2), (4, 5)]
    assert split_steps("one. two.", ". ") == [(3, 5), (9, 9)]
    assert split_steps("\n \n", "\n") == [] and split_steps("", "\n") == []
    assert criteria("x", "args.rubric") == [Criterion("x")]


def test_the_step_judge_grades_each_step_on_the_response_so_far(monkeypatch):
    seen = spied(monkeypatch)
    samples = [SAMPLES[1], SAMPLES[0], SAMPLES[1]]
    completions = ["3 * 4\n= 12\n", "6 * 7 = 42", " \n"]
    scores = judge.rubric_judge(completions, samples, model="tiny", mode="steps")
    assert scores[0].ends == (6, 11) and scores[1].ends == (10,) and scores[2] == StepScores((), ())
    # the judge saw the response up to each step, and was asked about its last step
    assert [p.split("Response:\n")[1].split("<unk>Does")[0] for p in seen] == ["3 * 4", "3 * 4\n= 12", "6 * 7 = 42",
                                                                             "6 * 7 = 42"]
    assert all(judge.INSTRUCTIONS["steps"] in p for p in seen)
    # by hand: step values are the yes/no grades of those questions; a checklist's step the weighted fraction
    loaded = load("tiny")
    rubric = Criterion(SAMPLES[1]["rubric"])
    step_jobs = [Job(0, rubric, "3 * 4"), Job(0, rubric, "3 * 4\n= 12"),
                 Job(1, Criterion(CHECKLIST[0]["criterion"]), "6 * 7 = 42"),
                 Job(1, Criterion(CHECKLIST[1]["criterion"]), "6 * 7 = 42")]
    grades = judge._expected_grades(judge.judge_model("tiny").model, loaded.tokenizer,
                                    judge.judge_prompts("tiny", step_jobs, samples, "steps", 9, True), "yes_no", 9)
    assert scores[0].values == pytest.approx(grades[:2], abs=1e-6)
    assert scores[1].values == pytest.approx([0.75 * grades[2] + 0.25 * grades[3]], abs=1e-6)
    # in a composition, the step values reach RewardResult.steps (paid where each step ends)
    result = build_reward([RewardSpec(fn="rubric_judge", name="steps", args={"model": "tiny", "mode": "steps"})]).score(
        completions, samples)
    assert [e for e, _ in result.steps[0]] == [6, 11]
    assert [v for _, v in result.steps[0]] == pytest.approx(grades[:2], abs=1e-6)
    assert float(result.total[2]) == 0.0 and not result.failed.any()


def test_steps_past_max_chars_are_not_graded():
    scores = judge.rubric_judge(["ab\ncd\nef", "abcdefgh\nx"], [SAMPLES[1]] * 2, model="tiny", mode="steps",
                                max_chars=5)
    assert scores[0].ends == (3, 6) and scores[1] is None  # its first step ends past the judge's view: no grade


def run_metrics(config) -> list[dict]:
    import json

    from aha.training.loop import train

    summary = train(config, echo=lambda *_: None)
    return [json.loads(line) for line in (Path(summary.run_dir) / "metrics.jsonl").read_text().splitlines()]


TINY_RUN = ["model=tiny", "train.steps=2", "train.checkpoint_every=0", "rollout.prompts_per_step=2",
            "rollout.group_size=4", "rollout.max_new_tokens=6", "eval.before=false", "eval.after=false",
            "algorithm.truncated_reward=null", "algorithm.dynamic_sampling=false"]


def test_the_rubric_checklist_recipe_runs_with_a_tiny_judge(tmp_path):
    """The recipe as shipped (each row's own checklist from data/rubrics/), the tiny model as
    policy and judge: each criterion is a reward component, the gold verifier is logged beside."""
    from aha.config import load_config

    config = load_config(CONFIGS / "rubric_checklist.yaml", TINY_RUN + [
        f"output_dir={tmp_path / 'run'}"])
    assert config.task.data == "data/rubrics/arithmetic_train.jsonl"
    assert config.reward[0].args["rubric_field"] == "rubric"
    config.reward[0].args["model"] = "tiny"
    for r in run_metrics(config):
        assert r["reward/failed"] == 0 and "monitor/gold_mean" in r
        # the checklist's parts: 2/3 and 1/3 of a grade in (0, 1)
        assert 0 < r["reward/judge/correct"] < 2 / 3 and 0 < r["reward/judge/concise"] < 1 / 3
        assert r["reward/verifier_mean"] == pytest.approx(r["reward/judge/correct"] + r["reward/judge/concise"])


def test_step_judge_rewards_reach_a_token_level_estimator(tmp_path):
    from aha.config import load_config

    config = load_config(CONFIGS / "quickstart.yaml", TINY_RUN + [
        f"output_dir={tmp_path / 'run'}", "algorithm.advantage=reinforce_pp",
        "reward=[{fn: rubric_judge, name: steps, args: {model: tiny, mode: steps, rubric: 'A correct step.'}}]"])
    for r in run_metrics(config):
        assert r["reward/failed"] == 0 and r["reward/steps"] > 0
