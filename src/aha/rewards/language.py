"""Language consistency as a reward (GreenMind; DeepSeek-R1's language-consistency reward):
the share of the completion written in the expected script.

What is counted: the letters a reader sees (extract.strip_hidden removes comments, hidden
text and fenced code blocks), after inline code (`...`), math ($...$, $$...$$, \\(...\\),
\\[...\\]) and LaTeX commands (\\frac, \\text...) are removed too: code and formulas are no
language. Digits, punctuation, symbols and emoji are not letters and never count either way.
- unit: letters (default): the share of letters (Unicode category L*) whose script is one of
  the expected ones;
- unit: words: the share of words (maximal runs of letters) whose letters are all in the
  expected scripts (a run that mixes scripts counts as not in them).
A letter's script is read from its Unicode name (unicodedata.name: "CYRILLIC SMALL LETTER
A"), fullwidth and halfwidth forms as their script. The script is `script` (one name or a
list, see SCRIPTS) or `language` (an ISO 639-1 code, see LANGUAGES: Japanese is han, hiragana
and katakana). A completion with no letter to count scores `empty` (default 0.0: nothing
written in the language is no evidence of it)."""

from __future__ import annotations

import re
import unicodedata

from aha.rewards.extract import strip_hidden

# script -> the prefixes of the Unicode character names of its letters
SCRIPTS = {
    "latin": ("LATIN",),
    "cyrillic": ("CYRILLIC",),
    "greek": ("GREEK",),
    "arabic": ("ARABIC",),
    "hebrew": ("HEBREW",),
    "han": ("CJK UNIFIED IDEOGRAPH", "CJK COMPATIBILITY IDEOGRAPH"),
    "hiragana": ("HIRAGANA",),
    "katakana": ("KATAKANA",),
    "hangul": ("HANGUL",),
    "devanagari": ("DEVANAGARI",),
    "bengali": ("BENGALI",),
    "tamil": ("TAMIL",),
    "thai": ("THAI",),
    "georgian": ("GEORGIAN",),
    "armenian": ("ARMENIAN",),
}
LATIN = ("en", "fr", "de", "es", "it", "pt", "nl", "sv", "da", "no", "fi", "pl", "cs", "ro", "hu", "tr", "vi", "id",
         "ms")
LANGUAGES = {
    **{code: ("latin",) for code in LATIN},
    **{code: ("cyrillic",) for code in ("ru", "uk", "be", "bg", "sr", "mk", "kk")},
    "el": ("greek",), "he": ("hebrew",), "ar": ("arabic",), "fa": ("arabic",), "ur": ("arabic",),
    "zh": ("han",), "ja": ("han", "hiragana", "katakana"), "ko": ("hangul",),
    "hi": ("devanagari",), "mr": ("devanagari",), "ne": ("devanagari",), "bn": ("bengali",), "ta": ("tamil",),
    "th": ("thai",), "ka": ("georgian",), "hy": ("armenian",),
}
UNITS = ("letters", "words")
_NOT_LANGUAGE = re.compile(r"`[^`]*`|\$\$.*?\$\$|(?<!\\)\$[^$]*\$|\\\(.*?\\\)|\\\[.*?\\\]|\\[A-Za-z]+", re.DOTALL)
_WORD = re.compile(r"[^\W\d_]+")


def letter_script(char: str) -> str | None:
    """The script of a letter by its Unicode name ("ж" -> "cyrillic"), None for others."""
    name = unicodedata.name(char, "")
    for width in ("FULLWIDTH ", "HALFWIDTH "):
        name = name.removeprefix(width)
    return next((script for script, prefixes in SCRIPTS.items() if name.startswith(prefixes)), None)


def language_text(completion: str) -> str:
    """The completion as the reward reads it: visible, without code or math (module docstring)."""
    return _NOT_LANGUAGE.sub(" ", strip_hidden(completion))


def expected_scripts(script: str | list[str] | None, language: str | None) -> set[str]:
    """The scripts of `script` (a name or a list of names) or of `language`; exactly one is given."""
    if (script is None) == (language is None):
        raise ValueError("language_consistency needs exactly one of script (e.g. latin) and language (e.g. en)")
    if language is not None:
        if language.lower() not in LANGUAGES:
            raise ValueError(f"language {language!r} is not known; known: {', '.join(sorted(LANGUAGES))} (or give "
                             "script)")
        return set(LANGUAGES[language.lower()])
    names = [script] if isinstance(script, str) else list(script)
    unknown = [s for s in names if s.lower() not in SCRIPTS]
    if unknown or not names:
        raise ValueError(f"script {unknown or names} is not known; known: {', '.join(SCRIPTS)}")
    return {s.lower() for s in names}


def script_share(text: str, scripts: set[str], unit: str = "letters") -> tuple[int, int]:
    """(how many letters, or words, are in the scripts, how many there are) in text as given."""
    if unit == "letters":
        found = [letter_script(ch) for ch in text if unicodedata.category(ch).startswith("L")]
        return sum(s in scripts for s in found), len(found)
    words = _WORD.findall(text)
    return sum(all(letter_script(ch) in scripts for ch in word) for word in words), len(words)


def language_consistency(completion: str, sample: dict, script: str | list[str] | None = None,
                         language: str | None = None, unit: str = "letters", empty: float = 0.0) -> float:
    """The share of the completion's letters (or words) in the expected script, in [0, 1]."""
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {list(UNITS)}, got {unit!r}")
    inside, total = script_share(language_text(completion), expected_scripts(script, language), unit)
    return inside / total if total else float(empty)
