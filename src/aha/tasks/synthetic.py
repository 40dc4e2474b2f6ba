"""Synthetic training data from the built-in arithmetic task: SFT responses, preference pairs
(DPO, reward models) and step-labelled solutions (process reward models), with no downloads.

Every file is a pure function of (task config, seed): the samples come from arithmetic_splits,
every random choice from random.Random(f"{seed}:{kind}:{sample id}"), so one sample's lines do
not depend on which other samples are in the file. *_train files use the task's train split and
*_eval files its held-out split, so nothing held out is ever trained on. Every line is checked
with the reward the demo trains on (numeric_answer) before it is written: a chosen or SFT
response scores 1, a rejected one 0, and a solution's last step label is its score."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from random import Random

from aha.config import TaskConfig
from aha.errors import TaskError
from aha.rewards.verifiers import numeric_answer
from aha.tasks.arithmetic import OPS, arithmetic_splits

SUBSETS = ("off_by_small", "digit_error", "wrong_operand", "no_answer", "long_wrong")
FORMS = ("plain", "worked", "steps")  # "38 * 7 = 266." / one line with the partial products / one step a line
MAX_PER_FILE = {"train": 400, "eval": 200}
_DELTAS = (-10, -2, -1, 1, 2, 10)  # a wrong step: a slip of one or two, or a dropped or doubled carry
_ID = re.compile(r"(-?\d+)([-+*])(-?\d+)")


def _score(text: str, sample: dict, want: float) -> str:
    """text, after checking that numeric_answer gives it `want` (not an `assert`: -O must not skip it)."""
    got = numeric_answer(text, sample)
    if got != want:
        raise AssertionError(f"synthetic data for {sample['id']}: {text!r} scores {got}, expected {want}")
    return text


def _operands(sample: dict) -> tuple[int, str, int]:
    """(a, op, b) from an arithmetic id such as "38*7" or "-3--5" (the prompt template is free text)."""
    a, op, b = _ID.fullmatch(sample["id"]).groups()
    return int(a), op, int(b)


def solution(a: int, op: str, b: int, bad: int | None = None, rng: Random | None = None) -> list[str]:
    """A worked solution of a op b, one step a string; with `bad`, that step states a wrong value
    and the steps after it build on it, as a solver that slipped would.

    A two-digit a is split into tens and ones ("38 * 7 = 30 * 7 + 8 * 7", "30 * 7 = 210",
    "8 * 7 = 56", "210 + 56 = 266"); a multiple of ten factors out the ten; anything else
    (a single digit) takes two steps through a - 1 ("7 * 8 = 6 * 8 + 8 = 48 + 8", "48 + 8 = 56")."""

    def val(i: int, v: int) -> int:
        return v + rng.choice(_DELTAS) if i == bad else v

    t, o = a - a % 10, a % 10
    if a >= 10 and o:
        o2 = rng.choice([d for d in range(1, 10) if d != o]) if bad == 0 else o  # a wrong split
        if op == "*":
            x, y = val(1, t * b), val(2, o2 * b)
            return [f"{a} * {b} = {t} * {b} + {o2} * {b}", f"{t} * {b} = {x}", f"{o2} * {b} = {y}", f"{x} + {y} = "
                    f"{val(3, x + y)}"]
        v = val(1, OPS[op](o2, b))
        rest = f"{t} + {v}" if v >= 0 else f"{t} - {-v}"
        return [f"{a} {op} {b} = {t} + {o2} {op} {b}", f"{o2} {op} {b} = {v}", f"{rest} = {val(2, t + v)}"]
    if op == "*" and a >= 10:
        x = val(0, a // 10 * b)
        return [f"{a} * {b} = {a // 10} * {b} * 10 = {x} * 10", f"{x} * 10 = {val(1, x * 10)}"]
    extra = b if op == "*" else 1  # a * b = (a - 1) * b + b; a + b = (a - 1) + b + 1; a - b = (a - 1) - b + 1
    x = val(0, OPS[op](a - 1, b))
    return [f"{a} {op} {b} = {a - 1} {op} {b} + {extra} = {x} + {extra}", f"{x} + {extra} = {val(1, x + extra)}"]


def _wrong_solution(sample: dict, rng: Random) -> tuple[list[str], int]:
    """A solution with one wrong step at a random position, and that position. A wrong split
    times b = 0 changes nothing; then the error moves to the last step, which always shows."""
    a, op, b = _operands(sample)
    bad = rng.randrange(len(solution(a, op, b)))
    steps = solution(a, op, b, bad, rng)
    if numeric_answer("\n".join(steps), sample):
        bad = len(steps) - 1
        steps = solution(a, op, b, bad, rng)
    return steps, bad


def _completion(form: str, a: int, op: str, b: int, steps: list[str], final: int) -> str:
    """a op b answered in `form` with `final` as its result, showing `steps` (which may be those
    of another problem: a wrong operand)."""
    if form == "plain" or (form == "worked" and len(steps) < 3):
        return f"{a} {op} {b} = {final}."
    if form == "worked":
        return " and ".join(steps[1:-1]) + f", so {a} {op} {b} = {final}."
    head = f"{a} {op} {b} = " + steps[0].split(" = ", 1)[1]
    return "\n".join([head, *steps[1:-1], steps[-1].rsplit(" = ", 1)[0] + f" = {final}"])


def _digit_error(answer: int, rng: Random) -> int:
    """answer with one digit changed (never to a leading zero)."""
    digits = list(str(abs(answer)))
    i = rng.randrange(len(digits))
    digits[i] = rng.choice([d for d in "0123456789" if d != digits[i] and (d != "0" or i > 0 or len(digits) == 1)])
    return int("".join(digits)) * (-1 if answer < 0 else 1)


def _rejected(subset: str, form: str, sample: dict, rng: Random) -> str:
    a, op, b = _operands(sample)
    answer, steps = int(sample["answer"]), solution(a, op, b)
    if subset == "off_by_small":
        return _completion(form, a, op, b, steps, answer + rng.choice((-3, -2, -1, 1, 2, 3)))
    if subset == "digit_error":
        return _completion(form, a, op, b, steps, _digit_error(answer, rng))
    if subset == "wrong_operand":  # a op (b +- 1), worked through as if it were right
        b2 = b + rng.choice((-1, 1))
        return _completion(form, a, op, b, solution(a, op, b2), OPS[op](a, b2))
    if subset == "no_answer":  # cut off just before the result, or a start that never gets to one
        if rng.random() < 0.5:
            full = _completion(form, a, op, b, steps, answer)
            return full[:full.rindex(str(answer))].rstrip()
        return f"Let me think about {a} {op} {b} step by step."
    wrong, _ = _wrong_solution(sample, rng)  # long_wrong: a longer, wrong solution (length bias)
    final = wrong[-1].rsplit(" = ", 1)[1]
    return "Let me work this out step by step.\n" + "\n".join(wrong) + f"\nSo {a} {op} {b} = {final}."


def sft_record(sample: dict, seed: int) -> dict:
    """{id, prompt, response, answer}: a short correct answer, plain or with its partial results."""
    rng = Random(f"{seed}:sft:{sample['id']}")
    a, op, b = _operands(sample)
    response = _completion(rng.choice(FORMS[:2]), a, op, b, solution(a, op, b), int(sample["answer"]))
    return {"id": sample["id"], "prompt": sample["prompt"], "response": _score(response, sample, 1.0),
            "answer": sample["answer"]}


def preference_record(sample: dict, subset: str, seed: int) -> dict:
    """{id, prompt, chosen, rejected, answer, subset}: a correct and a wrong completion. The
    subset names how the rejected one is wrong; it has the chosen one's form (so length is
    mostly equal), except two kinds that pull length opposite ways, so that length alone does
    not tell chosen from rejected: long_wrong (a step-by-step wrong solution against a plain right
    answer: a reward that likes length prefers the wrong one) and no_answer (a step-by-step right
    answer against one that stops before its result: a reward that likes brevity prefers it).
    A kind that cannot be wrong for this problem (a * (b + 1) when a = 0, a cut-off answer whose
    last number is the answer) falls back to off_by_small."""
    rng = Random(f"{seed}:preferences:{sample['id']}")
    a, op, b = _operands(sample)
    form = {"long_wrong": "plain", "no_answer": "steps"}.get(subset) or rng.choice(FORMS)
    chosen = _completion(form, a, op, b, solution(a, op, b), int(sample["answer"]))
    rejected = _rejected(subset, form, sample, rng)
    if numeric_answer(rejected, sample):
        subset, rejected = "off_by_small", _rejected("off_by_small", form, sample, rng)
    return {"id": sample["id"], "prompt": sample["prompt"], "chosen": _score(chosen, sample, 1.0),
            "rejected": _score(rejected, sample, 0.0), "answer": sample["answer"], "subset": subset}


def step_record(sample: dict, seed: int) -> dict:
    """{id, prompt, steps, labels, answer}. About half the solutions are right (every label 1);
    the others have one wrong step at a random position. Convention: the wrong step and EVERY
    step after it are labelled 0, even a step whose own arithmetic is right, because it rests on
    (or follows) an error and so is unsupported: a solution is right up to its first error. So
    the labels are 1...1 0...0, and the last label is 1 exactly when the final answer is right."""
    rng = Random(f"{seed}:steps:{sample['id']}")
    a, op, b = _operands(sample)
    if rng.random() < 0.5:
        steps, bad = _wrong_solution(sample, rng)
    else:
        steps = solution(a, op, b)
        bad = len(steps)
    labels = [1 if i < bad else 0 for i in range(len(steps))]
    _score("\n".join(steps), sample, float(labels[-1]))
    return {"id": sample["id"], "prompt": sample["prompt"], "steps": steps, "labels": labels,
            "answer": sample["answer"]}


def synthetic_files(cfg: TaskConfig, seed: int = 0, max_per_file: int | None = None) -> dict[str, list[dict]]:
    """File name -> lines. Each split is capped at max_per_file samples (default MAX_PER_FILE),
    taking the first ones of the task's own seeded order, so the cap is deterministic too."""
    if cfg.data is not None or cfg.name not in (None, "arithmetic"):
        raise TaskError(f"aha data generates from the built-in arithmetic task, but this config's task is "
                        f"{'the JSONL file ' + repr(cfg.data) if cfg.data else repr(cfg.name)}; set "
                        "task.name=arithmetic")
    if max_per_file is not None and max_per_file < 1:
        raise TaskError(f"--max-per-file must be at least 1, got {max_per_file}")
    train, held_out = arithmetic_splits(cfg)
    files: dict[str, list[dict]] = {}
    for split, samples in (("train", train), ("eval", held_out)):
        samples = samples[:max_per_file or MAX_PER_FILE[split]]
        if split == "train":
            files["sft_train.jsonl"] = [sft_record(s, seed) for s in samples]
        files[f"preferences_{split}.jsonl"] = [preference_record(s, SUBSETS[i % len(SUBSETS)], seed) for i,
                                               s in enumerate(samples)]
        files[f"steps_{split}.jsonl"] = [step_record(s, seed) for s in samples]
    return files


