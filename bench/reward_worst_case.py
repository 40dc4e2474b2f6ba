"""Worst-case time of every text reward on adversarial completions (issue 29).

    .venv/bin/python bench/reward_worst_case.py                  # 4,096 tokens, fail above 1 s
    .venv/bin/python bench/reward_worst_case.py --limit 0.5 --only math_answer --show 3
    .venv/bin/python bench/reward_worst_case.py --chars-per-token 20    # longer whitespace runs

A reward runs in the trainer's own process (reward.workers: 0 by default, and no timeout
there), so one regular expression that backtracks quadratically stalls the whole run. Each
text reward reads completions built to make a backtracking matcher work: whitespace and digit
runs, nested braces and boxes, "%" before spaces, long choice lists, many "answer is" anchors,
deep JSON, huge numbers, many ``` fences, unclosed tags. The table gives each reward's worst
time (time.perf_counter, one call after a warm-up) and the input that took it; the exit status
is 1 if any call took longer than --limit seconds.

Length: a completion of --tokens tokens (4,096) is --chars-per-token (5) characters a token,
20,480 characters. English text is about 4 characters a token in the tokenizers aha loads, and
a run of digits is 1-3; only a whitespace run packs more (one token can hold many spaces), so
--chars-per-token 20 runs every input at 81,920 characters too: a linear reward takes 4 times
as long, a quadratic one 16 times.

Expression bombs (a 30-character power tower, a factorial chain, deep nesting) are short and
linear to read, but math-verify's LaTeX parser and sympy would take seconds on them (up to
math_answer's timeout_seconds, 5 s a call); math_answer refuses them before parsing or verifying
(aha.rewards.bounded: brackets nested deeper than 8, numbers of more than 100,000 digits). They
are timed in a second table, for math_answer, under the same --limit (--bombs-limit to change it).

A call is stopped after --cap seconds of CPU time (SIGVTALRM, a timer of its own: math-verify
keeps its parse timeout with SIGALRM) and counted as that long, so the old quadratic code
finishes too."""

from __future__ import annotations

import argparse
import fnmatch
import logging
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from aha.rewards import (  # noqa: E402 - the checkout's src first
    bleu,
    calibration_reward,
    chrf,
    countdown,
    exact_match,
    format_reward,
    json_format,
    length_limit,
    length_penalty,
    list_answer,
    math_answer,
    multiple_choice,
    numeric_answer,
    regex_match,
    rouge_l,
    target_length_bonus,
    think_answer_format,
    yes_no,
)
from aha.rewards.code import extract_code  # noqa: E402

REFERENCE = {"answer": "The quick brown fox jumps over the lazy dog."}
# each text reward (SHORT_NAMES, code_tests by its extraction) as fn(completion) with a sample
REWARDS = {
    "numeric_answer": lambda c: numeric_answer(c, {"answer": "5"}),
    "math_answer": lambda c: math_answer(c, {"answer": "5"}),
    "math_answer (fraction)": lambda c: math_answer(c, {"answer": "\\frac{1}{2}"}),
    "multiple_choice": lambda c: multiple_choice(c, {"answer": "B"}),
    "exact_match": lambda c: exact_match(c, {"answer": "Paris"}),
    "regex_match": lambda c: regex_match(c, {}, pattern=r"answer:\s*\d+"),
    "regex_match (user's bad pattern)": lambda c: regex_match(c, {}, pattern=r"(?:\s|\d)*\d\s*$"),
    "format": lambda c: format_reward(c, {}),
    "think_answer_format": lambda c: think_answer_format(c, {}),
    "json_format": lambda c: json_format(c, {"schema": {"type": "object"}}),
    "length_limit": lambda c: length_limit(c, {}, max_chars=30000, max_words=500),
    "bleu": lambda c: bleu(c, REFERENCE),
    "chrf": lambda c: chrf(c, REFERENCE),
    "rouge_l": lambda c: rouge_l(c, REFERENCE),
    "length_penalty": lambda c: length_penalty(c, {}, limit_words=500),
    "target_length_bonus": lambda c: target_length_bonus(c, {"answer": "5"}, target_words=500),
    "calibration": lambda c: calibration_reward(c, {"answer": "5"}),
    "countdown": lambda c: countdown(c, {"numbers": [2, 3, 5], "target": 11}),
    "yes_no": lambda c: yes_no(c, {"answer": "yes"}),
    "list_answer": lambda c: list_answer(c, {"answer": [1, 2, 3]}),
    "code_tests (extraction)": lambda c: extract_code(c, "solve"),
}


