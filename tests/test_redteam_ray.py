"""Red team: the Ray rollout engine's redraw budget and its workers' seeds, a worker's partial
round under its seed, and a Ray reward actor's args, on test_audit_ray's in-process stand-in
for Ray (no cluster)."""

import pytest
import torch
from test_audit_ray import fake_ray, lm, prompts_of  # noqa: F401 - fixtures

import aha.rollout.ray_engine as ray_engine
from aha.rewards.ray_pool import RayRewardPool, RewardActor
from aha.rollout.ray_engine import MAX_REDRAWS, RayEngine
from aha.rollout.ray_worker import RolloutWorker
from aha.rollout.rollouts import PartialRound


def dying_engine(model, deaths: int) -> RayEngine:
    """An engine of 2 workers whose first share's worker dies `deaths` times in a row, each
    time with the share in flight."""
    engine = RayEngine(model.model, model.tokenizer, 3, workers=2, seed=3)
    submit, left = engine._submit, [deaths]

    def submit_then_die(actor, call, seed):
        ref = submit(actor, call, seed)
        if left[0] and call is engine_calls[0]:
            left[0] -= 1
            actor.dead = True
        return ref

    engine_calls = []
    start = engine._start

    def start_recording(calls, sizes, prompt_index):
        engine_calls[:] = calls
        return start(calls, sizes, prompt_index)

    engine._submit, engine._start = submit_then_die, start_recording
    return engine


def test_a_share_is_drawn_on_up_to_max_redraws_new_workers(fake_ray, lm):  # noqa: F811
    """Catches the redraw budget off by one (>= for >): a share is tried on MAX_REDRAWS + 1
    workers in all, the first and MAX_REDRAWS new ones, before the request fails."""
    prompts = prompts_of(lm, 4)
    engine = dying_engine(lm, deaths=MAX_REDRAWS)
    got = engine.generate(prompts, group_size=2)
    assert engine.redrawn == MAX_REDRAWS and got.prompt_index.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    engine = dying_engine(lm, deaths=MAX_REDRAWS + 1)
    with pytest.raises(RuntimeError, match=f"rollout share 0 failed on {MAX_REDRAWS + 1} workers in a row"):
        engine.generate(prompts, group_size=2)


def test_each_rollout_worker_and_each_replacement_gets_its_own_engine_seed(fake_ray, lm, monkeypatch):  # noqa: F811
    """Catches every worker built with the engine's seed itself: vLLM workers seeded alike
    draw alike (the seed is seed + the number of workers started before)."""
    seeds = []

    class Recording(RolloutWorker):
        def __init__(self, *args):
            seeds.append((args[6], args[7]))  # (seed, slot)
            super().__init__(*args)

    monkeypatch.setattr(ray_engine, "RolloutWorker", Recording)
    engine = RayEngine(lm.model, lm.tokenizer, 3, workers=3, seed=10)
    assert seeds == [(10, 0), (11, 1), (12, 2)]
    engine._replace(engine.actors[1])
    assert seeds[3:] == [(13, 1)]


def test_a_workers_partial_round_is_drawn_from_its_seed(lm):  # noqa: F811
    """Catches RolloutWorker.generate_partial ignoring its seed: a dead worker's partial share,
    drawn again with the same seed, would differ from the one it replaces."""
    threads = torch.get_num_threads()
    try:
        settings = dict(max_new_tokens=6, temperature=1.0, top_p=1.0, batch_size=8, dtype=torch.float32)
        worker = RolloutWorker(lm.model.config, lm.tokenizer, settings, threads, [lm.tokenizer.eos_token_id])
        worker.load_weights({k: v.numpy() for k, v in lm.model.state_dict().items()})
        prompts = prompts_of(lm, 3)
        plan = PartialRound([2, 2, 2], [6, 6, 6], [0, 1, 2], 3)
        torch.manual_seed(1)
        first = worker.generate_partial(prompts, plan, 5)
        torch.manual_seed(2)  # another driver-side state: only the seed handed over counts
        second = worker.generate_partial(prompts, plan, 5)
        other = worker.generate_partial(prompts, plan, 6)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(first.completion_ids, second.completion_ids) and first.texts == second.texts
    assert not torch.equal(first.completion_ids, other.completion_ids) or first.texts != other.texts


REWARD = """
def scaled(completion, sample, factor=1.0):
    return factor * len(completion)
"""


def test_a_ray_reward_actor_calls_its_function_with_the_specs_args(fake_ray, tmp_path):  # noqa: F811
    """Catches a Ray reward actor that drops the spec's args: the reward would score with its
    defaults while the local pool (and the config) say otherwise."""
    (tmp_path / "rew.py").write_text(REWARD)
    assert RewardActor("rew.py:scaled", {"factor": 3.0}, str(tmp_path)).call("abcd", {}).value == 12.0
    pool = RayRewardPool("rew.py:scaled", {"factor": 0.5}, tmp_path, workers=2, timeout_s=30.0)
    assert [o.value for o in pool.map(["ab", "abcd"], [{}, {}])] == [1.0, 2.0]
    pool.close()


def test_partial_shares_give_the_leftover_groups_to_the_largest_remainders():
    """Catches partial_shares handing the groups left after rounding down to the shares with the
    smallest remainders: each share's stop must be its fair part of plan.enough, rounded by
    largest remainders (here 4 of 7 groups over shares of 3, 2 and 2: 1.71, 1.14, 1.14)."""
    plan = PartialRound([1] * 7, [4] * 7, list(range(7)), 4)
    assert ray_engine.partial_shares(plan, 3) == [(0, 3, 2), (3, 5, 1), (5, 7, 1)]
    plan = PartialRound([1] * 7, [4] * 7, list(range(7)), 6)  # 2.57, 1.71, 1.71: both 2-group shares round up
    assert ray_engine.partial_shares(plan, 3) == [(0, 3, 2), (3, 5, 2), (5, 7, 2)]
