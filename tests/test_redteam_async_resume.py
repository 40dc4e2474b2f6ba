"""Red team: what asynchronous RL stamps on a round sampled ahead, what a restore brings back
besides the rounds in flight (the adaptive length coefficient),
partial rollouts at the token budget, and the run folder's files on resume."""

import json

import torch
from test_audit_async_resume import rl_method
from test_training import tiny_config

from aha.rollout.rollouts import rollouts_from_samples
from aha.tracking.run_dir import RunDir
from aha.training.checkpoint import best_evaluated_step
from aha.training.loop import train
from aha.training.rl.partial import Group, Launch, PartialRollouts, Row


def test_a_round_sampled_ahead_is_stamped_with_the_weights_it_is_drawn_on(tmp_path):
    """Catches a round sampled ahead (plain or partial) stamped with the version of the step
    that submits it instead of the weights it is drawn on (step - 1 updates): its staleness
    would read one less, and a partial round's tokens would carry a version not yet trained."""
    method = rl_method(tmp_path)
    method._sample_ahead(step=4)
    assert [a.policy_version for a in method.ahead] == [3, 3]
    partial = rl_method(tmp_path, "rollout.partial_rollouts=2", "rollout.max_staleness=1", name="partial")
    partial._sample_ahead(step=4)
    assert [a.policy_version for a in partial.ahead] == [3] and partial.ahead[0].launch is not None


def test_a_restore_brings_back_the_adaptive_length_coefficient(tmp_path):
    """Catches a resume that restarts the adaptive length penalty from algorithm.length_coef
    instead of the coefficient the checkpoint saved."""
    method = rl_method(tmp_path, "algorithm.length_coef=0.1")
    assert method.run_state.length_coef == 0.1
    state = dict(method.state(), length_coef=0.37)
    again = rl_method(tmp_path, "algorithm.length_coef=0.1", name="again")
    again.restore(state, {}, [])
    assert again.run_state.length_coef == 0.37
    old = {k: v for k, v in state.items() if k != "length_coef"}  # a checkpoint from before the key existed
    again.restore(old, {}, [])
    assert again.run_state.length_coef == 0.1


def _rows_at(lengths, done):
    return [Row(list(range(5, 5 + n)), [-0.5] * n, [0] * n, d, False) for n, d in zip(lengths, done)]


def test_a_carried_row_that_holds_max_new_tokens_tokens_is_done_and_truncated():
    """Catches the budget check on carried rows made strict (> for >=): a row stopped by the
    round at exactly max_new_tokens tokens has no budget left and must not be sent again
    (the engine refuses a budget of 0)."""
    partial = PartialRollouts(0, 2, 3)
    partial.carried = [Group({"id": "a"}, [1, 2], _rows_at([3, 1], [False, False])),
                       Group({"id": "b"}, [1, 3], _rows_at([3, 3], [True, False]))]
    launch = partial.launch(tokenizer=None, task=None, sampler=_NoFresh(), needed=2)
    a, b = launch.groups
    assert (a.rows[0].done, a.rows[0].truncated) == (True, True)
    assert b.complete and b.rows[1].truncated
    assert launch.plan.budgets == [2] and launch.prompts == [[1, 2, 5]] and launch.plan.enough == 1


class _NoFresh:
    def next(self, count):
        assert count == 0
        return []


def test_landing_counts_only_tokens_of_older_versions_as_stale():
    """Catches partial/stale_token_frac counting the landing version's own tokens as stale."""
    partial = PartialRollouts(0, 1, 4)
    old = Group({"id": "a"}, [1, 2], [Row([5, 6], [-0.1, -0.2], [2, 2], False, False)])
    fresh = Group({"id": "b"}, [1, 3], [Row()])
    launch = Launch([old, fresh], 2, [[1, 2, 5, 6], [1, 3]], [old.rows, fresh.rows])
    out = rollouts_from_samples([[1, 2, 5, 6], [1, 3]], [([7, 8], [-0.3, -0.4]), ([9, 10], [-0.5, -0.6])],
                                [False, False], torch.arange(2), _Tok(), 0, unfinished=[False, False])
    partial.land(launch, out, _Engine(), version=3)
    assert partial.last_stats["partial/stale_token_frac"] == 2 / 6
    assert partial.last_stats["partial/max_age"] == 1


class _Tok:
    eos_token_id = 2

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))

    def batch_decode(self, rows, skip_special_tokens=True):
        return [self.decode(r) for r in rows]


