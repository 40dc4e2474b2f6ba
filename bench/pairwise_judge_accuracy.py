"""Held-out accuracy and position consistency of a pairwise judge on preference pairs.

    python bench/pairwise_judge_accuracy.py MODEL [--pairs data/synthetic/arithmetic/preferences_eval.jsonl]
                                            [--limit N] [--json OUT.json]

MODEL: a model name (smollm2-135m), a folder or a run's checkpoints/step-N. Each pair is asked
in both orders (rewards/pairwise.py's prompt, chosen shown as A, then as B), read two ways:
- probability: P(A) / (P(A) + P(B)) at the reply's first token, as `fn: pairwise_judge` reads it;
  accuracy is the share of pairs whose order-averaged P(chosen is better) > 0.5;
- generated: the greedy reply (12 tokens), its letter read by multiple_choice, as the RL-trained
  judge is scored; a reply with no single letter is wrong.
Per order: the share of single verdicts that are right. Consistency: the share of pairs whose
two verdicts pick the same response (right or wrong). Position bias: mean P(A) minus 0.5.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from aha.jsonl import read_jsonl  # noqa: E402
from aha.prompts import token_ids  # noqa: E402
from aha.rewards import multiple_choice  # noqa: E402
from aha.rewards.judge import greedy_replies, judge_model  # noqa: E402
from aha.rewards.pairwise import first_preferred, judge_messages  # noqa: E402


@torch.no_grad()
def greedy_letters(model: str, conversations: list[list[dict]], batch_size: int = 16) -> list[str | None]:
    """The letter (A, B or None) of the judge's greedy reply to each conversation."""
    loaded = judge_model(model)
    tok = loaded.tokenizer
    letters: list[str | None] = []
    for start in range(0, len(conversations), batch_size):
        chunk = [token_ids(tok.apply_chat_template(c, add_generation_prompt=True, tokenize=True))
                 for c in conversations[start: start + batch_size]]
        for text in greedy_replies(loaded.model, tok, chunk, max_new_tokens=12):
            picks = [v for v in "AB" if multiple_choice(text, {"answer": v}) == 1.0]
            letters.append(picks[0] if len(picks) == 1 else None)
    return letters


def measure(model: str, pairs: list[dict]) -> dict:
    conversations = []
    for p in pairs:  # chosen first (right answer A), chosen second (right answer B)
        conversations += [judge_messages(p["prompt"], p["chosen"], p["rejected"]),
                          judge_messages(p["prompt"], p["rejected"], p["chosen"])]
    probs = first_preferred(conversations, model, batch_size=16)
    letters = greedy_letters(model, conversations)
    n = len(pairs)
    first_p, second_p = probs[0::2], probs[1::2]
    first_l, second_l = letters[0::2], letters[1::2]
    prob_right = [(a > 0.5, b < 0.5) for a, b in zip(first_p, second_p)]
    gen_right = [(a == "A", b == "B") for a, b in zip(first_l, second_l)]
    return {
        "model": model, "pairs": n,
        "prob/accuracy": sum((a + 1 - b) / 2 > 0.5 for a, b in zip(first_p, second_p)) / n,
        "prob/per_order_accuracy": sum(x + y for x, y in prob_right) / (2 * n),
        "prob/consistency": sum(x == y for x, y in prob_right) / n,
        "prob/position_bias": sum(probs) / len(probs) - 0.5,
        "gen/per_order_accuracy": sum(x + y for x, y in gen_right) / (2 * n),
        "gen/both_orders_right": sum(x and y for x, y in gen_right) / n,
        "gen/consistency": sum(a is not None and b is not None and a != b for a, b in zip(first_l, second_l)) / n,
        "gen/says_A": letters.count("A") / len(letters), "gen/no_letter": letters.count(None) / len(letters),
        **subset_accuracy(pairs, first_p, second_p),
    }


def subset_accuracy(pairs: list[dict], first_p: list[float], second_p: list[float]) -> dict:
    """Pair accuracy (order-averaged P) per subset of the pairs (how the rejected one is wrong)."""
    right: dict[str, list[bool]] = {}
    for pair, a, b in zip(pairs, first_p, second_p):
        right.setdefault(str(pair.get("subset", "all")), []).append((a + 1 - b) / 2 > 0.5)
    return {f"prob/accuracy/{k}": sum(v) / len(v) for k, v in sorted(right.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--pairs", default=str(ROOT / "data/synthetic/arithmetic/preferences_eval.jsonl"))
    parser.add_argument("--limit", type=int)
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args()
    pairs = [row for _, row in read_jsonl(Path(args.pairs))][: args.limit]
    result = measure(args.model, pairs)
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
