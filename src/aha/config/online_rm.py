"""The cross-checks of a reward model that learns during RL (`reward[i].online`): its messages
name the component and the verifier, so they are written here rather than in checks.py's
tables of fixed messages."""

from __future__ import annotations

from aha.config.sections import component_name


def verifier_problem(config, verifier: str, key: str, learner=None) -> str | None:
    """`verifier` (the value of `key`) must name a rule that labels samples right or wrong: a
    component of reward other than `learner` (the reward model that learns from it), else one
    of monitor.gold. Serves reward[i].online.verifier and referee.verifier."""
    if learner is not None and verifier == component_name(learner):
        return f"{key} names the reward model that learns; name the rule verifier that labels its pairs"
    found = [s for s in config.reward if s is not learner and component_name(s) == verifier] or \
            [s for s in config.monitor.gold if component_name(s) == verifier]
    if not found:
        names = [component_name(s) for s in config.reward if s is not learner] + \
                [f"monitor.gold: {component_name(s)}" for s in config.monitor.gold]
        none = "are none besides the reward model" if learner is not None else "are none"
        return (f"{key}: no component of reward or monitor.gold is named {verifier!r} (there "
                f"{'are: ' + ', '.join(names) if names else none}); add the verifier "
                "to monitor.gold (never trained on) or to reward (weight 0 keeps it out of the total)")
    if found[0].model is not None:
        return f"{key}: {verifier!r} is a reward model; the verifier must be a rule (fn:), whose 'right' is trusted"
    return None


def online_problems(config) -> list[str]:
    """Every rule of reward[i].online the config breaks."""
    problems = [f"{where}[{i}].online: only a component of reward learns during RL; drop it here"
                for where, specs in (("monitor.gold", config.monitor.gold), ("eval.rank_by", config.eval.rank_by))
                for i, spec in enumerate(specs) if spec.online is not None]
    learning = [i for i, spec in enumerate(config.reward) if spec.online is not None]
    if not learning:
        return problems
    key = f"reward[{learning[0]}].online"
    if config.method != "rl":
        problems.append(f"{key} updates a reward model between RL steps: method=rl only (method is {config.method})")
    if len(learning) > 1:
        problems.append(f"{key} and reward[{learning[1]}].online: one reward model learns online in a run")
    if config.env.name is not None:
        problems.append(f"{key} is not supported with multi-turn episodes (env.name): an episode's reward is the "
                        "environment's")
    spec = config.reward[learning[0]]
    problem = verifier_problem(config, spec.online.verifier, f"{key}.verifier", learner=spec)
    return problems + ([problem] if problem else [])