def fill(unit: str, n: int, before: str = "", after: str = "") -> str:
    """before + unit repeated + after, n characters in all (about)."""
    return before + unit * max(1, (n - len(before) - len(after)) // len(unit)) + after


def _split(first: str, middle: str, last: str, unit: str, n: int) -> str:
    """Two runs of `unit`, half the length each, around `middle`."""
    half = unit * (n // 2)
    return first + half + middle + half + last


# name -> fn(n) -> completion of about n characters
INPUTS = {
    "spaces": lambda n: fill(" ", n, after="x"),
    "1 then spaces": lambda n: fill(" ", n, "1", "x"),
    "1, spaces, '.', spaces": lambda n: _split("1", ".", "x", " ", n),
    "1 spaces $ spaces": lambda n: _split("\\boxed{1}", "$", "x", " ", n),
    "answer is 5 then spaces": lambda n: fill(" ", n, "The answer is 5", "x"),
    "answer: 5 then tabs": lambda n: fill("\t", n, "Answer: 5", "x"),
    "answer is 5, then ' then' runs": lambda n: fill(" ,", n, "The answer is 5", "x"),
    "answer is 5 then unit and spaces": lambda n: fill(" ", n, "The answer is 5 cm", "x"),
    "answer is 5 then letters": lambda n: fill("a", n, "The answer is 5 ", " b"),
    "answer: 5 then \\, runs": lambda n: fill("\\,", n, "Answer: 5", "x"),
    "newlines": lambda n: fill("\n", n, after="x"),
    "newlines in a code block": lambda n: fill("\n", n, "```python\n", "x"),
    "digits": lambda n: fill("1", n, after="x"),
    "digits then space": lambda n: fill("1", n, after=" x"),
    "digits and commas": lambda n: fill("1,", n, after="x"),
    "digits and dots": lambda n: fill("1.", n, after="x"),
    "digits and spaces": lambda n: fill("1 ", n, after="x"),
    "huge number boxed": lambda n: fill("9", n, "\\boxed{", "}"),
    "huge number stated": lambda n: fill("9", n, "The answer is "),
    "% then spaces": lambda n: fill(" ", n, "12 %", "x"),
    "% lines": lambda n: fill("%" + " " * 60 + ".\n", n),
    "% runs": lambda n: fill("%", n, after="x"),
    "box then spaces": lambda n: fill(" ", n, "\\boxed{5}", "x"),
    "many 'answer: '": lambda n: fill("answer: ", n),
    "many 'The answer is 5 '": lambda n: fill("The answer is 5 ", n),
    "many 'answer is' then clause": lambda n: fill("answer is 5 because ", n),
    "many 'final answer is'": lambda n: fill("final answer is ", n),
    "A A A ...": lambda n: fill("A ", n),
    "A then spaces": lambda n: fill(" ", n, "A", "1"),
    "(A) (B) ...": lambda n: fill("(A) (B) ", n, after="x"),
    "A or B or ...": lambda n: fill("A or B or ", n, after="1"),
    "A, B, ...": lambda n: fill("A, B, ", n, after="x"),
    "answer: A then spaces": lambda n: fill(" ", n, "Answer: A", "1"),
    "nested \\boxed{": lambda n: fill("\\boxed{", n),
    "\\boxed then braces": lambda n: fill("{", n, "\\boxed"),
    "many boxes": lambda n: fill("\\boxed{5}", n),
    "boxes joined by ', '": lambda n: fill("\\boxed{5}, ", n),
    "boxes and answer lines": lambda n: fill("answer: 5\n", n // 2) + fill("\\boxed{5} ", n // 2),
    "deep JSON arrays": lambda n: fill("[", n),
    "deep JSON objects": lambda n: fill('{"a":', n),
    "long JSON list": lambda n: fill("1,", n, "[", "1]"),
    "``` lines": lambda n: fill("```\n", n),
    "``` runs": lambda n: fill("```", n),
    "backticks then x": lambda n: fill("`", n, after="x "),
    "``` spaces x y": lambda n: fill(" ", n, "```", "x y"),
    "```json spaces": lambda n: fill(" ", n, "```json", "x"),
    "```python blocks": lambda n: fill("```python\ndef f(): pass\n```\n", n),
    "unclosed <answer>": lambda n: fill("<answer>", n),
    "unclosed <think>": lambda n: fill("<think>", n),
    "unclosed <confidence>": lambda n: fill("<confidence>", n),
    "<confidence> digits": lambda n: fill("1", n, "<confidence>", "x</confidence>"),
    "<confidence> spaces": lambda n: fill(" ", n, "<confidence>1", "x</confidence>"),
    "1+1+...": lambda n: fill("1+", n, after="1"),
    "((((1": lambda n: fill("(", n, after="1"),
    "1 x 1 x ...": lambda n: fill("1 x ", n, after="1"),
    "$ runs": lambda n: fill("$", n, after="1"),
    "$1$ $1$ ...": lambda n: fill("$1$ ", n),
    "\\( runs": lambda n: fill("\\(", n, after="1"),
    "<!-- runs": lambda n: fill("<!--", n),
    "\\iffalse runs": lambda n: fill("\\iffalse", n),
    "\\phantom{ runs": lambda n: fill("\\phantom{", n),
    "white <span> runs": lambda n: fill("<span style='color:white'>", n),
    "\\color{white} runs": lambda n: fill("{\\color{white} ", n),
    "<details> runs": lambda n: fill("<details>", n),
    "I don't know ...": lambda n: fill("I don't know ", n, "x = 12. "),
    "enumeration": lambda n: fill("1, ", n, after="42"),
    "yes no ...": lambda n: fill("yes no ", n),
    "sentences": lambda n: fill("The cat sat on the mat. ", n),
    "def lines": lambda n: fill("\n", n, "```python\n", "def solve(): pass\n```"),
}


# short answers that sympy would evaluate for seconds (math_answer refuses them: aha.rewards.bounded)
BOMBS = {
    "power tower 2^2^...^2": "The answer is \\boxed{" + "2^{" * 8 + "2" + "}" * 8 + "}",
    "factorial chain 9!!!!!!": "The answer is \\boxed{9!!!!!!}",
    "huge power 99999^99999999": "The answer is \\boxed{99999^{99999999}}",
    "nested fractions, 40 deep": "\\boxed{" + "\\frac{" * 40 + "1" + "}{2}" * 40 + "}",
    "nested parentheses, 30 deep": "\\boxed{" + "(" * 30 + "1" + ")" * 30 + "}",
    "e^e^e^e^100": "The answer is \\boxed{e^{e^{e^{e^{100}}}}}",
    "braces 16 deep": "\\boxed{" + "{" * 16 + "1" + "}" * 16 + "}",
    "an unclosed box of 490 braces": "\\boxed" + "{" * 491,
    "40 factorials, no brackets": "The answer is 42" + "!" * 40,
    "unbraced tower of 60": "\\boxed{" + "2^" * 60 + "2}",  # the most math-verify reads (bounded.MAX_MATH_CHARS)
}


class _OverCap(BaseException):
    """Raised by the CPU-time timer (a BaseException: math-verify catches every Exception)."""


def _stop(signum, frame):
    raise _OverCap()


def timed(fn, text: str, cap: float) -> tuple[float, str | None]:
    """(seconds one call took by perf_counter, or `cap` when it used more than cap seconds of CPU;
    the exception it raised, if any: a reward that raises on what a policy writes is a failure too)."""
    signal.setitimer(signal.ITIMER_VIRTUAL, cap)
    start = time.perf_counter()
    try:
        fn(text)
    except _OverCap:
        return cap, None
    except Exception as err:  # noqa: BLE001 - reported, the bench goes on
        return time.perf_counter() - start, f"{type(err).__name__}: {str(err)[:80]}"
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
    return time.perf_counter() - start, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--chars-per-token", type=float, default=5.0)
    parser.add_argument("--limit", type=float, default=1.0, help="seconds a call may take (exit 1 above)")
    parser.add_argument("--cap", type=float, default=30.0, help="CPU seconds after which a call is stopped")
    parser.add_argument("--only", action="append", default=[], help="fnmatch pattern over reward names")
    parser.add_argument("--show", type=int, default=1, help="slowest inputs listed per reward")
    parser.add_argument("--bombs-limit", type=float, default=None,
                        help="seconds an expression bomb may take in math_answer (default: --limit)")
    args = parser.parse_args(argv)
    n = int(args.tokens * args.chars_per_token)
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # it logs each timed-out text whole
    signal.signal(signal.SIGVTALRM, _stop)
    rewards = {k: v for k, v in REWARDS.items() if not args.only or any(fnmatch.fnmatch(k, p) for p in args.only)}
    print(f"{len(INPUTS)} inputs of about {n:,} characters ({args.tokens} tokens x {args.chars_per_token:g})")
    print(f"{'reward':34} {'worst s':>8}  input (slowest first)")
    worst_all, raised = 0.0, []
    for name, fn in rewards.items():
        fn("The answer is 5.")  # imports and caches out of the timing
        times = []
        for label, make in INPUTS.items():
            seconds, error = timed(fn, make(n), args.cap)
            times.append((seconds, label))
            raised += [f"{name} on {label!r}: {error}"] if error else []
        times.sort(reverse=True)
        worst_all = max(worst_all, times[0][0])
        flag = "  OVER" if times[0][0] > args.limit else ""
        shown = ", ".join(f"{label} ({t:.3f})" for t, label in times[:args.show])
        print(f"{name:34} {times[0][0]:8.3f}  {shown}{flag}", flush=True)
    print("\n".join(["raised:"] + raised) if raised else "no reward raised")
    print(f"worst {worst_all:.3f} s; limit {args.limit:g} s")
    bombs = _bombs(args.cap) if not args.only or any(fnmatch.fnmatch("math_answer", p) for p in args.only) else 0.0
    over_bombs = bombs > (args.limit if args.bombs_limit is None else args.bombs_limit)
    return 1 if worst_all > args.limit or raised or over_bombs else 0


def _bombs(cap: float) -> float:
    """Times math_answer on each expression bomb; the worst time."""
    print("\nexpression bombs, math_answer (refused before math-verify parses or verifies them)")
    worst = 0.0
    for label, text in BOMBS.items():
        seconds, error = timed(REWARDS["math_answer"], text, cap)
        worst = max(worst, seconds)
        print(f"  {label:34} {seconds:8.3f}{'  ' + error if error else ''}", flush=True)
    return worst


if __name__ == "__main__":
    sys.exit(main())
