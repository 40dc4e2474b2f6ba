"""A procedural task's difficulty schedule (curriculum.difficulty_max): a level's training
problems, the rise once the rolling accuracy reaches the threshold, and exact resumes."""

import json

from test_training import assert_resumes_exactly, metrics, tiny_config

from aha.config import TaskConfig
from aha.tasks.procedural import procedural_splits, procedural_train
from aha.tasks.schedule import DifficultySchedule


def level(name: str, n: int = 4) -> list[dict]:
    return [{"id": f"{name}{i}", "prompt": f"{name}{i}", "answer": "1"} for i in range(n)]


LEVELS = {1: level("a"), 2: level("b"), 3: level("c")}


def test_a_levels_training_problems_are_the_tasks_at_the_start_and_never_a_held_out_one():
    cfg = TaskConfig(name="sorting", difficulty=1, eval_difficulty=2, num_train=60, num_eval=40)
    train, held_out = procedural_splits(cfg)
    assert procedural_train(cfg, 1) == train
    second = procedural_train(cfg, 2)
    assert len(second) == 60 and all(s["difficulty"] == 2 and s["id"] == f"sorting-d2-train-{i}"
                                     for i, s in enumerate(second))
    assert all(len(s["answer"].split(", ")) == 4 for s in second)  # difficulty + 2 numbers
    assert not {s["prompt"] for s in second} & {s["prompt"] for s in held_out}  # held out at the same level


def step(schedule: DifficultySchedule, rights: list[int], group_size: int = 4) -> dict:
    """One step: its prompts, their groups' right answers, the stats it logs; then its end."""
    batch = schedule.next(len(rights))
    schedule.observe(batch, rights, group_size, step=0)
    stats = schedule.stats()
    schedule.end_step()
    return {"ids": {s["id"][0] for s in batch}, "difficulty": stats["curriculum/difficulty"],
            "accuracy": stats["curriculum/window_accuracy"]}


def test_the_level_rises_when_the_accuracy_over_the_window_reaches_the_threshold():
    schedule = DifficultySchedule(LEVELS, seed=0, threshold=0.75, window=2)
    first = step(schedule, [4, 4])  # 8 / 8, but the window (2 steps) is not full yet
    assert first == {"ids": {"a"}, "difficulty": 1, "accuracy": 1.0} and schedule.level == 1
    second = step(schedule, [2, 2])  # (8 + 4) / (8 + 8) = 0.75: reached
    assert second == {"ids": {"a"}, "difficulty": 1, "accuracy": 0.75} and schedule.level == 2
    third = step(schedule, [1, 1])  # a new level starts an empty window: 2 / 8
    assert third == {"ids": {"b"}, "difficulty": 2, "accuracy": 0.25}
    assert step(schedule, [4, 4])["accuracy"] == 10 / 16 and schedule.level == 2  # 0.625: below
    assert step(schedule, [4, 4])["accuracy"] == 1.0 and schedule.level == 3  # the window is the last 2 steps
    for _ in range(3):
        assert step(schedule, [4, 4])["ids"] == {"c"} and schedule.level == 3  # the top level stays


def test_every_round_of_a_step_counts_toward_its_accuracy():
    schedule = DifficultySchedule(LEVELS, seed=0, threshold=0.5, window=1)
    schedule.observe(schedule.next(2), [0, 0], 4, step=1)  # dynamic sampling's first round: 0 / 8
    schedule.observe(schedule.next(2), [4, 4], 4, step=1)  # its second: 8 / 8
    assert schedule.stats()["curriculum/window_accuracy"] == 0.5
    schedule.end_step()
    assert schedule.level == 2


def test_its_state_resumes_the_same_level_and_draws():
    a = DifficultySchedule(LEVELS, seed=3, threshold=0.6, window=2, weighting="variance")
    for rights in ([4, 2], [4, 4], [1, 2]):
        step(a, rights)
    assert a.level == 2 and a.history == [[3, 8]]
    b = DifficultySchedule(LEVELS, seed=3, threshold=0.6, window=2, weighting="variance")
    b.load_state(json.loads(json.dumps(a.state())))  # as state.json holds it
    assert [step(a, [4, 3]) for _ in range(4)] == [step(b, [4, 3]) for _ in range(4)]
    assert b.level == 3


FIRST_LEVEL_ONLY = "def first_level(completion, sample):\n    return float(sample['difficulty'] == 1)\n"


def test_an_rl_run_with_a_difficulty_schedule_logs_its_level_and_resumes_exactly(tmp_path):
    # every answer is right at difficulty 1 and wrong above: the level rises once, after step 1
    (tmp_path / "first_level.py").write_text(FIRST_LEVEL_ONLY)
    overrides = ("task.name=sorting", "task.num_train=20", "curriculum.difficulty_max=3",
                 "curriculum.difficulty_window=1", "curriculum.difficulty_threshold=0.5",
                 f"reward=[{{fn: '{tmp_path / 'first_level.py'}:first_level'}}]",
                 "eval.before=false", "eval.after=false")
    assert_resumes_exactly(tmp_path, tiny_config, *overrides)
    steps = [r for r in metrics(tmp_path / "straight") if "reward/mean" in r]
    assert [r["curriculum/difficulty"] for r in steps] == [1, 2, 2, 2]
    assert [r["curriculum/window_accuracy"] for r in steps] == [1.0, 0.0, 0.0, 0.0]
    groups = [json.loads(line) for line in (tmp_path / "straight/groups.jsonl").read_text().splitlines()]
    assert {(g["step"], g["id"].split("-")[1]) for g in groups} == {(1, "d1"), (2, "d2"), (3, "d2"), (4, "d2")}
    saved = json.loads((tmp_path / "resumed/checkpoints/step-2/state.json").read_text())
    assert saved["sampler"]["level"] == 2
