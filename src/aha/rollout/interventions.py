"""Rollout interventions from the literature, each behind one config key:

- multi-temperature sampling within a group (rollout.temperatures): a group's completions are
  drawn at several temperatures, each row's log-probs (the engine's and the learner's) at its
  own, for groups that hold both careful and exploratory answers;
- forced continuation after an early stop (rollout.force_continue, s1's budget forcing,
  Muennighoff et al. 2025): a completion that stopped is not allowed to: its stop token is
  replaced by rollout.continue_text ("Wait") and sampling goes on from there. The inserted
  text is in the sequence the learner reads but is not the policy's and is never trained."""

from __future__ import annotations

import torch

from aha.rollout.rollouts import Rollouts, concat_rollouts, rollouts_with_inserts


def group_temperatures(temperatures: list[float], group_size: int) -> list[float]:
    """The temperature of each row of a group: row j at temperatures[j mod K]."""
    return [temperatures[j % len(temperatures)] for j in range(group_size)]


def generate_mixed(engine, prompts: list[list[int]], group_size: int, temperatures: list[float]) -> Rollouts:
    """group_size completions of each prompt, consecutive, row j of each group sampled at
    temperatures[j mod K]; Rollouts.temperature holds each row's."""
    per_row = group_temperatures(temperatures, group_size)
    distinct = sorted(set(per_row), key=per_row.index)
    counts = [per_row.count(t) for t in distinct]
    parts = [engine.generate(prompts, group_size=count, temperature=t) for t, count in zip(distinct, counts)]
    for part, t in zip(parts, distinct):
        part.temperature = torch.full((len(part),), float(t))
    stacked = concat_rollouts(parts, engine.pad_id)
    # row j of prompt i's group: the next unused row of its temperature's part for that prompt
    starts = torch.cumsum(torch.tensor([0] + [len(p) for p in parts]), dim=0).tolist()
    order = []
    for i in range(len(prompts)):
        used = [0] * len(distinct)
        for t in per_row:
            k = distinct.index(t)
            order.append(starts[k] + i * counts[k] + used[k])
            used[k] += 1
    return stacked.select(torch.tensor(order))


def force_continuation(engine, prompts: list[list[int]], rollouts: Rollouts, times: int, text: str) -> Rollouts:
    """Each row of rollouts (prompts[i] is row i's prompt) that ended on a stop token goes on,
    up to `times` times: the stop token is dropped, `text`'s tokens are appended (not the
    policy's: masked out of training) and the engine continues for up to its max_new_tokens
    more, at the row's own temperature. Rows cut at their budget are left as they are."""
    inserted = continue_tokens(engine.tokenizer, text)
    stops = set(engine.eos_ids)
    lengths = rollouts.sequence_mask().sum(dim=1).long().tolist()
    tokens = [rollouts.completion_ids[i, :n].tolist() for i, n in enumerate(lengths)]
    policy = [rollouts.completion_mask[i, :n].bool().tolist() for i, n in enumerate(lengths)]
    logprobs = [rollouts.sampling_logprobs[i, :n].tolist() for i, n in enumerate(lengths)]
    truncated = rollouts.truncated.tolist()
    temperature = None if rollouts.temperature is None else rollouts.temperature.tolist()
    for _ in range(times):
        going = [i for i in range(len(tokens)) if tokens[i] and policy[i][-1] and tokens[i][-1] in stops]
        if not going:
            break
        for i in going:  # the stop token gives way to the continuation text
            tokens[i] = tokens[i][:-1] + inserted
            policy[i] = policy[i][:-1] + [False] * len(inserted)
            logprobs[i] = logprobs[i][:-1] + [0.0] * len(inserted)
        for t in sorted(set(temperature[i] for i in going)) if temperature else [None]:
            rows = [i for i in going if temperature is None or temperature[i] == t]
            out = engine.generate([prompts[i] + tokens[i] for i in rows], group_size=1, temperature=t)
            for r, i in enumerate(rows):
                n = int(out.completion_mask[r].sum())
                tokens[i] += out.completion_ids[r, :n].tolist()
                policy[i] += [True] * n
                logprobs[i] += out.sampling_logprobs[r, :n].tolist()
                truncated[i] = bool(out.truncated[r])
    out = rollouts_with_inserts(prompts, tokens, policy, logprobs, rollouts.prompt_index, truncated,
                                engine.tokenizer, engine.pad_id)
    out.temperature = rollouts.temperature
    return out


def continuations(rollouts: Rollouts, inserted_tokens: int) -> torch.Tensor:
    """(N,) how many times each row was made to go on, each time inserting inserted_tokens
    tokens (a continuation that stopped at once leaves two insertions side by side)."""
    if rollouts.observation_mask is None:
        return torch.zeros(len(rollouts))
    return rollouts.observation_mask.sum(dim=1) / inserted_tokens


def continue_tokens(tokenizer, text: str) -> list[int]:
    """The tokens that replace a forced completion's stop token."""
    inserted = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if not inserted:
        raise ValueError("rollout.continue_text must be some text (it has no tokens)")
    return inserted


def sample_groups(engine, prompts: list[list[int]], group_size: int, temperatures: list[float] | None = None,
                  force_continue: int = 0, continue_text: str = "Wait") -> Rollouts:
    """group_size completions of each prompt with the configured interventions (none: the
    engine's generate)."""
    rollouts = generate_mixed(engine, prompts, group_size, temperatures) if temperatures \
        else engine.generate(prompts, group_size=group_size)
    if force_continue:
        row_prompts = [prompts[i] for i in rollouts.prompt_index.tolist()]
        rollouts = force_continuation(engine, row_prompts, rollouts, force_continue, continue_text)
    return rollouts
