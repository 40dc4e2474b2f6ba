"""The second half of an RL step: gradient updates of the policy (and critic) on a batch."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from aha.algorithms import (
    LossNorm,
    aggregate,
    cispo_loss,
    clipped_surrogate,
    clipped_value_loss,
    gmpo_loss,
    gspo_surrogate,
    kl_estimate,
    policy_gradient_loss,
    sapo_loss,
)
from aha.config import AlgorithmConfig
from aha.models.compute import autocast
from aha.training.distributed import Ranks, clip_gradients, rank_passes, reduce_gradients, scaled_backward, summed
from aha.training.logprobs import rollout_hidden, token_stats
from aha.training.optimizer import guarded_step
from aha.training.rl.batch import Batch, group_rows

log = logging.getLogger(__name__)
# mean |log pi_trainer - log pi_engine| over the sampled tokens, before any update of the step
GAP = "logprobs/engine_trainer_abs_diff"


@dataclass
class Learner:
    """What the update touches: the policy, its optimizer, the optional reference and critic, and
    the optional distillation teacher (frozen: only read)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    ref_model: torch.nn.Module | None = None
    critic: torch.nn.Module | None = None
    critic_optimizer: torch.optim.Optimizer | None = None
    teacher: torch.nn.Module | None = None  # algorithm.teacher: frozen, loaded on its own (never a policy copy)
    # with several learner ranks: the policy spread over them, which the update trains; `model` is then
    # rank 0's whole copy, which rollouts, rewards and the no-gradient log-probs read
    trained: torch.nn.Module | None = None
    trained_critic: torch.nn.Module | None = None  # likewise the critic, `critic` being rank 0's whole copy

    @property
    def updated(self) -> torch.nn.Module:
        """The module the optimizer steps (the policy itself on one process)."""
        return self.model if self.trained is None else self.trained

    @property
    def updated_critic(self) -> torch.nn.Module | None:
        return self.critic if self.trained_critic is None else self.trained_critic


