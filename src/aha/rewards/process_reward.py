"""A trained process reward model (method: prm) as a reward:
`reward: [{model: runs/prm, args: {aggregate: min}}]`.

A completion is split into steps at the separator the PRM was trained with (recorded in its
checkpoint's process_reward_model.json, with the chat template's system prompt and few-shot
turns); each non-blank step is scored at the token that closes it, exactly as in training
(models/process_reward.py: the same tokenisation of the whole completion + the stop token,
the completion read as ordinary text: a "<|im_end|>" the policy wrote is not a special token),
and the step probabilities, after args.transform (none; clip, delta, clip_delta: Gao et al.
2024; min_form: PURE's softmin weights; aha.algorithms.transform_step_rewards), are aggregated
into one reward: `min` (PURE, Cheng et al. 2025:
the worst step decides, so padding a solution with easy steps does not pay), `sum` (rewards
more steps, the form PURE shows being hacked) or `mean`; or `dense` keeps them apart
(StepScores: each step's value, paid at the token that closes the step to a token-level
advantage estimator, reinforce_pp or gae, or to grpo / rloo with algorithm.step_advantages;
their sum to a sequence-level one otherwise). Blank pieces (a doubled or trailing separator)
are not steps. A completion with no step at all (empty, or only blanks) scores 0,
the lowest step probability: it is an answer, just a worthless one, and a reward failure
could stop the run (train.max_reward_failure_rate). One whose steps exist but none closes
within the PRM's max_length scores None (failed: it could not be judged), as the rm reward
does for a prompt that fills max_length. Called from rewards/learned.py when the folder
holds a process_reward_model.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from aha.rewards.functions import RewardError, StepScores, batched
from aha.rewards.rubrics import split_steps

DESCRIPTION = "process_reward_model.json"  # training/supervised/prm.py writes it into every checkpoint
ARGS = {"batch_size": 16, "dtype": "auto", "device": "auto", "aggregate": "min", "transform": "none", "threshold": 0.5,
        "temperature": 0.1}


def model_reward_args(args: dict, defaults: dict, key: str, what: str) -> dict:
    """A model reward's `args` over its defaults; an unknown key or a batch size that is not a
    positive integer is an error naming the config key. Shared by rm and prm rewards."""
    unknown = sorted(set(args) - set(defaults))
    if unknown:
        raise RewardError(f"{key}.args: {what} takes {', '.join(defaults)}; unknown: {', '.join(unknown)}")
    merged = {**defaults, **args}
    if not isinstance(merged["batch_size"], int) or merged["batch_size"] < 1:
        raise RewardError(f"{key}.args.batch_size must be a positive integer, got {merged['batch_size']!r}")
    return merged


def _args(args: dict, key: str, dtype: str, device: str) -> dict:
    from aha.models.process_reward import AGGREGATES

    merged = model_reward_args(args, {**ARGS, "dtype": dtype, "device": device}, key, "a process reward model")
    if merged["aggregate"] not in (*AGGREGATES, "dense"):
        raise RewardError(f"{key}.args.aggregate must be one of {', '.join(AGGREGATES)}, dense; got "
                          f"{merged['aggregate']!r}")
    check_step_transform(merged, key)
    return merged


def check_step_transform(args: dict, key: str) -> None:
    """args.transform (none, clip, delta, clip_delta, min_form), args.threshold (clip's) and
    args.temperature (min_form's, > 0) of a step reward; a bad one is an error naming the key."""
    from aha.algorithms.step_rewards import STEP_TRANSFORMS

    if args["transform"] not in STEP_TRANSFORMS:
        raise RewardError(f"{key}.args.transform must be one of {', '.join(STEP_TRANSFORMS)}; got "
                          f"{args['transform']!r}")
    for name in ("threshold", "temperature"):
        if isinstance(args[name], bool) or not isinstance(args[name], (int, float)) or args[name] != args[name]:
            raise RewardError(f"{key}.args.{name} must be a number, got {args[name]!r}")
    if args["temperature"] <= 0:
        raise RewardError(f"{key}.args.temperature must be > 0 (min_form's softmin), got {args['temperature']!r}")


def transform_steps(scores: StepScores, transform: str, threshold: float = 0.5, temperature: float = 0.1) -> StepScores:
    """A step reward's values after a transform (aha.algorithms.transform_step_rewards: clip,
    delta, clip_delta, PURE's min_form), at the same ends: for a user's reward function that
    returns StepScores and wants what a PRM's args.transform does."""
    import torch

    from aha.algorithms.step_rewards import transform_step_rewards

    values = transform_step_rewards(torch.tensor(scores.values, dtype=torch.float64), transform, threshold,
                                    temperature)
    return StepScores(scores.ends, tuple(values.tolist()))


def compute_placement(args: dict, key: str):
    """args.device (auto: a GPU where torch sees one, else the CPU; cpu; cuda) and args.dtype
    (auto, float32 or bfloat16) as the torch device a reward model scores on and its compute
    dtype there. On GPUs, a learner rank's own (LOCAL_RANK), as its policy's."""
    import os

    from aha.models.compute import resolve_device, resolve_dtype

    try:
        device = resolve_device(args["device"], int(os.environ.get("LOCAL_RANK", "0")))
    except ValueError as err:
        raise RewardError(f"{key}.args.{err}") from None
    try:
        return device, resolve_dtype(args["dtype"], device)
    except KeyError:
        raise RewardError(f"{key}.args.dtype must be auto, float32 or bfloat16, got {args['dtype']!r}") from None


def process_reward(folder: Path, args: dict, key: str = "reward[0]", dtype: str = "auto",
                   device: str = "auto") -> Callable:
    """fn(completions, samples) -> list[float | None] scoring with the PRM checkpoint in `folder`."""
    import torch
    from torch import nn

    from aha.models import load
    from aha.models.checkpoints import load_weights
    from aha.models.compute import stop_token
    from aha.models.process_reward import ProcessRewardModel, aggregate, encode_steps
    from aha.prompts import PlainText, PromptStyle, encode_prompts

    args = _args(args, key, dtype, device)
    device, dtype = compute_placement(args, key)
    about = json.loads((Path(folder) / DESCRIPTION).read_text())
    loaded = load(str(folder))
    loaded.model.to(device)  # the head follows the body (ProcessRewardModel)
    head = nn.Linear(loaded.model.config.hidden_size, 1)
    load_weights(head, folder, "reward_head")
    tokenizer = loaded.tokenizer
    plain = PlainText(tokenizer)  # the policy's steps as ordinary text: no forged special token
    model = ProcessRewardModel(loaded.model, head, tokenizer.pad_token_id).eval().requires_grad_(False)
    task = PromptStyle(about.get("system_prompt"), about.get("few_shot") or [])
    stop, limit, separator = stop_token(tokenizer, loaded.model), about["max_length"], about["separator"]
    dense = args["aggregate"] == "dense"

    def score(completions: list[str], samples: list[dict]) -> list[float | None]:
        prompts = encode_prompts(tokenizer, task, samples)
        rows, scores, step_chars = {}, [None] * len(completions), {}
        for i, (prompt, completion) in enumerate(zip(prompts, completions)):
            pieces = completion.split(separator)
            ids, ends = encode_steps(plain, pieces, separator, stop)
            # each non-blank piece's closing token, and where it ends in the completion with its separator
            closing = [e for e, piece in zip(ends, pieces) if piece.strip()]
            steps = [(len(prompt) + e, closed) for e, (_, closed) in zip(closing, split_steps(completion, separator))]
            kept = [(e, c) for e, c in steps if e < limit]
            if not steps:
                scores[i] = StepScores((), ()) if dense else 0.0
            elif kept:
                # nothing after the last scored step is needed
                rows[i] = ((prompt + ids)[:kept[-1][0] + 1], [e for e, _ in kept])
                step_chars[i] = tuple(c for _, c in kept)
        order = sorted(rows, key=lambda i: len(rows[i][0]))  # batches of like lengths pad little
        with torch.no_grad():
            for start in range(0, len(order), args["batch_size"]):
                batch = order[start:start + args["batch_size"]]
                probs = torch.sigmoid(model([rows[i][0] for i in batch], [rows[i][1] for i in batch], dtype))
                for i, p in zip(batch, probs.split([len(rows[i][1]) for i in batch])):
                    steps = transform_steps(StepScores(step_chars[i], tuple(p.tolist())), args["transform"],
                                            args["threshold"], args["temperature"])
                    scores[i] = steps if dense else aggregate(list(steps.values), args["aggregate"])
        return scores

    score.aha_checkpoint = str(folder)  # which weights scored (eval.rank_by's cache of scores)
    return batched(score)
