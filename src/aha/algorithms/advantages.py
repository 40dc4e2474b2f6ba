"""Advantage estimators: how much better each sampled token or sequence was than expected.

Sequence-level estimators take rewards shaped (num_prompts, group_size) and return the same
shape; the trainer broadcasts them over each completion's tokens. Token-level estimators
take (N, T) per-token rewards and a (N, T) 0/1 mask of valid completion tokens.

Guards shared by every estimator here:
- a non-finite reward (NaN, +-inf: a crashed or buggy reward function) gets advantage 0 and
  is left out of its group's mean, std and baseline, so it cannot poison the other samples;
- a group whose finite rewards are all equal gets exactly 0, in any dtype (the mean of
  [0.1] * 8 in float32 is not exactly 0.1, and dividing that ulp by std + eps gave +-0.1);
- padding is selected away with torch.where, never multiplied by 0 (NaN * 0 = NaN).
"""

import torch

SCALES = ("std", "none")


def _check_groups(rewards: torch.Tensor, min_size: int, name: str) -> None:
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be (num_prompts, group_size), got shape {tuple(rewards.shape)}")
    if rewards.shape[1] < min_size:
        raise ValueError(f"{name} needs group_size >= {min_size}, got {rewards.shape[1]}")


def _check_mask(values: torch.Tensor, mask: torch.Tensor, name: str = "values") -> None:
    if values.shape != mask.shape:
        raise ValueError(f"{name} and mask must have the same shape, got {name} {tuple(values.shape)} "
                         f"and mask {tuple(mask.shape)}")


def finite_reward_mask(rewards: torch.Tensor) -> torch.Tensor:
    """Bool mask of the rewards that take part in advantages: the finite ones. A NaN or
    infinite reward says the reward function broke on that sample, not how good it was."""
    return torch.isfinite(rewards)


