"""Task mixtures (task.mixture): several tasks in one RL run, each row scored only by its own
task's reward list, drawn by a seeded sampler that resumes exactly, with rewards and held-out
accuracy logged per task as well as overall, and the report's per-task curves."""

import json
import logging
from pathlib import Path

import pytest
import torch

from aha.algorithms.task_mixture import pick, scheduled_weights
from aha.config import ConfigError, from_dict, load_config
from aha.errors import TaskError
from aha.rewards.mixture import build_mixture_reward
from aha.tasks import build_task
from aha.tasks.mixture import MixtureSampler, interleaved
from aha.training.loop import train

QUIET = lambda *_: None

# each reward refuses a row of another task: if one ever reached it, the run's reward would fail
REWARDS = '''
def _check(sample, task):
    if sample["task"] != task:
        raise AssertionError(f"{task}'s verifier got a row of {sample['task']}")

def letters(completion, sample):
    _check(sample, "letter_count")
    return float(len(completion) % 2)

def sums(completion, sample):
    _check(sample, "arithmetic")
    return float(len(completion) % 3 == 0)

def broken(completion, sample):
    raise ValueError("no verdict")
'''

MIXTURE = """
model: tiny
output_dir: {out}
task:
  mixture:
    - {{name: letter_count, num_eval: 4, num_train: 40, weight: 1, reward: [{{fn: '{rewards}:letters'}}]}}
    - {{name: arithmetic, a_max: 12, num_eval: 3, weight: 3, reward: [{{fn: '{rewards}:{second}'}}]}}
  weights_schedule: [{{step: 3, weights: [1, 0]}}]
rollout: {{prompts_per_step: 4, group_size: 4, max_new_tokens: 6}}
train: {{steps: 4, lr: 1.0e-3, checkpoint_every: 2, keep_checkpoints: 5, micro_batch_size: 8, report: false}}
algorithm: {{dynamic_sampling: false, truncated_reward: null}}
eval: {{max_new_tokens: 6}}
"""


def mixture_config(tmp_path, name="run", *overrides, second="sums"):
    """letter_count and arithmetic, arithmetic scored by `second`."""
    rewards = tmp_path / "mix_rewards.py"
    rewards.write_text(REWARDS)
    path = tmp_path / f"{name}.yaml"
    path.write_text(MIXTURE.format(out=tmp_path / name, rewards=rewards, second=second))
    return load_config(path, list(overrides))


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_scheduled_weights_and_the_pick_by_hand():
    points = [(0, [1.0, 3.0]), (10, [1.0, 0.0]), (20, [0.0, 2.0])]
    assert scheduled_weights(0, points) == [0.25, 0.75]
    assert scheduled_weights(9, points) == [0.25, 0.75]  # step: the earlier weights until the later step
    assert scheduled_weights(10, points) == [1.0, 0.0]
    assert scheduled_weights(99, points) == [0.0, 1.0]  # after the last point, the last weights
    # linear, halfway from (1, 3) to (1, 0): (1, 1.5), normalised (0.4, 0.6)
    assert scheduled_weights(5, points, "linear") == pytest.approx([0.4, 0.6])
    # a quarter of the way from (1, 0) to (0, 2): (0.75, 0.5) -> (0.6, 0.4)
    assert scheduled_weights(12.5, points, "linear") == pytest.approx([0.6, 0.4])
    assert scheduled_weights(30, points, "linear") == [0.0, 1.0]
    assert [pick([0.25, 0.75], u) for u in (0.0, 0.2499, 0.25, 0.9999)] == [0, 0, 1, 1]
    assert [pick([0.5, 0.0, 0.5], u) for u in (0.49, 0.5, 0.7)] == [0, 2, 2]  # a zero weight is never picked
    assert pick([0.3, 0.7 - 1e-12, 0.0], 0.99999999999999) == 1  # rounding under 1: the last positive weight


def test_a_mixture_task_tags_each_sample_and_interleaves_the_held_out_ones():
    config = from_dict({"task": {"mixture": [{"name": "letter_count", "num_eval": 3, "num_train": 20},
                                             {"name": "sorting", "num_eval": 1, "num_train": 20, "label": "sort"}],
                                 "system_prompt": "Be brief."}})
    task = build_task(config.task)
    assert task.name == "letter_count+sort" and task.system_prompt == "Be brief."
    assert [s["task"] for s in task.eval] == ["letter_count", "sort", "letter_count", "letter_count"]
    assert all(s["id"].startswith(s["task"] + "/") for s in [*task.train, *task.eval])
    ids = [s["id"] for s in task.train]
    assert len(ids) == len(set(ids)) == 40
    # each task's own reward list by default: a built-in's verifier
    assert [e.reward[0].fn for e in config.task.mixture] == ["aha.rewards:numeric_answer", "aha.rewards:list_answer"]
    assert interleaved([[1, 2, 3], [4]]) == [1, 4, 2, 3]


