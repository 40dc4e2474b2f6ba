"""The DPO family's losses per pair, as `dpo.loss` names them: what each needs of a pair (the
policy's log-probs, the reference's, TDPO's per-token KL, ODPO's reward gap, BCO's reward
shift), the registry from config names to the pure functions of algorithms/preference.py,
and the implicit rewards the metrics read."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from aha.algorithms import (
    bco_pair_loss,
    dpo_loss,
    hinge_loss,
    ipo_loss,
    orpo_loss,
    reward_offset,
    simpo_loss,
    tdpo_loss,
)
from aha.config import PreferenceConfig
from aha.errors import TaskError


@dataclass
class PairLogps:
    """Per pair (N,): summed completion log-probs, token counts, and the reference's sums;
    for tdpo each completion's summed KL(ref || pi) over its positions; for an offset (ODPO)
    each pair's offset; for bco_pair the reward shift delta."""

    chosen: torch.Tensor
    rejected: torch.Tensor
    chosen_tokens: torch.Tensor
    rejected_tokens: torch.Tensor
    ref_chosen: torch.Tensor | None = None
    ref_rejected: torch.Tensor | None = None
    kl_chosen: torch.Tensor | None = None
    kl_rejected: torch.Tensor | None = None
    offset: torch.Tensor | None = None
    delta: float = 0.0

    def detached(self) -> "PairLogps":
        """The same numbers, cut from the graph (kept for the step's metrics after the backward)."""
        return dataclasses.replace(self, **{f.name: getattr(self, f.name).detach() for f in dataclasses.fields(self)
                                            if torch.is_tensor(getattr(self, f.name))})

    def averages(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.chosen / self.chosen_tokens, self.rejected / self.rejected_tokens

    def references(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.chosen, self.rejected, self.ref_chosen, self.ref_rejected


@dataclass(frozen=True)
class PairLoss:
    fn: Callable[[PairLogps, PreferenceConfig], torch.Tensor]
    reference: bool = True  # needs the reference's log-probs of each completion
    # needs the reference's whole next-token distribution at every completion position: a frozen
    # copy of the starting weights stays in memory (the cached sums are not enough)
    token_kl: bool = False


def _ipo(p: PairLogps, c: PreferenceConfig) -> torch.Tensor:
    # per-token averages, as TRL computes IPO (its length-normalised form of Azar et al.'s loss)
    chosen, rejected = p.averages()
    ref_chosen, ref_rejected = p.ref_chosen / p.chosen_tokens, p.ref_rejected / p.rejected_tokens
    return ipo_loss(chosen, rejected, ref_chosen, ref_rejected, c.beta)


def _orpo(p: PairLogps, c: PreferenceConfig) -> torch.Tensor:
    # a probability that rounds to 1 would make the odds infinite: keep the average below 0
    chosen, rejected = (x.clamp(max=-1e-6) for x in p.averages())
    return orpo_loss(chosen, rejected, -p.chosen / p.chosen_tokens, c.beta)


def _dpo(p: PairLogps, c: PreferenceConfig) -> torch.Tensor:
    offset = 0.0 if p.offset is None else p.offset
    return dpo_loss(*p.references(), c.beta, c.label_smoothing, offset)


def _tdpo(p: PairLogps, c: PreferenceConfig) -> torch.Tensor:
    return tdpo_loss(*p.references(), p.kl_chosen, p.kl_rejected, c.beta, c.tdpo_alpha, c.tdpo_version)


# dpo.loss -> its function and what it needs. A new loss is one entry here plus its name in the
# config's Literal (a test checks they agree).
PREFERENCE_LOSSES = {
    "dpo": PairLoss(_dpo),
    "ipo": PairLoss(_ipo),
    "simpo": PairLoss(lambda p, c: simpo_loss(*p.averages(), c.beta, c.simpo_gamma, c.label_smoothing), False),
    "orpo": PairLoss(_orpo, False),
    "tdpo": PairLoss(_tdpo, token_kl=True),
    "hinge": PairLoss(lambda p, c: hinge_loss(*p.references(), c.beta)),
    "bco_pair": PairLoss(lambda p, c: bco_pair_loss(*p.references(), c.beta, p.delta)),
}


def pair_losses(p: PairLogps, c: PreferenceConfig) -> torch.Tensor:
    """The configured loss per pair, plus RPO's NLL term on the chosen completion."""
    losses = PREFERENCE_LOSSES[c.loss].fn(p, c)
    if c.nll_coef:
        losses = losses + c.nll_coef * (-p.chosen / p.chosen_tokens)
    return losses


def implicit_rewards(p: PairLogps, c: PreferenceConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """What each loss takes as the reward of a completion: beta * log(pi / ref) with a
    reference (TDPO too: its KL term shapes the loss, not the reward the metrics compare),
    beta * average log pi without (SimPO, ORPO)."""
    if PREFERENCE_LOSSES[c.loss].reference:
        return c.beta * (p.chosen - p.ref_chosen), c.beta * (p.rejected - p.ref_rejected)
    chosen, rejected = p.averages()
    return c.beta * chosen, c.beta * rejected


def score_gap(row: dict) -> float:
    """A pair's reward gap, chosen minus rejected: from its chosen_score and rejected_score, else
    its margin field. A rejected sample whose reward failed (online) scores -inf: the gap is
    inf, which reward_offset turns into no offset."""
    if "chosen_score" in row and "rejected_score" in row:
        return float(row["chosen_score"]) - float(row["rejected_score"])
    return float(row["margin"])


def check_score_gaps(rows: list[dict], key: str) -> None:
    """With an offset every pair needs a reward gap above 0: numbers in chosen_score and
    rejected_score (or a margin); a bad row is an error naming its file and line."""
    for row in rows:
        fields = ("chosen_score", "rejected_score") if "chosen_score" in row or "rejected_score" in row else ("margin",)
        values = [row.get(f) for f in fields]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
            raise TaskError(f"{row['where']}: {key} needs finite numbers in {' and '.join(fields)} (the reward gap of "
                            f"the pair), got {', '.join(repr(v) for v in values)}")
        if score_gap(row) <= 0:
            raise TaskError(f"{row['where']}: {key} needs the chosen completion to score above the rejected one, got "
                            f"a gap of {score_gap(row)!r}")


def pair_offsets(rows: list[dict], index: list[int], c: PreferenceConfig) -> torch.Tensor | None:
    """ODPO's offset of each pair in index (None without dpo.offset)."""
    if c.offset == "none":
        return None
    gaps = torch.tensor([score_gap(rows[i]) for i in index], dtype=torch.float64)
    return reward_offset(gaps, torch.zeros_like(gaps), c.offset_alpha, c.offset).float()


class RunningMean:
    """BCO's reward shift delta: the running mean of the implicit rewards, one value per
    micro-batch (the mean over its chosen and rejected completions), as TRL's RunningMoments
    keeps it. Its state is checkpointed, so a resume continues with the same shift."""

    def __init__(self):
        self.mean, self.count = 0.0, 0

    def update(self, value: float) -> float:
        self.count += 1
        self.mean += (value - self.mean) / self.count
        return self.mean

    def state(self) -> dict:
        return {"mean": self.mean, "count": self.count}

    def load_state(self, state: dict) -> None:
        self.mean, self.count = float(state["mean"]), int(state["count"])
