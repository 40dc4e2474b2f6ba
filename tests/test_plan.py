"""`aha plan` (perf/plan.py, perf/workload.py, perf/profile.py, perf/fit.py): the forecast's terms
on the tiny model against numbers computed by hand, the table it prints, the refusal of a run
that cannot fit (rollout.group_size=100000, which the kernel's OOM killer once ended without a
word) and `aha train`'s check before the model loads."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import aha.cli.learners
import aha.perf.fit
from aha.cli import main
from aha.config import load_config
from aha.config.run_sections import LoraConfig
from aha.models.tiny import tiny_model, tiny_tokenizer
from aha.perf.plan import Profile, Workload, memory_terms, step_seconds
from aha.perf.profile import activation_bytes_per_token
from aha.perf.workload import EMBEDDED_CONFIG, architecture, workload

ROOT = Path(__file__).parent.parent
DEMO = str(ROOT / "configs" / "quickstart.yaml")
H, MLP, KV_D, LAYERS, VOCAB = 64, 128, 2 * 16, 2, 102  # the tiny Llama: hidden, MLP, key/value width, layers, vocab


@pytest.fixture(scope="module")
def tiny():
    return tiny_model(len(tiny_tokenizer())).config


def test_tiny_architecture_by_hand(tiny):
    layer = H * H + 2 * H * KV_D + H * H + 3 * H * MLP  # q, k and v, o, gate / up / down
    arch = architecture(tiny, LoraConfig())
    assert (arch.layers, arch.hidden, arch.heads, arch.kv_heads, arch.head_dim, arch.vocab) == (2, 64, 4, 2, 16, VOCAB)
    assert arch.linear_params == LAYERS * layer == 73728
    assert arch.params == arch.trained_params == VOCAB * H + LAYERS * (layer + 2 * H) + H == 80576  # tied head
    lora = architecture(tiny, LoraConfig(rank=4))  # r x (in + out) on each of a layer's 7 Linears
    adapters = LAYERS * 4 * ((H + H) + 2 * (H + KV_D) + (H + H) + 3 * (H + MLP))
    assert lora.trained_params == adapters == 8192 and lora.params == 80576 + 8192


def test_the_embedded_models_shapes_without_its_folder():
    from transformers import LlamaConfig

    arch = architecture(LlamaConfig(**EMBEDDED_CONFIG), LoraConfig())
    assert arch.params == 134_515_008 and arch.layers == 30  # test_embedded_model.py counts the loaded model alike


def test_activation_bytes_a_token_a_layer_by_hand(tiny):
    """What a Llama layer keeps for its backward, as counted by hand from what autograd saves
    (transformers' Llama, aha's grouped attention; scores apart). fp32: the two norms' input,
    normalised input and output (3 H each, and a scalar), the queries (H), keys and values,
    the attention's output (H), the MLP's gate, its SiLU, up and their product (4 x its width).
    bf16 autocast: the norms stay fp32 (2 H and a scalar each), each projection keeps its own
    bf16 copy of its input (q, k, v: 3 H; o: H; gate, up: 2 H; down: the product), and the
    queries, keys, values and the MLP's other three in bf16."""
    assert activation_bytes_per_token(tiny, torch.float32) == 4 * (8 * H + 2 * KV_D + 4 * MLP + 2) == 4360
    assert activation_bytes_per_token(tiny, torch.bfloat16) == 2 * 4 * (2 * H + 1) + 2 * (3 * H + H + H + 2 * H) \
        + 2 * 2 * KV_D + 2 * 4 * MLP == 3080


def test_memory_terms_by_hand(tiny):
    arch = architecture(tiny, LoraConfig())
    w = Workload(dtype_bytes=4, prompt_tokens=20, completion_tokens=16, rows=64, micro_rows=32, group_size=8,
                 share_prompt=True, rounds=2, round_rows=64, engine_rows=64)
    terms = {t.name.split(" (")[0]: t.bytes for t in memory_terms(arch, w, 4360, baseline=1000)}
    params = 80576
    # a micro-batch: 4 groups' prompts (4 x 20 tokens) and 32 completions after them (the last token predicts nothing)
    tokens = 4 * 20 + 32 * 15
    scores = 4 * 4 * 20 * 20 + 32 * 4 * 15 * (20 + 15)  # both passes under aha's attention: 4 bytes a score in fp32
    repeated = 32 * 20 * 2 * KV_D * 4  # the prompts' keys and values, repeated for each row of the group
    assert terms == {
        "process before the model loads": 1000,
        "weights": params * 4, "gradients": params * 4, "AdamW moments": params * 8,
        "engine KV cache": 64 * (20 + 16) * LAYERS * 2 * KV_D * 4,
        "engine weights": 73728 * 4 + VOCAB * H * 4, "engine logits of a step": 64 * VOCAB * 4 * 3,
        "activations": LAYERS * (tokens * 4360 + scores * 4 + repeated),  # no autocast copies in fp32
        "logits": 32 * 16 * VOCAB * (4 + 4) + VOCAB * H * 4,  # each scored token's fp32 logits and gradient
        "AdamW's temporary": params * 4}
    assert sum(terms.values()) == 1000 + params * 20 + 1179648 + 321024 + 78336 + 5799680 + 443904


