"""Procedural reasoning tasks with a difficulty knob: each draws problems from a seeded
generator, the held-out ones first, and training problems never repeat a held-out one (the
same problem key). `task.eval_difficulty` above `task.difficulty` holds out harder or longer
problems than any trained on: the out-of-distribution split.

Each task's default reward is its verifier (config.BUILT_IN_TASKS); every problem's answer is
computed here, and the tests recompute it independently."""

from __future__ import annotations

import string
from collections import deque
from dataclasses import dataclass
from random import Random
from typing import Callable

from aha.config import TaskConfig
from aha.errors import TaskError

MAX_TRIES_PER_PROBLEM = 50  # draws a problem may take before the space is judged too small


@dataclass(frozen=True)
class Procedural:
    """A task family: make(rng, difficulty, cfg) -> (key, sample); equal keys are one problem."""

    make: Callable[[Random, int, TaskConfig], tuple[tuple, dict]]
    describe: str


def procedural_splits(cfg: TaskConfig) -> tuple[list[dict], list[dict]]:
    """(train, held-out) for the built-in task cfg.name: cfg.num_eval held-out problems at
    cfg.eval_difficulty (default cfg.difficulty), then cfg.num_train training problems at
    cfg.difficulty, none of them a held-out one."""
    family = TASKS[cfg.name]
    eval_difficulty = cfg.eval_difficulty or cfg.difficulty
    held_out, keys = _draw(family, cfg, eval_difficulty, cfg.num_eval, set(), "eval")
    train, _ = _draw(family, cfg, cfg.difficulty, cfg.num_train, keys, "train")
    return train, held_out


def procedural_train(cfg: TaskConfig, difficulty: int) -> list[dict]:
    """cfg.num_train training problems at `difficulty`, none a held-out one (those stay at
    cfg.eval_difficulty, default cfg.difficulty): a difficulty schedule's level. At
    cfg.difficulty they are procedural_splits' training problems."""
    family = TASKS[cfg.name]
    _, held_out = _draw(family, cfg, cfg.eval_difficulty or cfg.difficulty, cfg.num_eval, set(), "eval")
    return _draw(family, cfg, difficulty, cfg.num_train, held_out, "train")[0]


def _draw(family: Procedural, cfg: TaskConfig, difficulty: int, count: int, taken: set,
          split: str) -> tuple[list[dict], set]:
    rng = Random(f"{cfg.name}:{cfg.seed}:{split}:{difficulty}")
    samples, keys = [], set(taken)
    for _ in range(count * MAX_TRIES_PER_PROBLEM):
        if len(samples) == count:
            break
        key, sample = family.make(rng, difficulty, cfg)
        if key in keys:
            continue
        keys.add(key)
        sample["id"] = f"{cfg.name}-d{difficulty}-{split}-{len(samples)}"
        sample["difficulty"] = difficulty
        samples.append(sample)
    if len(samples) < count:
        raise TaskError(f"task: {cfg.name} at difficulty {difficulty} has too few distinct problems for "
                        f"{count} {split} ones (found {len(samples)}); lower task.num_{split} or raise the difficulty")
    return samples, keys - taken


# --- arithmetic with many digits -------------------------------------------------------

def _multi_digit(rng: Random, d: int, cfg: TaskConfig):
    """Two operands of d digits each, an operator of task.operators."""
    low, high = (0 if d == 1 else 10 ** (d - 1)), 10 ** d - 1
    a, b, op = rng.randint(low, high), rng.randint(low, high), rng.choice(cfg.operators)
    value = {"+": a + b, "-": a - b, "*": a * b}[op]
    key = (op, min(a, b), max(a, b)) if op in "+*" else (op, a, b)
    return key, {"prompt": cfg.template.format(a=a, op=op, b=b), "answer": str(value)}


# --- Countdown -----------------------------------------------------------------------------

