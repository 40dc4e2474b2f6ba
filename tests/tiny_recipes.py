"""A shipped recipe cut to two quick steps on the tiny model, for the tests that check each
recipe still loads and runs as written (its own keys kept, only the scale changed)."""

from pathlib import Path


def tiny_overrides(out: Path, *extra: str) -> list[str]:
    """The overrides that shrink a recipe: the tiny model, two steps of two prompts x four
    completions of six tokens, no checkpoint; extra: what this recipe needs besides."""
    return ["model=tiny", f"output_dir={out}", "train.steps=2", "train.checkpoint_every=0",
            "rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=6", *extra]