def test_step_seconds_by_hand(tiny):
    arch = architecture(tiny, LoraConfig())
    w = Workload(dtype_bytes=4, prompt_tokens=16, completion_tokens=16, rows=16, micro_rows=16, group_size=4,
                 share_prompt=True, rounds=1, round_rows=16, engine_rows=16, extra_forwards=1)
    p = Profile(train_s_token=1e-5, forward_s_token=4e-6, head_train_s=(0.01, 1e-4), head_forward_s=(0.002, 5e-5),
                decode_s=(1e-3, 1e-5, 1e-7), decode_fixed_s=(2e-3, 1e-5), head_decode_s=(3e-3, 2e-5),
                adam_s_param=1e-9, saved_bytes_token=4360, train_length=32)
    # a layer's FLOPs a token: 2 x 36864 weights, and 4 x 4 heads x 16 a key; measured at 32 keys
    prefill_factor = (2 * 36864 + 256 * 16) / (2 * 36864 + 256 * 32)
    prefill = 4 * 16 * LAYERS * 4e-6 * prefill_factor  # 4 distinct prompts of 16 tokens
    step = LAYERS * (1e-3 + 1e-5 * 16 + 1e-7 * 16 * (16 + 8)) + (2e-3 + 1e-5 * 16) + (3e-3 + 2e-5 * 16)
    backbone, scored = 4 * 16 + 16 * 15, 16 * 16
    seconds = step_seconds(arch, w, p)
    assert seconds["generate"] == pytest.approx(prefill + 16 * step)
    assert seconds["prepare"] == pytest.approx(backbone * LAYERS * 4e-6 + 0.002 + 5e-5 * scored)
    assert seconds["update"] == pytest.approx(backbone * LAYERS * 1e-5 + 0.01 + 1e-4 * scored + 80576 * 1e-9)


def test_what_a_step_runs_from_the_config():
    demo = load_config(DEMO, ["model=tiny"])
    w, key = workload(demo, 30, 16, torch.bfloat16)
    assert (w.rows, w.micro_rows, w.engine_rows, w.rounds, w.round_rows, w.dtype_bytes, w.share_prompt) == \
        (64, 64, 64, 2, 64, 2, True)
    assert key == "train.micro_batch_size"
    huge, key = workload(load_config(DEMO, ["rollout.group_size=100000"]), 30, 16, torch.bfloat16)
    assert (huge.micro_rows, huge.engine_rows, key) == (100000, 100000, "rollout.group_size")  # whole groups
    dpo, _ = workload(load_config(str(ROOT / "configs" / "dpo_arithmetic.yaml")), 30, 40, torch.float32)
    assert (dpo.rows, dpo.micro_rows, dpo.rounds, dpo.reference) == (16, 8, 0, False)


def test_aha_plan_prints_the_forecast(capsys):
    assert main(["plan", DEMO, "model=tiny", "--memory-only"]) == 0
    out = capsys.readouterr().out
    for line in ("weights (fp32)", "engine KV cache (64 sequences at once)", "activations (64 sequences a micro-batch)",
                 "peak", "fits"):
        assert line in out
    assert main(["plan", DEMO, "model=tiny", "--memory-only", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["peak_bytes"] == sum(t["bytes"] for t in found["terms"])


def test_aha_plan_refuses_100000_completions_a_prompt(capsys):
    assert main(["plan", DEMO, "rollout.group_size=100000", "--memory-only"]) == 1
    out = capsys.readouterr().out
    assert "does not fit" in out and "change rollout.group_size (activations" in out


@pytest.fixture
def no_training(monkeypatch):
    """aha train's check runs; the training itself (model load included) is recorded, not run."""
    started = []
    monkeypatch.setattr(aha.cli.learners, "train_on_ranks", lambda config, argv: started.append(config) or 0)
    return started


def test_aha_train_refuses_before_loading(tmp_path, capsys, no_training):
    run = tmp_path / "run"
    assert main(["train", DEMO, "rollout.group_size=100000", f"output_dir={run}"]) == 2
    err = capsys.readouterr().err
    assert "forecast peak memory" in err and "rollout.group_size" in err and "train.memory_check=warn" in err
    assert not no_training and not run.exists()
    assert main(["train", DEMO, "rollout.group_size=100000", f"output_dir={run}", "train.memory_check=warn"]) == 0
    assert "warning: this run's forecast peak memory" in capsys.readouterr().err and len(no_training) == 1


def test_aha_train_warns_over_the_memory_free_now(monkeypatch, tmp_path, capsys, no_training):
    monkeypatch.setattr(aha.perf.fit, "machine_memory", lambda: (1 << 40, 1 << 20))  # 1 TiB, 1 MiB free
    assert main(["train", DEMO, "model=tiny", f"output_dir={tmp_path / 'run'}"]) == 0
    err = capsys.readouterr().err
    assert "warning: this run's forecast peak memory" in err and "1.0 MiB free now" in err and len(no_training) == 1
    monkeypatch.setattr(aha.perf.fit, "make_plan", lambda *a, **k: pytest.fail("memory_check=ignore forecasts nothing"))
    assert main(["train", DEMO, "model=tiny", "train.memory_check=ignore", f"output_dir={tmp_path / 'run'}"]) == 0


@pytest.mark.slow
def test_the_demos_forecast_against_a_measured_run(tmp_path):
    """docs/performance.md's first row again: three steps of the demo under `aha train`, its peak
    resident memory (the kernel's count) and its step time (steps 2 and 3) against `aha plan`."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "aha.cli", "train", DEMO, "train.steps=3", "eval.before=false",
               "eval.after=false", f"output_dir={out}"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    steps = [r["time/step_s"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
             if "time/step_s" in r]
    plan = aha.perf.fit.make_plan(load_config(DEMO))
    assert plan.forecast.peak_bytes == pytest.approx(usage.ru_maxrss * 1024, rel=0.25)
    assert plan.forecast.step_seconds == pytest.approx(sum(steps[1:]) / len(steps[1:]), rel=0.4)