@dataclass(frozen=True)
class Shape:
    """How to cut a batch for compute: fixed for the run."""

    group_size: int
    micro_batch_size: int  # rounded to whole groups; on each learner rank
    share_prompt: bool
    temperature: float
    dtype: torch.dtype
    ranks: Ranks = Ranks()  # the learner ranks sharing each optimizer step's micro-batches

    def temperature_of(self, rollouts, rows: slice) -> float | torch.Tensor:
        """The temperature rows were sampled at: the run's, or each row's own where a group
        mixes temperatures (rollout.temperatures)."""
        return self.temperature if rollouts.temperature is None else rollouts.temperature[rows]

    def micro_slices(self, n: int, ranks: int = 1):
        """Micro-batches of whole groups; ranks: over that many learner ranks, each micro-batch
        holds one per rank (rank_passes splits it)."""
        step = max(self.group_size, self.micro_batch_size // self.group_size * self.group_size) * ranks
        return [slice(s, min(s + step, n)) for s in range(0, n, step)]


def _width(batch: Batch) -> int:
    # drop columns that are padding in every row: they cost compute and carry nothing
    used = batch.rollouts.sequence_mask().sum(dim=0).nonzero()
    return int(used.max()) + 1 if len(used) else 1


@torch.no_grad()
def _per_token(batch: Batch, shape: Shape, module, backbone, head) -> torch.Tensor:
    """(N, T) head(hidden, rows, width) over the batch in micro-batches, without gradient."""
    ro, width = batch.rollouts, _width(batch)
    out = torch.zeros_like(ro.sampling_logprobs)
    module.eval()
    for sl in shape.micro_slices(len(ro)):
        with autocast(shape.dtype, backbone.device):
            hidden = rollout_hidden(backbone, ro, sl, width, shape.group_size, shape.share_prompt)
        out[sl, :width] = head(hidden, sl, width)
    return out


def forward_logprobs(model, batch: Batch, shape: Shape) -> torch.Tensor:
    """(N, T) log-probs of the batch's completions under model (no gradient)."""
    ro = batch.rollouts
    head = lambda hidden, sl, w: token_stats(model, hidden, ro.completion_ids[sl, :w], ro.completion_mask[sl, :w],
                                             shape.temperature_of(ro, sl)).logprobs
    return _per_token(batch, shape, model, model.base_model, head)


def forward_values(critic, batch: Batch, shape: Shape) -> torch.Tensor:
    """(N, T) critic values of the batch (no gradient)."""
    head = lambda hidden, sl, w: critic.values(hidden, batch.rollouts.completion_mask[sl, :w])
    return _per_token(batch, shape, critic, critic.backbone, head)


# algorithm.policy_loss -> (algo, logp, old, advantages, mask) -> (per-token loss, clip mask).
# A new loss is one entry here plus its name in the config's Literal (a test checks they agree).
POLICY_LOSSES = {
    "ppo": lambda algo, logp, old, advantages, mask:
        clipped_surrogate(logp, old, advantages, algo.clip_low, algo.clip_high, algo.dual_clip),
    "gspo": lambda algo, logp, old, advantages, mask:
        gspo_surrogate(logp, old, advantages, mask, algo.clip_low, algo.clip_high),
    "cispo": lambda algo, logp, old, advantages, mask:
        cispo_loss(logp, old, advantages, algo.clip_low, algo.clip_high),
    "pg": lambda algo, logp, old, advantages, mask: policy_gradient_loss(logp, advantages),
    "sapo": lambda algo, logp, old, advantages, mask:
        sapo_loss(logp, old, advantages, algo.sapo_tau_pos, algo.sapo_tau_neg),
    "gmpo": lambda algo, logp, old, advantages, mask:
        gmpo_loss(logp, old, advantages, mask, algo.clip_low, algo.clip_high),
}


def policy_loss(algo: AlgorithmConfig, logp, old, advantages, mask):
    """Per-token loss and clip mask of the configured policy loss."""
    if algo.policy_loss not in POLICY_LOSSES:
        raise ValueError(f"unknown policy loss {algo.policy_loss!r} (known: {', '.join(POLICY_LOSSES)})")
    return POLICY_LOSSES[algo.policy_loss](algo, logp, old, advantages, mask)


def _loss_mask(batch: Batch, algo: AlgorithmConfig, width: int) -> torch.Tensor:
    mask = batch.rollouts.completion_mask[:, :width]
    if algo.mask_truncated:  # DAPO's overlong filtering: cut-off answers teach nothing
        mask = mask * (~batch.rollouts.truncated).float().unsqueeze(1)
    return mask


def _critic_backward(learner: Learner, batch: Batch, algo: AlgorithmConfig, shape: Shape, sl: slice, width: int,
                     mask: torch.Tensor, norm: LossNorm, totals: dict, factor: float) -> None:
    """The critic's clipped value loss on one micro-batch, backpropagated (times factor: see
    rank_passes), added to totals."""
    ro, critic = batch.rollouts, learner.updated_critic
    with autocast(shape.dtype, critic.backbone.device):
        c_hidden = rollout_hidden(critic.backbone, ro, sl, width, shape.group_size, shape.share_prompt)
    values = critic.values(c_hidden, ro.completion_mask[sl, :width])
    v_tok, v_clipped = clipped_value_loss(values, batch.old_values[sl, :width], batch.returns[sl, :width],
                                          algo.value_clip)
    v_loss = aggregate(v_tok, mask, "token_mean", norm)
    scaled_backward(v_loss, factor)
    if not factor:
        return
    totals["loss/value"] += float(v_loss.detach())
    totals["value/clip_frac"] += float(aggregate(v_clipped.detach().float(), mask, "token_mean", norm))


def _optimizer_step(learner: Learner, batch: Batch, algo: AlgorithmConfig, shape: Shape, max_grad_norm: float,
                    loss_constant: float) -> dict:
    """One optimizer step on a (mini-)batch, accumulated over micro-batches. Every logged
    loss is the batch value of the term that was differentiated."""
    ro, width = batch.rollouts, _width(batch)
    mask = _loss_mask(batch, algo, width)
    norm = LossNorm.of(mask, loss_constant)
    entropy_mode = "grad" if algo.entropy_coef else "detached"
    # the reference's log-probs came with the batch (rank 0 computes them: other ranks hold no reference)
    kl_in_loss = batch.ref_logprobs is not None and algo.kl_in == "loss"
    totals = dict.fromkeys(["loss/total", "loss/policy", "policy/clip_frac", "policy/ratio_mean", "kl/old", "entropy",
                            GAP,
                            *(["loss/kl", "kl/ref"] if kl_in_loss else []),
                            *(["loss/value", "value/clip_frac"] if learner.critic is not None else [])], 0.0)
    model, ranks = learner.updated, shape.ranks
    model.train()
    learner.optimizer.zero_grad(set_to_none=True)
    if learner.critic is not None:
        learner.updated_critic.train()
        learner.critic_optimizer.zero_grad(set_to_none=True)
    for sl, factor in rank_passes(shape.micro_slices(len(ro), ranks.world_size), ranks, unit=shape.group_size):
        m = mask[sl]
        # this micro-batch's share of a token mean over the whole (mini-)batch, for logging
        batch_mean = lambda values: float(aggregate(values.detach().float(), m, "token_mean", norm))
        with autocast(shape.dtype, model.device):
            hidden = rollout_hidden(model.base_model, ro, sl, width, shape.group_size, shape.share_prompt)
        stats = token_stats(model, hidden, ro.completion_ids[sl, :width], ro.completion_mask[sl, :width],
                            shape.temperature_of(ro, sl), entropy_mode, grad_dtype=shape.dtype)
        logp, old = stats.logprobs, batch.old_logprobs[sl, :width]
        loss_tok, clipped = policy_loss(algo, logp, old, batch.advantages[sl, :width], m)
        if batch.is_weights is not None:
            loss_tok = loss_tok * batch.is_weights[sl, :width]
        pg = aggregate(loss_tok, m, algo.loss_agg, norm)
        total = pg
        if algo.entropy_coef:
            total = total - algo.entropy_coef * aggregate(stats.entropy, m, algo.loss_agg, norm)
        if kl_in_loss:
            kl_tok = kl_estimate(logp, batch.ref_logprobs[sl, :width], algo.kl_estimator)
            kl = aggregate(kl_tok, m, algo.loss_agg, norm)
            total = total + algo.kl_coef * kl
        scaled_backward(total, factor)
        if learner.critic is not None:
            _critic_backward(learner, batch, algo, shape, sl, width, m, norm, totals, factor)
        if not factor:  # a repeated pass only meets the other ranks' collectives: no result
            continue
        if kl_in_loss:
            totals["loss/kl"] += float(kl.detach())
            totals["kl/ref"] += batch_mean(kl_tok)
        totals["loss/total"] += float(total.detach())
        totals["loss/policy"] += float(pg.detach())
        totals["entropy"] += batch_mean(stats.entropy)
        totals["policy/clip_frac"] += batch_mean(clipped)
        totals["policy/ratio_mean"] += batch_mean(torch.exp(logp - old))
        totals["kl/old"] += batch_mean(kl_estimate(logp, old, "k3"))
        totals[GAP] += batch_mean((logp.detach() - ro.sampling_logprobs[sl, :width]).abs())
    totals = _apply_gradients(learner, summed(totals, ranks), max_grad_norm, ranks)
    totals["tokens/trained"] = int(norm.num_tokens)
    return totals


def _apply_gradients(learner: Learner, totals: dict, max_grad_norm: float, ranks: Ranks) -> dict:
    """The accumulated gradients of the policy (and critic) reduced over the ranks, clipped
    and applied unless not finite; totals (the step's losses over all ranks) gain the norms
    and skip counts."""
    model = learner.updated
    reduce_gradients(model.parameters(), ranks)
    totals["grad_norm"] = clip_gradients(model.parameters(), max_grad_norm, ranks)
    totals["train/skipped_updates"] = guarded_step(learner.optimizer, "policy", totals["loss/total"],
                                                   totals["grad_norm"])
    model.eval()
    if learner.critic is not None:
        critic = learner.updated_critic
        reduce_gradients(critic.parameters(), ranks)
        totals["value/grad_norm"] = clip_gradients(critic.parameters(), max_grad_norm, ranks)
        totals["value/skipped_updates"] = guarded_step(learner.critic_optimizer, "critic", totals["loss/value"],
                                                        totals["value/grad_norm"])
        critic.eval()
    return totals


def policy_update(learner: Learner, batch: Batch, algo: AlgorithmConfig, shape: Shape, max_grad_norm: float,
                  loss_constant: float) -> dict:
    """algo.epochs passes over the batch, each split into algo.mini_batches optimizer steps of
    whole groups (shuffled between passes). The importance ratio is always taken against
    batch.old_logprobs, fixed before the first step. Metrics are means over optimizer steps,
    plus the first step's loss (on-policy: its ratio is 1 up to engine/trainer mismatch), and
    `train/skipped_updates` (`value/skipped_updates`) counts the optimizer steps dropped for a
    NaN/inf loss or gradient norm."""
    G = shape.group_size
    num_groups = len(batch) // G
    parts = min(algo.mini_batches, num_groups)
    steps = []
    for _ in range(algo.epochs):
        order = torch.randperm(num_groups) if (algo.epochs > 1 or parts > 1) else torch.arange(num_groups)
        for chunk in torch.tensor_split(order, parts):
            mini = batch.select(group_rows(chunk, G))
            steps.append(_optimizer_step(learner, mini, algo, shape, max_grad_norm, loss_constant))
    metrics = {k: sum(s[k] for s in steps) / len(steps) for k in steps[0]}
    metrics["tokens/trained"] = sum(s["tokens/trained"] for s in steps) // algo.epochs
    for key in ("train/skipped_updates", "value/skipped_updates"):
        if key in metrics:  # a count of optimizer steps, not a mean
            metrics[key] = sum(s[key] for s in steps)
    metrics["loss/total_first_step"] = steps[0]["loss/total"]
    # the first optimizer step's alone: after it the policy is no longer the one that sampled (with
    # old_logprobs=trainer, prepare measured it over the whole batch)
    del metrics[GAP]
    if algo.old_logprobs == "engine":
        metrics[GAP] = steps[0][GAP]
    metrics["optimizer_steps"] = len(steps)
    return metrics