def test_a_row_with_its_own_task_field_is_refused(tmp_path):
    (tmp_path / "a.jsonl").write_text(json.dumps({"prompt": "p", "answer": "1", "task": "mine"}) + "\n")
    data = str(tmp_path / "a.jsonl")
    config = from_dict({"task": {"mixture": [{"data": data, "eval_data": data}, {"name": "arithmetic"}]}})
    with pytest.raises(TaskError, match=r"task.mixture\[0\] \(a\): sample 'a.jsonl:1' has a field 'task'"):
        build_task(config.task)


@pytest.mark.parametrize("raw, message", [
    ({"task": {"name": "sorting", "mixture": [{"name": "cycle"}]}}, "task.name: with task.mixture, set these on each"),
    ({"task": {"mixture": [{"name": "cycle", "few_shot": [{"prompt": "1+1?", "answer": "2"}]}]}},
     "few_shot: set on task .the whole mixture."),
    ({"task": {"mixture": [{"name": "cycle"}, {"name": "cycle"}]}}, r"task.mixture\[1\]: a second task named 'cycle'"),
    ({"task": {"mixture": [{"name": "cycle"}], "weights_schedule": [{"step": 2, "weights": [1, 1]}]}},
     r"task.weights_schedule\[0\].weights: 2 weights for 1 tasks"),
    ({"task": {"mixture": [{"name": "cycle", "weight": 0}]}}, "task.mixture.i..weight: weights must be >= 0 with a "
                                                              "positive sum"),
    ({"method": "sft", "task": {"mixture": [{"name": "cycle"}]}}, "task.mixture .* method=rl only"),
    ({"task": {"mixture": [{"name": "cycle"}]}, "curriculum": {"filter": True}},
     "curriculum.filter / .* does not work with task.mixture"),
    ({"task": {"mixture": [{"name": "cycle"}]}, "eval": {"scorer": "reward.yes_no"}},
     "eval.scorer=reward.<component> does not work with task.mixture"),
    ({"task": {"weights_schedule": [{"step": 0, "weights": [1]}]}}, "task.weights_schedule is read with task.mixture"),
    ({"task": {"mixture": [{"name": "cycle", "lable": "x"}]}}, "unknown config key 'task.mixture.0.lable'"),
])
def test_bad_mixtures_are_refused_naming_the_key(raw, message):
    with pytest.raises(ConfigError, match=message):
        from_dict(raw)


def test_each_row_is_scored_by_its_own_tasks_reward_only(tmp_path, caplog):
    (tmp_path / "r.py").write_text(REWARDS)
    config = from_dict({"task": {"mixture": [
        {"name": "letter_count", "reward": [{"fn": f"{tmp_path / 'r.py'}:letters"}]},
        {"name": "arithmetic", "reward": [{"fn": f"{tmp_path / 'r.py'}:sums"},
                                          {"fn": f"{tmp_path / 'r.py'}:broken", "weight": 0.5}]}]}})
    reward = build_mixture_reward(config.task.mixture)
    samples = [{"id": "a/1", "task": "arithmetic"}, {"id": "l/1", "task": "letter_count"},
               {"id": "a/2", "task": "arithmetic"}]
    with caplog.at_level(logging.WARNING):
        result = reward.score(["abc", "abc", "ab"], samples)  # letters: odd length 1; sums: length % 3 == 0
    assert result.total.tolist() == [1.0, 1.0, 0.0]
    assert result.failed.tolist() == [True, False, True]
    nan = float("nan")
    assert torch.equal(result.components["letter_count/letters"].nan_to_num(-1), torch.tensor([nan, 1.0, nan])
                       .nan_to_num(-1))
    assert result.components["arithmetic/sums"].nan_to_num(-1).tolist() == [1.0, -1.0, 0.0]
    # the failing reward is named with its task, in the log, the failure counts and the alarms' first error
    assert result.failures == {"arithmetic/broken": 2}
    assert "reward arithmetic/broken failed on sample a/1" in caplog.text
    assert reward.first_errors["arithmetic/broken"].startswith("on sample a/1: ValueError: no verdict")
    assert [c.name for c in reward.components_for(samples[1])] == ["letter_count/letters"]
    with pytest.raises(Exception, match="has task 'other', not one of task.mixture's"):
        reward.score(["x"], [{"id": "x", "task": "other"}])


