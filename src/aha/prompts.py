"""Prompts: what a sample's prompt may be (a string or a chat conversation), how it is shown
as text, and how it becomes the token ids the engine samples from. Below tasks and rewards:
both use it (a task's samples, a judge's or reward model's view of the question)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from aha.errors import TaskError


@dataclass
class PromptStyle:
    """What turns a sample's prompt into chat messages. A Task has these two fields too and is
    passed as it is; a reward model that saved its task's style rebuilds it from these."""

    system_prompt: str | None = None
    few_shot: list[dict] = field(default_factory=list)

ROLES = ("system", "user", "assistant")


def check_prompt(prompt, where: str) -> str | None:
    """Why `prompt` is not a prompt (None when it is): a string, or a conversation in the chat
    format (TRL's conversational prompts): a non-empty list of {"role", "content"} messages,
    roles system/user/assistant, contents strings, ending with a user turn."""
    if isinstance(prompt, str):
        return None
    if not isinstance(prompt, list):
        return f"{where}: prompt must be a string or a list of chat messages, got {type(prompt).__name__}"
    if not prompt:
        return f"{where}: prompt is an empty list of chat messages"
    for i, message in enumerate(prompt):
        if not isinstance(message, dict) or set(message) != {"role", "content"}:
            got = sorted(message) if isinstance(message, dict) else type(message).__name__
            return f"{where}: prompt[{i}] must be a message with exactly the keys role and content, got {got}"
        if message["role"] not in ROLES:
            return f"{where}: prompt[{i}].role must be one of {', '.join(ROLES)}, got {message['role']!r}"
        if not isinstance(message["content"], str):
            return f"{where}: prompt[{i}].content must be a string, got {type(message['content']).__name__}"
    if prompt[-1]["role"] != "user":
        return (f"{where}: the last message of a chat prompt must be the user's (the model answers it), "
                f"got {prompt[-1]['role']!r}")
    return None


def prompt_text(prompt) -> str:
    """A prompt as one readable string (logs, reports, a judge's view of the question): a
    conversation becomes its turns, one 'role: content' per line."""
    if isinstance(prompt, list):
        return "\n".join(f"{m.get('role')}: {m.get('content')}" if isinstance(m, dict) else str(m) for m in prompt)
    return str(prompt)


def chat_messages(task: PromptStyle, sample: dict) -> list[dict]:
    """System prompt, few-shot turns, then the sample's question, as chat messages. A sample
    whose prompt is already a conversation keeps it whole; its own system message, if any,
    replaces task.system_prompt, and the few-shot turns go between the system message and it."""
    prompt = sample["prompt"]
    turns = [dict(m) for m in prompt] if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]
    system = [turns.pop(0)] if turns[0]["role"] == "system" else []
    if not system and task.system_prompt is not None:
        system = [{"role": "system", "content": task.system_prompt}]
    shots = []
    for shot in task.few_shot:
        shots.append({"role": "user", "content": str(shot["prompt"])})
        shots.append({"role": "assistant", "content": str(shot["answer"])})
    return system + shots + turns


def plain_text_prompt(messages: list[dict]) -> str:
    """For a model without a chat template (a base model): one question alone is its own
    text; anything more is written out as labelled turns ending with 'Assistant:'."""
    if len(messages) == 1 and messages[0]["role"] == "user":
        return messages[0]["content"]
    return "".join(f"{m['role'].capitalize()}: {m['content']}\n\n" for m in messages) + "Assistant:"


def token_ids(encoded) -> list[int]:
    """What apply_chat_template(tokenize=True) returns, as ids: transformers gives a list of
    ids or, in newer versions, a BatchEncoding holding them."""
    if isinstance(encoded, dict) or hasattr(encoded, "keys"):
        encoded = encoded["input_ids"]
    return list(encoded)


def encode_prompts(tokenizer, task: PromptStyle, samples: list[dict],
                   tools: list[dict] | None = None) -> list[list[int]]:
    """Prompt token ids through the tokenizer's chat template (plain text where it has none),
    ready for generation. These ids travel with the rollout to the learner: nothing is
    re-tokenised later. tools: JSON schemas of the functions the model may call, given to a
    template that shows them (apply_chat_template(tools=...); one that does not ignores them)."""
    out = []
    templated = getattr(tokenizer, "chat_template", None) is not None
    described = {"tools": tools} if tools else {}
    for sample in samples:
        messages = chat_messages(task, sample)
        if templated:
            try:
                ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **described)
            except Exception as err:  # noqa: BLE001 - a template that rejects this conversation (roles, a system turn)
                raise TaskError(f"sample {sample.get('id', '?')!r}: the model's chat template cannot write its prompt "
                                f"({type(err).__name__}: {str(err)[:300]}); messages: "
                                f"{[m['role'] for m in messages]}") from None
        else:
            ids = tokenizer(plain_text_prompt(messages))["input_ids"]
        ids = token_ids(ids)
        if len(ids) == 0:  # nothing to condition on: the engine cannot sample from an empty prompt
            raise TaskError(f"sample {sample.get('id', '?')!r}: its prompt is no tokens "
                            + ("as the model's chat template writes it" if templated else "(empty text)"))
        out.append(ids)
    return out


