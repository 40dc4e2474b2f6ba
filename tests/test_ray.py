"""Sampling on Ray rollout workers (ray.rollout_workers): the same learning as in one
process, the policy's weights in every worker after each step, and a worker killed in the
middle of a step replaced with its share drawn again, nothing lost or counted twice."""

import logging
import os
import signal
from pathlib import Path

import pytest
import torch
from test_algorithm_runs import QUIET, say_seven
from test_training import metrics

from aha.models import load
from aha.training.loop import train

ray = pytest.importorskip("ray", reason="the Ray backend's tests need ray (pip install 'aha[ray]')")


@pytest.fixture(scope="module", autouse=True)
def local_cluster():
    # connected here, not by aha: the runs below leave it up for the next test
    ray.init(num_cpus=2, object_store_memory=256 << 20, include_dashboard=False)
    yield
    ray.shutdown()


def engine_for(model, tokenizer, workers=2, max_new_tokens=6):
    from aha.rollout.ray_engine import RayEngine

    return RayEngine(model, tokenizer, max_new_tokens, temperature=1.0, workers=workers, seed=3)


@pytest.mark.parametrize("lora", [False, True])
def test_workers_sample_from_the_policys_current_weights(lora):
    from aha.rollout.hf_engine import HFEngine

    lm = load("tiny")
    engine = engine_for(lm.model, lm.tokenizer)
    try:
        prompts = [lm.tokenizer.encode(t) for t in ("say 1", "say 22", "what is 3", "hello")]
        with torch.no_grad():  # weights the workers' fresh models could not have by chance
            for p in lm.model.parameters():
                p.mul_(2.5)
        if lora:  # adapters the workers get folded into the plain weights
            from test_fast_paths import _with_adapters

            _with_adapters(lm.model)
        engine.sync_weights(lm.model)
        rollouts = engine.generate(prompts, group_size=3)
        assert len(rollouts) == 12 and rollouts.prompt_index.tolist() == [i for i in range(4) for _ in range(3)]
        assert torch.equal(rollouts.prompt_ids[::3].ne(lm.tokenizer.pad_token_id).sum(1),
                           torch.tensor([len(p) for p in prompts]))
        # the workers' sampling log-probs are the in-process engine's for the same tokens
        local = HFEngine(lm.model, lm.tokenizer, 6)
        from aha.training.logprobs import completion_logprobs

        ours = completion_logprobs(lm.model, rollouts.prompt_ids, rollouts.prompt_mask, rollouts.completion_ids,
                                   rollouts.completion_mask, 1.0)
        assert torch.allclose(ours * rollouts.completion_mask, rollouts.sampling_logprobs, atol=1e-4)
        # the workers stop where the driver's engine does (its generation config's ids included)
        assert all(ray.get(actor.stop_ids.remote()) == local.eos_ids for actor in engine.actors)
        assert engine.version == 1 and engine.sync_seconds > 0
    finally:
        engine.close()


def test_a_worker_killed_mid_step_has_its_share_drawn_again(caplog):
    from aha.rollout.ray_engine import RayEngine

    lm = load("tiny")
    engine = engine_for(lm.model, lm.tokenizer, max_new_tokens=40)
    victim = engine.actors[0]
    pid = ray.get(victim.pid.remote())
    submit = RayEngine._submit

    def submit_then_kill(self, actor, *args):
        ref = submit(self, actor, *args)
        if actor is victim:  # the worker dies while its share is in flight
            os.kill(pid, signal.SIGKILL)
        return ref

    try:
        prompts = [lm.tokenizer.encode(f"say {i}") for i in range(6)]
        engine._submit = submit_then_kill.__get__(engine)
        with caplog.at_level(logging.WARNING, logger="aha.rollout.ray_engine"):
            rollouts = engine.generate(prompts, group_size=4)
        assert len(rollouts) == 24 and rollouts.prompt_index.tolist() == [i for i in range(6) for _ in range(4)]
        # every prompt's samples are there once, in order, the killed worker's share included
        for i, prompt in enumerate(prompts):
            rows = rollouts.prompt_ids[4 * i:4 * i + 4]
            assert all(row[row != lm.tokenizer.pad_token_id].tolist() == prompt for row in rows)
        assert engine.redrawn == 1 and engine.actors[0] is not victim
        assert [r.message for r in caplog.records].count(
            "rollout worker 0 died during sampling (ActorDiedError); its share, 12 samples, is drawn again on a new "
            "worker") == 1
        del engine._submit
        assert len(engine.generate(prompts, group_size=2)) == 12  # the replacement works on
    finally:
        engine.close()