def test_the_sampler_draws_by_weight_follows_the_schedule_and_resumes_exactly():
    samples = [{"id": f"{t}/{i}", "task": t} for t in ("a", "b") for i in range(5)]
    fresh = lambda: MixtureSampler(samples, ["a", "b"], [(0, [1.0, 3.0]), (2, [1.0, 0.0])], "step", seed=7)
    straight = fresh()
    drawn = [straight.next(400)]
    share_b = sum(s["task"] == "b" for s in drawn[0]) / 400
    assert 0.68 < share_b < 0.82  # 3 of 4, drawn
    straight.end_step()  # step 1 done: step 2 draws only a
    assert straight.stats() == {"mixture/a/weight": 1.0, "mixture/b/weight": 0.0}
    state = json.loads(json.dumps(straight.state()))  # what a checkpoint holds
    drawn.append(straight.next(30))
    assert {s["task"] for s in drawn[1]} == {"a"}
    resumed = fresh()
    resumed.load_state(state)
    assert resumed.next(30) == drawn[1]
    with pytest.raises(TaskError, match="not this mixture's"):
        MixtureSampler(samples, ["a", "c"], [(0, [1.0, 1.0])], "step", 7).load_state(state)


def test_a_mixture_run_logs_each_task_and_resumes_exactly(tmp_path):
    """The tiny model on letter_count and arithmetic, each with a reward that fails on the other
    task's rows: no reward ever fails, each task's reward and held-out accuracy are logged beside
    the overall ones, and a run stopped after step 2 and resumed draws and logs exactly what a
    straight run does (the schedule moves every prompt to letter_count from step 3)."""
    straight = train(mixture_config(tmp_path, "straight"), echo=QUIET)
    train(mixture_config(tmp_path, "resumed", "train.steps=2"), echo=QUIET)
    train(mixture_config(tmp_path, "resumed", "train.steps=4", "train.allow_config_change=true"), echo=QUIET)
    run = Path(straight.run_dir)
    logged = records(run / "metrics.jsonl")
    steps = [r for r in logged if "reward/mean" in r]
    assert all(r["reward/failed"] == 0 for r in steps)
    for r in steps:
        for key in ("reward/letter_count/letters", "reward/letter_count/mean", "reward/letter_count/correct_frac"):
            assert key in r
        assert r["mixture/letter_count/weight"] == (0.25 if r["step"] < 3 else 1.0)
    assert "reward/arithmetic/sums" in steps[0] and "reward/arithmetic/sums" not in steps[3]  # none drawn at step 4
    evals = [r for r in logged if "eval/accuracy" in r]
    assert [r["step"] for r in evals] == [0, 4]
    for r in evals:
        # arithmetic holds out whole groups of commuted problems: 4 for num_eval 3
        assert r["eval/letter_count/n"] == 4 and r["eval/arithmetic/n"] == 4 and r["eval/n"] == 8
        overall = (r["eval/letter_count/accuracy"] + r["eval/arithmetic/accuracy"]) / 2
        assert r["eval/accuracy"] == pytest.approx(overall)
    groups = records(run / "groups.jsonl")
    assert all(g["id"].startswith(g["task"] + "/") for g in groups)
    assert {g["task"] for g in groups if g["step"] >= 3} == {"letter_count"}
    samples = records(run / "samples.jsonl")
    assert all("task" in s for s in samples)
    # the steps and the final evaluation (the stopped run also evaluated at its end, step 2)
    strip = lambda rs: [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rs
                        if "reward/mean" in r or r["step"] == 4]
    assert strip(logged) == strip(records(tmp_path / "resumed/metrics.jsonl"))
    assert records(run / "groups.jsonl") == records(tmp_path / "resumed/groups.jsonl")


def test_a_task_whose_reward_raises_is_named_with_its_task(tmp_path):
    config = mixture_config(tmp_path, "run", "train.steps=1", "eval.before=false", "train.max_reward_failure_rate=0.1",
                            "task.weights_schedule=[]", second="broken")
    with pytest.raises(Exception, match="arithmetic/broken"):
        train(config, echo=QUIET)


