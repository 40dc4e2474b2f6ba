"""A static check of regular expressions for the shapes that make Python's backtracking re
super-linear (tests/test_regex_linear.py runs it over every pattern of the text rewards).

A pattern is read with re's own parser (re._parser) and three shapes are reported:

- "empty body": a backtracking run (*, +, {n,}) whose body can match nothing;
- "shared run": a backtracking run that what follows can make give characters back, followed --
  through items that can match nothing, or by its own next iteration -- by another run that can
  start with the characters it ends with ("\\s*\\.?\\s*$", "(a+)+b", "\\d*\\.?\\d+", "(a|aa)+$"):
  the two split a long run in every way, quadratic or worse;
- "re-entered run" (searched patterns only): a run the match can still fail after, where a
  search that starts again inside the run can scan it again ("\\d+...$", "[ \\d]*\\d" along a run
  of spaces, "<a>(.*?)</a>" from every unclosed <a>): each start rescans the run.

Possessive runs (*+, ++) and atomic groups never give characters back, so they are no "shared
run". A restart inside a run is cheap when it needs a character outside the run before a run of
its own can scan (a lookbehind such as (?<!\\s) or (?<=[\\d}]), ^ or \\A, a first character or a
run of one or more outside the run), and any run it meets first avoids the character each
restart starts at, so two restarts never read the same text. Character sets are compared on a
probe alphabet (ASCII and a few others). The check is conservative: what it flags and is linear
anyway is listed, with the reason, in tests/test_regex_linear.py."""

from __future__ import annotations

import re
import re._constants as C
import re._parser as P

PROBE = frozenset(chr(i) for i in range(128)) | frozenset("\u00a0é°²…\u2028\u3000—")
BACKTRACKING = (C.MAX_REPEAT, C.MIN_REPEAT)
REPEATS = BACKTRACKING + (C.POSSESSIVE_REPEAT,)
_CATEGORIES = {C.CATEGORY_DIGIT: r"\d", C.CATEGORY_NOT_DIGIT: r"\D", C.CATEGORY_SPACE: r"\s",
               C.CATEGORY_NOT_SPACE: r"\S", C.CATEGORY_WORD: r"\w", C.CATEGORY_NOT_WORD: r"\W"}


def _cased(chars: set, flags: int) -> set:
    return chars | {c.swapcase() for c in chars} if flags & re.IGNORECASE else chars


def _in_set(items, ch: str, flags: int) -> bool:
    """Whether `ch` is in a parsed [...] set."""
    hit, negate = False, False
    for op, av in items:
        if op is C.NEGATE:
            negate = True
        elif op is C.LITERAL:
            hit |= ch in _cased({chr(av)}, flags)
        elif op is C.RANGE:
            hit |= any(av[0] <= ord(c) <= av[1] for c in _cased({ch}, flags))
        elif op is C.CATEGORY:
            hit |= re.match(_CATEGORIES[av], ch) is not None
    return hit != negate


def chars(items, flags: int) -> frozenset:
    """The probe characters a parsed sequence can consume anywhere in it."""
    out = set()
    for op, av in items:
        if op is C.LITERAL:
            out |= _cased({chr(av)}, flags)
        elif op is C.NOT_LITERAL:
            out |= PROBE - _cased({chr(av)}, flags)
        elif op is C.ANY:
            out |= PROBE if flags & re.DOTALL else PROBE - {"\n"}
        elif op is C.IN:
            out |= {ch for ch in PROBE if _in_set(av, ch, flags)}
        elif op in REPEATS:
            out |= chars(av[2], flags)
        elif op is C.SUBPATTERN:
            out |= chars(av[3], (flags | av[1]) & ~av[2])
        elif op is C.ATOMIC_GROUP:
            out |= chars(av, flags)
        elif op is C.BRANCH:
            out |= set().union(*(chars(b, flags) for b in av[1]))
        elif op in (C.GROUPREF, C.GROUPREF_EXISTS):
            out |= PROBE
    return frozenset(out)


def nullable(items) -> bool:
    """Whether a parsed sequence can match the empty string."""
    def one(op, av) -> bool:
        if op in REPEATS:
            return av[0] == 0 or nullable(av[2])
        if op is C.SUBPATTERN:
            return nullable(av[3])
        if op is C.ATOMIC_GROUP:
            return nullable(av)
        if op is C.BRANCH:
            return any(nullable(b) for b in av[1])
        return op in (C.ASSERT, C.ASSERT_NOT, C.AT)
    return all(one(op, av) for op, av in items)


