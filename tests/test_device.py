"""`device: auto | cpu | cuda`: how the choice resolves, the errors where it cannot be kept, and
that each forward brings its CPU inputs to the model's device. This machine has no GPU: a model on
torch's `meta` device (shapes without data) stands in for a device the inputs are not on, which
is as far as the placement can be checked here (docs/scaling.md says what has run on GPUs)."""

from __future__ import annotations

import pytest
import torch

from aha.models.compute import autocast, placement, resolve_device, resolve_dtype

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the choice where torch sees no GPU")


@needs_no_gpu
def test_auto_and_cpu_pick_the_cpu_and_cuda_without_a_gpu_is_an_error():
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu", local_rank=3) == torch.device("cpu")
    with pytest.raises(ValueError, match=r"device: cuda, but torch sees no CUDA device .* set device: cpu or auto"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match=r"device must be one of auto, cpu, cuda, got 'gpu'"):
        resolve_device("gpu")


def test_the_dtype_follows_the_cpu_rule_on_the_cpu(monkeypatch):
    from aha.models import compute

    for native, expected in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(compute, "native_bf16", lambda native=native: native)
        assert resolve_dtype("auto", torch.device("cpu")) == expected
        assert placement("cpu", "auto") == (torch.device("cpu"), expected)
    assert resolve_dtype("float32", torch.device("cpu")) == torch.float32


def test_autocast_is_for_the_models_device_type():
    with autocast(torch.bfloat16, torch.device("cpu")):
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
    with autocast(torch.float32, "cpu"):
        assert not torch.is_autocast_enabled("cpu")


def test_the_config_names_the_device_key():
    from aha.config import ConfigError, load_config

    assert load_config(None, []).device == "auto"
    with pytest.raises(ConfigError, match="device"):
        load_config(None, ["device=gpu"])


@needs_no_gpu
def test_a_run_on_cuda_without_a_gpu_stops_before_anything_is_written(tmp_path):
    from aha.config import ConfigError, load_config
    from aha.training.loop import train

    out = tmp_path / "run"
    config = load_config(None, ["model=tiny", "device=cuda", f"output_dir={out}"])
    with pytest.raises(ConfigError, match="device: cuda, but torch sees no CUDA device"):
        train(config, echo=lambda *_: None)
    assert not out.exists()


@needs_no_gpu
def test_a_reward_models_device_is_checked_with_its_key(tmp_path):
    from aha.rewards.functions import RewardError
    from aha.rewards.process_reward import compute_placement

    assert compute_placement({"device": "auto", "dtype": "float32"}, "reward[0]") == (torch.device("cpu"),
                                                                                        torch.float32)
    with pytest.raises(RewardError, match=r"reward\[1\].args.device: cuda, but torch sees no CUDA device"):
        compute_placement({"device": "cuda", "dtype": "auto"}, "reward[1]")
    with pytest.raises(RewardError, match=r"reward\[0\].args.device must be one of auto, cpu, cuda, got 'tpu'"):
        compute_placement({"device": "tpu", "dtype": "auto"}, "reward[0]")


@pytest.fixture(scope="module")
def model_elsewhere():
    """The tiny model on a device its CPU inputs are not on (meta: a forward without data)."""
    from aha.models import load

    model = load("tiny").model.to("meta")
    model.set_attn_implementation("eager")  # SDPA's mask asks whether any row is padded: data meta lacks
    return model


def test_the_learners_forwards_bring_their_inputs_to_the_model(model_elsewhere):
    from aha.training.logprobs import completion_hidden, grouped_completion_hidden

    prompt, prompt_mask = torch.tensor([[1, 2, 3], [1, 2, 3]]), torch.ones(2, 3, dtype=torch.long)
    completion, completion_mask = torch.tensor([[4, 5], [6, 7]]), torch.ones(2, 2)
    backbone = model_elsewhere.base_model
    hidden = completion_hidden(backbone, prompt, prompt_mask, completion, completion_mask)
    assert hidden.device.type == "meta" and hidden.shape == (2, 2, model_elsewhere.config.hidden_size)
    shared = grouped_completion_hidden(backbone, prompt[:1], prompt_mask[:1], completion, completion_mask, 2)
    assert shared.device.type == "meta" and shared.shape == hidden.shape


def test_reward_and_value_heads_follow_their_body(model_elsewhere):
    from torch import nn

    from aha.models.process_reward import ProcessRewardModel, step_hidden
    from aha.models.reward_model import RewardModel, last_token_hidden
    from aha.models.value import ValueModel

    size = model_elsewhere.config.hidden_size
    rm = RewardModel(model_elsewhere, nn.Linear(size, 2), pad_id=0)
    prm = ProcessRewardModel(model_elsewhere, nn.Linear(size, 1), pad_id=0)
    assert rm.head.weight.device.type == prm.head.weight.device.type == "meta"
    ids, mask = torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.ones(2, 3, dtype=torch.long)
    assert last_token_hidden(model_elsewhere, ids, mask).shape == (2, size)
    assert step_hidden(model_elsewhere, [[1, 2, 3], [4, 5, 6]], [[0, 2], [1]], pad_id=0).shape == (3, size)
    critic = ValueModel(model_elsewhere)
    assert critic.head.weight.device.type == "meta"


def test_a_run_resumes_on_another_device_setting(tmp_path):
    """device is where the models run, not what they compute: a resume may change it (on this
    machine cpu and auto are the same CPU; a GPU run resuming on a CPU takes the same path)."""
    from aha.config import load_config
    from aha.training.loop import train

    out = tmp_path / "run"
    tiny = ["model=tiny", "task.num_eval=4", "eval.max_new_tokens=4", "train.report=false", "rollout.max_new_tokens=4",
            "rollout.prompts_per_step=2", "rollout.group_size=2", f"output_dir={out}"]
    train(load_config(None, [*tiny, "device=cpu", "train.steps=1"]), echo=lambda *_: None)
    summary = train(load_config(None, [*tiny, "device=auto", "train.steps=2"]), echo=lambda *_: None)
    assert summary.steps == 2


def test_ray_learner_ranks_take_a_gpu_each_only_where_the_cluster_has_them():
    from aha.cli.learners import on_ray_devices
    from aha.config import ConfigError, load_config

    class Cluster:  # what on_ray_devices reads of a Ray cluster: its resources
        def __init__(self, gpus: float):
            self.gpus = gpus

        def cluster_resources(self) -> dict:
            return {"CPU": 16.0, "GPU": self.gpus} if self.gpus else {"CPU": 16.0}

    auto, cuda = load_config(None, ["device=auto"]), load_config(None, ["device=cuda"])
    assert on_ray_devices(auto, Cluster(8), 8).device == "cuda"
    assert on_ray_devices(auto, Cluster(4), 8).device == "cpu"  # an actor without a GPU must not pick one up
    assert on_ray_devices(load_config(None, ["device=cpu"]), Cluster(8), 2).device == "cpu"
    assert on_ray_devices(cuda, Cluster(2), 2).device == "cuda"
    with pytest.raises(ConfigError, match=r"device: cuda with ray.learner_workers=4: the Ray cluster has 2 GPU"):
        on_ray_devices(cuda, Cluster(2), 4)
