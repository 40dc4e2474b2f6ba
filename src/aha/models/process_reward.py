"""A process reward model (PRM): one score per reasoning step, from a scalar head on the LM's
final hidden state at the token that closes the step.

A solution is its steps joined by a separator ("\\n"), tokenised as the policy would see the
completion, with the stop token after it. Step k is *closed* by the separator token after it,
and the last step by the stop token: that is where the score is read. Not the step's own last
token: a causal model cannot tell there whether the step is over ("= 21" may go on to "= 210"
with a one-token-a-digit tokenizer), while the separator says it is. The head is the reward
model's (models/reward_model.py: seeded init, one output), the body the causal LM itself, so
a trained PRM is saved as the LM plus that head, exactly like a method: rm reward model.

Step probabilities sigmoid(score) aggregate to one solution reward by `min` (PURE, Cheng et
al. 2025: a solution is as good as its worst step, which cannot be gamed by adding steps),
`sum` or `mean`."""

from __future__ import annotations

from itertools import accumulate

import torch
from torch import nn

from aha.models.compute import autocast, on_device
from aha.models.reward_model import right_pad

AGGREGATES = ("min", "sum", "mean")


def encode_steps(tokenizer, steps: list[str], separator: str, stop: int) -> tuple[list[int], list[int]]:
    """(completion ids + stop, ends): the ids of separator.join(steps) tokenised at once (what the
    policy sees) and, per step, the index in them of the token that closes it.

    The steps are tokenised one by one (step + separator; the last step alone), so each
    boundary falls exactly on a piece's last token. Where the pieces joined differ from the
    whole text's tokens (byte-level BPE can merge the separator with whitespace next to it:
    "\\n  b" is one token "\\n " then " b" in SmolLM2), the whole text's tokens are kept and a
    step closes at the last token that starts at or before its separator's last character
    (that token may also hold the next step's leading whitespace)."""
    pieces = [step + separator for step in steps[:-1]] + [steps[-1]]
    piece_ids = [list(tokenizer(piece, add_special_tokens=False)["input_ids"]) for piece in pieces]
    whole = tokenizer(separator.join(steps), add_special_tokens=False, return_offsets_mapping=True)
    ids = list(whole["input_ids"])
    if [t for piece in piece_ids for t in piece] == ids:
        ends = [total - 1 for total in accumulate(len(piece) for piece in piece_ids[:-1])]
    else:
        starts = [start for start, _ in whole["offset_mapping"]]
        closing = [len(separator.join(steps[:k + 1])) + len(separator) - 1 for k in range(len(steps) - 1)]
        ends = [max(i for i, start in enumerate(starts) if start <= char) for char in closing]
    return ids + [stop], ends + [len(ids)]


def step_hidden(lm, sequences: list[list[int]], ends: list[list[int]], pad_id: int) -> torch.Tensor:
    """(sum of len(ends), H) final hidden states (after the body's last norm) at each row's
    step-closing positions, rows in order. Rows are right-padded: a position sees only its
    own row's earlier tokens."""
    ids, mask = on_device(lm.device, *right_pad(sequences, pad_id))
    hidden = lm.base_model(input_ids=ids, attention_mask=mask).last_hidden_state
    rows = torch.tensor([i for i, row in enumerate(ends) for _ in row], dtype=torch.long, device=hidden.device)
    cols = torch.tensor([e for row in ends for e in row], dtype=torch.long, device=hidden.device)
    return hidden[rows, cols]


class ProcessRewardModel(nn.Module):
    """The LM (body) and a one-output head as one module (one optimizer, one gradient clip).
    Checkpoints save `lm` as "model" and `head` as "reward_head", as for method: rm."""

    def __init__(self, lm, head: nn.Linear, pad_id: int):
        super().__init__()
        self.lm = lm
        self.head = head.to(lm.device)
        self.pad_id = pad_id

    def forward(self, sequences: list[list[int]], ends: list[list[int]],
                dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """(sum of len(ends),) fp32 step scores (logits of "this step is right"), row by row,
        step by step, on the CPU. Differentiable unless called under no_grad."""
        with autocast(dtype, self.lm.device):
            hidden = step_hidden(self.lm, sequences, ends, self.pad_id).float()
        return self.head(hidden)[:, 0].cpu()  # the head in fp32: the scores at full precision


def aggregate(probs: list[float], how: str) -> float:
    """One solution reward from its step probabilities: min (PURE's min-form), sum or mean."""
    if how == "min":
        return min(probs)
    if how == "sum":
        return sum(probs)
    if how == "mean":
        return sum(probs) / len(probs)
    raise ValueError(f"aggregate must be one of {', '.join(AGGREGATES)}, got {how!r}")
