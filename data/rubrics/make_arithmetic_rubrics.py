"""Per-prompt rubrics for the quickstart's arithmetic problems: each row of
data/synthetic/arithmetic (the same train / held-out split) gets its own two-criterion
checklist, one criterion naming that problem's result (an instance-specific rubric, as in
Rubric anchors and OpenRubrics) and one about form. Regenerate with

    python data/rubrics/make_arithmetic_rubrics.py

(reads data/synthetic/arithmetic/sft_train.jsonl and preferences_eval.jsonl; writes
arithmetic_train.jsonl and arithmetic_eval.jsonl beside this script)."""

import json
from pathlib import Path

HERE = Path(__file__).parent
SOURCE = HERE.parent / "synthetic" / "arithmetic"


def rubric(prompt: str, answer: str) -> list[dict]:
    problem = prompt.removeprefix("What is ").removesuffix("?")
    return [{"name": "correct", "criterion": f"The response gives {answer} as the result of {problem}.", "weight": 2},
            {"name": "concise", "criterion": "The response is one short sentence that ends after the result.",
             "weight": 1}]


def write(source: str, target: str) -> int:
    rows = [json.loads(line) for line in (SOURCE / source).read_text().splitlines()]
    with open(HERE / target, "w") as out:
        for row in rows:
            out.write(json.dumps({"id": row["id"], "prompt": row["prompt"], "answer": row["answer"],
                                  "rubric": rubric(row["prompt"], row["answer"])}) + "\n")
    return len(rows)


if __name__ == "__main__":
    print(write("sft_train.jsonl", "arithmetic_train.jsonl"), write("preferences_eval.jsonl", "arithmetic_eval.jsonl"))
