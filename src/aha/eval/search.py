"""Step-level search at inference (`aha eval --search greedy_step|beam`): a solution grows one
step at a time; at each step every kept partial solution is continued `expand` times up to
its next step's end, a judge ranks the candidates, and the best are kept.

- greedy_step keeps one (the best of `expand` next steps, Ma et al. 2023's PRM-guided greedy
  search); beam keeps `width`, each expanded `expand` times (Snell et al. 2024's beam search).
- A step ends at the first token whose text holds the separator (eval.search_separator, "\\n"
  as prm.step_separator), at the stop token, or at the solution's token budget. A candidate
  that stopped or ran out of budget is finished: kept, it fills one of the `width` places for
  good, so the beam narrows as solutions finish. The last of `max_steps` expansions runs every
  candidate to its stop token or budget, so every search ends with finished answers.
- Token in, token out: a kept candidate is continued from its own token ids (prompt + the
  ids sampled so far), never from re-tokenised text; only the judge reads text.
- Every sampled token is counted, the candidates dropped included: that is the search's
  cost, set against best-of-N at the same count (eval/search_run.py).

The ranking and the bookkeeping are pure functions (algorithms/search.py)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tqdm.auto import tqdm

from aha.algorithms.search import STEP, best_index, candidate_key, keep_best, step_end
from aha.config import ConfigError
from aha.rollout.rollouts import PartialRound
from aha.tasks import Task, encode_prompts

if TYPE_CHECKING:
    from aha.rewards.compose import CompositeReward
    from aha.rollout import Engine

BEAM_WIDTH = 4  # eval.search_width's default for beam


def greedy_width(width: int | None) -> int:
    """greedy_step keeps one partial solution (eval.search_width must be unset or 1)."""
    return 1


def beam_width(width: int | None) -> int:
    return BEAM_WIDTH if width is None else width


# eval.search's values (besides none) and how many partial solutions each keeps
SEARCHES = {"greedy_step": greedy_width, "beam": beam_width}


@dataclass
class SearchSettings:
    width: int  # partial solutions kept at each step
    expand: int  # candidate next steps sampled from each
    max_steps: int  # expansions; the last runs each candidate to its end
    budget: int  # most tokens of a whole solution (eval.max_new_tokens or rollout.max_new_tokens)
    separator: str
    threshold: float  # a judge of finished answers: the score that passes (eval.correct_threshold)
    judges_partial: bool  # the judge scores partial solutions (a process reward model)


@dataclass
class Candidate:
    ids: list[int]  # the completion's token ids: the kept prefix, then this step's
    end: str  # how its last step ended: STEP (a separator), STOP or BUDGET
    steps: int = 0
    score: float | None = None  # the judge's; None where it did not (or could not) judge
    key: tuple[int, float] = (0, 0.0)

    @property
    def finished(self) -> bool:
        return self.end != STEP


@dataclass
class Searched:
    """One problem's search: the answer it picked, what it cost, and each round's candidates
    ({parent, length, end, score, kept}: parent is the index of the kept candidate it grew from,
    length its token count so far)."""

    answer: Candidate
    tokens: int = 0  # tokens sampled for this problem, every candidate counted
    rounds: list[list[dict]] = field(default_factory=list)


def separator_ids(tokenizer, separator: str) -> set[int]:
    """Every token whose text holds the separator: a step ends at the first one sampled (a
    separator spread over several tokens is not seen). Special tokens are not steps' ends."""
    special = set(tokenizer.all_special_ids)
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    found = {i for i, text in enumerate(texts) if separator in text and i not in special}
    if not found:
        raise ConfigError(f"eval.search_separator: no token of the model's vocabulary holds {separator!r}, so no step "
                         "could ever end at it; choose a separator the tokenizer has (e.g. '\\n')")
    return found


@contextmanager
def stopping_at(engine: Engine, extra: set[int]):
    """The engine also stops at `extra` while inside (its stop ids are read at each call)."""
    saved = list(engine.eos_ids)
    engine.eos_ids = saved + sorted(set(extra) - set(saved))
    try:
        yield
    finally:
        engine.eos_ids = saved