def cannot_fail(items) -> bool:
    """Whether a parsed sequence always matches (every item optional): what follows a run then
    never makes the run give characters back."""
    def one(op, av) -> bool:
        if op in REPEATS:
            return av[0] == 0
        if op is C.SUBPATTERN:
            return cannot_fail(av[3])
        if op is C.ATOMIC_GROUP:
            return cannot_fail(av)
        return op is C.BRANCH and any(cannot_fail(b) for b in av[1])
    return all(one(op, av) for op, av in items)


def edge_chars(items, flags: int, last: bool = False) -> frozenset:
    """The characters a parsed sequence can consume first (last=True: last)."""
    out = set()
    for op, av in (reversed(list(items)) if last else items):
        if op in REPEATS:
            out |= edge_chars(av[2], flags, last)
        elif op is C.SUBPATTERN:
            out |= edge_chars(av[3], (flags | av[1]) & ~av[2], last)
        elif op is C.ATOMIC_GROUP:
            out |= edge_chars(av, flags, last)
        elif op is C.BRANCH:
            out |= set().union(*(edge_chars(b, flags, last) for b in av[1]))
        elif op not in (C.ASSERT, C.ASSERT_NOT, C.AT):
            out |= chars([(op, av)], flags)
        if not nullable([(op, av)]):
            break
    return frozenset(out)


def leading_runs(items) -> list:
    """The unbounded runs that can consume the first characters of a parsed sequence."""
    found = []
    for op, av in items:
        if op in REPEATS:
            found += ([(op, av)] if av[1] == C.MAXREPEAT else []) + leading_runs(av[2])
        elif op is C.SUBPATTERN:
            found += leading_runs(av[3])
        elif op is C.ATOMIC_GROUP:
            found += leading_runs(av)
        elif op is C.BRANCH:
            found += [run for b in av[1] for run in leading_runs(b)]
        if not nullable([(op, av)]):
            break
    return found


def _variable_width(run) -> bool:
    """Whether a run's body can match strings of different lengths."""
    low, high = run[1][2].getwidth()
    return low != high


def all_runs(items) -> list:
    """Every unbounded run of a parsed sequence, nested ones too."""
    found = []
    for op, av in items:
        if op in REPEATS:
            found += ([(op, av)] if av[1] == C.MAXREPEAT else []) + all_runs(av[2])
        elif op is C.SUBPATTERN:
            found += all_runs(av[3])
        elif op is C.ATOMIC_GROUP:
            found += all_runs(av)
        elif op is C.BRANCH:
            found += [run for b in av[1] for run in all_runs(b)]
        elif op in (C.ASSERT, C.ASSERT_NOT):
            found += all_runs(av[1])
    return found


def _restart_is_cheap(items, run_chars: frozenset, flags: int, entry: frozenset | None = None) -> bool:
    """Whether a search that starts again inside a run over `run_chars` (that character and the one
    before it both in the run) is cheap there. It is when the attempt needs a character outside
    the run before any run of its own scans the text (a lookbehind or ^ / \\A that rejects the
    position, a character or a run of at least one character outside the run): then it fails at
    once, or only near the run's end. Runs it reaches before that must avoid `entry`, the
    character every restart starts at (or follows): then two restarts never scan the same text."""
    for i, (op, av) in enumerate(items):
        rest = list(items[i + 1:])
        if op is C.ASSERT_NOT and av[0] == -1 and run_chars <= chars(av[1], flags):
            return True  # (?<![...]) rejects a position preceded by the run
        if op is C.ASSERT and av[0] == -1:
            if not run_chars & chars(av[1], flags):
                return True  # (?<=[...]) accepts no position preceded by the run
            entry = entry or chars(av[1], flags)
        elif op is C.AT and (av is C.AT_BEGINNING_STRING or av is C.AT_BEGINNING and not flags & re.MULTILINE):
            return True
        elif op is C.AT and av is C.AT_BEGINNING:  # ^ in MULTILINE: after a line break
            if "\n" not in run_chars:
                return True
            entry = entry or frozenset("\n")
        elif op is C.SUBPATTERN:
            return _restart_is_cheap(list(av[3]) + rest, run_chars, flags, entry)
        elif op is C.BRANCH:
            return all(_restart_is_cheap(list(b) + rest, run_chars, flags, entry) for b in av[1])
        elif op in REPEATS and av[0] == 0:  # skipped, or entered
            return _restart_is_cheap(rest, run_chars, flags, entry) \
                and _restart_is_cheap([(op, (1,) + tuple(av[1:]))] + rest, run_chars, flags, entry)
        elif op in REPEATS and av[1] == C.MAXREPEAT:
            own = chars([(op, av)], flags)
            if not own & run_chars:
                return True  # it needs a character outside the run
            if entry is None or own & entry:
                return False  # it scans the run from every restart
        elif op in REPEATS:
            return _restart_is_cheap(list(av[2]) + rest, run_chars, flags, entry)
        elif op not in (C.AT, C.ASSERT, C.ASSERT_NOT):
            own = chars([(op, av)], flags)
            if not own & run_chars:
                return True
            entry = entry or own
    return True


