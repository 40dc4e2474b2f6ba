"""Find the final answer in a completion.

A completion states an answer as a \\boxed{...} (or \\fbox{...}), an <answer>...</answer> span,
or an "Answer:" / "The answer is" / "Final answer:" line. The LAST one stated wins, whatever
its form, so a completion cannot score by mentioning the right value on the way (repeating an
operand, listing candidates, a box in the reasoning) and then concluding something else.

Text a reader does not see is removed first (`strip_hidden`): HTML comments, LaTeX % comments,
\\iffalse...\\fi blocks and fenced ``` code blocks, then phantoms, white text, comment
environments, hidden HTML and closed <details> (aha.rewards.visible), so an answer cannot hide
in them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from aha.rewards.visible import strip_invisible

# a number with its commas ("1,200", "1,2,3"); to_float reads it only when they separate thousands
NUMBER = r"-?\d+(?:,\d+)*(?:\.\d+)?"
_NUMBER = re.compile(NUMBER)
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")

_HTML_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_CODE_BLOCK = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_IFFALSE = re.compile(r"\\iffalse\b.*?(?:\\fi\b|\Z)", re.DOTALL)
# a LaTeX comment runs from an unescaped % to the end of the line when it hides something there;
# "12%", "12 %" and a % closing its line ("$28$ %.") are percent signs; punctuation right after
# the % does not make it one ("%, \boxed{42}" hides the box)
_LATEX_COMMENT = re.compile(r"(?<![\\\d])(?<!\d )%(?=[ \t.,;:!?]*+[^\s.,;:!?])[^\n]*")

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
# "answer:", "answer is", "answer =", "answer isn't"; the anchor ends where its content starts, so
# that "Final Answer: The final answer is 5" yields both anchors and the later one wins. Every run
# is possessive: the run after it starts with other characters, or nothing follows it
_ANSWER_ANCHOR = re.compile(r"\banswer\s*+(is\s*+n[o']t\b|is\b|:|=)\s*+:?[ \t]*+", re.IGNORECASE)
# an answer line's content is kept to this many characters (its sentence or clause ends well
# before): "answer: answer: ..." on one long line would otherwise hold the rest of the line once
# per anchor (quadratic in the contents' total length)
MAX_ANSWER_LINE = 500
# an answer line ends with its sentence or clause: "The answer is 12, because ..." is 12
_CLAUSE_WORDS = r"(?:then|because|since|so|which|where|when|if|but)\b"
_SENTENCE_END = re.compile(r"\.(?=\s|$)|\bI hope it is correct|,?\s+" + _CLAUSE_WORDS, re.IGNORECASE)
# the same, its whitespace run entered only at a comma or where the run starts: searched along a
# long run of spaces, ",?\s+" was tried from every space, each time to the run's end (quadratic)
_SENTENCE_END_AT_RUN = re.compile(r"\.(?=\s|$)|\bI hope it is correct|(?:,|(?<!\s))\s++" + _CLAUSE_WORDS,
                                  re.IGNORECASE)


def strip_hidden(text: str, keep_code: bool = False) -> str:
    """The completion without HTML comments, LaTeX % comments, \\iffalse...\\fi blocks and
    fenced code blocks (each unclosed one runs to the end of the text), then without what a
    reader is not shown (visible.strip_invisible: phantoms, white text, a comment environment,
    hidden HTML, the body of a closed <details>). Comments go first: LaTeX reads a brace after %
    as part of the comment. keep_code=True keeps code blocks (shown, just not an answer), for
    rewards that score all the text a reader sees (bleu, chrf, rouge_l)."""
    text = _HTML_COMMENT.sub("", text)
    if not keep_code:
        text = _CODE_BLOCK.sub("", text)
    text = _IFFALSE.sub("", text)
    return strip_invisible(_LATEX_COMMENT.sub("", text))


@dataclass(frozen=True)
class Stated:
    """One stated answer: its form ("boxed", "tag" or "line"), where it starts and ends in the
    text, and its content. `negated` marks "the answer is not X" / "the answer isn't X"; `closed`
    is False for a box or tag never closed (it runs to the end of the text)."""
    form: str
    start: int
    end: int
    text: str
    negated: bool = False
    closed: bool = True


def boxes(text: str) -> list[Stated]:
    """Every \\boxed{...} / \\fbox{...} in order, nested braces balanced. A box that is never
    closed runs to the end of the text."""
    found, pos = [], 0
    while (match := _BOX.search(text, pos)) is not None:
        depth, i = 1, match.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        content = text[match.end():i - 1] if depth == 0 else text[match.end():]
        found.append(Stated("boxed", match.start(), i, content.strip(), closed=depth == 0))
        pos = i
    return found


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}); None if there is none or it is never closed."""
    found = boxes(text)
    return found[-1].text if found and found[-1].closed else None


