"""Write math_answers.jsonl: labelled (completion, reference, label) pairs for auditing math
verifiers (`aha audit reward ... --labels data/audit/math_answers.jsonl`).

Labels come from construction, not from a verifier: each positive restates the reference in
a form a grader would accept (decimal for fraction, reordered expression, another LaTeX
spelling, units, commas, an "Answer:" line...), each negative is a near miss (off by one,
inverted fraction, wrong bracket, a right value mentioned but a wrong one concluded).
Run: python data/audit/make_math_answers.py  (deterministic)."""

import json
import random
from fractions import Fraction
from pathlib import Path

rng = random.Random(0)
rows = []


def add(category, reference, completion, label):
    rows.append({"id": f"{category}-{len(rows)}", "category": category, "reference": reference,
                 "completion": completion, "label": label})


# integers: plain, boxed, answer line, decimals, thousands separators, units, words
for n in rng.sample(range(2, 5000), 30):
    ref = str(n)
    add("integer", ref, f"Adding the parts gives \\boxed{{{n}}}.", True)
    add("integer", ref, f"So the result is {n}.0", True)
    add("integer", ref, f"The answer is {n:,}" if n >= 1000 else f"Answer: {n}", True)
    add("integer", ref, f"Each side is \\boxed{{{n} \\text{{ cm}}}}", True)
    add("integer", ref, f"\\boxed{{{n + rng.choice([-1, 1, 10])}}}", False)
    add("integer", ref, f"First I thought {n}, but after checking the answer is {n + 2}.", False)

# fractions: LaTeX, slash, decimal, unreduced, \dfrac; negatives: inverted, rounded badly
for _ in range(25):
    while True:
        p, q = rng.randint(1, 12), rng.randint(2, 12)
        f = Fraction(p, q)
        if f.denominator in (2, 4, 5, 8, 10, 20, 25) and f.numerator != f.denominator:
            break
    a, b = f.numerator, f.denominator
    ref = f"\\frac{{{a}}}{{{b}}}"
    k = rng.randint(2, 4)
    add("fraction", ref, f"\\boxed{{{float(f):g}}}", True)
    add("fraction", ref, f"The probability is {a}/{b}.", True)
    add("fraction", ref, f"\\boxed{{\\frac{{{a * k}}}{{{b * k}}}}}", True)
    add("fraction", ref, f"$\\dfrac{{{a}}}{{{b}}}$ is the answer", True)
    add("fraction", ref, f"\\boxed{{\\frac{{{b}}}{{{a}}}}}", False)
    add("fraction", ref, f"\\boxed{{{float(f) + 0.1:g}}}", False)

# expressions, radicals, intervals, sets, constants, scientific notation (hand-written)
SPECIAL = [
    ("expression", "x^2+2x+1", ["\\boxed{(x+1)^2}", "\\boxed{1 + 2x + x^2}", "Answer: $x^2 + 2x + 1$"], ["\\boxed{x^2+1}", "\\boxed{(x-1)^2}"]),
    ("expression", "2x+6", ["\\boxed{2(x+3)}", "\\boxed{6+2x}"], ["\\boxed{2x+3}"]),
    ("expression", "\\frac{x}{2}", ["\\boxed{0.5x}", "\\boxed{x/2}"], ["\\boxed{2x}"]),
    ("radical", "\\frac{\\sqrt{2}}{2}", ["\\boxed{\\frac{1}{\\sqrt{2}}}", "\\boxed{\\sqrt{2}/2}", "\\boxed{\\sqrt{\\frac{1}{2}}}"], ["\\boxed{\\sqrt{2}}", "\\boxed{\\frac{\\sqrt{3}}{2}}"]),
    ("radical", "2\\sqrt{3}", ["\\boxed{\\sqrt{12}}", "\\boxed{2 \\sqrt 3}"], ["\\boxed{3\\sqrt{2}}"]),
    ("radical", "3\\sqrt{2}", ["\\boxed{\\sqrt{18}}"], ["\\boxed{\\sqrt{12}}"]),
    ("interval", "(1,2]", ["\\boxed{(1, 2]}", "\\boxed{\\left(1, 2\\right]}"], ["\\boxed{[1,2]}", "\\boxed{(1,2)}"]),
    ("interval", "[0,\\infty)", ["\\boxed{[0, \\infty)}"], ["\\boxed{(0,\\infty)}"]),
    ("interval", "(-\\infty,3)", ["\\boxed{(-\\infty, 3)}"], ["\\boxed{(-\\infty,3]}"]),
    ("set", "\\{1,2,3\\}", ["\\boxed{\\{3,2,1\\}}", "\\boxed{\\{1, 2, 3\\}}"], ["\\boxed{\\{1,2\\}}"]),
    ("set", "\\{-2,2\\}", ["\\boxed{\\{2,-2\\}}", "\\boxed{\\pm 2}"], ["\\boxed{\\{2\\}}"]),
    ("constant", "2\\pi", ["\\boxed{2 \\pi}", "\\boxed{\\pi \\cdot 2}"], ["\\boxed{\\pi}", "\\boxed{4\\pi}"]),
    ("constant", "\\frac{\\pi}{4}", ["\\boxed{\\pi/4}", "\\boxed{0.25\\pi}"], ["\\boxed{\\pi/2}"]),
    ("constant", "e^2", ["\\boxed{e^{2}}", "\\boxed{e \\cdot e}"], ["\\boxed{2e}"]),
    ("scientific", "1500", ["\\boxed{1.5 \\times 10^{3}}", "\\boxed{1.5e3}"], ["\\boxed{1.5 \\times 10^{4}}"]),
    ("scientific", "0.003", ["\\boxed{3 \\times 10^{-3}}", "\\boxed{\\frac{3}{1000}}"], ["\\boxed{3 \\times 10^{-2}}"]),
    ("percent", "25\\%", ["\\boxed{25\\%}", "\\boxed{0.25}", "\\boxed{\\frac{1}{4}}"], ["\\boxed{0.025}"]),
    ("degrees", "90^\\circ", ["\\boxed{90^{\\circ}}", "\\boxed{90}", "\\boxed{90 \\text{ degrees}}"], ["\\boxed{180^\\circ}"]),
    ("negative", "-7", ["\\boxed{-7}", "The answer is $-7$.", "\\boxed{- 7}"], ["\\boxed{7}"]),
    ("tuple", "(2,-1)", ["\\boxed{(2, -1)}", "$x=2, y=-1$ so \\boxed{(2,-1)}"], ["\\boxed{(-1,2)}"]),
    ("words", "12", ["The answer is twelve."], ["The answer is eleven."]),
    ("many_numbers", "7", ["Candidates 3, 5, then 7"], ["7? or 9? or 11"]),
    ("boxed_in_reasoning", "3", ["Trying \\boxed{4} fails, so the final answer is \\boxed{3}"], ["\\boxed{3} was my first guess; the final answer is \\boxed{4}"]),
    ("matrix", "\\begin{pmatrix}1\\\\2\\end{pmatrix}", ["\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}"], ["\\boxed{\\begin{pmatrix}2\\\\1\\end{pmatrix}}"]),
]
for category, ref, positives, negatives in SPECIAL:
    for c in positives:
        add(category, ref, c, True)
    for c in negatives:
        add(category, ref, c, False)

out = Path(__file__).with_name("math_answers.jsonl")
out.write_text("".join(json.dumps(r) + "\n" for r in rows))
print(f"wrote {len(rows)} pairs ({sum(r['label'] for r in rows)} correct) to {out}")
