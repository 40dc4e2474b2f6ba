"""The Ray rollout engine's seeds and the Ray reward pool's failures, on an in-process
stand-in for Ray (no cluster: each actor is the real RolloutWorker / RewardActor object,
called in this process when its result is asked for, in the order its calls were made).

- every share of a request gets its own seed, base + share index, base drawn from the
  driver's torch RNG (which checkpoints save);
- a share whose worker died is drawn again, whole, with the same seed: the request's
  rollouts are those it would have had with the worker alive;
- a reward that raises (or whose value Ray cannot move) for one sample fails that sample
  only: its actor lives on; an actor that dies is replaced."""

import pickle
import types

import pytest
import torch

import aha.rewards.ray_pool as ray_pool
import aha.rollout.ray_engine as ray_engine
from aha.models import load
from aha.rewards.ray_pool import RayRewardPool
from aha.rollout.ray_engine import RayEngine


class RayError(Exception):
    pass


class RayActorError(RayError):
    pass


class RayTaskError(RayError):
    pass


class SerializationError(RayError):
    pass


class Ref:
    def __init__(self, actor, method, args):
        self.actor, self.method, self.args = actor, method, args
        self.ran, self.value, self.error = False, None, None


class Actor:
    """A Ray actor handle: `actor.method.remote(*args)` queues the call; FakeRay.get runs the
    actor's queue up to it. A dead actor runs nothing more."""

    def __init__(self, ray, cls, args):
        self.ray, self.calls, self.queue, self.dead = ray, [], [], False
        with torch.random.fork_rng():  # a model made from its config draws its random weights
            self.obj = cls(*args)

    def __getattr__(self, method):
        def remote(*args):
            ref = Ref(self, method, args)
            self.calls.append((method, args))
            self.queue.append(ref)
            return ref
        return types.SimpleNamespace(remote=remote)

    def run_until(self, ref):
        while not ref.ran and self.queue and not self.dead:
            call = self.queue.pop(0)
            try:
                with torch.random.fork_rng():  # the actor's RNG is its own process's, not the driver's
                    value = getattr(self.obj, call.method)(*call.args)
            except SystemExit:  # the actor's process exits: the call never returns
                self.dead = True
                return
            except Exception as err:  # noqa: BLE001 - Ray hands a task's error to the caller
                call.error = RayTaskError(f"{type(err).__name__}: {err}")
            else:
                try:
                    call.value = pickle.loads(pickle.dumps(value))  # Ray moves the value back to the driver
                except Exception as err:  # noqa: BLE001 - a value that cannot be moved: this call only
                    call.error = SerializationError(f"{type(err).__name__}: {err}")
            call.ran = True


class FakeRay:
    exceptions = types.SimpleNamespace(RayError=RayError, RayActorError=RayActorError, RayTaskError=RayTaskError)

    def __init__(self):
        self.actors = []

    def remote(self, **options):
        def decorate(cls):
            def make(*args):
                actor = Actor(self, cls, args)
                self.actors.append(actor)
                return actor
            return types.SimpleNamespace(remote=make)
        return decorate

    def cluster_resources(self):
        return {"CPU": 16}

    def put(self, value):
        return value

    def get(self, ref, timeout=None):
        ref.actor.run_until(ref)
        if not ref.ran:  # its actor died first
            raise RayActorError("The actor died unexpectedly before finishing this task.")
        if ref.error is not None:
            raise ref.error
        return ref.value

    def wait(self, refs, num_returns=1, timeout=None):
        for ref in refs:
            ref.actor.run_until(ref)
        return list(refs), []


def kill(actor):
    actor.dead = True


@pytest.fixture
def fake_ray(monkeypatch):
    ray = FakeRay()
    for module in (ray_engine, ray_pool):
        monkeypatch.setattr(module, "ray_module", lambda: ray)
        monkeypatch.setattr(module, "start_ray", lambda *args, **kwargs: None)
        monkeypatch.setattr(module, "kill_actor", kill)
    threads = torch.get_num_threads()
    yield ray
    torch.set_num_threads(threads)  # RolloutWorker sets its process's threads


@pytest.fixture(scope="module")
def lm():
    return load("tiny")


def prompts_of(lm, count):
    return [lm.tokenizer.encode(f"say {i}") for i in range(count)]


def seeds_sent(actor) -> list[int]:
    return [args[-1] for method, args in actor.calls if method in ("generate", "generate_partial")]


def base_after(seed: int) -> int:
    torch.manual_seed(seed)
    return int(torch.randint(0, 1 << 62, (1,)))