def test_two_ray_rollout_workers_learn_as_one_process_does(tmp_path):
    local = train(say_seven(tmp_path / "local"), echo=QUIET) if (tmp_path / "local").mkdir() is None else None
    (tmp_path / "ray").mkdir()
    on_ray = train(say_seven(tmp_path / "ray", "ray.rollout_workers=2"), echo=QUIET)
    for summary in (local, on_ray):
        hits = [r["reward/mean"] for r in metrics(Path(summary.run_dir)) if "reward/mean" in r]
        first, last = sum(hits[:3]) / 3, sum(hits[-5:]) / 5
        assert len(hits) == 30 and first < 0.1 and last > 3 * first
        assert summary.accuracy_after > 0.5
    synced = [r["time/sync_s"] for r in metrics(Path(on_ray.run_dir)) if "time/sync_s" in r]
    assert len(synced) == 30 and all(s > 0 for s in synced[1:])  # the weights went to the workers each step


@pytest.mark.parametrize("bound", [1, 2])
def test_asynchronous_rl_learns_with_samples_at_most_max_staleness_versions_old(tmp_path, bound):
    summary = train(say_seven(tmp_path, "ray.rollout_workers=2", f"rollout.max_staleness={bound}"), echo=QUIET)
    records = [r for r in metrics(Path(summary.run_dir)) if "reward/mean" in r]
    staleness = [r["async/staleness"] for r in records]
    # step 1 samples on the spot; from then on each step trains on a round drawn `bound` updates ago
    assert staleness[0] == 0 and max(staleness) == bound and all(0 <= s <= bound for s in staleness)
    assert staleness[:bound + 1] == list(range(bound + 1))  # rising by one a step to the bound
    assert staleness[bound:] == [bound] * (len(records) - bound)
    # nothing is sampled ahead for steps the run will not reach
    assert [r["async/ahead"] for r in records[-bound - 1:]] == list(range(bound, -1, -1))
    hits = [r["reward/mean"] for r in records]
    first, last = sum(hits[:3]) / 3, sum(hits[-5:]) / 5
    assert len(hits) == 30 and first < 0.1 and last > 3 * first
    assert summary.accuracy_after > 0.5


def test_an_asynchronous_run_resumes_drawing_the_prompts_it_had_sampled_ahead(tmp_path):
    import json

    def prompts_at(run, step):
        rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
        return [r["prompt"] for r in rows if r["step"] == step and r["split"] == "train"]

    extra = ("ray.rollout_workers=2", "rollout.max_staleness=1", "train.checkpoint_every=2", "eval.after=false")
    (tmp_path / "straight").mkdir()
    (tmp_path / "resumed").mkdir()
    straight = Path(train(say_seven(tmp_path / "straight", *extra, "train.steps=4"), echo=QUIET).run_dir)
    train(say_seven(tmp_path / "resumed", *extra, "train.steps=2"), echo=QUIET)
    resumed = Path(train(say_seven(tmp_path / "resumed", *extra, "train.steps=4", "train.allow_config_change=true"),
                         echo=QUIET).run_dir)
    # step 3's prompts were submitted during step 2 and not trained on before the checkpoint:
    # the resumed run draws the same prompts again (on the spot: staleness 0)
    assert prompts_at(resumed, 3) == prompts_at(straight, 3) and prompts_at(straight, 3)
    assert [r["async/staleness"] for r in metrics(resumed) if "async/staleness" in r] == [0, 1, 0, 1]


def test_a_resumed_asynchronous_run_samples_the_rounds_that_were_in_flight_and_nothing_twice(tmp_path):
    import json
    import shutil

    def prompts_at(run, step):
        rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
        return [r["prompt"] for r in rows if r["step"] == step and r["split"] == "train"]

    # two rounds in flight at the checkpoint, and dynamic sampling's refill rounds drawing
    # prompts between them; a reward that writes down every prompt it scores
    extra = ("ray.rollout_workers=2", "rollout.max_staleness=2", "train.checkpoint_every=2", "eval.after=false",
             "algorithm.dynamic_sampling=true", "algorithm.max_rounds=2", "train.steps=4", "train.keep_checkpoints=5",
             "reward=[{fn: 'logged.py:hits'}]")
    (tmp_path / "straight").mkdir()
    (tmp_path / "straight" / "logged.py").write_text(
        "import os\n"
        "def hits(completion, sample):\n"
        "    with open(os.path.join(os.path.dirname(__file__), 'scored.txt'), 'a') as f:\n"
        "        f.write(sample['prompt'] + '\\n')\n"
        "    return completion.count('7') / max(len(completion), 1)\n")
    straight = Path(train(say_seven(tmp_path / "straight", *extra), echo=QUIET).run_dir)
    records = [r for r in metrics(straight) if "reward/mean" in r]
    assert all(r["groups/sampled"] == 8 for r in records)  # a refill round every step
    scored = (tmp_path / "straight" / "scored.txt").read_text().splitlines()
    before_checkpoint = set(scored[:2 * 8 * 8])  # steps 1 and 2: two rounds of 4 prompts x 8 samples each
    # the run as if it had died after step 3: its step-2 checkpoint, saved with steps 3 and 4's
    # rounds in flight, is the newest
    shutil.copytree(tmp_path / "straight", tmp_path / "resumed")
    (tmp_path / "resumed" / "scored.txt").unlink()
    shutil.rmtree(tmp_path / "resumed" / "run" / "checkpoints" / "step-4")
    resumed = Path(train(say_seven(tmp_path / "resumed", *extra), echo=QUIET).run_dir)
    for step in (3, 4):  # the rounds that were in flight are the ones trained
        assert prompts_at(resumed, step) == prompts_at(straight, step) and prompts_at(straight, step)
    # and no prompt trained before the checkpoint is sampled again (the refill rounds draw on
    # from the data cursor, past everything drawn before it)
    assert not set((tmp_path / "resumed" / "scored.txt").read_text().splitlines()) & before_checkpoint
    assert [r["async/staleness"] for r in metrics(resumed) if "async/staleness" in r] == [0, 1, 0, 1]


