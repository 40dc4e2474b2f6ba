"""Advantage estimators: how much better each sampled token or sequence was than expected.

Sequence-level estimators take rewards shaped (num_prompts, group_size) and return the same
shape; the trainer broadcasts them over each completion's tokens. Token-level estimators
take (N, T) per-token rewards and a (N, T) mask of valid completion tokens.
"""

import torch

SCALES = ("std", "none")


def _check_groups(rewards: torch.Tensor, min_size: int, name: str) -> None:
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be (num_prompts, group_size), got shape {tuple(rewards.shape)}")
    if rewards.shape[1] < min_size:
        raise ValueError(f"{name} needs group_size >= {min_size}, got {rewards.shape[1]}")


def grpo_advantages(rewards: torch.Tensor, scale: str = "std", eps: float = 1e-6) -> torch.Tensor:
    """Advantages of G samples per prompt relative to their own group.

    rewards: (num_prompts, group_size) scalar reward of each completion.
    scale="std":  (r - mean) / (std + eps), GRPO (Shao et al. 2024). std is the unbiased
                  (Bessel-corrected) group std, as in TRL and verl.
    scale="none": r - mean, Dr. GRPO (Liu et al. 2025): no division, so easy and hard
                  prompts are not re-weighted by their reward spread.
    A group whose rewards are all equal gets zero advantage under both.
    """
    if scale not in SCALES:
        raise ValueError(f"unknown advantage scale {scale!r}; choose one of {SCALES}")
    _check_groups(rewards, 2 if scale == "std" else 1, f"scale={scale!r}")
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    if scale == "none":
        return centered
    return centered / (rewards.std(dim=1, keepdim=True) + eps)


def rloo_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """REINFORCE leave-one-out (Ahmadian et al. 2024): r_i - mean of the other G-1 rewards.

    The baseline excludes the sample itself, so it is independent of that sample's action and
    the estimate is unbiased. Equals G/(G-1) * (r_i - group mean)."""
    _check_groups(rewards, 2, "RLOO")
    G = rewards.shape[1]
    others_mean = (rewards.sum(dim=1, keepdim=True) - rewards) / (G - 1)
    return rewards - others_mean


def remax_advantages(rewards: torch.Tensor, greedy_rewards: torch.Tensor) -> torch.Tensor:
    """ReMax (Li et al. 2024): the baseline is the reward of the prompt's greedy completion.

    rewards: (num_prompts, G); greedy_rewards: (num_prompts,)."""
    _check_groups(rewards, 1, "ReMax")
    if greedy_rewards.shape != rewards.shape[:1]:
        raise ValueError(f"greedy_rewards must be (num_prompts,) = {tuple(rewards.shape[:1])}, got {tuple(greedy_rewards.shape)}")
    return rewards - greedy_rewards.unsqueeze(1)


def zero_variance_groups(rewards: torch.Tensor) -> torch.Tensor:
    """(num_prompts,) bool: groups whose samples all got the same reward.

    Their group-relative advantages are all zero, so they carry no policy gradient (DAPO's
    dynamic sampling drops them rather than diluting the token mean with them)."""
    return (rewards.max(dim=1).values - rewards.min(dim=1).values) == 0


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of values over the valid positions of mask (0 when there are none)."""
    return (values * mask).sum() / mask.sum().clamp(min=1)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the valid tokens of the whole batch (unbiased std); padding -> 0."""
    n = mask.sum()
    if n < 2:
        return values * 0
    mean = (values * mask).sum() / n
    var = (((values - mean) * mask) ** 2).sum() / (n - 1)
    return (values - mean) / torch.sqrt(var + eps) * mask


