"""The fast paths give the reference paths' numbers: the chunked LM head, the sampling loop
(inverse-transform sampling, finished rows leaving the batch), eager attention for short
sequences, and the allocator setting."""

import pytest
import torch

import aha.training.logprobs as logprobs_module
from aha.models import load
from aha.models.compute import EAGER_ATTENTION_MAX_SCORES, attention_for, retain_freed_memory
from aha.rollout import HFEngine
from aha.rollout.hf_engine import _sample, draw
from aha.training.logprobs import _token_stats_reference, completion_hidden, token_stats


class Head(torch.nn.Module):
    def __init__(self, vocab=300, hidden=16, bias=False):
        super().__init__()
        self.head = torch.nn.Linear(hidden, vocab, bias=bias)

    def get_output_embeddings(self):
        return self.head


def _head_case(bias: bool, seed: int = 0):
    torch.manual_seed(seed)
    model = Head(bias=bias)
    hidden = (torch.randn(4, 9, 16) * 2).requires_grad_()
    targets = torch.randint(0, 300, (4, 9))
    mask = torch.ones(4, 9)
    mask[0, 5:] = 0
    mask[2, 1:] = 0
    return model, hidden, targets, mask


def _value_and_grads(stats, entropy: str, model, hidden):
    loss = (stats.logprobs * torch.linspace(-1, 2, stats.logprobs.numel()).view_as(stats.logprobs)).sum()
    if entropy == "grad":
        loss = loss + 0.7 * stats.entropy.sum()
    return torch.autograd.grad(loss, [hidden, *model.parameters()])


