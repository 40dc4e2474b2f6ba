"""What a reader of the last number or letter would take for an answer, and is none.

A completion that states no answer (no box, <answer> span or answer line) is read by its last
number (or, for multiple choice, its last choice letter). Two cases where that is no answer:

1. An explicit refusal to commit comes after it: "... so maybe 42. I can't determine the final
   answer." A refusal is first person, and either closes its clause ("I don't know.", "I'm not
   sure, ...", "I give up") or is about the answer ("I cannot give an answer", "I'm not sure of
   the result", "I don't know what the answer is"). Doubt about something else does not refuse:
   "x = 12. I'm not sure this is the simplest way." is 12; so is "I'm not sure, but it is 12"
   (the refusal comes before the number). An impersonal "cannot be determined" is not read as a
   refusal: it may be the answer itself (a choice "(E) cannot be determined").
2. It closes a long enumeration: the last number ends a run of 6 numbers or more, or of 3 or
   more with an ellipsis ("...", "…", \\dots) standing for the numbers left out, joined only by
   spaces, line breaks, commas, semicolons, "and" / "or" ("1, 2, 3, ..., 41, 42", "Candidates:
   40 41 42 43 ... 99"). Listing candidates is not answering; the price: a completion whose
   answer is the 6th number of a sequence it lists must state it ("the answer is 64").

And in any multiple-choice answer, a capital I followed by a contraction ("I'm", "I'd") or by a
word that follows the pronoun ("think", "believe", "guess", "am", "would", ...) is the pronoun,
not choice I: "The answer is B, I think." picks B; "The answer is B, I" still lists two choices.

Every regular expression here runs in linear time (possessive runs, bounded repeats)."""

from __future__ import annotations

import re

from aha.rewards.extract import NUMBER

# where a refusal stops being one: its clause ends, or it names the answer within four words
_ABOUT_THE_ANSWER = (r"(?=[ \t]*+(?:[.,;:!?)\n]|$)"
                     r"|(?:\s++[\w']++){0,4}?\s++(?:answers?|results?|solutions?)\b)")
_REFUSAL = re.compile(
    r"\bI\s++give\s++up\b|\bI\s++have\s++no\s++answer\b"
    r"|\bI\s++have\s++no\s++(?:idea|clue)" + _ABOUT_THE_ANSWER
    + r"|\bI(?:'m|\s++am)\s++(?:not\s++(?:sure|certain)|unsure|uncertain)" + _ABOUT_THE_ANSWER
    + r"|\bI\s++(?:don't|do\s++not|dont)\s++know" + _ABOUT_THE_ANSWER
    + r"|\bI(?:\s++(?:can't|cannot|can\s++not|couldn't|could\s++not|am\s++(?:not\s++able|unable)\s++to)"
      r"|'m\s++(?:not\s++able|unable)\s++to)\s++(?:determine|decide|tell|say|give|find|state|provide|commit"
      r"|be\s++sure|know|figure\s++out|solve|answer)\b" + _ABOUT_THE_ANSWER,
    re.IGNORECASE)
_NUMBER = re.compile(NUMBER)
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
# what may stand between two numbers of an enumeration; each alternative starts with its own characters
_LIST_GAP = re.compile(r"(?:[\s,;]|\.\.\.|…|\\[lc]?dots(?![A-Za-z])|and\b|or\b)*+")
_ELLIPSIS = re.compile(r"\.\.\.|…|\\[lc]?dots(?![A-Za-z])")
_LONG_RUN, _LONG_RUN_WITH_ELLIPSIS = 6, 3
_PRONOUN_I = re.compile(r"(?<![A-Za-z(])I(?=['\u2019](?:m|d|ll|ve)\b|\s++(?:am|was|think|believe|guess|suppose|reckon"
                        r"|bet|feel|hope|know|expect|assume|say|would|will|could|can|cannot|should|must|might|may"
                        r"|have|had|do|did|pick|chose|choose|select|go|went|get|got|see|found|find|need|want|agree"
                        r"|prefer|conclude|concluded|tried|checked|computed|used|thought|doubt|suspect|also|really"
                        r"|still|just)\b)")


def refuses(text: str) -> bool:
    """True if `text` (what follows a candidate answer) holds an explicit refusal to commit."""
    return _REFUSAL.search(text.replace("\u2019", "'")) is not None


def closes_enumeration(text: str) -> bool:
    """True if the last number of `text` ends a long enumeration (see the module's docstring)."""
    numbers = list(_NUMBER.finditer(text))
    count, ellipsis, i = 0, False, len(numbers) - 1
    while i >= 0:
        token = numbers[i].group()
        count += 1 if _THOUSANDS.fullmatch(token) else token.count(",") + 1  # "1,2,3" is three
        if i == 0:
            break
        gap = text[numbers[i - 1].end():numbers[i].start()]
        if not _LIST_GAP.fullmatch(gap):
            break
        ellipsis = ellipsis or _ELLIPSIS.search(gap) is not None
        i -= 1
    return count >= _LONG_RUN or (ellipsis and count >= _LONG_RUN_WITH_ELLIPSIS)


def unstated(text: str, enumeration: bool = True) -> bool:
    """True if the last number of a completion that states no answer is no answer: a refusal
    follows it, or (with `enumeration`) it closes a long enumeration."""
    last = None
    for last in _NUMBER.finditer(text):
        pass
    if last is None:
        return False
    return refuses(text[last.end():]) or (enumeration and closes_enumeration(text))


def without_pronoun_i(text: str) -> str:
    """The text with each pronoun I lower-cased, so that it is not read as choice I."""
    return _PRONOUN_I.sub("i", text)