def tags(text: str, tag: str = "answer") -> list[Stated]:
    """Every <tag>...</tag> span in order; one never closed runs to the end of the text."""
    found = []
    for match in re.finditer(rf"<{tag}>(.*?)(</{tag}>|\Z)", text, flags=re.DOTALL):
        found.append(Stated("tag", match.start(), match.end(), match.group(1).strip(), closed=bool(match.group(2))))
    return found


# where a completion states how sure it is (rewards.shaping.stated_confidence): never its answer
CONFIDENCE_TAG = "confidence"


def without_tags(text: str, tag: str) -> str:
    """The text with every <tag>...</tag> span cut out (one never closed: to the end)."""
    kept, start = [], 0
    for span in tags(text, tag):
        kept.append(text[start:span.start])
        start = span.end
    return "".join(kept) + text[start:]


def answer_text(text: str) -> str:
    """What an answer is read from: the visible text (strip_hidden) without a stated confidence."""
    return without_tags(strip_hidden(text), CONFIDENCE_TAG)


def tagged(text: str, tag: str = "answer") -> str | None:
    """Content of the last closed <tag>...</tag> span."""
    # tags() reads an unclosed one to the end once; a search for "<tag>(.*?)</tag>" read to the
    # end from every unclosed <tag> (quadratic on "<tag><tag><tag>...")
    found = [s.text for s in tags(text, tag) if s.closed]
    return found[-1] if found else None


def answer_lines(text: str) -> list[Stated]:
    """Every "Answer:" / "answer is" / "answer =" anchor in order, with what follows it on its
    line up to the end of the sentence (". ", "I hope it is correct") or clause (", because", " then", ...),
    its first MAX_ANSWER_LINE characters."""
    found, stop, searched, ahead = [], -1, False, None
    for match in _ANSWER_ANCHOR.finditer(text):
        start = match.end()
        if start > stop:  # the first anchor of its line
            newline = text.find("\n", start)
            stop, searched = (newline if newline >= 0 else len(text)), False
        cut = _SENTENCE_END.match(text, start, stop)  # the sentence ends right where the content starts
        if cut is None:
            # else further on (where the run-entry form finds the same ends): one search serves
            # every anchor of the line before the end it found, so a line is searched once
            if not searched or (ahead is not None and ahead.start() <= start):
                ahead, searched = _SENTENCE_END_AT_RUN.search(text, start + 1, stop), True
            cut = ahead
        # markdown emphasis around it is no part of it: "**Answer:** 12", "The answer is **12**."
        content = text[start:min(cut.start() if cut else stop, start + MAX_ANSWER_LINE)].strip().strip("*_").strip()
        negated = len(match.group(1)) > 2 or re.match(r"(?:not|never)\b", content, re.IGNORECASE) is not None
        found.append(Stated("line", match.start(), stop, content, negated))
    return found


def answer_line(text: str) -> str | None:
    """What follows the last "Answer:" / "The answer is" / "Final answer:" on its line."""
    found = answer_lines(text)
    return (found[-1].text or None) if found else None


def stated_answers(text: str) -> list[Stated]:
    """All boxes, <answer> spans and answer lines of a (visible) text, ordered by where they start."""
    return sorted(boxes(text) + tags(text) + answer_lines(text), key=lambda s: s.start)


