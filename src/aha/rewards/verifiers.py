"""Rule-based verifiers: math (symbolic), numeric with tolerance, multiple choice, string
match; and a format reward (regex_match is in formats.py). Each is fn(completion, sample,
**args) -> float in [0, 1]; sample["answer"] holds the reference. Keyword args come from the
config (`reward[i].args`)."""

from __future__ import annotations

import math
import re
import string
from bisect import bisect_left
from functools import lru_cache

from aha.rewards.bounded import MAX_MATH_CHARS, MAX_MATH_DEPTH, bracket_depth, ends_with_number, math_tail, too_large
from aha.rewards.decimals import decimal_comma_reading, equal_when_rounded
from aha.rewards.extract import (
    NUMBER,
    Stated,
    answer_text,
    boxes,
    final_answer,
    last_boxed,
    last_number,
    stated_answers,
    strip_hidden,
    strip_unit,
    to_float,
    units_differ,
)
from aha.rewards.fallback import refuses, unstated, without_pronoun_i


def extract_answer(completion: str) -> float | None:
    """The final answer as a number: the last \\boxed{...} if any (an empty one is no answer),
    else the last number (with no answer stated, not one refused or closing a long list:
    aha.rewards.fallback); hidden text is removed first (extract.strip_hidden).

    Only the final answer counts, so a completion cannot score by mentioning the right
    number somewhere (e.g. by repeating an operand) and then concluding something else. A
    stated confidence (<confidence>0.8</confidence>) is no answer: it is cut out first."""
    completion = answer_text(completion)
    boxed = last_boxed(completion)
    if boxed is not None:
        return to_float(boxed)
    if not any(_holds_math(s.text) for s in stated_answers(completion)) and unstated(completion):
        return None
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


_MATH_DELIMITERS = re.compile(r"(?<!\\)\$|\\\(|\\\[|\\boxed|\\fbox")
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
_MATHY = re.compile(r"\d|[$\\^=+*/()\[\]{}<>-]|^\s*[A-Za-z]\s*$")
_PERCENT_AFTER = re.compile(r"\s*+(?:\$\s*+)?(?:\\?%|percent|pct)")  # "\s*\$?\s*" split a run every way
_BOX_GAP = 70  # math-verify joins boxes at most this far apart (with "and", "or", "," or ";" between)


def _as_latex(text: str) -> str:
    """math-verify finds LaTeX in $...$, \\(...\\), \\[...\\] or \\boxed{}; a bare answer like 1/2 is wrapped."""
    return text if _MATH_DELIMITERS.search(text) else f"${text}$"


