"""What an engine returns (Rollouts: token ids, masks, sampling log-probs, text) and the
padding helpers that stack them. The learner's batches are built from these; engines and
training both import this module, and it imports neither."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class Rollouts:
    """N sampled sequences. Prompts are left-padded, completions right-padded.

    completion_mask covers each completion up to and including its EOS token: the tokens the
    policy sampled, the ones it is trained on. In a multi-turn episode (aha.envs) the
    completion also holds what the environment said between turns (observation_mask): those
    tokens are in the sequence the learner reads, but no loss or advantage falls on them.
    sampling_logprobs are log pi(token | prefix) at the sampling temperature, computed by
    the engine at sampling time; the learner uses them as the "old" policy."""

    prompt_ids: torch.Tensor  # (N, P) long
    prompt_mask: torch.Tensor  # (N, P) long
    completion_ids: torch.Tensor  # (N, T) long
    completion_mask: torch.Tensor  # (N, T) float
    sampling_logprobs: torch.Tensor  # (N, T) float
    prompt_index: torch.Tensor  # (N,) long: which input prompt each sequence answers
    texts: list[str]
    truncated: torch.Tensor  # (N,) bool: hit max_new_tokens without EOS
    # (N, T) KL(uniform || p) of each next-token distribution at temperature 1, the
    # per-token self-certainty of Kang et al. 2025; only from an engine made with
    # self_certainty=True (evaluation), None otherwise
    certainty: torch.Tensor | None = None
    # (N,) bool: rows an early stop left going (generate_partial), their tokens so far; None
    # from generate, where every row runs to its stop token or the budget
    unfinished: torch.Tensor | None = None
    # (N, T) float: 1 on completion tokens the environment wrote (a multi-turn episode's
    # observations); None for single-turn completions, where every token is the policy's
    observation_mask: torch.Tensor | None = None
    # (N,) the temperature each row was sampled at, where a group mixes temperatures
    # (rollout.temperatures); None: all at the engine's one
    temperature: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def lengths(self) -> torch.Tensor:
        """Tokens each row's policy sampled (an episode's observations not counted)."""
        return self.completion_mask.sum(dim=1)

    def sequence_mask(self) -> torch.Tensor:
        """(N, T) the completion tokens in the sequence: the policy's and the environment's.
        The learner attends to (and positions) these; it trains on completion_mask only."""
        if self.observation_mask is None:
            return self.completion_mask
        return self.completion_mask + self.observation_mask

    def select(self, index: torch.Tensor) -> "Rollouts":
        index = index.long()
        return Rollouts(
            self.prompt_ids[index], self.prompt_mask[index], self.completion_ids[index],
            self.completion_mask[index], self.sampling_logprobs[index], self.prompt_index[index],
            [self.texts[i] for i in index.tolist()], self.truncated[index],
            None if self.certainty is None else self.certainty[index],
            None if self.unfinished is None else self.unfinished[index],
            None if self.observation_mask is None else self.observation_mask[index],
            None if self.temperature is None else self.temperature[index],
        )


@dataclass(frozen=True)
class PartialRound:
    """A sampling round that may stop before every completion is finished (APRIL's partial
    rollouts): prompt i is sampled copies[i] times with at most budgets[i] new tokens, its
    completions belonging to group groups[i] (a group may span several prompts: a carried
    group's rows each continue from their own prefix). Sampling stops once `enough` groups
    have every completion finished; the rows still going then come back with their tokens so
    far and Rollouts.unfinished set."""

    copies: list[int]
    budgets: list[int]
    groups: list[int]
    enough: int

    def __post_init__(self):
        if not len(self.copies) == len(self.budgets) == len(self.groups):
            raise ValueError("PartialRound: copies, budgets and groups need one entry a prompt")
        if min(self.copies, default=1) < 1 or min(self.budgets, default=1) < 1:
            raise ValueError("PartialRound: every prompt needs at least one copy and one token of budget")


def left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r):] = 1
    return ids, mask


def rollouts_from_samples(prompts: list[list[int]], samples: list[tuple[list[int], list[float]]],
                          truncated: list[bool], prompt_index: torch.Tensor, tokenizer, pad_id: int,
                          unfinished: list[bool] | None = None) -> Rollouts:
    """Rollouts of samples given as lists: each row's prompt, its completion's token ids and
    their sampling log-probs (a row's completion is all valid: up to its stop token, its
    budget, or where an early stop left it)."""
    width = max(1, max(len(ids) for ids, _ in samples))
    completion = torch.full((len(samples), width), pad_id, dtype=torch.long)
    mask, logprobs = torch.zeros(len(samples), width), torch.zeros(len(samples), width)
    for i, (ids, lps) in enumerate(samples):
        completion[i, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        mask[i, :len(ids)] = 1.0
        logprobs[i, :len(lps)] = torch.tensor(lps, dtype=torch.float32)
    prompt_ids, prompt_mask = left_pad(prompts, pad_id)
    return Rollouts(prompt_ids, prompt_mask, completion, mask, logprobs, prompt_index,
                    tokenizer.batch_decode(completion, skip_special_tokens=True),
                    torch.tensor(truncated, dtype=torch.bool), None,
                    None if unfinished is None else torch.tensor(unfinished, dtype=torch.bool))


def rollouts_with_inserts(prompts: list[list[int]], tokens: list[list[int]], policy: list[list[bool]],
                          logprobs: list[list[float]], prompt_index: torch.Tensor, truncated: list[bool],
                          tokenizer, pad_id: int) -> Rollouts:
    """Rollouts of completions that hold tokens the policy did not sample (an environment's
    turn, a forced "Wait"): policy[i][j] says whether token j of row i was sampled, and so
    trained on (completion_mask); the others are in observation_mask, with log-prob 0."""
    N, width = len(tokens), max(1, max(len(t) for t in tokens))
    completion = torch.full((N, width), pad_id, dtype=torch.long)
    mine, inserted, lps = torch.zeros(N, width), torch.zeros(N, width), torch.zeros(N, width)
    for i, row in enumerate(tokens):
        n = len(row)
        completion[i, :n] = torch.tensor(row, dtype=torch.long)
        sampled = torch.tensor(policy[i], dtype=torch.bool)
        mine[i, :n], inserted[i, :n] = sampled.float(), (~sampled).float()
        lps[i, :n] = torch.tensor(logprobs[i], dtype=torch.float32)
    prompt_ids, prompt_mask = left_pad(prompts, pad_id)
    return Rollouts(prompt_ids, prompt_mask, completion, mine, lps, prompt_index,
                    tokenizer.batch_decode(completion, skip_special_tokens=True),
                    torch.tensor(truncated, dtype=torch.bool), observation_mask=inserted)


def _pad_to(t: torch.Tensor, width: int, value, left: bool = False) -> torch.Tensor:
    extra = width - t.shape[1]
    if extra == 0:
        return t
    return F.pad(t, (extra, 0) if left else (0, extra), value=value)


def concat_rollouts(parts: list[Rollouts], pad_id: int) -> Rollouts:
    """Stack rollouts of different widths (prompts re-padded left, completions right)."""
    if len(parts) == 1:
        return parts[0]
    P = max(p.prompt_ids.shape[1] for p in parts)
    T = max(p.completion_ids.shape[1] for p in parts)
    stack = lambda name, width, value, left=False: torch.cat([_pad_to(getattr(p, name), width, value,
                                                                      left) for p in parts])
    return Rollouts(
        prompt_ids=stack("prompt_ids", P, pad_id, left=True),
        prompt_mask=stack("prompt_mask", P, 0, left=True),
        completion_ids=stack("completion_ids", T, pad_id),
        completion_mask=stack("completion_mask", T, 0.0),
        sampling_logprobs=stack("sampling_logprobs", T, 0.0),
        prompt_index=torch.cat([p.prompt_index for p in parts]),
        texts=[t for p in parts for t in p.texts],
        truncated=torch.cat([p.truncated for p in parts]),
        certainty=None if any(p.certainty is None for p in parts) else stack("certainty", T, 0.0),
        unfinished=None if all(p.unfinished is None for p in parts) else torch.cat(
            [torch.zeros(len(p), dtype=torch.bool) if p.unfinished is None else p.unfinished for p in parts]),
        observation_mask=None if all(p.observation_mask is None for p in parts) else torch.cat(
            [_pad_to(torch.zeros(p.completion_mask.shape) if p.observation_mask is None else p.observation_mask, T, 0.0)
             for p in parts]),
        temperature=_stacked_temperatures(parts),
    )


def _stacked_temperatures(parts: list[Rollouts]) -> torch.Tensor | None:
    if all(p.temperature is None for p in parts):
        return None
    if any(p.temperature is None for p in parts):
        raise ValueError("cannot stack rollouts with per-row temperatures and rollouts without them")
    return torch.cat([p.temperature for p in parts])
