"""What a checkpoint of asynchronous RL holds of the rounds in flight, and what a resume does
to the run's files.

- Rounds that were in flight at a checkpoint are sampled again after a resume; until they are
  re-submitted they are still in flight, so the next checkpoint saves them again (and once
  re-submitted, as rounds sampled ahead, in the same order). With partial rollouts the
  groups of a round in flight are saved with the carried ones.
- A resume from step N drops the records of the steps after N from metrics.jsonl,
  samples.jsonl and groups.jsonl before training them again: no step appears twice."""

import json
from pathlib import Path

import torch
from test_training import tiny_config

from aha.models import load
from aha.rewards import build_reward
from aha.rollout import HFEngine
from aha.tasks import build_task
from aha.tracking.run_dir import RunDir
from aha.training.loop import train
from aha.training.method import Setup
from aha.training.rl.method import RLMethod
from aha.training.rl.partial import Group, PartialRollouts, Row

QUIET = lambda *_: None  # noqa: E731


class SubmittingEngine(HFEngine):
    """The HF engine with the asynchronous engine's submit calls (RayEngine's), which only
    record what was submitted: nothing here collects them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.submitted = []

    def submit(self, prompts, group_size=1, *args):
        self.submitted.append(("submit", prompts, group_size))
        return len(self.submitted)

    def submit_partial(self, prompts, plan):
        self.submitted.append(("submit_partial", prompts, plan))
        return len(self.submitted)


def rl_method(tmp_path, *overrides, name="run") -> RLMethod:
    """The rl method of an asynchronous run (rollout.max_staleness=2, 10 steps) on the tiny
    model, built as the loop builds it, its engine a SubmittingEngine."""
    config = tiny_config(tmp_path, name, "ray.rollout_workers=2", "rollout.max_staleness=2", "train.steps=10",
                         *overrides)
    lm = load("tiny", seed=config.seed)
    task = build_task(config.task, config.base_dir)
    reward = build_reward(config.reward, config.base_dir)
    engine = SubmittingEngine(lm.model, lm.tokenizer, config.rollout.max_new_tokens)
    setup = Setup(config, tmp_path / name, task, reward, reward, lm.model, lm.tokenizer, engine, torch.float32)
    return RLMethod(setup, RLMethod.prepare(config, task, reward))


def test_rounds_resumed_in_flight_are_saved_again_until_and_after_they_are_resubmitted(tmp_path):
    """Catches a checkpoint taken after a resume, before the resumed rounds are sampled again,
    that loses them (extra_state without resumed_rounds, or none at all when nothing new is
    in flight), a restore that drops them, re-submission that draws new prompts in their
    place, and saved rounds out of order."""
    method = rl_method(tmp_path)
    train = method.setup.task.train
    rounds = [train[0:3], train[3:6], train[6:9]]  # prompts_per_step 3: three rounds that were in flight
    state = method.state()
    method.restore(state, {"in_flight": [list(r) for r in rounds]}, [])
    assert list(method.resumed_rounds) == rounds and not method.ahead
    # a checkpoint now, nothing submitted yet: the three rounds are saved again, as they were
    assert method.extra_state() == {"in_flight": rounds}
    # two rounds (max_staleness) are submitted ahead: the resumed ones first, in order
    method._sample_ahead(step=3)
    assert [a.chosen for a in method.ahead] == rounds[:2] and list(method.resumed_rounds) == rounds[2:]
    assert [s[0] for s in method.setup.engine.submitted] == ["submit", "submit"]
    assert method.extra_state() == {"in_flight": rounds}
    # a method restored from that checkpoint holds the same rounds
    again = rl_method(tmp_path, name="again")
    again.restore(state, method.extra_state(), [])
    assert again.extra_state() == {"in_flight": rounds}


def group(sample, prompt, lengths, done):
    return Group(sample, prompt, [Row(list(range(5, 5 + n)), [-0.5] * n, [1] * n, d, False)
                                  for n, d in zip(lengths, done)])


def test_partial_groups_of_a_round_in_flight_are_saved_with_the_carried_ones(tmp_path):
    """Catches a checkpoint of asynchronous RL with partial rollouts that saves only the carried
    groups, not those of the rounds in flight (their started rows would be lost), and a
    restore that drops the carried groups."""
    method = rl_method(tmp_path, "rollout.partial_rollouts=2", "rollout.max_staleness=1")
    train = method.setup.task.train
    tok = method.setup.tokenizer
    carried = [group(train[0], tok.encode(train[0]["prompt"]), [2, 1, 3, 0], [True, False, False, False]),
               group(train[1], tok.encode(train[1]["prompt"]), [4, 4, 4, 2], [True, True, True, False])]
    saved = PartialRollouts(2, 4, 6)
    saved.carried = carried
    state = saved.state()
    method.restore(method.state(), {"partial": state}, [])
    assert method.partial.carried == carried
    assert method.extra_state() == {"partial": state}  # a checkpoint before any launch: as it was
    method._sample_ahead(step=3)  # one round launched: the two carried groups and 3 fresh prompts
    (ahead,) = method.ahead
    assert method.partial.carried == [] and len(ahead.launch.groups) == 5
    saved = method.extra_state()["partial"]["carried"]
    assert saved[:2] == state["carried"]
    assert [g["sample"] for g in saved[2:]] == [g.sample for g in ahead.launch.groups[2:]]
    assert all(row["tokens"] == [] for g in saved[2:] for row in g["rows"])
    restored = PartialRollouts(2, 4, 6)
    restored.load_state(method.extra_state()["partial"])
    assert restored.carried == ahead.launch.groups


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_truncate_after_keeps_the_checkpoint_step_and_drops_every_later_one(tmp_path):
    """Catches the boundary (the checkpoint's own step dropped, or the next one kept) and a
    file of the run left untruncated on resume (groups.jsonl, samples.jsonl)."""
    run = RunDir(tmp_path / "run")
    metrics = [{"step": 0, "eval/accuracy": 0.5}, {"step": 1, "reward/mean": 0.1}, {"step": 2, "reward/mean": 0.2},
               {"step": 2, "eval/accuracy": 0.6}, {"step": 3, "reward/mean": 0.3}, {"step": 4, "reward/mean": 0.4}]
    samples = [{"step": s, "split": split,
                "completion": f"{s}{split}"} for s in range(5) for split in ("train", "eval")]
    groups = [{"step": s, "epoch": 0, "id": str(i), "right": i, "tried": 4} for s in range(1, 5) for i in range(2)]
    write_jsonl(run.metrics_path, metrics)
    write_jsonl(run.samples_path, samples)
    write_jsonl(run.groups_path, groups)
    run.truncate_after(2)
    assert read_jsonl(run.metrics_path) == metrics[:4]
    assert read_jsonl(run.samples_path) == samples[:6]
    assert read_jsonl(run.groups_path) == groups[:4]
    run.truncate_after(-1)  # a fresh start: nothing kept
    assert [read_jsonl(p) for p in (run.metrics_path, run.samples_path, run.groups_path)] == [[], [], []]


def test_a_resumed_run_logs_each_step_after_its_checkpoint_once(tmp_path):
    """Catches a resume that keeps the records the run wrote after its last checkpoint (a crash
    after step 3 logged, checkpoint at 2): step 3 would be in metrics.jsonl twice, the stale
    record first; likewise its samples and groups."""
    fast = ("eval.before=false", "eval.after=false", "train.steps=2", "rollout.prompts_per_step=2")
    train(tiny_config(tmp_path, "run", *fast), echo=QUIET)
    run = tmp_path / "run"
    # the run went on past its checkpoint at step 2 and was killed after logging step 3
    paths = [run / name for name in ("metrics.jsonl", "samples.jsonl", "groups.jsonl")]
    for path in paths:
        records = read_jsonl(path)
        assert records and {r["step"] for r in records} == {1, 2}
        with path.open("a") as f:
            for r in records:
                if r["step"] == 2:
                    f.write(json.dumps({**r, "step": 3, "stale": True}) + "\n")
    said = []
    train(tiny_config(tmp_path, "run", *fast[:2], "train.steps=3", "rollout.prompts_per_step=2"), echo=said.append)
    assert any(line.startswith("resumed from ") and line.endswith("step-2 (step 2)") for line in said)
    records = read_jsonl(run / "metrics.jsonl")
    assert [r["step"] for r in records if "reward/mean" in r] == [1, 2, 3]
    for path in paths:
        records = read_jsonl(path)
        assert not any(r.get("stale") for r in records), path.name
        assert sorted({r["step"] for r in records}) == [1, 2, 3], path.name
    groups = read_jsonl(run / "groups.jsonl")
    assert [r["step"] for r in groups] == [1, 1, 2, 2, 3, 3]  # prompts_per_step groups a step, once each