def test_asynchronous_rl_needs_rollout_workers_and_a_correction_for_trainer_log_probs(tmp_path):
    with pytest.raises(Exception, match="rollout.max_staleness > 0 .* set ray.rollout_workers >= 1"):
        say_seven(tmp_path, "rollout.max_staleness=1")
    with pytest.raises(Exception, match="old_logprobs=trainer needs algorithm.tis_cap"):
        say_seven(tmp_path, "rollout.max_staleness=1", "ray.rollout_workers=2", "algorithm.old_logprobs=trainer")


def test_reward_workers_on_ray_keep_the_deadline_and_survive_a_crash(tmp_path):
    from aha.config import RayConfig, RewardSpec
    from aha.rewards import build_reward
    from aha.rewards.ray_pool import RayRewardPool

    (tmp_path / "slow.py").write_text(
        "import os, time\n"
        "def score(completion, sample):\n"
        "    if completion == 'hang':\n"
        "        time.sleep(60)\n"
        "    if completion == 'crash':\n"
        "        os._exit(3)\n"
        "    if completion == 'raise':\n"
        "        raise ValueError('no number')\n"
        "    return float(len(completion)) + sample['bonus']\n")
    spec = RewardSpec(fn="slow.py:score", workers=2, timeout_s=2.0)
    reward = build_reward([spec], tmp_path, ray=RayConfig(reward_workers=True, object_store_mb=256))
    pool = reward.components[0].pool
    try:
        assert isinstance(pool, RayRewardPool)
        texts = ["ab", "hang", "abcd", "crash", "raise", "x"]
        result = reward.score(texts, [{"bonus": 10.0}] * len(texts))
        assert result.components["score"][[0, 2, 5]].tolist() == [12.0, 14.0, 11.0]
        assert result.failed.tolist() == [False, True, False, True, True, False]
        assert pool.restarts == 2  # the hung call's actor and the crashed one, replaced
        again = reward.score(["abc"], [{"bonus": 0.0}])  # the pool works on
        assert again.total.tolist() == [3.0]
    finally:
        reward.close()


def test_a_reward_that_cannot_start_on_ray_says_why(tmp_path):
    from aha.config import RayConfig, RewardSpec
    from aha.rewards import build_reward

    # imports here (build_reward checks it at once) but not in a worker: another machine's
    # environment, say, without a package the reward needs
    (tmp_path / "broken.py").write_text(f"import os\nif os.getpid() != {os.getpid()}:\n    import "
                                        "not_a_module_anywhere\n"
                                        "def score(c, s):\n    return 1.0\n")
    reward = build_reward([RewardSpec(fn="broken.py:score", workers=1)], tmp_path, ray=RayConfig(reward_workers=True))
    try:
        with pytest.raises(RuntimeError, match="a reward worker could not start: .*not_a_module_anywhere"):
            reward.score(["a"], [{}])
    finally:
        reward.close()


def test_a_run_stops_the_local_cluster_it_started(tmp_path):
    ray.shutdown()  # (the module's cluster: this run must start its own)
    train(say_seven(tmp_path, "ray.rollout_workers=1", "train.steps=2", "eval.after=false"), echo=QUIET)
    assert not ray.is_initialized()


