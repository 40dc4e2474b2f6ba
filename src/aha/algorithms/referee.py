"""The policy as its own referee (URPO: Lu et al. 2025, arXiv 2507.17515): the maths of judging.

The referee is asked "is this answer correct? yes or no". Its reward for a completion is
P(yes) / (P(yes) + P(no)) at the first token of its reply (each verdict's probability summed
over the cases it may be written in): smooth in the completion, free of sampling noise, and
only the two verdicts' share of the probability counts (a model that would rather say "The"
still ranks answers). Trained as a player, it samples verdicts on answers a
rule verifier has labelled, and each verdict scores 1 when it agrees with the label."""

from __future__ import annotations

import re

import torch

_WORD = re.compile(r"[^\W_]+")  # letters and digits: "Yes." and "yes," both read as "yes"
_FIELD = re.compile(r"\{(question|completion)\}")


def judge_text(template: str, question: str, completion: str) -> str:
    """The referee's question about one completion: template with {question} and {completion}
    filled in one pass, so braces in either text (or a "{question}" the policy wrote) stay as
    they are."""
    return _FIELD.sub(lambda m: question if m.group(1) == "question" else completion, template)


def parse_verdict(text: str, verdicts: list[str]) -> int | None:
    """The index in `verdicts` of the reply's first word (case ignored), or None: a reply that
    starts with anything else ("not sure", "nope", nothing) gives no verdict."""
    match = _WORD.search(text)
    if match is None:
        return None
    word = match.group().lower()
    return next((i for i, v in enumerate(verdicts) if v.lower() == word), None)


def verdict_rewards(texts: list[str], right: torch.Tensor, verdicts: list[str]) -> torch.Tensor:
    """(N,) 1.0 where a sampled verdict agrees with the verifier's label of what it judged
    (verdicts[0] for right, verdicts[1] for wrong), else 0.0: a wrong or unparseable verdict."""
    wanted = [0 if bool(r) else 1 for r in right]
    return torch.tensor([float(parse_verdict(t, verdicts) == w) for t, w in zip(texts, wanted)])


def yes_share(verdict_logits: torch.Tensor) -> torch.Tensor:
    """(N,) P(yes) / (P(yes) + P(no)) from (N, 2) next-token logits (or log-probs) of the two
    verdicts: a softmax over the two, the rest of the vocabulary cancelling."""
    return torch.softmax(verdict_logits.float(), dim=-1)[:, 0]


def verdict_logits(logits: torch.Tensor, yes_ids: list[int], no_ids: list[int]) -> torch.Tensor:
    """(N, 2) the log-mass (up to the shared normaliser) of each verdict's first tokens, from
    (N, V) next-token logits: a verdict may start with several tokens ("yes", "Yes", "YES"), and
    its probability is theirs summed, as a sampled verdict is read whatever its case."""
    logits = logits.float()
    return torch.stack([logits[:, yes_ids].logsumexp(dim=-1), logits[:, no_ids].logsumexp(dim=-1)], dim=-1)


def balanced_pick(right: torch.Tensor, usable: torch.Tensor, limit: int, keys: torch.Tensor) -> list[int]:
    """Rows to judge: as many right as wrong ones (limit // 2 each at most, fewer when either
    side is short), each side taken in increasing `keys` (random keys give a random choice),
    returned sorted. A referee trained on one side only would learn to always say the same."""
    sides = [(usable & right).nonzero().view(-1), (usable & ~right).nonzero().view(-1)]
    each = min(limit // 2, len(sides[0]), len(sides[1]))
    picked = [int(i) for rows in sides for i in rows[torch.argsort(keys[rows], stable=True)][:each]]
    return sorted(picked)


def referee_agreement(scores: torch.Tensor, right: torch.Tensor, usable: torch.Tensor,
                      threshold: float = 0.5) -> tuple[float, int]:
    """(the share of usable rows where score >= threshold agrees with the verifier's label, how
    many rows were compared); (0.0, 0) when none was."""
    n = int(usable.sum())
    if n == 0:
        return 0.0, 0
    calls = scores[usable] >= threshold
    return float((calls == right[usable]).float().mean()), n