def _countdown(rng: Random, d: int, cfg: TaskConfig):
    """d + 2 numbers in 1..25 combined, in a random order, by random operations into a target
    in 1..999 (a division only when exact, a subtraction only when positive): every target
    has at least that solution."""
    while True:
        numbers = [rng.randint(1, 25) for _ in range(d + 2)]
        parts = [(n, str(n)) for n in numbers]
        while len(parts) > 1:
            (a, left), (b, right) = parts.pop(rng.randrange(len(parts))), parts.pop(rng.randrange(len(parts)))
            # every operation in parentheses, so that the text computes what was computed
            options = [(a + b, f"({left} + {right})"), (a * b, f"({left} * {right})")]
            if a > b:
                options.append((a - b, f"({left} - {right})"))
            if b > 1 and a % b == 0:
                options.append((a // b, f"({left} / {right})"))
            parts.append(rng.choice(options))
        target, solution = parts[0][0], parts[0][1][1:-1]  # the outer parentheses are not needed
        if 1 <= target <= 999:
            break
    prompt = (f"Using the numbers {', '.join(map(str, numbers))}, make {target}. Use each number exactly once, "
              "with + - * / and parentheses. Give the expression as your final answer.")
    return (tuple(sorted(numbers)), target), {"prompt": prompt, "answer": str(target), "numbers": numbers,
                                              "target": target, "solution": solution}


# --- small graphs ------------------------------------------------------------------------

def _random_tree(rng: Random, nodes: list[str]) -> set[tuple[str, str]]:
    order = nodes[:]
    rng.shuffle(order)
    return {tuple(sorted((order[i], rng.choice(order[:i])))) for i in range(1, len(order))}


def _edges_text(edges: set, rng: Random) -> str:
    listed = sorted(edges)
    rng.shuffle(listed)
    return ", ".join(f"{a}-{b}" for a, b in listed)


def distances(edges: set, source: str) -> dict[str, int]:
    """Breadth-first: the number of edges on a shortest path from source to each node it reaches."""
    neighbours: dict[str, list[str]] = {}
    for a, b in edges:
        neighbours.setdefault(a, []).append(b)
        neighbours.setdefault(b, []).append(a)
    seen, queue = {source: 0}, deque([source])
    while queue:
        node = queue.popleft()
        for other in neighbours.get(node, []):
            if other not in seen:
                seen[other] = seen[node] + 1
                queue.append(other)
    return seen


def _shortest_path(rng: Random, d: int, cfg: TaskConfig):
    """A connected graph of d + 4 nodes (a random tree and about half as many extra edges):
    the number of edges on a shortest path between two nodes at least 2 apart."""
    nodes = list(string.ascii_uppercase[:d + 4])
    edges = _random_tree(rng, nodes)
    for _ in range(len(nodes) // 2):
        a, b = rng.sample(nodes, 2)
        edges.add(tuple(sorted((a, b))))
    while True:
        source, target = rng.sample(nodes, 2)
        length = distances(edges, source)[target]
        if length >= 2:
            break
    prompt = (f"An undirected graph has the edges {_edges_text(edges, rng)}. How many edges does the shortest path "
              f"from {source} to {target} have?")
    return (frozenset(edges), frozenset((source, target))), {"prompt": prompt, "answer": str(length)}


def _connectivity(rng: Random, d: int, cfg: TaskConfig):
    """d + 5 nodes in one tree, or in two (cut at a random edge): is there a path between two
    nodes? "yes" and "no" equally often as drawn (the training split, deduplicated, leans to
    "yes" at difficulty 1: fewer distinct "no" problems)."""
    nodes = list(string.ascii_uppercase[:d + 5])
    edges = _random_tree(rng, nodes)
    connected = rng.random() < 0.5
    if not connected:
        edges.discard(rng.choice(sorted(edges)))
    while True:
        source, target = rng.sample(nodes, 2)
        if (target in distances(edges, source)) == connected:
            break
    prompt = (f"An undirected graph has the nodes {', '.join(nodes)} and the edges {_edges_text(edges, rng)}. Is there "
              f"a path from {source} to {target}? Answer yes or no.")
    return (frozenset(edges), frozenset((source, target))), {"prompt": prompt, "answer": "yes" if connected else "no"}


def _cycle(rng: Random, d: int, cfg: TaskConfig):
    """A tree of d + 5 nodes, or the tree with one more edge (which closes a cycle): does the
    graph have a cycle? "yes" and "no" equally often."""
    nodes = list(string.ascii_uppercase[:d + 5])
    edges = _random_tree(rng, nodes)
    has_cycle = rng.random() < 0.5
    if has_cycle:
        missing = [(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1:] if (a, b) not in edges]
        edges.add(rng.choice(missing))
    prompt = f"An undirected graph has the edges {_edges_text(edges, rng)}. Does it contain a cycle? Answer yes or no."
    return (frozenset(edges),), {"prompt": prompt, "answer": "yes" if has_cycle else "no"}


# --- lists and letters ---------------------------------------------------------------------

def _sorting(rng: Random, d: int, cfg: TaskConfig):
    """d + 2 numbers in 0..99 in ascending order."""
    numbers = [rng.randint(0, 99) for _ in range(d + 2)]
    prompt = f"Sort these numbers in ascending order: {', '.join(map(str, numbers))}."
    return tuple(numbers), {"prompt": prompt, "answer": ", ".join(map(str, sorted(numbers)))}


WORDS = ("apple banana cherry strawberry raspberry blueberry orange lemon melon grape peach pear plum mango "
         "papaya coconut tomato potato carrot pepper onion garlic broccoli spinach lettuce cucumber pumpkin "
         "mississippi committee bookkeeper balloon coffee letter address success possession necessary "
         "parallel occurrence accommodate embarrass millennium questionnaire assessment tomorrow "
         "elephant giraffe kangaroo hippopotamus crocodile butterfly dragonfly grasshopper mosquito "
         "mountain river ocean forest desert island volcano canyon valley meadow glacier waterfall "
         "computer keyboard monitor program language variable function library terminal network "
         "sentence paragraph chapter question answer problem solution example exercise mistake").split()


def _letter_count(rng: Random, d: int, cfg: TaskConfig):
    """How often a letter occurs in d words; the letter is one of theirs four times in five."""
    text = " ".join(rng.choice(WORDS) for _ in range(d))
    letter = rng.choice(sorted(set(text) - {" "})) if rng.random() < 0.8 else rng.choice(string.ascii_lowercase)
    prompt = f'How many times does the letter "{letter}" appear in "{text}"?'
    return (text, letter), {"prompt": prompt, "answer": str(text.count(letter))}


# --- linear equations ----------------------------------------------------------------------

def _term(coefficient: int, first: bool = False) -> str:
    """coefficient * x written as people write it: x, -x, 3x, - 3x."""
    size = "" if abs(coefficient) == 1 else str(abs(coefficient))
    sign = ("-" if coefficient < 0 else "") if first else (" - " if coefficient < 0 else " + ")
    return f"{sign}{size}x"


def _plus(constant: int) -> str:
    return "" if constant == 0 else f" - {-constant}" if constant < 0 else f" + {constant}"


def _linear_equation(rng: Random, d: int, cfg: TaskConfig):
    """An integer x in -12..12 and an equation it solves: a x + b = c (difficulty 1),
    a x + b = c x + e (2), a(x + b) + c = e x + f (3 and above)."""
    x = rng.randint(-12, 12)
    nonzero = lambda low, high: rng.choice([n for n in range(low, high + 1) if n])  # noqa: E731
    if d == 1:
        a, b = nonzero(-9, 9), rng.randint(-20, 20)
        equation = f"{_term(a, True)}{_plus(b)} = {a * x + b}"
    elif d == 2:
        a, c = rng.sample([n for n in range(-9, 10) if n], 2)
        b = rng.randint(-20, 20)
        e = a * x + b - c * x
        equation = f"{_term(a, True)}{_plus(b)} = {_term(c, True)}{_plus(e)}"
    else:
        a, e = rng.sample([n for n in range(2, 10)], 2)
        b, c = nonzero(-9, 9), rng.randint(-20, 20)
        f = a * (x + b) + c - e * x
        equation = f"{a}(x{_plus(b)}){_plus(c)} = {_term(e, True)}{_plus(f)}"
    return (equation,), {"prompt": f"Solve for x: {equation}", "answer": str(x)}


TASKS: dict[str, Procedural] = {
    "multi_digit": Procedural(_multi_digit, "a op b with operands of `difficulty` digits (task.operators, "
                                            "task.template)"),
    "countdown": Procedural(_countdown, "reach a target from difficulty + 2 numbers with + - * /"),
    "shortest_path": Procedural(_shortest_path, "edges on a shortest path in a graph of difficulty + 4 nodes"),
    "connectivity": Procedural(_connectivity, "is there a path between two nodes (difficulty + 5 nodes)"),
    "cycle": Procedural(_cycle, "does a graph of difficulty + 5 nodes have a cycle"),
    "sorting": Procedural(_sorting, "sort difficulty + 2 numbers"),
    "letter_count": Procedural(_letter_count, "count a letter in `difficulty` words"),
    "linear_equation": Procedural(_linear_equation, "solve for x; difficulty 1, 2, 3 add terms on both sides"),
}
