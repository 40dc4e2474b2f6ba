"""A judge behind an OpenAI-compatible chat endpoint (`/v1/chat/completions`: vLLM, SGLang,
llama.cpp's server, a hosted API), called with the standard library only.

chat_completions sends one request per conversation, `concurrency` at a time, greedy
(temperature 0), asking for the first token's top log-probs when top_logprobs > 0. A request
that fails (connection refused, no answer within timeout_s, an HTTP error, a reply that is not
the chat format) is tried again up to `retries` times, backing off 0.5 s, 1 s, 2 s...; one that
still fails is None (the reward scores it as failed), and each distinct cause is logged once
per batch, naming the URL. The key is read from the environment variable the config names
(api_key_env), never from the config itself, and never logged.

The endpoint tokenises the judge's prompt itself: a policy that writes a chat template's
control-token text ("<|im_end|>") is read however that server reads it (vLLM parses special
tokens in message text). The local judge (rewards/judge.py) reads it as characters.

USAGE counts this process's calls, failures, retries and tokens (the endpoint's `usage`
field); the reward composition reports its run's share as metrics (judge_http/*)."""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

log = logging.getLogger(__name__)


@dataclass
class Reply:
    text: str  # the generated message
    top_logprobs: dict[str, float]  # the first generated token's alternatives: token text -> log-prob ({}: none sent)


@dataclass
class Usage:
    calls: int = 0  # requests sent, retries included
    retries: int = 0
    failures: int = 0  # requests with no reply after every retry
    prompt_tokens: int = 0  # as the endpoint counts them (its `usage`)
    completion_tokens: int = 0


USAGE = Usage()
_LOCK = threading.Lock()  # requests run in threads


def usage() -> dict[str, int]:
    """This process's counts so far, over every endpoint."""
    with _LOCK:
        return asdict(USAGE)


def endpoint_metrics(start: dict[str, int]) -> dict[str, int]:
    """judge_http/<count> spent since `start` (a usage() taken earlier); {} when no call was made."""
    now = usage()
    spent = {key: now[key] - start[key] for key in now}
    return {f"judge_http/{key}": value for key, value in spent.items()} if spent["calls"] else {}


def _count(**add: int) -> None:
    with _LOCK:
        for key, value in add.items():
            setattr(USAGE, key, getattr(USAGE, key) + value)


class MalformedReply(ValueError):
    """The endpoint answered, but not with a chat completion."""


def endpoint_url(base_url: str) -> str:
    """base_url as OpenAI clients take it (http://host:port/v1) + /chat/completions."""
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ValueError(f"base_url must be an http:// or https:// URL (e.g. http://127.0.0.1:8000/v1), got "
                         f"{base_url!r}")
    return base_url.rstrip("/") + "/chat/completions"


def headers(api_key_env: str | None) -> dict[str, str]:
    found = {"Content-Type": "application/json"}
    if api_key_env is not None:
        key = os.environ.get(api_key_env, "")
        if not key:
            raise ValueError(f"api_key_env: the environment variable {api_key_env!r} is not set (it holds the "
                             "endpoint's key; the config names the variable, never the key)")
        found["Authorization"] = f"Bearer {key}"
    return found


def parse_reply(data) -> Reply:
    """The first choice's text and its first token's top log-probs, from a chat completion."""
    try:
        choice = data["choices"][0]
        text = choice["message"]["content"]
        if not isinstance(text, str):
            raise TypeError(f"message.content is {type(text).__name__}")
        tokens = ((choice.get("logprobs") or {}).get("content") or [])
        top = {}
        if tokens:
            first = tokens[0]
            for alt in [first, *(first.get("top_logprobs") or [])]:
                top[str(alt["token"])] = float(alt["logprob"])
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as err:
        raise MalformedReply(f"malformed response (not a chat completion: {type(err).__name__}: {err})") from None
    return Reply(text, top)


def _cause(err: BaseException, timeout_s: float) -> str:
    """Why a request failed, in words."""
    if isinstance(err, urllib.error.HTTPError):
        body = err.read()[:200].decode("utf-8", "replace") if err.fp is not None else ""
        return f"HTTP {err.code} {err.reason}: {body}".rstrip(": ")
    reason = err.reason if isinstance(err, urllib.error.URLError) else err
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (no server listening)"
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"no answer within timeout_s={timeout_s:g}"
    if isinstance(err, (MalformedReply, json.JSONDecodeError, UnicodeDecodeError)):
        return str(err) if isinstance(err, MalformedReply) else f"malformed response (not JSON: {err})"
    return f"{type(reason).__name__}: {reason}"


