"""A reward is one component among others and runs in the trainer's process or a worker's; what
it does must stay its own business (issue 29, round two):

- kind 6: a score is a real number: a string ('1e30') is a failed sample, never read as one;
- kind 7: SystemExit, KeyboardInterrupt and GeneratorExit raised by an in-process reward fail
  its sample, as they do in a worker; a real Ctrl-C still stops the run;
- kind 8: a pooled reward killed at its timeout takes every process it started with it;
- kind 9: a component that changes its sample (or a batched one its completions) changes
  nothing another component, another row or the dataset sees, with workers or without."""

import copy
import os
import signal
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
import torch

from aha.config import RewardSpec
from aha.eval.scoring import FunctionScorer, ScorerError
from aha.rewards import StepScores, batched
from aha.rewards.compose import Component, CompositeReward, build_reward
from aha.rewards.pool import WorkerPool, _Worker
from aha.training.interrupt import DeferredInterrupt

SAMPLES = [{"id": f"s{i}"} for i in range(3)]


def constant(value):
    return lambda completion, sample: value


def scored(reward: CompositeReward, completions, samples):
    """reward.score, with anything escaping it turned into a test failure (not a stopped session)."""
    try:
        return reward.score(completions, samples)
    except BaseException as err:  # noqa: BLE001 - a KeyboardInterrupt would end the whole pytest run
        pytest.fail(f"{type(err).__name__} escaped the composition: {err!r}")


# -- kind 6: a score is a number, not text that reads as one --------------------------------

@pytest.mark.parametrize("value", ["1e30", "1", b"1e30", bytearray(b"2"), np.array("1e30"), np.str_("3"), [1.0],
                                   1 + 0j, None, {"x": "1e30"}])
def test_a_score_that_is_not_a_real_number_fails_its_sample(value):
    reward = CompositeReward([Component("r", constant(value)), Component("ok", constant(0.5))])
    result = scored(reward, ["a"], SAMPLES[:1])
    assert result.failed.tolist() == [True] and result.failures == {"r": 1}
    assert result.total.tolist() == [0.5]
    assert "not a number or dict of numbers" in reward.first_errors["r"]


@pytest.mark.parametrize("value, number", [(True, 1.0), (False, 0.0), (3, 3.0), (np.float32(0.25), 0.25),
                                           (np.bool_(True), 1.0), (torch.tensor(2.5), 2.5), (np.array(4.0), 4.0),
                                           (Decimal("0.75"), 0.75), ({"a": True, "b": 2}, 3.0)])
def test_real_numbers_and_bools_score_as_numbers(value, number):
    result = scored(CompositeReward([Component("r", constant(value))]), ["a"], SAMPLES[:1])
    assert result.failed.tolist() == [False] and result.total.tolist() == [number]


def test_a_string_from_a_pooled_reward_fails_its_sample_too(tmp_path):
    (tmp_path / "texty.py").write_text("def score(completion, sample):\n"
                                       "    return '1e30' if completion == 'x' else 2.0\n")
    reward = build_reward([RewardSpec(fn="texty.py:score", workers=1, timeout_s=30.0)], tmp_path)
    try:
        result = scored(reward, ["x", "y"], SAMPLES[:2])
    finally:
        reward.close()
    assert result.failed.tolist() == [True, False] and result.total.tolist() == [0.0, 2.0]
    assert "'1e30'" in reward.first_errors["score"]


def test_a_function_scorer_reads_no_number_from_an_array_of_text():
    scorer = FunctionScorer("texty", constant(np.array("1e30")))
    with pytest.raises(ScorerError, match="not a finite number"):
        scorer.score(["a"], SAMPLES[:1])


# -- kind 7: what a reward raises is its failure; a real Ctrl-C is not ----------------------

def raising(error):
    def fn(completion, sample):
        if completion == "bad":
            raise error
        return 1.0
    return fn