def expand(engine: Engine, prompts: list[list[int]], todo: list[tuple[int, Candidate]], settings: SearchSettings,
           separators: set[int], last: bool) -> list[tuple[int, int, Candidate]]:
    """(problem, parent row in todo, child) for settings.expand children of every candidate in
    todo, each continued from prompt + its ids with the budget it has left. In the last round
    (last=True) a child runs to its stop token or budget."""
    stops = set(engine.eos_ids)
    plan = PartialRound(copies=[settings.expand] * len(todo), budgets=[settings.budget - len(c.ids) for _, c in todo],
                        groups=list(range(len(todo))), enough=len(todo))  # enough = all: no early stop
    with stopping_at(engine, set() if last else separators):
        out = engine.generate_partial([prompts[i] + c.ids for i, c in todo], plan)
    if out.unfinished is not None and bool(out.unfinished.any()):
        raise RuntimeError("the engine left candidates unfinished in a round that asked for all of them")
    lengths = [int(n) for n in out.lengths().tolist()]
    children = []
    for row, parent in enumerate(out.prompt_index.tolist()):
        problem, candidate = todo[parent]
        step = out.completion_ids[row, :lengths[row]].tolist()
        end = step_end(step, plan.budgets[parent], stops, set() if last else separators)
        children.append((problem, parent, Candidate(candidate.ids + step, end, candidate.steps + 1)))
    return children


def judge_candidates(judge: CompositeReward, tokenizer, problems: list[dict],
                     children: list[tuple[int, int, Candidate]], settings: SearchSettings) -> None:
    """Sets each child's score and key: a judge of partial solutions scores them all, a judge
    of finished answers only the finished ones (the text decoded from the ids, stop token left out)."""
    rows = [(i, c) for i, _, c in children if settings.judges_partial or c.finished]
    if rows:
        texts = tokenizer.batch_decode([c.ids for _, c in rows], skip_special_tokens=True)
        result = judge.score(texts, [problems[i] for i, _ in rows], [len(c.ids) for _, c in rows])
        for (_, c), total, failed in zip(rows, result.total.tolist(), result.failed.tolist()):
            c.score = None if failed else total
    for _, _, c in children:
        c.key = candidate_key(c.score, c.finished, settings.judges_partial, settings.threshold)


def search(engine: Engine, task: Task, problems: list[dict], judge: CompositeReward, settings: SearchSettings,
           desc: str = "search") -> list[Searched]:
    """The search of every problem, all problems' candidates sampled together each round."""
    prompts = encode_prompts(engine.tokenizer, task, problems)
    separators = separator_ids(engine.tokenizer, settings.separator)
    active = [[Candidate([], STEP)] for _ in problems]  # the empty solution, about to take its first step
    done: list[list[Candidate]] = [[] for _ in problems]
    outcomes = [Searched(Candidate([], STEP)) for _ in problems]
    for step in tqdm(range(settings.max_steps), desc=desc, unit="step", leave=False):
        todo = [(i, c) for i, beams in enumerate(active) for c in beams]
        if not todo:
            break
        children = expand(engine, prompts, todo, settings, separators, last=step == settings.max_steps - 1)
        judge_candidates(judge, engine.tokenizer, problems, children, settings)
        for i in range(len(problems)):
            mine = [(parent, c) for p, parent, c in children if p == i]
            if not mine:
                continue
            first = min(parent for parent, _ in mine)  # todo's rows of problem i start here
            kept = set(keep_best([c.key for _, c in mine], settings.width - len(done[i])))
            outcomes[i].tokens += sum(len(c.ids) - len(todo[parent][1].ids) for parent, c in mine)
            outcomes[i].rounds.append([{"parent": parent - first, "length": len(c.ids), "end": c.end,
                                        "score": c.score, "kept": j in kept} for j, (parent, c) in enumerate(mine)])
            active[i] = [c for j, (_, c) in enumerate(mine) if j in kept and not c.finished]
            done[i] += [c for j, (_, c) in enumerate(mine) if j in kept and c.finished]
    for i, outcome in enumerate(outcomes):
        pool = done[i] + active[i]  # active is empty: the last round finishes every candidate
        outcome.answer = pool[best_index([c.key for c in pool])]
    return outcomes

