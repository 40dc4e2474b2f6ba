"""A trained reward model (method: rm) as a reward: `reward: [{model: runs/rm}]`.

The model is loaded once, when the reward is built, and scores completions in batches:
prompt and completion are tokenised as in its training (the prompt through the chat
template with the system prompt and few-shot turns it was trained with, recorded in the
checkpoint's reward_model.json; the completion as plain tokens + the stop token: read as
ordinary text, so a "<|im_end|>" the policy wrote is not the model's end of turn), and the
score is the heads' ensemble score read at the last token. It is a batched reward
(rewards/functions.py: batched), so clip_min/clip_max, weight and combine apply as to any
other, and `eval.rank_by` ranks samples by it.

Torch is imported only here, and this module only when a config names a reward model:
aha.config and the reward worker processes stay torch-free."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from aha.config.paths import resolve_path
from aha.rewards.functions import RewardError, batched
from aha.rewards.process_reward import DESCRIPTION as PRM_DESCRIPTION  # a method: prm run's checkpoints hold it
from aha.rewards.process_reward import compute_placement, model_reward_args

DESCRIPTION = "reward_model.json"  # written into every checkpoint of a method: rm run
# score, k None: as trained (reward_model.json)
ARGS = {"batch_size": 16, "dtype": "auto", "device": "auto", "score": None, "k": None}


def resolve_checkpoint(path: str, base_dir: str | Path = ".", key: str = "reward.model") -> Path:
    """A reward model checkpoint folder, or a run folder's newest checkpoint (as it is when
    the reward is built: a run that trains on is not followed), or a Hub id
    (`owner/name[@revision]`) of a checkpoint uploaded as a repository."""
    folder = resolve_path(path, base_dir)
    if not folder.is_dir():
        folder = _hub_snapshot(path, key) or folder
    if not folder.is_dir():
        raise RewardError(f"{key}: {path!r} is not a folder (a method: rm run folder or one of its checkpoints) nor a "
                          "Hugging Face Hub id of a checkpoint (owner/name[@revision])")
    described = lambda f: (f / DESCRIPTION).is_file() or (f / PRM_DESCRIPTION).is_file()
    if not described(folder) and (folder / "checkpoints").is_dir():
        from aha.models.checkpoints import list_checkpoints

        kept = list_checkpoints(folder / "checkpoints")
        if not kept:
            raise RewardError(f"{key}: run folder {folder} has no checkpoint yet")
        folder = kept[-1]
    if not described(folder):
        raise RewardError(f"{key}: {folder} holds no {DESCRIPTION}: not a reward model (train one with method: rm, "
                          f"or method: prm for a process reward model, which holds a {PRM_DESCRIPTION})")
    return folder


def _hub_snapshot(path: str, key: str) -> Path | None:
    """A checkpoint uploaded to the Hugging Face Hub: its snapshot in the Hub client's cache
    (downloaded when online) when path is a Hub id, else None."""
    from aha.models.errors import ModelNotFound
    from aha.models.hub import parse, snapshot

    if parse(path) is None:
        return None
    try:
        return snapshot(path)
    except ModelNotFound as err:
        raise RewardError(f"{key}: {err}") from None


@dataclass
class LearnedModel:
    """What a reward model's reward holds, for an RL run that keeps training it
    (`reward: [{model: ..., online: ...}]`, training/rl/online_rm.py): the module scoring, how a
    completion becomes the tokens it reads, and the compute dtype it scores in."""

    model: Any  # models.reward_model.RewardModel, frozen until the run unfreezes it
    encode: Callable[[list[str], list[dict]], list[list[int] | None]]
    dtype: Any


def learned_reward(path: str, args: dict, key: str = "reward[0]", base_dir: str | Path = ".",
                   dtype: str = "auto", device: str = "auto") -> Callable:
    """fn(completions, samples) -> list[float | None] scoring with the reward model at `path`; None
    (the sample fails) where the prompt alone fills the model's max_length. dtype, device: unless
    args.dtype or args.device say otherwise (the caller passes the policy's: train.dtype, device)."""
    import torch
    from torch import nn

    from aha.models import load
    from aha.models.checkpoints import load_weights
    from aha.models.compute import stop_token
    from aha.models.reward_model import SCORES, RewardModel, ensemble_score
    from aha.prompts import PlainText, PromptStyle, encode_prompts

    try:  # a process reward model scores step by step, with its own args
        prm = resolve_checkpoint(path, base_dir, f"{key}.model")
    except RewardError:
        prm = None  # reported below, after the args
    if prm is not None and (prm / PRM_DESCRIPTION).is_file():
        from aha.rewards.process_reward import process_reward

        return process_reward(prm, args, key, dtype, device)
    args = model_reward_args(args, {**ARGS, "dtype": dtype, "device": device}, key, "a reward model")
    folder = resolve_checkpoint(path, base_dir, f"{key}.model")
    about = json.loads((folder / DESCRIPTION).read_text())
    how, k = args["score"] or about["score"], args["k"] if args["k"] is not None else about["k"]
    if how not in SCORES:
        raise RewardError(f"{key}.args.score must be one of {', '.join(SCORES)}, got {how!r}")
    device, dtype = compute_placement(args, key)
    loaded = load(str(folder))
    loaded.model.to(device)  # the head follows the body (RewardModel)
    head = nn.Linear(loaded.model.config.hidden_size, about["heads"])
    load_weights(head, folder, "reward_head")
    tokenizer = loaded.tokenizer
    plain = PlainText(tokenizer)  # the policy's text as ordinary text: no forged special token
    model = RewardModel(loaded.model, head, tokenizer.pad_token_id).eval().requires_grad_(False)
    task = PromptStyle(about.get("system_prompt"), about.get("few_shot") or [])
    stop, max_length = stop_token(tokenizer, loaded.model), about["max_length"]

    def encode(completions: list[str], samples: list[dict]) -> list[list[int] | None]:
        """Prompt + completion + stop, cut at max_length; None where the prompt alone fills it."""
        prompts = encode_prompts(tokenizer, task, samples)
        return [(prompt + plain(completion)["input_ids"] + [stop])[:max_length] if len(prompt) < max_length else None
                for prompt, completion in zip(prompts, completions)]

    def score(completions: list[str], samples: list[dict]) -> list[float | None]:
        sequences = {i: ids for i, ids in enumerate(encode(completions, samples)) if ids is not None}
        scores: list[float | None] = [None] * len(completions)
        order = sorted(sequences, key=lambda i: len(sequences[i]))  # batches of like lengths pad little
        with torch.no_grad():
            for start in range(0, len(order), args["batch_size"]):
                rows = order[start:start + args["batch_size"]]
                values = ensemble_score(model([sequences[i] for i in rows], dtype), how, k)
                for i, value in zip(rows, values.tolist()):
                    scores[i] = value
        return scores

    score.aha_checkpoint = str(folder)  # which weights scored (eval.rank_by's cache of scores)
    score.aha_learned = LearnedModel(model, encode, dtype)  # for an RL run that trains it on (online:)
    return batched(score)
