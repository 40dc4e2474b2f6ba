"""Where a completion's reasoning ends, for VeriFree's likelihood reward (training/rl/likelihood.py):
the reference answer is put in place of the completion's own final answer, in the form the
completion itself chose, and the policy's probability of it there is the reward.

cut=answer: the reasoning is the completion up to where its final answer's content starts,
after the last opener of an answer (\\boxed{, <answer>, "The answer is", "Answer:") or, with
none, at its last number; what follows (its own answer and anything after it) is dropped. The
whitespace before the answer goes with the answer ("= 184" -> "=" then " 184"), as the model
would write it in one token. A completion with neither an opener nor a number is followed by
`no_answer` ("\\nThe answer is ") and the reference.
cut=end: the whole completion is the reasoning, followed by `no_answer` and the reference (a
policy that reasons and stops, leaving the answer to the reward).
`no_answer` is part of the context, not scored (only its trailing whitespace goes with the
answer), unless score_no_answer: then the reward is the probability of going on to write
no_answer and the reference, which pays a completion that leaves its answer out less (on the
demo task, without it the policy learned to state no product at all: docs/methods.md).
Nothing after the reference (a closing brace or tag) is scored."""

from __future__ import annotations

import re

from aha.rewards.extract import NUMBER

# an opener and the whitespace after it (which goes with the answer)
_OPENER = re.compile(r"(?:\\(?:boxed|fbox)\s*\{|<answer>|\banswer\s*+(?:is\b|:|=)\s*+:?)\s*+", re.IGNORECASE)
_NUMBER = re.compile(NUMBER)
CUTS = ("answer", "end")


def answer_start(text: str) -> int | None:
    """Where the final answer's content starts in text: after its last answer opener, else at
    its last number; None when it has neither."""
    openers = list(_OPENER.finditer(text))
    if openers:
        return openers[-1].end()
    numbers = list(_NUMBER.finditer(text))
    return numbers[-1].start() if numbers else None


def split_reasoning(completion: str, cut: str = "answer", no_answer: str = "\nThe answer is ",
                    score_no_answer: bool = False) -> tuple[str, str]:
    """(the reasoning: a prefix of the completion, the text that goes between it and the
    reference answer). score_no_answer: no_answer is that text, scored with the reference."""
    if cut not in CUTS:
        raise ValueError(f"cut must be one of {list(CUTS)}, got {cut!r}")
    start = answer_start(completion) if cut == "answer" else None
    if start is None and score_no_answer:
        return completion, no_answer
    if start is None:  # no_answer is read, not scored: it joins the reasoning, less its trailing whitespace
        completion, start = completion + no_answer, len(completion + no_answer)
    reasoning = completion[:start].rstrip()
    return reasoning, completion[len(reasoning):start]
