"""The distillation teacher (algorithm.teacher): found before the policy loads, loaded once on
its own (never a copy of the policy: its weights are the teacher's), frozen, and checked to
read the policy's tokens the way the policy does."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from aha.config import Config, ConfigError
from aha.models import load
from aha.models.errors import ModelNotFound
from aha.models.hub import SYNTAX, parse, snapshot
from aha.models.loading import EMBEDDED, LoadedModel

KEY = "algorithm.teacher"


def check_teacher_path(config: Config) -> None:
    """A teacher that is neither a built-in name, a folder nor a Hub model to be had fails here,
    before the policy's slow load (a Hub id is resolved, and downloaded when online, now)."""
    name = config.algorithm.teacher
    if name is None or name in (EMBEDDED, "tiny") or Path(name).expanduser().is_dir():
        return
    if parse(name) is None:
        raise ConfigError(f"{KEY}: {name!r} is neither a built-in model name ({EMBEDDED}, tiny), a folder (relative "
                          f"paths are to the working directory, {os.getcwd()}) nor a Hugging Face Hub id "
                          f"({SYNTAX}); a run's checkpoints/step-N folder is a teacher")
    try:
        snapshot(name)
    except ModelNotFound as err:
        raise ConfigError(f"{KEY}: {err}") from None


def load_teacher(config: Config) -> LoadedModel | None:
    """The teacher's model, frozen (no gradient, eval mode), and its tokenizer (for
    check_teacher); None without algorithm.teacher. A folder that does not load is an error
    naming the key."""
    name = config.algorithm.teacher
    if name is None:
        return None
    check_teacher_path(config)
    try:
        loaded = load(name, seed=config.seed)
    except ModelNotFound as err:
        raise ConfigError(f"{KEY}: {err}") from None
    loaded.model.requires_grad_(False).eval()
    return loaded


def check_teacher(teacher: LoadedModel, model: torch.nn.Module, tokenizer) -> None:
    """The teacher scores the policy's token ids as they are: its vocabulary must be the
    policy's (the same size of LM head, and the same token for every id), or its log-probs would
    be of other tokens, or out of range."""
    name = teacher.name
    theirs, ours = (m.get_output_embeddings().weight.shape[0] for m in (teacher.model, model))
    if theirs != ours:
        raise ConfigError(f"{KEY}: {name!r} has a vocabulary of {theirs} tokens, the policy {ours}: distillation "
                          "needs a teacher with the policy's tokenizer")
    theirs, ours = teacher.tokenizer.get_vocab(), tokenizer.get_vocab()
    if theirs != ours:
        differ = sorted(set(theirs.items()) ^ set(ours.items()), key=lambda item: item[1])[:3]
        raise ConfigError(f"{KEY}: {name!r} has another tokenizer than the policy (the same id names another token, "
                          f"e.g. {differ}): distillation needs a teacher with the policy's tokenizer")
