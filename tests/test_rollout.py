"""Token in, token out: the engine's samples and log-probs are what the learner sees."""

import torch

from aha.models import load
from aha.rollout import HFEngine
from aha.training.logprobs import completion_logprobs, grouped_completion_logprobs


def tiny_engine(max_new_tokens=6, temperature=1.0):
    lm = load("tiny")
    prompts = [lm.tokenizer.encode(text) for text in ("<|im_start|>user\n1+1<|im_end|>\n", "7*8=", "a")]
    return lm, HFEngine(lm.model, lm.tokenizer, max_new_tokens, temperature, batch_size=4), prompts


def test_groups_are_consecutive_and_masks_end_at_eos():
    lm, engine, prompts = tiny_engine()
    torch.manual_seed(0)
    ro = engine.generate(prompts, group_size=3)
    assert len(ro) == 9 and ro.prompt_index.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    eos = lm.tokenizer.eos_token_id
    for i in range(len(ro)):
        n = int(ro.lengths()[i])
        ids = ro.completion_ids[i].tolist()
        assert eos not in ids[: n - 1]  # the only EOS in the valid span is its last token
        assert bool(ro.truncated[i]) == (eos not in ids[:n])
        assert ro.texts[i] == lm.tokenizer.decode(ids[:n], skip_special_tokens=True)
        assert torch.all(ro.sampling_logprobs[i, n:] == 0)
    # each row's prompt is its group's prompt, left-padded
    assert ro.prompt_ids[4][ro.prompt_mask[4].bool()].tolist() == prompts[1]


def test_shared_prefill_gives_the_same_greedy_tokens():
    lm, engine, prompts = tiny_engine()
    shared = engine.generate(prompts, group_size=2, greedy=True)
    plain = engine.generate([p for p in prompts for _ in range(2)], group_size=1, greedy=True)
    assert torch.equal(shared.completion_ids, plain.completion_ids)
    torch.testing.assert_close(shared.sampling_logprobs, plain.sampling_logprobs, atol=1e-5, rtol=0)


def test_learner_logprobs_match_sampling_logprobs():
    lm, engine, prompts = tiny_engine(max_new_tokens=8, temperature=0.7)
    torch.manual_seed(1)
    ro = engine.generate(prompts, group_size=4)
    with torch.no_grad():
        learner = completion_logprobs(lm.model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids, ro.completion_mask,
                                      0.7)
    # both compute the LM head in fp32: equal to fp32 precision
    torch.testing.assert_close(learner, ro.sampling_logprobs, atol=1e-5, rtol=0)


def test_grouped_logprobs_equal_ungrouped_values_and_gradients():
    lm, engine, prompts = tiny_engine(max_new_tokens=8)
    torch.manual_seed(2)
    G = 3
    ro = engine.generate(prompts, group_size=G)
    model = lm.model
    weights = torch.randn(ro.completion_ids.shape)

    def grads(fn):
        model.zero_grad()
        values = fn()
        (values * weights).sum().backward()
        return values.detach(), [p.grad.clone() for p in model.parameters()]

    a, grad_a = grads(lambda: completion_logprobs(model, ro.prompt_ids, ro.prompt_mask, ro.completion_ids,
                                                  ro.completion_mask))
    b, grad_b = grads(lambda: grouped_completion_logprobs(model, ro.prompt_ids[::G], ro.prompt_mask[::G],
                                                          ro.completion_ids, ro.completion_mask, G))
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    for ga, gb in zip(grad_a, grad_b):
        torch.testing.assert_close(ga, gb, atol=1e-5, rtol=1e-4)