def test_a_cluster_too_small_for_the_workers_is_refused_up_front():
    from aha.ray_cluster import RayUnavailable
    from aha.rollout.ray_engine import RayEngine

    if not ray.is_initialized():
        ray.init(num_cpus=2, object_store_memory=256 << 20, include_dashboard=False)
    lm = load("tiny")
    with pytest.raises(RayUnavailable, match=r"ray.rollout_workers=3 x ray.worker_threads=1 need 3 CPUs; the Ray "
                                             r"cluster has 2"):
        RayEngine(lm.model, lm.tokenizer, 4, workers=3)


def test_a_training_run_goes_on_after_a_worker_is_killed_mid_step(tmp_path, monkeypatch, caplog):
    from aha.rollout.ray_engine import RayEngine

    if not ray.is_initialized():
        ray.init(num_cpus=2, object_store_memory=256 << 20, include_dashboard=False)
    submit, calls = RayEngine._submit, []

    def kill_at_the_third(self, actor, *args):
        calls.append(1)
        pid = ray.get(actor.pid.remote()) if len(calls) == 3 else None  # asked before the share is queued
        ref = submit(self, actor, *args)
        if pid is not None:  # step 2's first share: its worker dies with the share in flight
            os.kill(pid, signal.SIGKILL)
        return ref

    monkeypatch.setattr(RayEngine, "_submit", kill_at_the_third)
    overrides = ("ray.rollout_workers=2", "train.steps=4", "eval.after=false", "algorithm.dynamic_sampling=false")
    with caplog.at_level(logging.WARNING, logger="aha.rollout.ray_engine"):
        summary = train(say_seven(tmp_path, *overrides), echo=QUIET)
    records = [r for r in metrics(Path(summary.run_dir)) if "reward/mean" in r]
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    # every step trained on its whole batch: the dead worker's prompts were drawn again
    assert all(r["groups/sampled"] == 4 and r["groups/trained"] == 4 for r in records)
    assert sum("died during sampling" in r.message for r in caplog.records) == 1
    assert len(calls) == 4 * 2 + 1  # two shares a step, and the killed share once more


@pytest.fixture
def stops_often(monkeypatch):
    """Every 3rd token id stops a completion (the driver's stop ids, which it hands to its
    workers), so that the tiny model's completions end at different lengths."""
    import aha.rollout.settings

    monkeypatch.setattr(aha.rollout.settings, "stop_ids", lambda tokenizer, model: list(range(0, 49152, 3)))


def test_a_partial_round_on_workers_stops_with_enough_complete_groups(stops_often):
    from aha.rollout import PartialRound

    lm = load("tiny")
    engine = engine_for(lm.model, lm.tokenizer, max_new_tokens=12)
    try:
        prompts = [lm.tokenizer.encode(f"say {i}") for i in range(8)]
        torch.manual_seed(0)
        out = engine.generate_partial(prompts, PartialRound([3] * 8, [12] * 8, list(range(8)), enough=3))
        assert out.prompt_index.tolist() == [i for i in range(8) for _ in range(3)]
        done = ~out.unfinished.view(8, 3)
        assert int(done.all(dim=1).sum()) >= 3 and out.unfinished.any()  # stopped early, enough groups whole
        for i in range(len(out)):
            ids = out.completion_ids[i, :int(out.lengths()[i])].tolist()
            if not out.unfinished[i]:  # a finished row ends at a stop token or its budget
                assert (ids[-1] in engine.eos_ids) != bool(out.truncated[i]) and len(ids) <= 12
            assert not any(t in engine.eos_ids for t in ids[:-1])
    finally:
        engine.close()


def test_asynchronous_rl_with_partial_rollouts_trains_whole_batches_and_resumes(tmp_path, stops_often):
    extra = ("ray.rollout_workers=2", "rollout.max_staleness=1", "rollout.partial_rollouts=2",
             "rollout.max_new_tokens=10",
             "train.checkpoint_every=2", "eval.after=false", "algorithm.dynamic_sampling=false")
    (tmp_path / "straight").mkdir()
    (tmp_path / "resumed").mkdir()
    straight = Path(train(say_seven(tmp_path / "straight", *extra, "train.steps=6"), echo=QUIET).run_dir)
    records = [r for r in metrics(straight) if "reward/mean" in r]
    assert [r["async/staleness"] for r in records] == [0, 1, 1, 1, 1, 1]
    assert all(r["groups/trained"] == 4 for r in records)
    assert any(r["partial/resumed_rows"] > 0 for r in records)
    # a continued row holds tokens older than the round that finished it
    assert max(r["partial/max_age"] for r in records) >= 1
    train(say_seven(tmp_path / "resumed", *extra, "train.steps=2"), echo=QUIET)
    resumed = Path(train(say_seven(tmp_path / "resumed", *extra, "train.steps=6", "train.allow_config_change=true"),
                         echo=QUIET).run_dir)
    assert all(r["groups/trained"] == 4 for r in metrics(resumed) if "reward/mean" in r)
