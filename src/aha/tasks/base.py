"""The Task dataclass, building a task from config, and turning samples into prompt tokens."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from aha.config import TaskConfig


class TaskError(ValueError):
    """Bad task data or settings; the message names the file and line or the key."""


@dataclass
class Task:
    """train and eval are lists of samples: dicts with at least `id`, `prompt`, `answer`
    (extra fields are kept and passed to reward functions)."""

    name: str
    train: list[dict]
    eval: list[dict]
    system_prompt: str | None = None
    few_shot: list[dict] = field(default_factory=list)


BUILT_IN = ("arithmetic",)


def build_task(cfg: TaskConfig, base_dir: str | Path = ".") -> Task:
    if cfg.name in BUILT_IN and cfg.data is not None:
        raise TaskError(f"task: task.name {cfg.name!r} is a built-in task and task.data a JSONL task; set one of them "
                        "(with task.data, task.name only names your task: pick a name that is not a built-in's)")
    if cfg.data is not None:
        from aha.tasks.jsonl import load_jsonl

        if cfg.eval_data is None:
            raise TaskError("task.eval_data is required with task.data (held-out samples for eval)")
        base = Path(base_dir)
        train = load_jsonl(_resolve(cfg.data, base))
        held_out = load_jsonl(_resolve(cfg.eval_data, base))
        name = cfg.name or Path(cfg.data).stem
    elif cfg.name == "arithmetic":
        from aha.tasks.arithmetic import arithmetic_splits

        train, held_out = arithmetic_splits(cfg)
        name = "arithmetic"
    else:
        raise TaskError(f"task.name: unknown built-in task {cfg.name!r} (built-in: {', '.join(BUILT_IN)}); or set task.data")
    for i, shot in enumerate(cfg.few_shot):
        if set(shot) != {"prompt", "answer"}:
            raise TaskError(f"task.few_shot[{i}] must have exactly the keys prompt and answer, got {sorted(shot)}")
    return Task(name, train, held_out, cfg.system_prompt, list(cfg.few_shot))


def _resolve(path: str, base: Path) -> Path:
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    return base / p


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
        return f"{where}: the last message of a chat prompt must be the user's (the model answers it), got {prompt[-1]['role']!r}"
    return None


def prompt_text(prompt) -> str:
    """A prompt as one readable string (logs, reports, a judge's view of the question): a
    conversation becomes its turns, one 'role: content' per line."""
    if isinstance(prompt, list):
        return "\n".join(f"{m.get('role')}: {m.get('content')}" if isinstance(m, dict) else str(m) for m in prompt)
    return str(prompt)


def chat_messages(task: Task, sample: dict) -> list[dict]:
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


def encode_prompts(tokenizer, task: Task, samples: list[dict]) -> list[list[int]]:
    """Prompt token ids through the tokenizer's chat template (plain text where it has none),
    ready for generation. These ids travel with the rollout to the learner: nothing is
    re-tokenised later."""
    out = []
    templated = getattr(tokenizer, "chat_template", None) is not None
    for sample in samples:
        messages = chat_messages(task, sample)
        if templated:
            ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        else:
            ids = tokenizer(plain_text_prompt(messages))["input_ids"]
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        out.append(list(ids))
    return out
