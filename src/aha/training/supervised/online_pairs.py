"""Online preference pairs (online DPO): completions sampled from the current policy for
each prompt, ranked by the run's reward; the best and the worst of a prompt make a pair."""

from __future__ import annotations

import torch

from aha.rewards import CompositeReward
from aha.rollout import Engine
from aha.tasks import PromptSampler, Task, encode_prompts
from aha.training.supervised.sequences import Sequence


def sampled_pairs(engine: Engine, task: Task, sampler: PromptSampler, reward: CompositeReward, n_prompts: int,
                  samples_per_prompt: int) -> tuple[list[dict], list[Sequence], list[Sequence], dict]:
    """(rows, chosen, rejected, stats). The sequences are the engine's own token ids (nothing
    is re-tokenised); a prompt whose samples all score the same (or whose reward failed on
    all of them) gives no pair. A sample whose reward failed counts as the lowest score (-inf
    in the row's rejected_score). Each row keeps both scores: ODPO's offset reads their gap."""
    G = samples_per_prompt
    samples = sampler.next(n_prompts)
    prompts = encode_prompts(engine.tokenizer, task, samples)
    ro = engine.generate(prompts, group_size=G)
    result = reward.score(ro.texts, [samples[i] for i in ro.prompt_index.tolist()], ro.lengths().tolist())
    scores = torch.where(result.failed | ~torch.isfinite(result.total), torch.tensor(float("-inf")), result.total)
    rows, chosen, rejected = [], [], []

    def sequence(row: int) -> Sequence:
        length = int(ro.completion_mask[row].sum())
        return Sequence(tuple(prompts[row // G]), tuple(ro.completion_ids[row, :length].tolist()),
                        bool(ro.truncated[row]))

    for i, group in enumerate(scores.view(-1, G)):
        best, worst = int(group.argmax()), int(group.argmin())
        if not group[best] > group[worst]:
            continue
        b, w = i * G + best, i * G + worst
        rows.append({"prompt": samples[i]["prompt"], "chosen": ro.texts[b], "rejected": ro.texts[w],
                     "chosen_score": float(scores[b]), "rejected_score": float(scores[w]),
                     "where": f"task {task.name}, sample {samples[i]['id']}"})
        chosen.append(sequence(b))
        rejected.append(sequence(w))
    finite = result.total[torch.isfinite(result.total)]
    stats = {"online/pairs": len(rows), "online/prompts": len(samples),
             "reward/mean": float(finite.mean()) if len(finite) else 0.0,
             "reward/failed": int(result.failed.sum()), "length/mean": float(ro.lengths().mean())}
    return rows, chosen, rejected, stats


