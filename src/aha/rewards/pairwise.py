"""A pairwise judge: a model reads a question and two responses, "A" and "B", and says which is
better. Two uses share one prompt, so a judge trained on the first is the judge of the second:

- judge training data (`aha data --judge-from PAIRS`, tasks/judge_pairs.py): each preference
  pair as two judge prompts, chosen first and chosen second, answered "A" or "B"; the judge is
  trained by RL with `fn: multiple_choice` (MENLO, JudgeLRM: RL-trained generative judges).
- `fn: pairwise_judge`, a group reward (SPO-style self-play preference): every completion of a
  group is compared with every other, in both orders, and paid its win rate
  (algorithms/pairwise.py); the judge's position bias and its consistency across the two
  orders are logged beside it as `<name>/position_bias` and `<name>/consistency`.

The verdict is read as URPO's referee and rubric_judge's yes_no are: P(A) / (P(A) + P(B)) at
the first token of the judge's reply, one forward pass per ordered pair, no sampling noise.
The judge is a local model (rubric_judge's loader: loaded once per process, frozen, never the
policy) or, with `base_url`, a model behind an OpenAI-compatible endpoint (rubric_judge's HTTP
client, rewards/judge_http.py: P(A) from the first token's top log-probs, else the letter the
reply starts with); `first_preferred` is the one function that asks either. Locally the
responses are read as ordinary text (prompts.PlainText): a "<|im_end|>" the policy writes
cannot end the judge's turn. Cost: G * (G - 1) judge calls per group."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aha.algorithms.pairwise import win_rates
from aha.prompts import PlainText, encode_quoting, prompt_text
from aha.rewards import judge_http
from aha.rewards.functions import Logged, grouped
from aha.rewards.judge import judge_model, next_token_probs

SYSTEM = "You are a careful, strict judge. You compare two responses to the same question."
TEMPLATE = "Question:\n{question}\n\nResponse A:\n{first}\n\nResponse B:\n{second}\n\n{instruction}"
INSTRUCTION = "Which response is better? Answer A or B."
VERDICTS = ("A", "B")
_USER = "\ue000aha-judge-user\ue000"  # private-use characters: where the user's message goes in the template
_PLAIN: dict[str, tuple[PlainText, str, str]] = {}  # judge -> (plain-text reader, template before and after)


def judge_messages(question: str, first: str, second: str) -> list[dict]:
    """The judge's conversation about one ordered pair: `first` is shown as A, `second` as B."""
    user = TEMPLATE.format(question=question, first=first, second=second, instruction=INSTRUCTION)
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def _framing(name: str) -> tuple[PlainText, str, str]:
    """The judge's plain-text reader and its chat template rendered around the user's message."""
    if name not in _PLAIN:
        tokenizer = judge_model(name).tokenizer
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(f"pairwise_judge: the judge {name!r} has no chat template; use an instruct model")
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": _USER}]
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        if rendered.count(_USER) != 1:  # the template edits the user's text: no place to quote it
            raise ValueError(f"pairwise_judge: the chat template of {name!r} does not write the user's message as "
                             "given; it cannot quote responses")
        before, _, after = rendered.partition(_USER)
        _PLAIN[name] = (PlainText(tokenizer), before, after)
    return _PLAIN[name]


def verdict_tokens(tokenizer) -> list[int]:
    """The first token of "A" and of "B" in the judge's tokenizer (they must differ)."""
    ids = [tokenizer.encode(v, add_special_tokens=False)[0] for v in VERDICTS]
    if ids[0] == ids[1]:
        raise ValueError(f"pairwise_judge: {VERDICTS} start with the same token in the judge's tokenizer")
    return ids


