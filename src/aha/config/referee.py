"""The `referee` section (URPO: the policy is its own referee, trained in the same GRPO loop)
and its cross-checks, whose messages name the verifier and so are written here rather than in
checks.py's tables of fixed messages."""

from __future__ import annotations

from pydantic import Field, field_validator

from aha.config.live_reward import live_reward_problems
from aha.config.online_rm import verifier_problem
from aha.config.sections import Strict

TEMPLATE = "Question: {question}\nProposed answer: {completion}\nIs the proposed answer correct? Reply yes or no."
NAME = "referee"  # the reward component the referee's scores go by (reward/referee)


class RefereeConfig(Strict):
    """The policy as its own referee (URPO, method: rl): every completion also earns the live
    policy's P(yes) that it is correct (a reward component named referee), and the policy is
    trained in the same GRPO step to judge the step's answers as a rule verifier labels them.
    Off while verifier is unset."""

    verifier: str | None = Field(None, description="the rule verifier that labels the judged answers: the name of a "
                                                   "component of reward (weight 0 keeps it out of the total) or of "
                                                   "monitor.gold; setting it turns the referee on")
    threshold: float = Field(1.0, description="a verifier score >= this is right, below it wrong")
    weight: float = Field(1.0, description="the referee's score in the reward total: weight * P(yes) / (P(yes) + "
                                           "P(no)), added after reward's sums, products and gates")
    template: str = Field(TEMPLATE, description="the judge prompt, with {question} (the sample's prompt) and "
                                                "{completion}; asked through the task's chat template and system "
                                                "prompt")
    verdicts: list[str] = Field(["yes", "no"], description="the two replies, the one meaning right first; the reward "
                                "reads the first token of each in lower, Capitalised and UPPER case, a sampled verdict "
                                "is read by its first word, case ignored")
    prompts_per_step: int = Field(8, ge=0, description="judge prompts trained on a step, half the verifier's right "
                                  "answers and half its wrong ones (fewer when either side is short); 0: the referee "
                                  "rewards but never trains")
    max_new_tokens: int = Field(8, ge=1, description="tokens a sampled verdict may take (its first word is read)")

    @field_validator("verdicts", mode="before")
    @classmethod
    def _quoted(cls, verdicts):
        if isinstance(verdicts, list) and any(isinstance(v, bool) for v in verdicts):
            raise ValueError("YAML reads an unquoted yes / no as true / false: quote the verdicts, e.g. ['yes', 'no']")
        return verdicts

    @field_validator("verdicts")
    @classmethod
    def _two_words(cls, verdicts: list[str]) -> list[str]:
        words = [v.strip() for v in verdicts]
        if len(words) != 2 or not all(words) or words[0].lower() == words[1].lower() or \
                any(len(w.split()) != 1 for w in words):
            raise ValueError(f"two different one-word verdicts, the one meaning right first, e.g. ['yes', 'no']; "
                             f"got {verdicts}")
        return words


def referee_problems(config) -> list[str]:
    """Every rule of the referee section the config breaks (none while it is off)."""
    ref = config.referee
    if ref.verifier is None:
        return []
    problems = []
    if config.method != "rl":
        problems.append(f"referee.verifier trains the policy as a referee in its RL steps: method=rl only (method is "
                        f"{config.method})")
    if config.rollout.group_size < 2:
        problems.append("referee.verifier needs rollout.group_size >= 2: the referee's verdicts are trained as groups")
    if "{completion}" not in ref.template:
        problems.append("referee.template must hold {completion}: the answer the referee judges")
    problems += live_reward_problems(config, "referee.verifier", "the referee", NAME)
    problem = verifier_problem(config, ref.verifier, "referee.verifier")
    return problems + ([problem] if problem else [])