def _tokens(data: dict, key: str) -> int:
    """A count from the reply's `usage`; 0 where the endpoint sent none (or no number)."""
    spent = data.get("usage")
    value = spent.get(key) if isinstance(spent, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _ask(url: str, payload: dict, sent_headers: dict, timeout_s: float, retries: int,
         backoff_s: float) -> tuple[Reply | None, str | None]:
    """One conversation's reply, or None and the last failure's cause."""
    body = json.dumps(payload).encode()
    cause = None
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff_s * 2 ** (attempt - 1))
            _count(retries=1)
        _count(calls=1)
        try:
            request = urllib.request.Request(url, data=body, headers=sent_headers, method="POST")
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                data = json.loads(response.read())
            reply = parse_reply(data)
        except Exception as err:  # noqa: BLE001 - every way a request fails is a cause to report
            cause = _cause(err, timeout_s)
            continue
        _count(prompt_tokens=_tokens(data, "prompt_tokens"), completion_tokens=_tokens(data, "completion_tokens"))
        return reply, None
    _count(failures=1)
    return None, cause


def chat_completions(base_url: str, model: str, messages_list: list[list[dict]], *, api_key_env: str | None = None,
                     timeout_s: float = 60.0, retries: int = 2, concurrency: int = 8, max_tokens: int = 8,
                     top_logprobs: int = 0, backoff_s: float = 0.5) -> list[Reply | None]:
    """One greedy reply per conversation (None: failed after retries), in order.
    top_logprobs > 0 asks for the first token's top alternatives (Reply.top_logprobs)."""
    url = endpoint_url(base_url)
    sent_headers = headers(api_key_env)
    payloads = []
    for messages in messages_list:
        payload = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0}
        if top_logprobs > 0:
            payload.update(logprobs=True, top_logprobs=top_logprobs)
        payloads.append(payload)
    if not payloads:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(payloads)))) as pool:
        answered = list(pool.map(lambda p: _ask(url, p, sent_headers, timeout_s, retries, backoff_s), payloads))
    for cause, count in Counter(cause for _, cause in answered if cause is not None).items():
        log.warning("judge endpoint %s: %d of %d requests failed after %d tries: %s; scored as failed", url, count,
                    len(payloads), retries + 1, cause)
    return [reply for reply, _ in answered]


def answer_probabilities(reply: Reply, words: list[str]) -> list[float] | None:
    """The probability the judge starts each answer word, from the first token's top log-probs.
    Text is compared with leading whitespace stripped ("Yes" and " Yes" are one word). A word
    some returned token spells whole counts those tokens alone, as the local judge reads the
    word's own token ("Yes", not also "Y", which starts "You" as well); a word no returned token
    spells whole counts every token that is a non-empty prefix of it (a judge whose tokenizer
    spells "Yes" as "Y"+"es" starts with "Y"), so words must start differently. None when no
    returned token starts any word."""
    probs = [0.0] * len(words)
    stripped = {token: token.lstrip() for token in reply.top_logprobs}
    for k, word in enumerate(words):
        whole = word in stripped.values()
        for token, logprob in reply.top_logprobs.items():
            text = stripped[token]
            if (text == word) if whole else (text and word.startswith(text)):
                probs[k] += math.exp(logprob)
    return probs if sum(probs) > 0 else None


def word_value(reply: Reply, words: list[str], values: list[float]) -> float | None:
    """The words' values weighted by the probability the judge starts each (answer_probabilities,
    renormalised over the words); None when no returned token starts any."""
    probs = answer_probabilities(reply, words)
    return None if probs is None else sum(p * v for p, v in zip(probs, values)) / sum(probs)


def answer_word(reply: Reply, words: list[str]) -> int | None:
    """Which word the generated text starts with (leading whitespace ignored), or None."""
    text = reply.text.lstrip()
    return next((k for k, word in enumerate(words) if text.startswith(word)), None)
