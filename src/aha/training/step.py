"""One RL step's two halves: collect scored groups of rollouts, then update the policy."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from aha.algorithms import clipped_surrogate, grpo_advantages, kl_k3, token_mean
from aha.algorithms.advantages import zero_variance_groups
from aha.config import RolloutConfig, TrainConfig
from aha.rewards import CompositeReward
from aha.rollout import HFEngine, Rollouts
from aha.rollout.hf_engine import concat_rollouts
from aha.tasks import PromptSampler, Task, encode_prompts
from aha.training.logprobs import completion_logprobs, grouped_completion_logprobs
from aha.training.precision import autocast


@dataclass
class Batch:
    """The groups a step trains on, and statistics over everything sampled for it."""

    rollouts: Rollouts  # only the kept groups, group_size consecutive rows each
    advantages: torch.Tensor  # (N,) one per sequence
    stats: dict = field(default_factory=dict)


def collect(engine: HFEngine, task: Task, sampler: PromptSampler, reward: CompositeReward,
            rollout: RolloutConfig, train: TrainConfig) -> tuple[Batch, list[dict]]:
    """Sample groups; with dynamic sampling, drop groups whose rewards are all equal (zero
    advantage, no gradient) and sample more prompts, up to train.max_rounds rounds, until
    prompts_per_step informative groups are found (DAPO, Yu et al. 2025).

    Returns the batch and a few example records for samples.jsonl."""
    G = rollout.group_size
    kept: list[tuple[Rollouts, torch.Tensor]] = []
    all_rewards, all_lengths, all_truncated, components, failed = [], [], [], {}, 0
    zero_var = groups_seen = kept_groups = 0
    examples: list[dict] = []
    for _ in range(train.max_rounds if train.dynamic_sampling else 1):
        prompts_needed = rollout.prompts_per_step - kept_groups
        chosen = sampler.next(rollout.prompts_per_step)
        rollouts = engine.generate(encode_prompts(engine.tokenizer, task, chosen), group_size=G)
        seq_samples = [chosen[i] for i in rollouts.prompt_index.tolist()]
        result = reward.score(rollouts.texts, seq_samples)
        if train.truncated_reward is not None:
            # an answer that never ends is not an answer (DAPO's overlong shaping, in its
            # simplest form): this teaches the policy to stop, which also shortens steps
            result.total = torch.where(rollouts.truncated, torch.tensor(train.truncated_reward), result.total)
        all_rewards.append(result.total)
        all_lengths.append(rollouts.lengths())
        all_truncated.append(rollouts.truncated.float())
        failed += int(result.failed.sum())
        for name, values in result.components.items():
            components.setdefault(name, []).append(values)
        if not examples:
            examples = [{"prompt": seq_samples[i]["prompt"], "answer": seq_samples[i]["answer"],
                         "completion": rollouts.texts[i], "reward": float(result.total[i]),
                         **{k: float(v[i]) for k, v in result.components.items()}}
                        for i in range(0, len(rollouts), max(1, G))]
        grouped = result.total.view(-1, G)
        advantages = grpo_advantages(grouped, train.advantage_scale).view(-1)
        flat = zero_variance_groups(grouped)
        groups_seen += grouped.shape[0]
        zero_var += int(flat.sum())
        keep = ~flat if train.dynamic_sampling else torch.ones_like(flat)
        keep_groups = keep.nonzero().view(-1)[:prompts_needed]
        rows = (keep_groups.view(-1, 1) * G + torch.arange(G)).view(-1)
        if len(rows):
            kept.append((rollouts.select(rows), advantages[rows]))
            kept_groups += len(keep_groups)
        if kept_groups >= rollout.prompts_per_step:
            break
    rewards = torch.cat(all_rewards)
    stats = {
        "reward/mean": float(rewards.mean()),
        "reward/std": float(rewards.std()) if len(rewards) > 1 else 0.0,
        **{f"reward/{k}": float(torch.cat(v).mean()) for k, v in components.items()},
        "reward/failed": failed,
        "length/mean": float(torch.cat(all_lengths).mean()),
        "length/truncated_frac": float(torch.cat(all_truncated).mean()),
        "groups/sampled": groups_seen,
        "groups/zero_variance_frac": zero_var / max(groups_seen, 1),
        "groups/trained": kept_groups,
    }
    if not kept:
        return Batch(None, torch.zeros(0), stats), examples
    return Batch(concat_rollouts([k[0] for k in kept], engine.pad_id), torch.cat([k[1] for k in kept]), stats), examples


def _logprobs(model, ro: Rollouts, sl: slice, width: int, group_size: int, share_prompt: bool,
              temperature: float) -> torch.Tensor:
    completion, mask = ro.completion_ids[sl, :width], ro.completion_mask[sl, :width]
    if share_prompt:
        # rows come in whole groups (micro-batches are group-aligned): one prompt row per group
        return grouped_completion_logprobs(model, ro.prompt_ids[sl][::group_size], ro.prompt_mask[sl][::group_size],
                                           completion, mask, group_size, temperature)
    return completion_logprobs(model, ro.prompt_ids[sl], ro.prompt_mask[sl], completion, mask, temperature)


def policy_update(model, ref_model, optimizer, batch: Batch, train: TrainConfig, group_size: int,
                  temperature: float, dtype: torch.dtype) -> dict:
    """One optimizer step on the batch: clipped surrogate (+ k3 KL to the reference),
    token-mean over the whole batch, accumulated over micro-batches, grad-norm clipped."""
    ro = batch.rollouts
    # micro-batches hold whole groups, so each group's prompt can be run once
    micro = max(group_size, train.micro_batch_size // group_size * group_size)
    # drop columns that are padding in every row: they cost compute and carry nothing
    width = int(ro.completion_mask.sum(dim=0).nonzero().max()) + 1
    mask = ro.completion_mask[:, :width]
    num_tokens = float(mask.sum())
    model.train()
    optimizer.zero_grad(set_to_none=True)
    totals = {"loss/policy": 0.0, "loss/clip_frac": 0.0, "kl/old": 0.0, "kl/ref": 0.0}
    for start in range(0, len(ro), micro):
        sl = slice(start, start + micro)
        m = mask[sl]
        args = (ro, sl, width, group_size, train.share_prompt, temperature)
        with autocast(dtype):
            logp = _logprobs(model, *args)
        old = ro.sampling_logprobs[sl, :width]
        loss_tok, clipped = clipped_surrogate(logp, old, batch.advantages[sl].unsqueeze(1), train.clip_low, train.clip_high)
        loss = token_mean(loss_tok, m, num_tokens)
        totals["loss/policy"] += float(loss.detach())
        totals["loss/clip_frac"] += float((clipped.float() * m).sum()) / num_tokens
        totals["kl/old"] += float(token_mean(kl_k3(logp.detach(), old), m, num_tokens))
        if ref_model is not None:
            with torch.no_grad(), autocast(dtype):
                ref_logp = _logprobs(ref_model, *args)
            kl = token_mean(kl_k3(logp, ref_logp), m, num_tokens)
            totals["kl/ref"] += float(kl.detach())
            loss = loss + train.kl_coef * kl
        loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), train.max_grad_norm)
    optimizer.step()
    model.eval()
    if ref_model is None:
        del totals["kl/ref"]
    return {**totals, "grad_norm": float(grad_norm), "tokens/trained": int(num_tokens)}