@pytest.mark.parametrize("error", [SystemExit(3), KeyboardInterrupt(), GeneratorExit(), StopIteration()])
def test_an_in_process_reward_raising_a_base_exception_fails_only_its_sample(error):
    reward = CompositeReward([Component("r", raising(error)), Component("ok", constant(0.5))])
    result = scored(reward, ["good", "bad", "good"], SAMPLES)
    assert result.failed.tolist() == [False, True, False] and result.total.tolist() == [1.5, 0.5, 1.5]
    assert reward.first_errors["r"].endswith(f"{type(error).__name__}: {error}")


@pytest.mark.parametrize("error", [SystemExit(3), KeyboardInterrupt(), GeneratorExit()])
def test_a_batched_reward_raising_a_base_exception_fails_its_batch(error):
    @batched
    def judge(completions, samples):
        raise error

    reward = CompositeReward([Component("judge", judge, batched=True), Component("ok", constant(0.5))])
    result = scored(reward, ["a", "b"], SAMPLES[:2])
    assert result.failed.tolist() == [True, True] and result.total.tolist() == [0.5, 0.5]


def ctrl_c(times: int, catch: bool = False):
    """A reward during which the user presses Ctrl-C `times` times (SIGINT to this process),
    while it scores completion "a"."""
    def fn(completion, sample):
        try:
            for _ in range(times if completion == "a" else 0):
                os.kill(os.getpid(), signal.SIGINT)
                for _ in range(20):  # the handler runs between bytecodes of the main thread
                    time.sleep(0.005)
        except KeyboardInterrupt:
            if not catch:
                raise
        return 1.0
    return fn


@pytest.mark.parametrize("catch", [False, True])
def test_a_real_ctrl_c_during_an_in_process_reward_still_stops_the_run(catch):
    # Python's own handler, as in a terminal: a suite started in the background by a shell
    # (`make test &`) inherits SIGINT ignored, and no Ctrl-C would reach it at all
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        reward = CompositeReward([Component("r", ctrl_c(1, catch=catch))])
        with pytest.raises(KeyboardInterrupt):  # even where the reward caught it
            reward.score(["a", "b"], SAMPLES[:2])
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, inherited)


def test_training_ctrl_c_finishes_the_step_and_a_second_stops_it():
    echoed = []
    with DeferredInterrupt(echoed.append) as interrupt:
        result = scored(CompositeReward([Component("r", ctrl_c(1))]), ["a", "b"], SAMPLES[:2])
        assert result.total.tolist() == [1.0, 1.0] and not result.failed.any()
        assert interrupt.requested and len(echoed) == 1
        # the first Ctrl-C armed Python's default handler; the composition left it so
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with DeferredInterrupt(echoed.append) as interrupt:
        with pytest.raises(KeyboardInterrupt):
            CompositeReward([Component("r", ctrl_c(2, catch=True))]).score(["a"], SAMPLES[:1])
        assert interrupt.requested


# -- kind 8: a reward killed at its timeout takes what it started with it ---------------------

SPAWNING = """
import os, subprocess, sys, time

def score(completion, sample):
    marker, pids = sample["marker"], sample["pids"]
    child = subprocess.Popen(["sleep", marker])  # a child it never waits for
    # a grandchild in its own session whose parent exits at once (a daemon's double fork)
    grandchild = subprocess.run(["sh", "-c", f"setsid sleep {marker} >/dev/null 2>&1 & echo $!"],
                                capture_output=True, text=True).stdout.strip()
    loop = subprocess.Popen(["sh", "-c", f"while :; do sleep {marker} & sleep 0.1; done"])  # a fork loop
    with open(pids, "w") as out:
        out.write(f"{child.pid} {grandchild} {loop.pid}")
    time.sleep(300)
    return 1.0
"""


