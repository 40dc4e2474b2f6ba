"""Reward shaping terms that read the completion: length penalties, a target-length step
bonus, and a calibration reward for a stated confidence. Each is fn(completion, sample, **args)
-> float.

A length is best measured in what the policy generated: tokens. The composition gives each
completion's token count (completion_tokens) to the length rewards, whose *_tokens limits
read it; called without it, they estimate it from the text (estimate_tokens). A limit in
words still counts words, split at whitespace and at invisible characters too, so zero-width
characters between words cannot join them into one."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from aha.rewards.extract import CONFIDENCE_TAG, tagged, without_tags

# invisible characters that are neither whitespace nor a format character (Cf, found in each
# text): the combining grapheme joiner, Hangul fillers, Khmer inherent vowels, Mongolian and
# other variation selectors, the blank braille pattern
_INVISIBLE = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2800\u3164\ufe00-\ufe0f\uffa0"
                        "\U000e0100-\U000e01ef\U0001d159\U00016fe4]")
_SPACE = re.compile(r"\s+")
BYTES_PER_TOKEN = 4  # about what a BPE vocabulary gives English text


def count_words(text: str) -> int:
    """Words, split at whitespace and at every invisible character (zero-width spaces and
    joiners, U+2060, U+FEFF, bidi marks, control characters, unassigned and private-use code
    points, separators, ...): hiding the spaces between words joins none."""
    hidden = {ord(c): " " for c in set(text) if unicodedata.category(c)[0] in "CZ"}  # Cc Cf Cn Co Cs, Zs Zl Zp
    return len(_INVISIBLE.sub(" ", text.translate(hidden)).split())


def estimate_tokens(text: str) -> int:
    """About how many tokens text is, for a reward called without the count: its UTF-8 bytes
    outside whitespace, BYTES_PER_TOKEN to a token. Whatever is inserted, visible or not, adds
    bytes, and dropping the spaces between words saves none."""
    return -(-len(_SPACE.sub("", text).encode("utf-8")) // BYTES_PER_TOKEN)


def generated_tokens(completion: str, completion_tokens: int | None) -> int:
    """The tokens the policy generated for completion (the composition's count), else an estimate."""
    return estimate_tokens(completion) if completion_tokens is None else int(completion_tokens)


def _length(completion: str, completion_tokens: int | None, words: int | None, tokens: int | None,
            names: tuple[str, str]) -> tuple[int, int]:
    """(the completion's length, its limit): in tokens for a limit in tokens, else in words."""
    if (words is None) == (tokens is None):
        raise ValueError(f"give one of {names[0]} or {names[1]} (tokens: what the policy generated)")
    if tokens is not None:
        return generated_tokens(completion, completion_tokens), tokens
    return count_words(completion), words


def length_penalty(completion: str, sample: dict, limit_words: int | None = None, coef: float = 1.0,
                   limit_tokens: int | None = None, completion_tokens: int | None = None) -> float:
    """A fixed length cost: -coef * min(length / limit, 1), in [-coef, 0], with the length in
    tokens the policy generated (limit_tokens) or in words (limit_words). Add it with a
    positive weight next to the correctness reward."""
    length, limit = _length(completion, completion_tokens, limit_words, limit_tokens, ("limit_words", "limit_tokens"))
    if limit <= 0:
        raise ValueError(f"{'limit_words' if limit_tokens is None else 'limit_tokens'} must be positive, got {limit}")
    return -coef * min(length / limit, 1.0)


@lru_cache(maxsize=None)
def _verifier(name: str):
    from aha.rewards.functions import resolve_function

    return resolve_function(name, key="reward.args.verifier")


def _verify(completion: str, sample: dict, verifier: str) -> float:
    return float(_verifier(verifier)(completion, sample))


def target_length_bonus(completion: str, sample: dict, target_words: int | None = None, bonus: float = 0.5,
                        verifier: str = "math_answer", target_tokens: int | None = None,
                        completion_tokens: int | None = None) -> float:
    """LASER-style step reward (Liu et al. 2025, arXiv:2505.15612): correctness plus a bonus
    only for a correct answer within the target length (target_tokens the policy generated,
    or target_words), so shortening never pays for a wrong one.
    reward = c + bonus * c * [length <= target], c from the verifier."""
    length, target = _length(completion, completion_tokens, target_words, target_tokens,
                             ("target_words", "target_tokens"))
    correct = _verify(completion, sample, verifier)
    return correct + bonus * correct * float(length <= target)


# "0.8", ".8", "80", "80 %": a possessive run each, and the integer and decimal forms apart, so a
# long digit or space run is read once (\d*\.?\d+ and \s*(%?)\s* split a run in every way: quadratic)
_NUMBER = re.compile(r"\s*+(\d++(?:\.\d++)?|\.\d++)\s*+(%?)\s*+$")


def stated_confidence(completion: str, tag: str = CONFIDENCE_TAG) -> float | None:
    """The confidence in the last <confidence>...</confidence> span, as a probability:
    0.8, .8 or 80% -> 0.8. None when absent or outside [0, 1]."""
    span = tagged(completion, tag)
    match = _NUMBER.match(span) if span is not None else None
    if match is None:
        return None
    value = float(match.group(1)) / (100.0 if match.group(2) else 1.0)
    return value if 0.0 <= value <= 1.0 else None


def calibration_reward(completion: str, sample: dict, verifier: str = "math_answer", tag: str = CONFIDENCE_TAG) -> dict:
    """RLCR (Damani et al. 2025, arXiv:2507.16806): correctness plus a Brier score of the
    stated confidence q, reward = c - (q - c)^2. A missing or malformed confidence counts as
    q = 1 - c (the worst Brier score). Returns {correct, brier} so both are logged; their
    sum is the RLCR reward. The verifier reads the completion without its <tag> spans: a
    verifier that takes the last number would otherwise read the confidence as the answer."""
    correct = _verify(without_tags(completion, tag), sample, verifier)
    q = stated_confidence(completion, tag)
    if q is None:
        q = 1.0 - correct
    return {"correct": correct, "brier": -((q - correct) ** 2)}