@lru_cache(maxsize=1)
def _extraction():
    """math-verify's extraction targets as its own test helper sets them: LaTeX (boxes first) and
    plain expressions/numbers, with its default normalisation (units, \\text, \\!, thousands)."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig

    return (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())


def _parse(text: str, timeout: int, first_match: bool = False, answer: bool = True) -> list:
    from math_verify import parse

    if answer and bracket_depth(text) > MAX_MATH_DEPTH:  # math-verify's parser and sympy slow down fast
        return []
    return parse(text, list(_extraction()), parsing_timeout=timeout,
                 extraction_mode="first_match" if first_match else "any_match")


@lru_cache(maxsize=4096)
def _parse_reference(reference: str, timeout: int) -> tuple:
    """A reference is parsed once for all the completions of its group (sympy values are immutable).
    A bare decimal-comma reference ("1,22") is read both ways: the list {1, 22} and 1.22."""
    comma = decimal_comma_reading(reference)
    return tuple(_parse(_as_latex(reference), timeout, answer=False)
                 + (_parse(f"${comma}$", timeout, answer=False) if comma else []))


def _box_run(text: str, found: list[Stated]) -> str:
    """The last box with the boxes just before it (each within _BOX_GAP characters of the next,
    no blank line or "the answer is" between): math-verify reads them as one answer -- a set when
    they differ and are joined by "and", "or", "," or ";" or are under 10 characters apart --
    else the last box alone. The run reaches back at most MAX_MATH_CHARS (bounded.py)."""
    run = [b for b in found if b.form == "boxed"]
    others = [s.start for s in found if s.form != "boxed"]  # ascending, as found is
    first = len(run) - 1
    while first > 0:
        before, after = run[first - 1].end, run[first].start
        gap = text[before:after]
        between = bisect_left(others, before)  # the first other answer from `before` on
        if len(gap) >= _BOX_GAP or "\n\n" in gap or (between < len(others) and others[between] < after) \
                or run[-1].end - run[first - 1].start > MAX_MATH_CHARS:  # math-verify reads no more
            break
        first -= 1
    percent = "\\%" if _PERCENT_AFTER.match(text, run[-1].end) else ""  # \boxed{12}\% is 12%
    return text[run[first].start:run[-1].start] + "\\boxed{" + run[-1].text + percent + "}"


def _parse_span(span: str, timeout: int) -> list:
    """An <answer> span or answer line: as written when it holds LaTeX delimiters or prose (two
    words or more), else as one LaTeX expression ("12 or 13" is the set {12, 13}, not 13)."""
    words = [w for w in _WORD.findall(span) if w.lower() not in ("or", "and")]
    if _MATH_DELIMITERS.search(span) or len(words) >= 2:
        return _parse(span, timeout)
    return _parse(f"${strip_unit(span)}$", timeout, first_match=True)


_NEGATION_AFTER = re.compile(r"\b(?:not|never|wrong|incorrect)\b|n't\b", re.IGNORECASE)
_NEGATION_BEFORE = re.compile(r"(?:\bnot|n't|\bnever)[\s$(]*$", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n")


def _negated_fallback(text: str) -> bool:
    """Without a stated answer, "12 is not the answer" / "it's not 12" refuse the last number: a
    negation right before it, or after it in its own sentence ("x = 12. Note this does not depend
    on y." keeps it)."""
    numbers = list(re.finditer(NUMBER, text))
    if not numbers:
        return False
    last = numbers[-1]
    after = text[last.end():]
    end = _SENTENCE_END.search(after)
    return bool(_NEGATION_AFTER.search(after[:end.start()] if end else after)
                or _NEGATION_BEFORE.search(text[:last.start()]))


def _holds_math(span: str) -> bool:
    """An answer line states an answer when it holds some math (a digit, an operator, a LaTeX
    command, a lone letter), a leading "not" aside: "the answer is not obvious" states none."""
    return _MATHY.search(re.sub(r"^\s*(?:not|never)\b", "", span, flags=re.IGNORECASE)) is not None


def _is_text(reference: str, gold: list) -> bool:
    """A reference is text when math-verify keeps only its text, or when it holds no math (a word:
    "gif", "Paris", "yes", which math-verify reads as a product of letters, so gif = fig) and is
    not a constant math-verify knows ("infinity")."""
    values = [g for g in gold if not isinstance(g, str)]
    return not values or (not _holds_math(reference) and any(getattr(v, "free_symbols", None) for v in values))


def _percent_as_value(parsed: list, gold: list) -> list:
    """math-verify takes 12% for 12; aha does only when the reference is itself a percentage, so a
    prediction of 12% against a plain 12 compares as 0.12 (and 12% still equals 0.12). The text
    math-verify keeps beside a percentage ("12") is dropped with it."""
    from math_verify.grader import get_pct_val
    from sympy import Rational

    if any(get_pct_val(g) is not None for g in gold if not isinstance(g, str)) \
            or all(isinstance(p, str) or get_pct_val(p) is None for p in parsed):
        return parsed
    return [p if get_pct_val(p) is None else get_pct_val(p) * Rational(1, 100)
            for p in parsed if not isinstance(p, str)]


def _plain_text(text: str) -> str:
    """A text answer without $ and \\( \\) \\[ \\] delimiters, \\text{} wrappers, spacing (\\, \\quad) and case."""
    text = re.sub(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}", r"\1", text)
    text = re.sub(r"\\[()\[\] ,;:!]|\\q?quad\b|(?<!\\)\$", "", text)
    return "".join(text.split()).lower().rstrip(".")


def math_answer(completion: str, sample: dict, timeout_seconds: int = 5) -> float:
    """1.0 if the completion's final answer is mathematically equal to sample['answer'], by
    the math-verify package: fractions, decimals, LaTeX, percentages, sets, intervals,
    symbolic expressions (1/2 = 0.5 = \\frac{2}{4}, x+1 = 1+x, (1,2] as an interval).

    Which answer counts (docs/rewards.md has the full rules): hidden text (comments, code
    blocks, phantoms, white text, hidden HTML) is removed; the LAST stated answer wins -- a \\boxed{}
    run, an <answer> span or an "Answer:" line -- else math-verify's own extraction of the last
    expression, unless a refusal follows it or it closes a long list (fallback.py). An empty box,
    an empty span or "the answer is not X" scores 0 with no fall back. Boxes side by side are
    one answer, a set. Units stated on both sides must agree; a percentage equals a plain number
    only when the reference is a percentage. A reference that is not math (math-verify keeps only
    its text, or a word such as "Paris") is compared as text."""
    from math_verify import verify

    reference = str(sample["answer"])
    gold = list(_parse_reference(reference, timeout_seconds))
    gold_is_text = _is_text(reference, gold)
    if gold_is_text and not _plain_text(reference):
        raise ValueError(f"reference answer {reference!r} could not be parsed as math")
    text = strip_hidden(completion)
    # "the answer is correct" / "the answer is not obvious" state no answer: a line counts when it
    # holds math (or the reference is text)
    found = [s for s in stated_answers(text) if s.form != "line" or gold_is_text or _holds_math(s.text)]
    if found and (found[-1].negated or not found[-1].text):
        return 0.0
    if gold_is_text:  # the stated answer, else the last line, as text
        span = found[-1].text if found else (text.strip().splitlines() or [""])[-1]
        return 1.0 if _plain_text(span) == _plain_text(reference) else 0.0
    if found:
        last = found[-1]
        span = last.text
        if len(span) > MAX_MATH_CHARS:  # no final answer is that long; math-verify is not given it
            return 0.0
        predicted = _parse(_box_run(text, found), timeout_seconds, first_match=True) if last.form == "boxed" \
            else _parse_span(span, timeout_seconds)
    else:
        single = to_float(reference) is not None or "," not in reference  # a list may answer a list reference
        if _negated_fallback(text) or unstated(text, enumeration=single):
            return 0.0
        span = text.strip().splitlines()[-1] if text.strip() else ""
        predicted = _parse(math_tail(text.strip().rstrip(".")), timeout_seconds)  # "... is 3/5." is 3/5
    if not predicted or too_large(predicted) or units_differ(span, _gold_span(reference)):
        return 0.0
    predicted = _percent_as_value(predicted, gold)
    equal = verify(gold, predicted, timeout_seconds=timeout_seconds) \
        or equal_when_rounded(gold, predicted, timeout_seconds)
    return 1.0 if equal else 0.0


def _gold_span(reference: str) -> str:
    """Where a reference states its unit: its last box when it has one (a worked solution), else all of it."""
    found = boxes(reference)
    return found[-1].text if found else reference


_CHOICE = re.compile(r"(?<![A-Za-z])\(?([A-J])\)?(?![A-Za-z])")


# two or more choice letters joined only by separators: "A or B", "A B C D", "(A), (C)", "A/B"
# (each run possessive: "\s*(?:,|or)?\s*" split a run of spaces every way, quadratic)
_CHOICE_LIST = re.compile(r"(?<![A-Za-z])\(?[A-J]\)?"
                          r"(?:\s*+(?:(?:,|/|;|&|\bor\b|\band\b)\s*+)?\(?[A-J]\)?(?![A-Za-z]))+")
_SENTENCE_END = re.compile(r"(?<=[.?!])\s+|\n")


def _hedges(text: str, choices: str) -> bool:
    """True if `text` lists several different choices as its answer ("A or B", "A B C D")."""
    return any(len({c for c in _CHOICE.findall(run.group()) if c in choices}) > 1
               for run in _CHOICE_LIST.finditer(text))


def multiple_choice(completion: str, sample: dict, choices: str = "ABCDEFGHIJ") -> float:
    """1.0 if the chosen letter equals sample['answer'] (e.g. "B"): the first letter in the
    final answer span, else the last standalone choice letter of the completion. Where the
    pick is read from (the span, else the last sentence with a letter) must not list several
    choices: "A or B" and "A B C D" are hedges and score 0, whichever letter is right. Only
    visible text counts (extract.strip_hidden); an I followed by "think", "'m", ... is the
    pronoun ("B, I think" picks B); with no answer stated, a refusal after the last letter
    ("Maybe B. I don't know.") picks nothing."""
    text = without_pronoun_i(strip_hidden(completion))
    span = final_answer(text)
    region = span
    if span is None:
        sentences = [t for t in _SENTENCE_END.split(text) if any(c in choices for c in _CHOICE.findall(t))]
        region = sentences[-1] if sentences else ""
    found = [c for c in _CHOICE.findall(region) if c in choices]
    if not found or _hedges(region, choices):
        return 0.0
    if span is None and refuses(text[[m for m in _CHOICE.finditer(text) if m.group(1) in choices][-1].end():]):
        return 0.0
    pick = found[0] if span is not None else found[-1]
    return 1.0 if pick == str(sample["answer"]).strip().strip("()").upper() else 0.0


def normalize_text(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (the SQuAD normalisation)."""
    text = text.lower()
    text = text.translate(str.maketrans("", "", string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(completion: str, sample: dict, normalize: bool = True) -> float:
    """1.0 if the final answer span (else the whole visible completion, extract.strip_hidden)
    equals sample['answer'], or any of sample['answers'] when a list of accepted answers is given."""
    span = final_answer(completion)
    predicted = span if span is not None else strip_hidden(completion)
    accepted = sample.get("answers") or [sample["answer"]]
    canon = normalize_text if normalize else str.strip
    return 1.0 if any(canon(predicted) == canon(str(a)) for a in accepted) else 0.0


def format_reward(completion: str, sample: dict) -> float:
    """1.0 if the answer is given in the expected form: boxed, or a number closing the text."""
    text = completion.strip()
    return 1.0 if last_boxed(text) is not None or ends_with_number(text) else 0.0
