"""ExPO's guidance in an RL step (algorithm.guidance: expo; the maths: aha.algorithms.guidance).

After a round is scored, each group with no passing completion is asked again, guidance_tries
times, with its answer shown (algorithm.guidance_hint). The first retry that passes the
reward (total >= length_correct_min, not failed, and not cut at the budget where the run does
not pay cut completions their score: truncated_reward or mask_truncated) takes the place of the
group's last completion: the same tokens, now after the prompt without the hint. The reward's
scores of that row are the retry's. The step then treats the row as the policy's own sample
with two differences, both in training/rl/step.py and estimate.py: its old log-probs are the
policy's on the unhinted prompt (the engine's were taken with the hint), and its advantage is
capped at guidance_cap.

What the policy sampled on its own is what the step's statistics, the hacking monitor and the
curriculum see (collect records it before guidance); groups/trained counts guided groups."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aha.algorithms.guidance import first_passing, guided_row, placement
from aha.algorithms.rejection import eligible, unsolved_groups
from aha.config import AlgorithmConfig
from aha.prompts import hinted
from aha.rewards import RewardResult
from aha.rollout.rollouts import concat_rollouts, rollouts_from_samples
from aha.tasks import encode_prompts
from aha.training.phases import Phases


def merged_result(result: RewardResult, extra: RewardResult, order: list[int]) -> RewardResult:
    """The round's reward result with rows taken from `extra` (the retries' results), in the
    placement order (aha.algorithms.guidance.placement). Failure counts stay the round's: they
    report what the policy's own samples did."""
    index = torch.tensor(order, dtype=torch.long)
    pick = lambda a, b: torch.cat([a, b])[index]  # noqa: E731
    # a dict reward may name a part on some rows only: a part one side lacks is 0 there, as the
    # reward itself gives a row that does not name it
    names = list(result.components) + [name for name in extra.components if name not in result.components]
    part = lambda r, name: r.components.get(name, torch.zeros(len(r.total)))  # noqa: E731
    steps = None
    if result.steps is not None or extra.steps is not None:
        both = (result.steps or [[] for _ in result.total]) + (extra.steps or [[] for _ in extra.total])
        steps = [both[i] for i in order]
    return RewardResult(pick(result.total, extra.total),
                        {name: pick(part(result, name), part(extra, name)) for name in names},
                        pick(result.failed, extra.failed), dict(result.failures), steps)


@dataclass
class Guided:
    """A round after guidance: its rollouts and reward result with the guided rows in place,
    which rows those are, and what guidance did (counts for the step's metrics)."""

    rollouts: object  # Rollouts
    result: RewardResult
    guided: torch.Tensor  # (N,) bool
    unsolved: int  # groups with no passing completion
    retried: int  # retries sampled
    found: int  # groups given a guided completion

    def counts(self) -> dict[str, int]:
        return {"guidance/unsolved_groups": self.unsolved, "guidance/retries": self.retried,
                "guidance/guided_groups": self.found}


class Guidance:
    """Samples and places the guided completions of a round (algorithm.guidance=expo)."""

    def __init__(self, algo: AlgorithmConfig, group_size: int):
        self.hint, self.tries = algo.guidance_hint, algo.guidance_tries
        self.threshold, self.group_size = algo.length_correct_min, group_size
        # a cut retry is no answer where the run does not pay cut completions their score
        self.refuse_cut = algo.truncated_reward is not None or algo.mask_truncated

    def apply(self, parts, chosen: list[dict], rollouts, result: RewardResult, phases: Phases) -> Guided:
        """chosen: the round's prompts' samples; rollouts and result: the round's G rows a prompt."""
        G, engine, task = self.group_size, parts.engine, parts.task
        none = torch.zeros(len(rollouts), dtype=torch.bool)
        unsolved = unsolved_groups((result.total >= self.threshold).tolist(), G)
        if not unsolved:
            return Guided(rollouts, result, none, 0, 0, 0)
        asked = [chosen[int(rollouts.prompt_index[g * G])] for g in unsolved]
        with phases("generate"):
            retries = engine.generate(encode_prompts(engine.tokenizer, task, [hinted(s, self.hint) for s in asked]),
                                      group_size=self.tries)
        with phases("score"):
            scored = parts.reward.score(retries.texts, [asked[i] for i in retries.prompt_index.tolist()],
                                        [int(n) for n in retries.lengths().tolist()])
        cut = retries.truncated.tolist() if self.refuse_cut else [False] * len(retries)
        passed = eligible(scored.total.tolist(), scored.failed.tolist(), cut, self.threshold)
        found = [(group, row) for group, row in zip(unsolved, first_passing(passed, self.tries)) if row is not None]
        if not found:
            return Guided(rollouts, result, none, len(unsolved), len(retries), 0)
        rows = torch.tensor([row for _, row in found], dtype=torch.long)
        picked = retries.select(rows)
        # the retry's tokens as an answer to the prompt without the hint (the group's own prompt)
        prompt_rows = [guided_row(group, G) for group, _ in found]
        prompts = [rollouts.prompt_ids[r][rollouts.prompt_mask[r].bool()].tolist() for r in prompt_rows]
        samples = [(picked.completion_ids[k, :int(picked.completion_mask[k].sum())].tolist(),
                    picked.sampling_logprobs[k, :int(picked.completion_mask[k].sum())].tolist())
                   for k in range(len(found))]
        moved = rollouts_from_samples(prompts, samples, picked.truncated.tolist(), rollouts.prompt_index[prompt_rows],
                                      engine.tokenizer, engine.pad_id)
        order = placement(len(rollouts), G, [group for group, _ in found])
        placed = concat_rollouts([rollouts, moved], engine.pad_id).select(torch.tensor(order))
        guided = none.clone()
        guided[prompt_rows] = True
        return Guided(placed, merged_result(result, _rows(scored, rows), order), guided, len(unsolved), len(retries),
                      len(found))


def _rows(result: RewardResult, rows: torch.Tensor) -> RewardResult:
    """The result of some rows only (the retries that are used)."""
    index = rows.tolist()
    return RewardResult(result.total[rows], {k: v[rows] for k, v in result.components.items()}, result.failed[rows],
                        dict(result.failures), None if result.steps is None else [result.steps[i] for i in index])