def test_each_share_gets_its_own_seed_drawn_from_the_drivers_rng(fake_ray, lm):
    """Catches every share given the same seed (shares of equal prompts would sample alike),
    and a base seed not drawn from the driver's checkpointed RNG (the same seeds every step,
    or a resumed run drawing other samples than a straight one)."""
    engine = RayEngine(lm.model, lm.tokenizer, 4, workers=3, seed=3)
    prompts = prompts_of(lm, 5)
    torch.manual_seed(11)
    first = engine.submit(prompts, group_size=2)
    second = engine.submit(prompts, group_size=2)
    base = base_after(11)
    assert first.seeds == [base, base + 1, base + 2]
    assert len(set(second.seeds)) == 3 and second.seeds[1:] == [second.seeds[0] + 1, second.seeds[0] + 2]
    assert second.seeds[0] != base
    # the seeds the workers were handed, share by share
    assert [seeds_sent(actor) for actor in engine.actors] == [[s, t] for s, t in zip(first.seeds, second.seeds)]
    # shares of 2, 1 and 2 prompts (whole groups of 2)
    assert first.sizes == [4, 2, 4]
    assert first.prompt_index.tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]


def test_a_redrawn_share_has_its_seed_and_equals_the_share_it_replaces(fake_ray, lm):
    """Catches a dead worker's share drawn again with another seed (or another share's call
    or seed): the redrawn rollouts must be those the worker would have returned alive."""
    prompts = prompts_of(lm, 6)
    alive = RayEngine(lm.model, lm.tokenizer, 5, workers=3, seed=3)
    torch.manual_seed(0)
    expected = alive.generate(prompts, group_size=2)

    engine = RayEngine(lm.model, lm.tokenizer, 5, workers=3, seed=3)
    victim = engine.actors[1]
    submit = engine._submit

    def submit_then_die(actor, call, seed):
        ref = submit(actor, call, seed)
        if actor is victim:  # the middle share's worker dies with its share in flight
            victim.dead = True
        return ref

    engine._submit = submit_then_die
    torch.manual_seed(0)
    submitted = engine.submit(prompts, group_size=2)
    got = engine.collect(submitted)
    assert engine.redrawn == 1 and engine.actors[1] is not victim and engine.actors[1] is fake_ray.actors[-1]
    # the new worker drew the middle share's prompts with the middle share's seed
    (method, args), = [c for c in engine.actors[1].calls if c[0] == "generate"]
    assert args[0] == prompts[2:4] and args[-1] == submitted.seeds[1]
    for name in ("prompt_ids", "completion_ids", "completion_mask", "sampling_logprobs", "prompt_index", "truncated"):
        assert torch.equal(getattr(got, name), getattr(expected, name)), name
    assert got.texts == expected.texts
    # the rollouts are not all alike (else equal seeds would pass): the shares differ
    assert len(set(got.texts)) > 1


REWARD = """
def score(completion, sample):
    if completion == "raise":
        raise ValueError("no number")
    if completion == "unmovable":
        return lambda: 0  # a value Ray cannot send back
    if completion == "exit":
        raise SystemExit(3)  # the actor's process is gone
    return float(len(completion)) + sample["bonus"]
"""


def test_a_reward_that_fails_for_one_sample_fails_that_sample_only(fake_ray, tmp_path):
    """Catches a per-sample error (the reward raised, or Ray could not move its value) taken for
    the actor's death (actor killed and replaced), a raising reward not caught in the actor,
    and a dead actor's sample not failed or its actor not replaced."""
    (tmp_path / "rew.py").write_text(REWARD)
    pool = RayRewardPool("rew.py:score", {}, tmp_path, workers=1, timeout_s=30.0)
    texts = ["ab", "raise", "abc", "unmovable", "x", "exit", "abcd"]
    outcomes = pool.map(texts, [{"bonus": 10.0}] * len(texts))
    assert [o.value for o in outcomes] == [12.0, None, 13.0, None, 11.0, None, 14.0]
    assert outcomes[1].error == "ValueError: no number"
    assert outcomes[3].error.startswith("SerializationError: ")
    assert outcomes[5].error == "the worker died (RayActorError)"
    assert [o.error is None for o in outcomes] == [True, False, True, False, True, False, True]
    # one actor lived through both per-sample errors; only the exit replaced it
    assert pool.restarts == 1 and len(fake_ray.actors) == 2
    first, second = fake_ray.actors
    assert [args[0] for method, args in first.calls if method == "call"] == texts[:6]
    assert [args[0] for method, args in second.calls if method == "call"] == texts[6:]
    assert pool.actors == [second] and not second.dead