def to_jsonl(rows: list[dict]) -> str:
    """One JSON object a line, keys sorted, "\\n" endings: the same rows are the same bytes."""
    return "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows)


def write_synthetic(cfg: TaskConfig, out: str | Path, seed: int = 0,
                    max_per_file: int | None = None) -> dict[str, list[dict]]:
    files = synthetic_files(cfg, seed, max_per_file)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in files.items():
        with open(out / name, "w", encoding="utf-8", newline="\n") as f:
            f.write(to_jsonl(rows))
    return files


def describe(files: dict[str, list[dict]]) -> str:
    """Line counts, preference subsets and how often the chosen completion is the shorter one."""
    lines = []
    for name, rows in files.items():
        lines.append(f"{name}: {len(rows)} lines")
        if name.startswith("preferences"):
            subsets = Counter(r["subset"] for r in rows)
            lines.append("  subsets: " + ", ".join(f"{s} {subsets[s]}" for s in SUBSETS))
            sign = Counter((len(r["chosen"]) > len(r["rejected"])) - (len(r["chosen"]) < len(r["rejected"]))
                           for r in rows)
            lines.append(f"  chosen shorter {sign[-1] / max(len(rows), 1):.1%}, same length "
                         f"{sign[0] / max(len(rows), 1):.1%}, "
                         f"longer {sign[1] / max(len(rows), 1):.1%} (characters)")
        if name.startswith("steps"):
            right = sum(r["labels"][-1] for r in rows)
            lines.append(f"  all steps right {right}, one wrong step {len(rows) - right}")
    return "\n".join(lines)