def alive(pid: int) -> bool:
    """True while pid runs (a zombie, killed and waiting for its parent to reap it, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def with_marker(marker: str) -> list[int]:
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes() and alive(int(cmdline.parent.name)):
                pids.append(int(cmdline.parent.name))
        except OSError:
            continue
    return pids


def kill_marked(marker: str) -> None:
    """Kill what a pool left running (again and again: the fork loop may start one more meanwhile)."""
    for _ in range(5):
        for pid in with_marker(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_reward_killed_at_its_timeout_leaves_no_process_it_started(tmp_path):
    (tmp_path / "spawning.py").write_text(SPAWNING)
    marker = f"300.{uuid.uuid4().int % 10**9:09d}"  # `sleep 300.<n>`: found by its command line
    pids = tmp_path / "pids"
    pool = WorkerPool("spawning.py:score", {}, tmp_path, workers=1, timeout_s=3.0)
    try:
        outcomes = pool.map(["x"], [{"marker": marker, "pids": str(pids)}])
        assert outcomes[0].error == "timed out after 3 s"
        started = [int(p) for p in pids.read_text().split()]
        assert len(started) == 3
        assert_all_gone(started, marker)
    finally:
        kill_marked(marker)
        pool.close()


def assert_all_gone(started: list[int], marker: str) -> None:
    """No process the reward started is alive, none with its marker either (SIGKILL is delivered at
    once; up to 5 s allowed for a busy machine)."""
    deadline = time.monotonic() + 5
    while (any(alive(p) for p in started) or with_marker(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in started if alive(p)] == [] and with_marker(marker) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_ray_reward_killed_at_its_timeout_leaves_no_process_it_started(tmp_path):
    ray = pytest.importorskip("ray", reason="needs ray (pip install 'aha[ray]')")
    from aha.rewards.ray_pool import RayRewardPool

    (tmp_path / "spawning.py").write_text(SPAWNING)
    marker = f"300.{uuid.uuid4().int % 10**9:09d}"
    pids = tmp_path / "pids"
    ray.init(num_cpus=2, object_store_memory=256 << 20, include_dashboard=False)
    pool = RayRewardPool("spawning.py:score", {}, tmp_path, workers=1, timeout_s=5.0)
    try:
        outcomes = pool.map(["x"], [{"marker": marker, "pids": str(pids)}])
        assert outcomes[0].error == "timed out after 5 s" and pool.restarts == 1
        assert_all_gone([int(p) for p in pids.read_text().split()], marker)
    finally:
        kill_marked(marker)
        pool.close()
        ray.shutdown()


def test_closing_a_pool_kills_a_busy_worker_and_what_it_started(tmp_path):
    (tmp_path / "spawning.py").write_text(SPAWNING)
    marker = f"300.{uuid.uuid4().int % 10**9:09d}"
    pids = tmp_path / "pids"
    pool = WorkerPool("spawning.py:score", {}, tmp_path, workers=1, timeout_s=300.0)
    try:
        worker_started = time.monotonic()
        worker = _Worker(pool.spec)
        pool.workers.append(worker)
        worker.wait_ready(pool.STARTUP_S)
        worker.job = 0  # as when Ctrl-C stops a map with the call in flight
        worker.conn.send((0, "x", {"marker": marker, "pids": str(pids)}, None))
        while not pids.exists() or len(pids.read_text().split()) < 3:
            assert time.monotonic() - worker_started < 60
            time.sleep(0.05)
        started = [int(p) for p in pids.read_text().split()]
        pool.close()
        time.sleep(0.2)
        assert [p for p in started if alive(p)] == [] and with_marker(marker) == []
    finally:
        kill_marked(marker)
        pool.close()


# -- kind 9: each component scores its own copy ----------------------------------------------

MUTATING = """
from aha.rewards import StepScores, batched

def meddle(completion, sample):
    seen = sample.setdefault("seen", [])  # a row of the same group sees the first row's note otherwise
    seen.append(completion)
    sample["answer"] = "wrong"
    return float(len(seen))

def correct(completion, sample):
    return 1.0 if sample["answer"] == "42" and "seen" not in sample else 0.0