def discounted_returns(token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """G_t = sum_{s >= t} gamma^(s-t) r_s over each row's valid tokens."""
    returns = torch.zeros_like(token_rewards)
    running = torch.zeros(token_rewards.shape[0], dtype=token_rewards.dtype)
    for t in reversed(range(token_rewards.shape[1])):
        running = (token_rewards[:, t] + gamma * running) * mask[:, t]
        returns[:, t] = running
    return returns


def reinforce_pp_advantages(token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
                            group_size: int | None = None) -> torch.Tensor:
    """REINFORCE++ (Hu 2025): discounted return-to-go of per-token rewards (outcome reward on
    the last token, minus any per-token KL penalty), normalised over all valid tokens of the
    global batch rather than per group.

    group_size: REINFORCE++-baseline: first subtract the mean full-sequence return of each
    group of group_size consecutive rows, then normalise globally."""
    returns = discounted_returns(token_rewards, mask, gamma)
    if group_size is not None:
        seq_returns = returns[:, 0].view(-1, group_size)
        baseline = seq_returns.mean(dim=1).repeat_interleave(group_size).unsqueeze(1)
        returns = (returns - baseline) * mask
    return masked_whiten(returns, mask)


def gae_advantages(token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                   gamma: float = 1.0, lam: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016) over completion tokens.

    values[:, t] is the critic's estimate before token t is sampled; the state after the last
    valid token is terminal (value 0). delta_t = r_t + gamma V_{t+1} - V_t,
    A_t = sum_k (gamma lam)^k delta_{t+k}. Returns (advantages, returns = A + V), zero on padding.
    With gamma = lam = 1 (Open-Reasoner-Zero) A_t = (sum of rewards from t) - V_t."""
    N, T = token_rewards.shape
    advantages = torch.zeros_like(token_rewards)
    next_adv = torch.zeros(N, dtype=token_rewards.dtype)
    for t in reversed(range(T)):
        next_mask = mask[:, t + 1] if t + 1 < T else torch.zeros(N, dtype=mask.dtype)
        next_value = values[:, t + 1] * next_mask if t + 1 < T else torch.zeros(N, dtype=values.dtype)
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        next_adv = (delta + gamma * lam * next_adv * next_mask) * mask[:, t]
        advantages[:, t] = next_adv
    return advantages, (advantages + values) * mask


def ktae_token_weights(completion_ids: torch.Tensor, mask: torch.Tensor, seq_advantages: torch.Tensor,
                       group_size: int, alpha: float = 0.5) -> torch.Tensor:
    """Token weights in the spirit of KTAE (Sun et al. 2025): within a group, a token that
    appears in more of the better-than-average rollouts than of the worse ones is a "key"
    token for success, and the reverse for failure.

    For each group and token id v: d(v) = (share of positive-advantage rollouts containing v)
    - (share of negative-advantage rollouts containing v), in [-1, 1]. A token t of a rollout
    with advantage A gets weight 1 + alpha * sign(A) * d(v_t), in [1 - alpha, 1 + alpha]: a
    winning rollout's success tokens and a losing rollout's failure tokens count more, and no
    token's advantage changes sign (alpha <= 1). KTAE itself scores the 2x2 contingency
    table with Fisher's exact test and information gain; this keeps only its direction score.

    completion_ids, mask: (N, T); seq_advantages: (N,). Returns (N, T) weights (1 on padding)."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    N, T = completion_ids.shape
    weights = torch.ones(N, T)
    vocab = int(completion_ids.max()) + 1 if completion_ids.numel() else 1
    for start in range(0, N, group_size):
        rows = slice(start, start + group_size)
        ids, valid, adv = completion_ids[rows], mask[rows].bool(), seq_advantages[rows]
        present = torch.zeros(ids.shape[0], vocab)
        for i in range(ids.shape[0]):
            present[i, ids[i][valid[i]]] = 1.0
        pos, neg = adv > 0, adv < 0
        share = lambda sel: present[sel].mean(dim=0) if sel.any() else torch.zeros(vocab)
        direction = share(pos) - share(neg)  # (vocab,)
        weights[rows] = torch.where(valid, 1.0 + alpha * torch.sign(adv).unsqueeze(1) * direction[ids], 1.0)
    return weights