def _reaches_end(run, follow, flags: int) -> bool:
    """A run over every character followed by an alternative of \\Z or $ ("<!--.*?(?:-->|\\Z)"):
    its scan always ends in a match, so the search never starts again inside it."""
    if chars([run], flags) != PROBE or not follow:
        return False
    op, av = follow[0]
    if op is C.SUBPATTERN and len(av[3]) == 1:
        op, av = av[3][0]
    ends = ([(C.AT, C.AT_END_STRING)], [(C.AT, C.AT_END)])
    return op is C.BRANCH and any(list(b) in ends for b in av[1])


def _run_shapes(run, body: list, follows: list, flags: int, top, searched: bool) -> list[str]:
    """The shapes of one unbounded run (see the module); `follows`: what may come after it."""
    out, shown = [], _show(chars([run], flags))
    if run[0] in BACKTRACKING:
        if nullable(body):
            out.append(f"empty body: a run over {shown} can repeat matching nothing")
        # a run gives back its last characters when what follows fails; another run right
        # after it (or its own next iteration) that can start with them splits the run every way
        back = edge_chars(body, flags, last=True)
        for follow in (f for f in follows if not cannot_fail(f)):
            nexts = leading_runs(follow) + leading_runs(body + follow)
            if any(back & edge_chars([y], flags) for y in nexts if y[1] is not run[1]):
                out.append(f"shared run: a run over {shown} and a run after it can split the same characters")
            # "(a|aa)+": iterations of more than one length, each able to start with how one ends
            if _variable_width(run) and back & edge_chars(body, flags):
                out.append(f"shared run: the iterations of a loop over {shown} can split the same characters")
    if searched and not any(cannot_fail(f) or _reaches_end(run, f, flags) for f in follows) \
            and not _restart_is_cheap(top, chars([run], flags), flags):
        out.append(f"re-entered run: a search restarts inside a run over {shown} it can fail after")
    return out


def _check(items, conts: list, flags: int, top, searched: bool, out: list) -> None:
    for i, (op, av) in enumerate(items):
        follows = [list(items[i + 1:]) + c for c in conts]
        if op in REPEATS:
            body = list(av[2])
            if av[1] == C.MAXREPEAT:
                out += _run_shapes((op, av), body, follows, flags, top, searched)
            # inside, a body is followed by the next iteration or by what follows the run; a
            # possessive run is atomic: nothing outside takes back what its body matched
            inner = [[]] if op not in BACKTRACKING else follows if av[1] == 1 else [body + f for f in follows] + follows
            _check(body, inner, flags, top, searched, out)
        elif op is C.SUBPATTERN:
            _check(av[3], follows, (flags | av[1]) & ~av[2], top, searched, out)
        elif op is C.BRANCH:
            for b in av[1]:
                _check(b, follows, flags, top, searched, out)
        elif op is C.ATOMIC_GROUP:
            _check(av, [[]], flags, top, searched, out)
        elif op in (C.ASSERT, C.ASSERT_NOT):
            _check(av[1], [[]], flags, top, searched, out)


def _show(chars_: frozenset) -> str:
    text = "".join(sorted(chars_))
    return repr(text if len(text) <= 12 else text[:12] + "...")


def shapes(pattern: str, flags: int = 0, searched: bool = True) -> list[str]:
    """The super-linear shapes of a pattern (see the module); `searched`: it is used with
    search / finditer / findall / sub / split, not only match / fullmatch."""
    items = list(P.parse(pattern, flags))
    flags |= P.parse(pattern, flags).state.flags
    out: list[str] = []
    _check(items, [[]], flags, items, searched, out)
    return sorted(set(out))