def _all_equal(values: torch.Tensor, valid: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """True where the valid values (along dim, or all of them) are all equal, or there are
    none. A valid NaN is equal to nothing, so it is never hidden as a flat group."""
    hi = torch.where(valid, values, float("-inf"))
    lo = torch.where(valid, values, float("inf"))
    if dim is None:
        return (hi.max() == lo.min()) | ~valid.any()
    return (hi.amax(dim=dim) == lo.amin(dim=dim)) | ~valid.any(dim=dim)


def _group_mean(rewards: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(count, mean) of each group's valid rewards, shaped (num_prompts, 1); mean 0 for an empty group."""
    count = valid.sum(dim=1, keepdim=True)
    total = torch.where(valid, rewards, 0).sum(dim=1, keepdim=True)
    return count, total / count.clamp(min=1)


def grpo_advantages(rewards: torch.Tensor, scale: str = "std", eps: float = 1e-6) -> torch.Tensor:
    """Advantages of G samples per prompt relative to their own group.

    rewards: (num_prompts, group_size) scalar reward of each completion.
    scale="std":  (r - mean) / (std + eps), GRPO (Shao et al. 2024). std is the unbiased
                  (Bessel-corrected) group std, as in TRL and verl.
    scale="none": r - mean, Dr. GRPO (Liu et al. 2025): no division, so easy and hard
                  prompts are not re-weighted by their reward spread.
    A group whose finite rewards are all equal gets exactly zero advantage under both, in
    any dtype. A non-finite reward gets 0 and is left out of its group's mean and std."""
    if scale not in SCALES:
        raise ValueError(f"unknown advantage scale {scale!r}; choose one of {SCALES}")
    _check_groups(rewards, 2 if scale == "std" else 1, f"scale={scale!r}")
    valid = finite_reward_mask(rewards)
    count, mean = _group_mean(rewards, valid)
    spread = valid & ~_all_equal(rewards, valid, dim=1).unsqueeze(1)
    centered = torch.where(spread, rewards - mean, 0)
    if scale == "none":
        return centered
    std = torch.sqrt((centered**2).sum(dim=1, keepdim=True) / (count - 1).clamp(min=1))
    return torch.where(spread, centered / (std + eps), 0)


def rloo_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """REINFORCE leave-one-out (Ahmadian et al. 2024): r_i - mean of the other G-1 rewards.

    The baseline excludes the sample itself, so it is independent of that sample's action and
    the estimate is unbiased. Equals G/(G-1) * (r_i - group mean). Non-finite rewards are
    left out (G counts the finite ones) and get 0, as does a sample with no finite other
    and every sample of a group whose finite rewards are all equal."""
    _check_groups(rewards, 2, "RLOO")
    valid = finite_reward_mask(rewards)
    count = valid.sum(dim=1, keepdim=True)
    others_mean = (torch.where(valid, rewards, 0).sum(dim=1, keepdim=True) - rewards) / (count - 1).clamp(min=1)
    spread = valid & (count > 1) & ~_all_equal(rewards, valid, dim=1).unsqueeze(1)
    return torch.where(spread, rewards - others_mean, 0)


def remax_advantages(rewards: torch.Tensor, greedy_rewards: torch.Tensor) -> torch.Tensor:
    """ReMax (Li et al. 2024): the baseline is the reward of the prompt's greedy completion.

    rewards: (num_prompts, G); greedy_rewards: (num_prompts,). A non-finite reward gets 0;
    so does every sample of a prompt whose greedy reward is non-finite (no baseline)."""
    _check_groups(rewards, 1, "ReMax")
    if greedy_rewards.shape != rewards.shape[:1]:
        raise ValueError(f"greedy_rewards must be (num_prompts,) = {tuple(rewards.shape[:1])}, got "
                         f"{tuple(greedy_rewards.shape)}")
    baseline = greedy_rewards.unsqueeze(1)
    valid = finite_reward_mask(rewards) & finite_reward_mask(baseline)
    return torch.where(valid, rewards - baseline, 0)


def zero_variance_groups(rewards: torch.Tensor) -> torch.Tensor:
    """(num_prompts,) bool: groups whose samples all got the same finite reward (non-finite
    rewards are ignored, so a NaN never makes a group look informative; a group with no
    finite reward counts as flat).

    Their group-relative advantages are all zero, so they carry no policy gradient (DAPO's
    dynamic sampling drops them rather than diluting the token mean with them)."""
    return _all_equal(rewards, finite_reward_mask(rewards), dim=1)


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of values over the valid positions of a 0/1 mask (0 when there are none).
    Padding is selected away, so a NaN or inf there changes nothing."""
    return torch.where(mask.bool(), values, 0).sum() / mask.sum().clamp(min=1)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the valid tokens of the whole batch (unbiased std); padding -> 0.
    Fewer than two valid tokens, or valid tokens all equal: exactly 0."""
    _check_mask(values, mask)
    valid = mask.bool()
    n = valid.sum()
    if n < 2 or _all_equal(values, valid):
        return torch.zeros_like(values)
    mean = torch.where(valid, values, 0).sum() / n
    centered = torch.where(valid, values - mean, 0)
    var = (centered**2).sum() / (n - 1)
    return centered / torch.sqrt(var + eps)


def _finite_rows(token_rewards: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows whose valid tokens' rewards are all finite, (N,) bool; the mask without the other rows)."""
    _check_mask(token_rewards, mask, "token_rewards")
    rows = torch.where(mask.bool(), torch.isfinite(token_rewards), True).all(dim=1)
    return rows, mask * rows.unsqueeze(1).to(mask.dtype)


def discounted_returns(token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """G_t = sum_{s >= t} gamma^(s-t) r_s over each row's valid tokens, s and t counted in
    valid tokens: a gap in the mask (the environment's turn in a multi-turn episode) passes
    the return through undiscounted, and its own entries are 0."""
    returns = torch.zeros_like(token_rewards)
    running = torch.zeros(token_rewards.shape[0], dtype=token_rewards.dtype)
    for t in reversed(range(token_rewards.shape[1])):
        valid = mask[:, t].bool()
        running = torch.where(valid, token_rewards[:, t] + gamma * running, running)
        returns[:, t] = torch.where(valid, running, 0)
    return returns


def reinforce_pp_advantages(token_rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
                            group_size: int | None = None) -> torch.Tensor:
    """REINFORCE++ (Hu 2025): discounted return-to-go of per-token rewards (outcome reward on
    the last token, minus any per-token KL penalty), normalised over all valid tokens of the
    global batch rather than per group.

    group_size: REINFORCE++-baseline: first subtract the mean full-sequence return of each
    group of group_size consecutive rows, then normalise globally.

    A row with a non-finite reward on a valid token gets 0 and is left out of its group's
    baseline and of the global mean and std; a group whose rows' returns are all equal has
    its baseline subtracted exactly."""
    rows, mask = _finite_rows(token_rewards, mask)
    returns = discounted_returns(torch.where(mask.bool(), token_rewards, 0), mask, gamma)
    if group_size is not None:
        seq_returns, seq_valid = returns[:, 0].view(-1, group_size), rows.view(-1, group_size)
        _, mean = _group_mean(seq_returns, seq_valid)
        # all equal: the common value itself, so that r - baseline is exactly 0
        common = torch.where(seq_valid, seq_returns, float("-inf")).amax(dim=1, keepdim=True)
        baseline = torch.where(_all_equal(seq_returns, seq_valid, dim=1).unsqueeze(1), common, mean)
        returns = torch.where(mask.bool(), returns - baseline.repeat_interleave(group_size, dim=0), 0)
    return masked_whiten(returns, mask)


def gae_advantages(token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                   gamma: float = 1.0, lam: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016) over completion tokens.

    values[:, t] is the critic's estimate before token t is sampled; the state after the last
    valid token is terminal (value 0), and a gap in the mask (an environment's turn) is
    stepped over: V_{t+1} is that of the next valid token. delta_t = r_t + gamma V_{t+1} - V_t,
    A_t = sum_k (gamma lam)^k delta_{t+k}. Returns (advantages, returns = A + V), zero on padding.
    With gamma = lam = 1 (Open-Reasoner-Zero) A_t = (sum of rewards from t) - V_t.
    A row with a non-finite reward on a valid token gets advantage 0 and returns = values
    (its value target does not move)."""
    N, T = token_rewards.shape
    full_mask = mask
    _, mask = _finite_rows(token_rewards, mask)
    valid = mask.bool()
    advantages = torch.zeros_like(token_rewards)
    # the value and advantage of each row's next valid token (0 past its last): a gap in the
    # mask (the environment's turn in a multi-turn episode) is not a step of the policy, so
    # the next state the policy acts in is the one after the gap
    next_value = torch.zeros(N, dtype=values.dtype)
    next_adv = torch.zeros(N, dtype=token_rewards.dtype)
    for t in reversed(range(T)):
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        adv = delta + gamma * lam * next_adv
        advantages[:, t] = torch.where(valid[:, t], adv, 0)
        next_adv = torch.where(valid[:, t], adv, next_adv)
        next_value = torch.where(valid[:, t], values[:, t], next_value)
    return advantages, torch.where(full_mask.bool(), advantages + values, 0)


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