@pytest.mark.parametrize("entropy", ["none", "detached", "grad"])
@pytest.mark.parametrize("bias", [False, True])
def test_the_chunked_head_gives_the_full_logits_values_and_gradients(monkeypatch, entropy, bias):
    monkeypatch.setattr(logprobs_module, "HEAD_CHUNK_ROWS", 5)  # several chunks, the last one short
    model, hidden, targets, mask = _head_case(bias)
    fast = token_stats(model, hidden, targets, mask, 0.7, entropy)
    reference = _token_stats_reference(model.head(hidden).float() / 0.7, targets, mask, entropy)
    torch.testing.assert_close(fast.logprobs, reference.logprobs, atol=1e-5, rtol=0)
    assert torch.all(fast.logprobs[mask == 0] == 0)
    if entropy == "none":
        assert fast.entropy is None
    else:
        torch.testing.assert_close(fast.entropy, reference.entropy, atol=1e-5, rtol=0)
        assert fast.entropy.requires_grad == (entropy == "grad")
    for a, b in zip(_value_and_grads(fast, entropy, model, hidden),
                    _value_and_grads(reference, entropy, model, hidden)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_bf16_head_gradients_keep_fp32_values_and_bf16_precision_gradients():
    model, hidden, targets, mask = _head_case(bias=False, seed=3)
    fp32 = token_stats(model, hidden, targets, mask, 1.0, grad_dtype=torch.float32)
    bf16 = token_stats(model, hidden, targets, mask, 1.0, grad_dtype=torch.bfloat16)
    assert torch.equal(fp32.logprobs, bf16.logprobs)  # the forward is fp32 either way
    for a, b in zip(_value_and_grads(fp32, "none", model, hidden), _value_and_grads(bf16, "none", model, hidden)):
        assert a.dtype == b.dtype == torch.float32
        assert not torch.equal(a, b)  # the backward's matmuls did run in bf16
        assert float((a - b).norm() / a.norm()) < 1e-2


def test_the_head_computes_in_fp32_under_autocast():
    model, hidden, targets, mask = _head_case(bias=True, seed=4)
    plain = token_stats(model, hidden, targets, mask, 0.9).logprobs
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under_autocast = token_stats(model, hidden, targets, mask, 0.9).logprobs
    assert under_autocast.dtype == torch.float32
    assert torch.equal(plain, under_autocast)


def _frequencies(draw, vocab: int, n: int) -> torch.Tensor:
    return torch.bincount(draw(n), minlength=vocab).float() / n


def test_inverse_transform_sampling_draws_the_softmax_distribution():
    torch.manual_seed(0)
    logits = torch.tensor([2.0, 0.5, -float("inf"), 1.0, -1.0, -float("inf")])
    expected = torch.softmax(logits, dim=0)
    n = 200_000
    rows = logits.expand(n, -1).contiguous()
    got = _frequencies(lambda n: _sample(rows.exp(), 1.0), 6, n)
    assert got[2] == 0 and got[5] == 0  # zero-probability tokens, also the last one, never drawn
    sigma = (expected * (1 - expected) / n).sqrt()
    assert torch.all((got - expected).abs() <= 5 * sigma + 1e-9), (got, expected)


def test_top_p_keeps_the_smallest_set_reaching_p_renormalised():
    # probabilities 0.5, 0.3, 0.15, 0.05: with top_p 0.7 the nucleus is {0.5, 0.3} (0.5 alone
    # is under 0.7), as Hugging Face's TopPLogitsWarper defines it
    torch.manual_seed(1)
    probs = torch.tensor([0.15, 0.5, 0.05, 0.3])
    n = 100_000
    rows = probs.log().expand(n, -1).contiguous()
    got = _frequencies(lambda n: _sample(rows.exp() * 3.7, 0.7), 4, n)  # weights up to a factor
    assert got[0] == 0 and got[2] == 0
    assert got[1] == pytest.approx(0.5 / 0.8, abs=0.01) and got[3] == pytest.approx(0.3 / 0.8, abs=0.01)
    # top_p below the largest probability keeps the most probable token alone
    assert torch.all(_sample(rows[:100].exp(), 0.1) == 1)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_a_draw_reports_the_log_prob_the_learner_computes(temperature):
    # the learner: log_softmax(logits * (1 / T)) at the token; the draw overwrites its logits
    torch.manual_seed(2)
    logits = torch.randn(64, 3000) * 6
    logits[5, 7] = -float("inf")  # a masked token never drawn, the row still fine
    reference = torch.log_softmax(logits * (1.0 / temperature), dim=1)
    picked, logprob = draw(logits.clone(), temperature, 1.0, greedy=False)
    assert torch.allclose(logprob, reference.gather(1, picked[:, None]).squeeze(1), atol=1e-5)
    best, best_logprob = draw(logits.clone(), temperature, 1.0, greedy=True)
    assert torch.equal(best, logits.argmax(dim=1))
    # greedy samples at temperature 1 (the engine passes 1 when greedy)
    assert torch.allclose(best_logprob, torch.log_softmax(logits, dim=1).gather(1, best[:, None]).squeeze(1), atol=1e-5)
    broken = logits.clone()
    broken[3, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="not finite at sampling step 4"):
        draw(broken, temperature, 1.0, greedy=False, step=4)


def tiny(max_new_tokens=8, temperature=1.0):
    lm = load("tiny")
    prompts = [lm.tokenizer.encode(text) for text in ("<|im_start|>user\n1+1<|im_end|>\n", "7*8=", "a", "hello there")]
    return lm, HFEngine(lm.model, lm.tokenizer, max_new_tokens, temperature, batch_size=16), prompts


def test_rows_that_stop_leave_the_batch_without_changing_the_others():
    lm, engine, prompts = tiny()
    with torch.no_grad():  # sharper: the tiny model's greedy paths then vary instead of repeating a token
        for p in lm.model.parameters():
            p.mul_(3)
    free = engine.generate(prompts, greedy=True)
    # make a token that one row reaches mid-way (and no row earlier) a stop token: that row
    # leaves the batch there while others go on, and every row must read as if decoded alone
    ids = free.completion_ids.tolist()
    row, step = next((i, t) for t in range(1, 6) for i in range(len(ids))
                     if all(ids[i][t] not in r[:t + 1] for k,
                            r in enumerate(ids) if k != i) and ids[i][t] not in ids[i][:t])
    engine.eos_ids = sorted({*engine.eos_ids, ids[row][step]})
    together = engine.generate(prompts, greedy=True)
    assert int(together.lengths()[row]) == step + 1 and not together.truncated[row]
    assert int(together.lengths().max()) == 8
    for i, prompt in enumerate(prompts):
        alone = engine.generate([prompt], greedy=True)
        n = int(alone.lengths()[0])
        assert together.completion_ids[i, :n].tolist() == alone.completion_ids[0, :n].tolist()
        torch.testing.assert_close(together.sampling_logprobs[i, :n], alone.sampling_logprobs[0, :n], atol=1e-5, rtol=0)


def test_grouped_attention_gives_sdpas_hidden_states_and_gradients():
    lm = load("tiny")
    model = lm.model
    assert model.config._attn_implementation == "sdpa"
    torch.manual_seed(6)
    vocab = model.config.vocab_size
    prompt = torch.randint(5, vocab, (3, 7))
    prompt_mask = torch.ones(3, 7, dtype=torch.long)
    prompt_mask[1, :3] = 0  # left padding
    completion = torch.randint(5, vocab, (3, 5))
    completion_mask = torch.ones(3, 5)
    completion_mask[2, 2:] = 0

    def run(scores_limit):
        model.zero_grad()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr("aha.models.compute.EAGER_ATTENTION_MAX_SCORES", scores_limit)
            hidden = completion_hidden(model.base_model, prompt, prompt_mask, completion, completion_mask)
        (hidden * completion_mask[..., None]).sum().backward()
        return hidden.detach(), [p.grad.clone() for p in model.parameters()]

    eager, eager_grads = run(EAGER_ATTENTION_MAX_SCORES)
    sdpa, sdpa_grads = run(0)
    keep = completion_mask.bool()
    torch.testing.assert_close(eager[keep], sdpa[keep], atol=1e-5, rtol=1e-5)
    for a, b in zip(eager_grads, sdpa_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    assert model.config._attn_implementation == "sdpa"


def test_attention_for_restores_the_implementation_after_an_error():
    model = load("tiny").model
    with pytest.raises(RuntimeError), attention_for(model, 1):
        assert model.config._attn_implementation == "aha_grouped"
        raise RuntimeError("boom")
    assert model.config._attn_implementation == "sdpa"
    with attention_for(model, EAGER_ATTENTION_MAX_SCORES + 1):  # too many scores: unchanged
        assert model.config._attn_implementation == "sdpa"


def test_the_allocator_setting_applies_on_glibc_linux():
    import platform
    import sys

    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        pytest.skip("mallopt is glibc's")
    assert retain_freed_memory() is True


def test_greedy_decoding_is_hugging_face_generates():
    # the whole sampling loop (prefill, cache with room, grouped attention, rows leaving)
    # against the reference: transformers' own generate, one prompt at a time
    lm, engine, prompts = tiny(max_new_tokens=10)
    with torch.no_grad():
        for p in lm.model.parameters():
            p.mul_(3)
    ours = engine.generate(prompts, group_size=2, greedy=True)
    for i, prompt in enumerate(prompts):
        out = lm.model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                do_sample=False, max_new_tokens=10, eos_token_id=engine.eos_ids,
                                pad_token_id=engine.pad_id)
        reference = out[0, len(prompt):].tolist()
        for row in (2 * i, 2 * i + 1):
            n = int(ours.lengths()[row])
            assert ours.completion_ids[row, :n].tolist() == reference[:n]
            assert n == len(reference) or reference[n - 1] in engine.eos_ids


@pytest.mark.parametrize("queries", [1, 5])
def test_grouped_query_attention_is_eager_attention_without_copies(queries):
    from transformers.models.llama.modeling_llama import eager_attention_forward

    from aha.models.compute import grouped_query_attention

    torch.manual_seed(7)
    N, H, KV, L, d = 3, 9, 3, 8, 16
    module = torch.nn.Module()
    module.num_key_value_groups = H // KV
    module.eval()
    q = torch.randn(N, H, queries, d)
    k, v = torch.randn(N, KV, L, d), torch.randn(N, KV, L, d)
    mask = torch.zeros(N, 1, queries, L)
    mask[0, :, :, :2] = torch.finfo(torch.float32).min  # left padding
    mask[:, :, :, L - queries:] += torch.triu(torch.full((queries, queries), torch.finfo(torch.float32).min), 1)
    ours, _ = grouped_query_attention(module, q, k, v, mask, 0.25)
    reference, _ = eager_attention_forward(module, q, k, v, mask, 0.25)
    torch.testing.assert_close(ours, reference, atol=1e-6, rtol=1e-6)


def test_releasing_freed_memory_returns_the_pages_to_the_kernel():
    import platform
    import sys

    from aha.models.compute import release_freed_memory

    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        pytest.skip("malloc_trim is glibc's")
    retain_freed_memory()  # 200 MB blocks now come from the heap and stay there when freed

    def resident_gb():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2 ** 30

    blocks = [torch.ones(50_000_000) for _ in range(4)]  # 800 MB
    held = resident_gb()
    del blocks
    release_freed_memory()
    assert resident_gb() < held - 0.5


def test_grouped_query_attention_takes_a_value_head_size_of_its_own():
    # multi-head latent attention (DeepSeek-V2/V3, MiniCPM3): values narrower than queries
    from aha.models.compute import grouped_query_attention

    module = torch.nn.Module()
    module.eval()
    q, k, v = torch.randn(2, 4, 3, 6), torch.randn(2, 2, 5, 6), torch.randn(2, 2, 5, 4)
    out, probs = grouped_query_attention(module, q, k, v, None, 0.4)
    assert out.shape == (2, 3, 4, 4) and probs.shape == (2, 4, 3, 5)
    expected = torch.softmax(q @ k.repeat_interleave(2, dim=1).transpose(2, 3) * 0.4,
                             dim=-1) @ v.repeat_interleave(2, dim=1)
    torch.testing.assert_close(out, expected.transpose(1, 2), atol=1e-6, rtol=1e-6)


def test_attention_with_a_position_bias_is_left_to_sdpa():
    # a term the plain form does not apply is not dropped: SDPA's path, which adds it, runs
    from aha.models.compute import grouped_query_attention

    module = torch.nn.Module()
    module.eval()
    module.num_key_value_groups, module.is_causal = 1, False
    q, k, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    bias = torch.randn(1, 2, 3, 3)
    out, _ = grouped_query_attention(module, q, k, v, torch.zeros(1, 1, 3, 3), 0.3, position_bias=bias)
    expected = torch.softmax(q @ k.transpose(2, 3) * 0.3 + bias, dim=-1) @ v
    torch.testing.assert_close(out, expected.transpose(1, 2), atol=1e-5, rtol=1e-5)


def test_models_whose_config_does_not_name_its_heads_keep_their_attention():
    from aha.models.compute import attention_scores

    class Config:
        pass

    assert attention_scores(Config(), 1, 1, 1) > EAGER_ATTENTION_MAX_SCORES


def test_non_finite_logits_stop_sampling_with_an_error():
    lm, engine, prompts = tiny()
    with torch.no_grad():
        lm.model.get_output_embeddings().weight[3, 0] = float("nan")
    with pytest.raises(FloatingPointError, match="not finite at sampling step 0"):
        engine.generate(prompts)


def _prefilled(model, prompt_ids, room=8):
    from aha.rollout.kv_cache import decoding_cache

    cache = decoding_cache(model.config, room)
    mask = torch.ones_like(prompt_ids)
    mask[0, :2] = 0  # a left-padded row
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    model.base_model(input_ids=prompt_ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                     use_cache=True)
    return cache, mask, positions[:, -1] + 1


def _with_adapters(model):
    """model with LoRA adapters on every projection, moved off their zero start"""
    from aha.models.adapters import add_lora, trainable_parameters

    add_lora(model, rank=4, alpha=8)
    torch.manual_seed(11)
    with torch.no_grad():
        for p in trainable_parameters(model):
            p.normal_(std=0.1)
    return model


@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_lean_llama_step_is_the_models_own_forward(dtype, lora):
    import copy

    from aha.models.compute import autocast
    from aha.rollout.llama_decoding import LlamaDecoding

    lm = load("tiny")
    model = (_with_adapters(lm.model) if lora else lm.model).eval()
    torch.manual_seed(0)
    prompt_ids = torch.randint(3, 60, (3, 5))
    tokens = torch.randint(3, 60, (3,))
    with torch.no_grad(), autocast(dtype):
        cache, mask, position = _prefilled(model, prompt_ids)
        assert LlamaDecoding.fits(model, cache)
        reference_cache = copy.deepcopy(cache)
        mask = torch.cat([mask, mask.new_ones(3, 1)], dim=1)
        decoding = LlamaDecoding(model, dtype, cache)
        for step in range(3):  # several steps: the cache the lean step writes is read back
            ours = decoding.step(tokens, position, mask)
            theirs = model.base_model(input_ids=tokens[:, None], attention_mask=mask, position_ids=position[:, None],
                                      past_key_values=reference_cache, use_cache=True).last_hidden_state[:, -1]
            assert ours.dtype == theirs.dtype == torch.float32
            tolerance = 1e-5 if dtype == torch.float32 else 2e-2  # bf16: products fused differently
            assert torch.allclose(ours, theirs, atol=tolerance, rtol=tolerance), (ours - theirs).abs().max()
            tokens, position = (tokens * 7 + step) % 60 + 3, position + 1
            mask = torch.cat([mask, mask.new_ones(3, 1)], dim=1)


@pytest.mark.parametrize("lora", [False, True])
def test_the_engine_samples_the_same_on_the_lean_step_as_on_the_models_forward(monkeypatch, lora):
    from aha.rollout.llama_decoding import LlamaDecoding

    lm, engine, prompts = tiny(max_new_tokens=8)
    with torch.no_grad():
        for p in lm.model.parameters():
            p.mul_(3)
    if lora:  # the adapters folded into the lean step's weights: the same samples as peft's layers give
        _with_adapters(lm.model)
    steps = []
    lean_step = LlamaDecoding.step
    monkeypatch.setattr(LlamaDecoding, "step", lambda self, *a: steps.append(1) or lean_step(self, *a))
    torch.manual_seed(5)
    lean = engine.generate(prompts, group_size=3)
    assert steps, "the tiny Llama did not decode on the lean step"
    monkeypatch.setattr(LlamaDecoding, "fits", staticmethod(lambda model, cache: False))
    torch.manual_seed(5)
    plain = engine.generate(prompts, group_size=3)
    assert torch.equal(lean.completion_ids, plain.completion_ids)
    assert torch.allclose(lean.sampling_logprobs, plain.sampling_logprobs, atol=1e-5)


def test_wrapped_projections_and_other_caches_take_the_models_forward():
    from transformers.cache_utils import DynamicCache

    from aha.rollout.llama_decoding import LlamaDecoding

    class Wrapped(torch.nn.Linear):  # what an adapter library puts in a projection's place
        pass

    lm = load("tiny")
    prompt_ids = torch.randint(3, 60, (2, 4))
    with torch.no_grad():
        cache, _, _ = _prefilled(lm.model, prompt_ids)
        assert LlamaDecoding.fits(lm.model, cache)
        assert not LlamaDecoding.fits(lm.model, DynamicCache(config=lm.model.config))
        attention = lm.model.base_model.layers[1].self_attn
        plain = attention.v_proj
        attention.v_proj = Wrapped(plain.in_features, plain.out_features, bias=False)
        assert not LlamaDecoding.fits(lm.model, cache)


def test_the_cache_with_room_holds_what_was_written_through_growth_and_row_changes():
    from aha.rollout.kv_cache import RoomyLayer

    layer = RoomyLayer(room=2)
    torch.manual_seed(0)
    written_k, written_v = [], []
    for length in (3, 1, 1, 1, 2):  # past the room twice: the buffers grow
        k, v = torch.randn(2, 3, length, 4), torch.randn(2, 3, length, 4)
        keys, values = layer.update(k, v)
        written_k.append(k)
        written_v.append(v)
        assert torch.equal(keys, torch.cat(written_k, dim=2)) and torch.equal(values, torch.cat(written_v, dim=2))
        # the scores' product reads the keys transposed: a slice of the buffer, not a copy
        assert keys.transpose(2, 3).data_ptr() == layer.key_buffer.data_ptr()
    layer.batch_repeat_interleave(2)
    assert torch.equal(layer.keys, torch.cat(written_k, dim=2).repeat_interleave(2, dim=0))
    layer.batch_select_indices(torch.tensor([3, 0]))
    assert torch.equal(layer.values, torch.cat(written_v, dim=2)[[1, 0]])
    layer.keys_as(torch.bfloat16)
    assert layer.keys.dtype == torch.bfloat16 and torch.equal(layer.keys,
                                                              torch.cat(written_k, dim=2)[[1, 0]].bfloat16())
    more = torch.randn(2, 3, 5, 4)  # past the room again: the grown buffer stays bf16
    keys, _ = layer.update(more, torch.randn(2, 3, 5, 4))
    assert keys.dtype == torch.bfloat16
    assert torch.equal(keys, torch.cat([torch.cat(written_k, dim=2)[[1, 0]], more], dim=2).bfloat16())


@pytest.mark.parametrize("bias", [False, True])
def test_the_fp32_head_gives_each_rows_logits_however_many_rows_it_computes(bias):
    from aha.models.compute import FP32Head

    torch.manual_seed(0)
    weight, hidden = torch.randn(5000, 96) * 0.1, torch.randn(70, 96)
    b = torch.randn(5000) if bias else None
    exact = torch.nn.functional.linear(hidden.double(), weight.double(), None if b is None else b.double())
    head = FP32Head(weight, b)
    logits = head(hidden)
    assert logits.dtype == torch.float32 and torch.allclose(logits.double(), exact, atol=1e-5)
    if head.packed is not None:  # oneDNN's packed product: a row's logits are the same alone or in a batch
        assert torch.equal(head(hidden[3:4]), logits[3:4]) and torch.equal(head(hidden[:37]), logits[:37])
    head.packed = None  # the sliced product, where oneDNN cannot pack
    assert torch.allclose(head(hidden).double(), exact, atol=1e-5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert head(hidden).dtype == torch.float32
    with pytest.raises(RuntimeError, match="does not differentiate"):
        head(hidden.requires_grad_())
