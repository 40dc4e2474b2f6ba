"""Rule-based verifiers: math (symbolic), numeric with tolerance, multiple choice, string
match, regex; and a format reward. Each is fn(completion, sample, **args) -> float in [0, 1];
sample["answer"] holds the reference. Keyword args come from the config (`reward[i].args`)."""

from __future__ import annotations

import math
import re
import string

from aha.rewards.extract import NUMBER, final_answer, last_boxed, last_number, to_float

_ENDS_WITH_NUMBER = re.compile(NUMBER + r"\s*\.?\s*$")


def extract_answer(completion: str) -> float | None:
    """The final answer as a number: the last \\boxed{...} if any, else the last number.

    Only the final answer counts, so a completion cannot score by mentioning the right
    number somewhere (e.g. by repeating an operand) and then concluding something else."""
    boxed = last_boxed(completion)
    if boxed is not None:
        return to_float(boxed)
    return to_float(last_number(completion))


def numeric_answer(completion: str, sample: dict, rel_tol: float = 1e-9, abs_tol: float = 1e-9) -> float:
    """1.0 if the final answer equals sample['answer'] numerically within the tolerances."""
    reference = to_float(str(sample["answer"]))
    if reference is None:
        raise ValueError(f"reference answer {sample['answer']!r} is not a number")
    predicted = extract_answer(completion)
    if predicted is None:
        return 0.0
    return 1.0 if math.isclose(predicted, reference, rel_tol=rel_tol, abs_tol=abs_tol) else 0.0


def _as_latex(text: str) -> str:
    """math-verify finds LaTeX in $...$ or \\boxed{}; a bare reference like 1/2 is wrapped."""
    return text if ("$" in text or "\\boxed" in text) else f"${text}$"


def math_answer(completion: str, sample: dict, timeout_seconds: int = 5) -> float:
    """1.0 if the completion's final answer is mathematically equal to sample['answer'], by
    the math-verify package: fractions, decimals, LaTeX, percentages, sets, intervals,
    symbolic expressions (1/2 = 0.5 = \\frac{2}{4}, x+1 = 1+x, (1,2] as an interval).

    Only the final answer is compared (last \\boxed{}, <answer>, "Answer:" line, else the
    last expression math-verify finds), so listing many candidate values earns nothing."""
    from math_verify import parse, verify

    gold = parse(_as_latex(str(sample["answer"])), parsing_timeout=timeout_seconds)
    if not any(not isinstance(g, str) for g in gold):  # only the raw text came back: not math
        raise ValueError(f"reference answer {sample['answer']!r} could not be parsed as math")
    span = final_answer(completion)
    # no explicit final answer: math-verify's own extraction takes the last expression
    text = _as_latex(span) if span is not None else completion.strip().rstrip(".")  # "... is 3/5." is 3/5
    predicted = parse(text, parsing_timeout=timeout_seconds)
    return 1.0 if predicted and verify(gold, predicted, timeout_seconds=timeout_seconds) else 0.0


_CHOICE = re.compile(r"(?<![A-Za-z])\(?([A-J])\)?(?![A-Za-z])")


def multiple_choice(completion: str, sample: dict, choices: str = "ABCDEFGHIJ") -> float:
    """1.0 if the chosen letter equals sample['answer'] (e.g. "B"): the letter in the final
    answer span, else the last standalone choice letter of the completion."""
    span = final_answer(completion)
    found = [c for c in _CHOICE.findall(span if span is not None else completion) if c in choices]
    if not found:
        return 0.0
    pick = found[0] if span is not None else found[-1]
    return 1.0 if pick == str(sample["answer"]).strip().strip("()").upper() else 0.0


def normalize_text(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (the SQuAD normalisation)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(completion: str, sample: dict, normalize: bool = True) -> float:
    """1.0 if the final answer span (else the whole completion) equals sample['answer'],
    or any of sample['answers'] when a list of accepted answers is given."""
    span = final_answer(completion)
    predicted = span if span is not None else completion
    accepted = sample.get("answers") or [sample["answer"]]
    canon = normalize_text if normalize else str.strip
    return 1.0 if any(canon(predicted) == canon(str(a)) for a in accepted) else 0.0


def regex_match(completion: str, sample: dict, pattern: str | None = None, full: bool = False) -> float:
    """1.0 if the completion matches a regular expression: `pattern` from the config, else
    sample['pattern']. full=True requires the whole (stripped) completion to match."""
    pattern = pattern if pattern is not None else sample.get("pattern")
    if pattern is None:
        raise ValueError("regex_match needs a pattern: set reward[i].args.pattern or a 'pattern' field in the sample")
    match = re.fullmatch(pattern, completion.strip(), flags=re.DOTALL) if full else re.search(pattern, completion)
    return 1.0 if match else 0.0


def format_reward(completion: str, sample: dict) -> float:
    """1.0 if the answer is given in the expected form: boxed, or a number closing the text."""
    text = completion.strip()
    return 1.0 if last_boxed(text) is not None or _ENDS_WITH_NUMBER.search(text) else 0.0