class PlainText:
    """The tokenizer reading text the policy wrote (a completion, a step of one) as ordinary
    text, for a judge or reward model that re-tokenises it: a chat control token's string in it
    ("<|im_end|>", the EOS) becomes the tokens of its characters, never that token, so the
    policy cannot forge the end of its turn and a new one. Rollouts decode completions with
    skip_special_tokens=True, so such a string in one was always spelled out, never sampled.

    Control tokens (`control`, longest first, as a regex) are the tokenizer's special tokens
    and the added tokens its chat template writes (DeepSeek-R1's "<｜User｜>" is not special);
    other added tokens (Gemma's runs of newlines) stay as they are. This is the set
    transformers' apply_chat_template(sanitize_control_tokens=True) protects. Text with no
    control token's string in it gets exactly the tokenizer's ids (and offsets).
    Called as the tokenizer is: plain(text, return_offsets_mapping=...) -> dict."""

    def __init__(self, tokenizer):
        template = str(getattr(tokenizer, "chat_template", None) or "")
        added = tokenizer.added_tokens_decoder.values()
        strings = sorted({t.content for t in added if (t.special or t.content in template) and not t.content.isspace()},
                         key=len, reverse=True)
        self.tokenizer = tokenizer
        self.strings = strings
        self.control = re.compile("|".join(map(re.escape, strings)) or "(?!)")  # (?!) matches nothing
        # built on the first text that needs it: copying a large vocabulary takes a while, and a
        # multi-turn rollout makes a PlainText every step though few texts ever hold a control token
        self.pipeline = None

    def split_pipeline(self):
        """A copy of the tokenizer's pipeline that leaves the control tokens (and only them) unmatched."""
        from tokenizers import Tokenizer

        spec = json.loads(self.tokenizer.backend_tokenizer.to_str())
        for token in spec["added_tokens"]:  # none removed: the copy numbers its added tokens anew
            token["special"] = token["content"] in self.strings
        spec["truncation"] = spec["padding"] = None
        pipeline = Tokenizer.from_str(json.dumps(spec))
        pipeline.encode_special_tokens = True  # special tokens are read as text
        return pipeline

    def __call__(self, text: str, add_special_tokens: bool = False, return_offsets_mapping: bool = False) -> dict:
        # add_special_tokens is taken as the tokenizer takes it, and ignored: the policy's text is
        # the middle or the end of a sequence, never given a BOS of its own
        if self.control.search(text) is None:  # nothing to read otherwise: the tokenizer's own ids, by construction
            encoded = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=return_offsets_mapping)
        elif getattr(self.tokenizer, "backend_tokenizer", None) is None:
            # a Python tokenizer: told to, it leaves every added token unmatched
            encoded = self.tokenizer(text, add_special_tokens=False, split_special_tokens=True,
                                     return_offsets_mapping=return_offsets_mapping)
        else:
            if self.pipeline is None:
                self.pipeline = self.split_pipeline()
            split = self.pipeline.encode(text, add_special_tokens=False)
            encoded = {"input_ids": split.ids, "offset_mapping": split.offsets}
        out = {"input_ids": list(encoded["input_ids"])}
        if return_offsets_mapping:
            out["offset_mapping"] = list(encoded["offset_mapping"])
        return out


def encode_quoting(tokenizer, plain: PlainText, before: str, text: str, after: str) -> list[int]:
    """Token ids of before + text + after (a rendered chat template around the policy's text),
    the template's control tokens read as tokens and `text` as ordinary text (PlainText).

    A tokenizer cuts its input at control tokens first and reads each stretch between two on
    its own; so the stretch holding `text` (from the last control token before it to the first
    after it) is read by `plain`, the rest as the tokenizer reads it. For a text with no control
    token's string in it this gives the ids of the whole string."""
    cuts = [match.end() for match in plain.control.finditer(before)]
    start = cuts[-1] if cuts else 0
    following = plain.control.search(after)
    end = following.start() if following else len(after)
    head = tokenizer(before[:start], add_special_tokens=False)["input_ids"] if start else []
    tail = tokenizer(after[end:], add_special_tokens=False)["input_ids"] if end < len(after) else []
    return list(head) + plain(before[start:] + text + after[:end])["input_ids"] + list(tail)


def hinted(sample: dict, hint: str) -> dict:
    """The sample asked with its answer shown: `hint` (a template with {prompt} and {answer}) around
    its question, or around a chat prompt's last user turn. Expert iteration's rationalisation
    (rft.hint) and ExPO's guidance (algorithm.guidance_hint) ask this way."""
    prompt = sample["prompt"]
    if isinstance(prompt, list):
        last = prompt[-1]
        shown = hint.format(prompt=last["content"], answer=sample.get("answer"))
        return {**sample, "prompt": [*prompt[:-1], {**last, "content": shown}]}
    return {**sample, "prompt": hint.format(prompt=prompt, answer=sample.get("answer"))}