@batched
def shuffle(completions, samples):
    scores = [float(len(c)) for c in completions]
    completions.reverse()
    for sample in samples:
        sample["answer"] = "wrong"
    return scores

def first(completion, sample):
    return float(len(completion))
"""


def mutating_specs(workers: int) -> list[RewardSpec]:
    return [RewardSpec(fn="mut.py:meddle", workers=workers), RewardSpec(fn="mut.py:shuffle"),
            RewardSpec(fn="mut.py:correct", workers=workers), RewardSpec(fn="mut.py:first", workers=workers)]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_reward_that_changes_its_inputs_changes_nothing_others_score(tmp_path, workers):
    (tmp_path / "mut.py").write_text(MUTATING)
    row = {"id": "p0", "answer": "42", "tests": [1, 2]}
    samples = [row, row, row]  # a group: its rows share the dataset row
    completions = ["a", "bb", "ccc"]
    kept = copy.deepcopy(row)
    reward = build_reward(mutating_specs(workers), tmp_path)
    try:
        result = scored(reward, completions, samples)
        again = scored(reward, completions, samples)  # the next step draws the same row
    finally:
        reward.close()
    assert row == kept and completions == ["a", "bb", "ccc"]  # the dataset row and the caller's list
    assert result.components["meddle"].tolist() == [1.0, 1.0, 1.0]  # each row its own sample
    assert result.components["shuffle"].tolist() == [1.0, 2.0, 3.0]
    assert result.components["correct"].tolist() == [1.0, 1.0, 1.0]
    assert result.components["first"].tolist() == [1.0, 2.0, 3.0]
    assert again.total.tolist() == result.total.tolist() == [4.0, 6.0, 8.0]


def test_scores_with_and_without_workers_are_the_same(tmp_path):
    (tmp_path / "mut.py").write_text(MUTATING)
    results = []
    for workers in (0, 2):
        rows = [{"id": f"p{i}", "answer": "42"} for i in range(3)]
        samples = [rows[i // 2] for i in range(6)]  # groups of 2 rows
        reward = build_reward(mutating_specs(workers), tmp_path)
        try:
            results.append(scored(reward, [f"{'x' * i}" for i in range(1, 7)], samples))
        finally:
            reward.close()
    local, pooled = results
    assert local.total.tolist() == pooled.total.tolist()
    assert {k: v.tolist() for k, v in local.components.items()} == {k: v.tolist() for k, v in pooled.components.items()}


def test_a_reward_whose_value_or_error_message_raises_fails_its_sample_only():
    """Converting a value (its __float__, .shape) and describing an error (its __str__) run the
    reward's own code too: whatever they raise fails that sample, never the run (a red team's)."""
    class BadFloat(float):
        def __float__(self):
            raise RuntimeError("no")

    class BadShape:
        @property
        def shape(self):
            raise KeyboardInterrupt

    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no message")

    def raises_unprintable(completion, sample):
        raise Unprintable()

    for fn in (lambda c, s: BadFloat(1.0), lambda c, s: BadShape(), raises_unprintable,
               lambda c, s: {1: 10.0, "1": -10.0}):
        result = CompositeReward([Component("r", fn)]).score(["a", "b"], [{"id": 1}, {"id": 2}])
        assert result.failed.tolist() == [True, True] and result.total.tolist() == [0.0, 0.0]


def test_a_batched_gate_that_empties_its_list_fails_instead_of_vanishing():
    @batched
    def emptying_gate(completions, samples):
        completions.clear()
        return []

    reward = CompositeReward([Component("ok", lambda c, s: 1.0), Component("gate", emptying_gate, combine="gate",
                                                                          batched=True)])
    result = reward.score(["a", "b"], [{"id": 1}, {"id": 2}])
    assert result.total.tolist() == [0.0, 0.0] and result.failed.tolist() == [True, True]


def test_step_scores_read_no_string_as_a_number():
    with pytest.raises(ValueError, match="real numbers"):
        StepScores((1,), ("1e30",))