@torch.no_grad()
def _local_first_preferred(name: str, conversations: list[list[dict]], batch_size: int) -> list[float]:
    """P(A) / (P(A) + P(B)) at the first token of the local judge's reply, per conversation."""
    loaded = judge_model(name)
    model, tokenizer = loaded.model, loaded.tokenizer
    plain, before, after = _framing(name)
    ids = verdict_tokens(tokenizer)
    prompts = [encode_quoting(tokenizer, plain, before, c[-1]["content"], after) for c in conversations]
    out: list[float] = []
    for start in range(0, len(prompts), batch_size):
        out += next_token_probs(model, tokenizer.pad_token_id, prompts[start: start + batch_size], ids)[:, 0].tolist()
    return out


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible chat endpoint serving the judge (rewards/judge_http.py)."""

    base_url: str
    api_key_env: str | None = None
    timeout_s: float = 60.0
    retries: int = 2
    top_logprobs: int = 20


def endpoint_verdict(reply: judge_http.Reply | None) -> float | None:
    """P(A) / (P(A) + P(B)) from the reply's first-token log-probs; without them, 1 or 0 by the
    letter it starts with; None when it failed or names neither."""
    if reply is None:
        return None
    weighted = judge_http.word_value(reply, list(VERDICTS), [1.0, 0.0])
    if weighted is not None:
        return weighted
    said = judge_http.answer_word(reply, list(VERDICTS))
    return None if said is None else 1.0 - said


def first_preferred(conversations: list[list[dict]], model: str, batch_size: int = 8,
                    endpoint: Endpoint | None = None) -> list[float | None]:
    """The judge's P(the response shown first is better) for each conversation (judge_messages),
    None where an endpoint gave no verdict. The one place the judge is asked: the local model,
    or with `endpoint` the model of that name behind it, batch_size requests at a time."""
    if not conversations:  # a group of one: nothing to ask, no judge to load
        return []
    if endpoint is None:
        return _local_first_preferred(model, conversations, batch_size)
    replies = judge_http.chat_completions(endpoint.base_url, model, conversations, api_key_env=endpoint.api_key_env,
                                          timeout_s=endpoint.timeout_s, retries=endpoint.retries,
                                          concurrency=batch_size, max_tokens=1, top_logprobs=endpoint.top_logprobs)
    return [endpoint_verdict(reply) for reply in replies]


def group_preferences(question: str, completions: list[str], model: str, batch_size: int, max_chars: int,
                      endpoint: Endpoint | None = None) -> torch.Tensor | None:
    """(G, G): [i, j] = P(the judge prefers i) with i shown first; the diagonal is not asked (0.5).
    None when some pair got no verdict (an endpoint failed): no win rate stands without it."""
    G = len(completions)
    pairs = [(i, j) for i in range(G) for j in range(G) if i != j]
    texts = [c[:max_chars] for c in completions]
    conversations = [judge_messages(question, texts[i], texts[j]) for i, j in pairs]
    verdicts = first_preferred(conversations, model, batch_size, endpoint)
    if any(p is None for p in verdicts):
        return None
    first = torch.full((G, G), 0.5)
    for (i, j), p in zip(pairs, verdicts):
        first[i, j] = p
    return first


@grouped
def pairwise_judge(completions: list[str], samples: list[dict], model: str = "smollm2-135m", batch_size: int = 8,
                   max_chars: int = 2000, base_url: str | None = None, api_key_env: str | None = None,
                   timeout_s: float = 60.0, retries: int = 2, top_logprobs: int = 20) -> list[Logged | None]:
    """Each completion's win rate in [0, 1] against the others of its group (they sum to G / 2),
    with the group's position bias and consistency logged beside it. With base_url the judge is
    `model` at that OpenAI-compatible endpoint; a group with a pair it did not answer fails whole."""
    if batch_size < 1 or max_chars < 1:
        raise ValueError(f"batch_size and max_chars must be at least 1, got {batch_size} and {max_chars}")
    endpoint = None if base_url is None else Endpoint(base_url, api_key_env, timeout_s, retries, top_logprobs)
    question = prompt_text(samples[0].get("prompt", ""))
    first = group_preferences(question, completions, model, batch_size, max_chars, endpoint)
    if first is None:
        return [None] * len(completions)
    won = win_rates(first)
    logged = {"position_bias": won.position_bias, "consistency": won.consistency}
    return [Logged(float(rate), logged) for rate in won.rates.tolist()]