class _Engine:
    tokenizer, pad_id = _Tok(), 0


# ---------------------------------------------------------------- the run folder on resume


def _write(path, lines):
    path.write_text("".join(lines))


def test_truncate_after_drops_a_torn_last_line_even_when_every_record_is_kept(tmp_path):
    """Catches _rewrite leaving a file alone when no whole record is dropped: a line torn by a
    kill would stay, and the next record appended would be glued to it."""
    folder = RunDir(tmp_path)
    whole = [json.dumps({"step": s, "reward/mean": 0.5}) + "\n" for s in (1, 2)]
    _write(folder.metrics_path, whole + ['{"step": 3, "rew'])
    folder.truncate_after(5)
    assert folder.metrics_path.read_text() == "".join(whole)
    folder.log_metrics({"step": 3})
    assert [r["step"] for r in folder.read_metrics()] == [1, 2, 3]


def test_drop_samples_drops_only_that_splits_samples_of_that_step(tmp_path):
    """Catches drop_samples dropping every split's samples of the step (an evaluation made
    again would take the step's training samples with it)."""
    folder = RunDir(tmp_path)
    records = [{"step": 2, "split": "train", "i": 0}, {"step": 2, "split": "eval", "i": 1},
               {"step": 4, "split": "eval", "i": 2}, {"step": 2, "split": "eval", "i": 3}]
    _write(folder.samples_path, [json.dumps(r) + "\n" for r in records])
    folder.drop_samples(2, "eval")
    assert [json.loads(line)["i"] for line in folder.samples_path.read_text().splitlines()] == [0, 2]


def test_keep_best_picks_the_later_of_equal_scores_among_checkpointed_steps():
    """Catches best_evaluated_step keeping the earlier of two equal scores (documented: the
    later) or ranking an evaluation whose step has no checkpoint (nothing would be kept)."""
    records = [{"step": 0, "eval/accuracy": 0.9}, {"step": 2, "eval/accuracy": 0.5},
               {"step": 3, "reward/mean": 1.0}, {"step": 4, "eval/accuracy": 0.5},
               {"step": 6, "eval/accuracy": 0.75}, {"step": 8, "eval/accuracy": None}]
    assert best_evaluated_step(records, {2, 4, 6}) == 6
    assert best_evaluated_step(records, {2, 4, 8}) == 4
    assert best_evaluated_step(records, {3, 8}) is None


def test_a_fresh_run_in_a_folder_without_checkpoints_drops_the_old_step_0_records(tmp_path):
    """Catches a fresh start (nothing to resume from) that keeps the step-0 records of a run
    stopped before its first checkpoint: the held-out evaluation before training would be
    logged twice, the old one first."""
    run = tmp_path / "run"
    run.mkdir()
    _write(run / "metrics.jsonl", [json.dumps({"step": 0, "eval/accuracy": 0.123, "eval/n": 2}) + "\n",
                                   json.dumps({"step": 1, "reward/mean": 0.5}) + "\n"])
    _write(run / "samples.jsonl", [json.dumps({"step": 0, "split": "eval", "completion": "old"}) + "\n"])
    train(tiny_config(tmp_path, "run", "train.steps=1", "eval.after=false", "eval.limit=2"), echo=lambda *_: None)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "eval/accuracy" in r] == [0]
    assert [r["step"] for r in records if "reward/mean" in r] == [1]
    assert all(r.get("eval/accuracy") != 0.123 for r in records)
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert "old" not in [s["completion"] for s in samples]


def test_a_resumed_run_keeps_the_accuracy_before_training(tmp_path):
    """Catches a resume that forgets the held-out accuracy before training (state.json's
    accuracy_before): the summary and the before -> after line would lose it."""
    first = train(tiny_config(tmp_path, "run", "train.steps=2", "eval.after=false", "eval.limit=2"),
                  echo=lambda *_: None)
    assert first.accuracy_before is not None
    lines = []
    resumed = train(tiny_config(tmp_path, "run", "train.steps=3", "eval.limit=2"), echo=lines.append)
    assert resumed.accuracy_before == first.accuracy_before
    assert any(line.startswith(f"held-out greedy accuracy: {first.accuracy_before:.1%} -> ") for line in lines)
    state = json.loads((tmp_path / "run/checkpoints/step-3/state.json").read_text())
    assert state["accuracy_before"] == first.accuracy_before
