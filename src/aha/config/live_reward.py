"""The rules a reward read from the live policy during RL shares (the referee's verdicts, VeriFree's
likelihood): it is scored in this process's score phase with the weights that sampled, so
whatever samples ahead, scores elsewhere or scores without it cannot have it."""

from __future__ import annotations

from aha.config.sections import component_name


def live_reward_problems(config, key: str, label: str, name: str) -> list[str]:
    """The config's conflicts with a live-policy reward set by `key` (e.g. referee.verifier),
    called `label` in messages (e.g. "the referee"), whose scores go by component `name`."""
    problems = []
    if config.env.name is not None:
        problems.append(f"{key} is not supported with multi-turn episodes (env.name): an episode's reward is the "
                        "environment's")
    for setting in ("rollout.partial_rollouts", "rollout.max_staleness"):
        section, field = setting.split(".")
        if getattr(getattr(config, section), field):
            problems.append(f"{key} does not work with {setting} > 0: {label} reads the live weights, which must be "
                            "the ones that sampled; set it to 0")
    if config.algorithm.advantage == "remax":
        problems.append(f"{key} does not work with algorithm.advantage=remax: the greedy baseline is scored without "
                        f"{label}")
    if getattr(config.algorithm, "guidance", "none") != "none":
        problems.append(f"{key} does not work with algorithm.guidance: a guided retry is scored without {label}; set "
                        "one of them")
    if not config.reward and config.eval.scorer.split(".")[0] == "reward":
        problems.append(f"{key} with reward: [] ({label} is the only reward): eval.scorer {config.eval.scorer!r} "
                        "would score held-out answers by an empty reward; name a verifier (e.g. eval.scorer: "
                        "numeric_answer)")
    if any(component_name(s) == name for s in config.reward):
        problems.append(f"{key}: a reward component is already named {name!r}, the name of {label}'s scores; rename "
                        "it")
    return problems