def last_number(text: str) -> str | None:
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def final_answer(text: str) -> str | None:
    """The completion's final answer as text: the content of the last stated box, <answer> span
    or answer line, after hidden text is removed. "" for an empty box (an empty answer, not
    a missing one); None if no answer is stated. A negated line ("the answer is not 5") is
    an empty answer."""
    found = stated_answers(answer_text(text))
    if not found:
        return None
    return "" if found[-1].negated else found[-1].text


# A unit closes an answer: after a number, a \\text{...} (\\mathrm, \\mbox) group, a degree sign, or a
# plain word of three letters or more (or a known short unit); an exponent may follow ("cm^2").
# Every run is possessive (what follows it starts with other characters), so the search is linear:
# "\s*\.?\s*$" split a trailing run of spaces every way at each start, quadratic.
_UNIT = re.compile(
    r"(?<=[\d}])(?:\s|~|\\[,;: !])*+"
    r"(?P<unit>\\(?:text|textrm|mathrm|mbox|rm)\s*+\{[^{}]*+\}|\^\s*+\{?\\circ\}?|°|(?<![\\A-Za-z])[A-Za-z]++)"
    r"(?P<power>\^\s*+\{?[23]\}?|[²³])?\s*+(?:\.\s*+)?$")
_SHORT_UNITS = {"m", "cm", "mm", "km", "g", "kg", "mg", "s", "ms", "h", "hr", "ft", "yd", "mi", "l", "ml", "lb", "oz"}
_NOT_UNITS = {"and", "or", "is", "are", "the", "percent", "percentage", "pct"}  # percent is not a unit here
_UNIT_NAMES = {"centimeter": "cm", "centimetre": "cm", "millimeter": "mm", "millimetre": "mm", "kilometer": "km",
               "kilometre": "km", "meter": "m", "metre": "m", "gram": "g", "kilogram": "kg", "second": "s",
               "sec": "s", "minute": "min", "hour": "h", "hr": "h", "degree": "deg", "°": "deg", "\\circ": "deg",
               "foot": "ft", "feet": "ft", "inch": "in", "mile": "mi", "liter": "l", "litre": "l",
               "pound": "lb", "dollar": "$", "cent": "¢"}


def _strip_delimiters(text: str) -> str:
    return re.sub(r"\\[()\[\]]|(?<!\\)\$", "", text).strip()


def _unit_match(text: str) -> re.Match | None:
    match = _UNIT.search(_strip_delimiters(text))
    if match is None:
        return None
    word = match.group("unit")
    if word[0].isalpha() and (word.lower() in _NOT_UNITS or (len(word) < 3 and word.lower() not in _SHORT_UNITS)):
        return None
    return match


def unit_of(text: str) -> str | None:
    """The unit an answer ends with, canonical: "12\\text{ km}" -> "km", "5 meters" -> "m",
    "90^\\circ" -> "deg"; None without one. Percent is not a unit here."""
    match = _unit_match(text)
    if match is None:
        return None
    word = re.sub(r"^\\[a-z]+\s*\{|\}$|\^|\{|\}|\s", "", match.group("unit")).lower()
    if word.endswith("s") and len(word) > 3:  # plural: inches, boxes, meters
        word = word[:-2] if re.search(r"(?:x|ch|sh|ss|z)es$", word) else word[:-1]
    word = _UNIT_NAMES.get(word, word)
    return word + re.sub(r"[^23²³]", "", match.group("power") or "").replace("²", "2").replace("³", "3")


def strip_unit(text: str) -> str:
    """The answer without the unit it ends with (as unit_of finds it)."""
    match = _unit_match(text)
    return _strip_delimiters(text)[:match.start()].strip() if match else text


def units_differ(predicted: str, reference: str) -> bool:
    """True when both answers state a unit and the units differ (no conversion: 120 mm is not 12 cm).
    A unit on one side only does not count against it."""
    a, b = unit_of(predicted), unit_of(reference)
    return a is not None and b is not None and a != b


def to_float(text: str | None) -> float | None:
    """The number a text is ("$1,200" -> 1200.0), else None. A comma only separates thousands:
    "1,2" and "1,2,3" are lists, not one number."""
    if text is None:
        return None
    text = text.replace("$", "").strip()
    if "," in text:
        if not _THOUSANDS.fullmatch(text):
            return None
        text = text.replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None