def test_the_mixture_report_shows_per_task_curves_in_a_real_browser(tmp_path, browser):
    config = mixture_config(tmp_path, "run", "train.report=true", "eval.every=2", "train.checkpoint_every=0")
    run = Path(train(config, echo=QUIET).run_dir)
    page = (run / "report.html").read_text()
    assert "task letter_count+arithmetic" in page
    images, colours = browser(run / "report.html", tmp_path, height=2400)
    alts = [alt for alt, w, h in images if (w, h) == (600, 340)]  # decoded at full size
    for title in ("Held-out accuracy (overall and per task)", "Reward per task (shaped mean)",
                  "Task mixture weights"):
        assert title in alts
    assert colours > 50


def test_the_mixture_recipe_runs_on_the_tiny_model(tmp_path):
    """configs/mixture.yaml as shipped, its three tasks cut small (a list's items take no dotted
    override): each task's own verifier, and each task's reward and accuracy are logged."""
    import yaml

    raw = yaml.safe_load((Path(__file__).parent.parent / "configs" / "mixture.yaml").read_text())
    for entry in raw["task"]["mixture"]:
        entry.update(num_eval=2, num_train=20)
    raw.update(model="tiny", output_dir=str(tmp_path / "run"))
    raw["train"].update(steps=2, checkpoint_every=0, micro_batch_size=16)
    raw["rollout"].update(prompts_per_step=3, group_size=2, max_new_tokens=4)
    raw["eval"].update(max_new_tokens=4)
    config = from_dict(raw)
    assert [e.reward[0].fn.split(":")[1] for e in config.task.mixture] == ["numeric_answer", "yes_no", "numeric_answer"]
    train(config, echo=QUIET)
    logged = records(tmp_path / "run/metrics.jsonl")
    assert [r["step"] for r in logged if "reward/mean" in r] == [1, 2]
    final = logged[-1]
    assert {f"eval/{t}/accuracy" for t in ("letter_count", "connectivity", "arithmetic")} <= set(final)


def test_sampled_eval_gives_each_task_of_a_mixture_its_own_pass_at_k(tmp_path):
    """`aha eval --samples` on a mixture: a pass@k curve for each task on its own problems,
    beside the whole set's, which is their problem-weighted mean at every k."""
    from aha.eval.compare import curve_task, summarize
    from aha.eval.study import run_study

    config = mixture_config(tmp_path, "run")
    report = run_study(config, ["tiny"], 4, tmp_path / "study")
    curves = report["models"]["tiny"]["curves"]
    assert {"pass@k [letter_count]", "pass@k [arithmetic]"} <= set(curves)
    solved = report["models"]["tiny"]["solved"]
    sizes = {t: sum(i.startswith(t + "/") for i in solved) for t in ("letter_count", "arithmetic")}
    assert sizes == {"letter_count": 4, "arithmetic": 4}
    for j, k in enumerate(curves["pass@k"]["k"]):
        weighted = sum(sizes[t] * curves[f"pass@k [{t}]"]["mean"][j] for t in sizes) / sum(sizes.values())
        assert curves["pass@k"]["mean"][j] == pytest.approx(weighted)
    assert "pass@k [letter_count]" in (tmp_path / "study/report.html").read_text()
    # by hand: task a solves 2 of 2 samples and 0 of 2; task b 1 of 2 -> pass@1 0.5 and 0.5, pass@2 0.5 and 1.0
    sample = lambda score: {"completion": "x", "score": score, "answer": None, "length": 1, "truncated": False}
    by_problem = {"a/1": [sample(1.0), sample(1.0)], "a/2": [sample(0.0), sample(0.0)],
                  "b/1": [sample(1.0), sample(0.0)]}
    hand = summarize(by_problem, task_of={"a/1": "a", "a/2": "a", "b/1": "b"})["curves"]
    assert hand["pass@k [a]"]["mean"] == [0.5, 0.5] and hand["pass@k [b]"]["mean"] == [0.5, 1.0]
    assert hand["pass@k"]["mean"] == pytest.approx([0.5, 2 / 3])
    assert "pass@k [a]" not in summarize(by_problem)["curves"]
    assert [curve_task(name) for name in hand] == [None, "a", "b"] + [None] * (len(hand) - 3)
