"""The procedural tasks: seeded disjoint splits, a difficulty knob, an out-of-distribution
split, every answer recomputed here by another method, and their verifiers."""

import re
from collections import Counter
from pathlib import Path

import pytest
import sympy

from aha.config import BUILT_IN_TASKS, TaskConfig, load_config
from aha.rewards import countdown, list_answer, yes_no
from aha.tasks import TaskError, build_task
from aha.tasks.procedural import TASKS

NAMES = sorted(TASKS)


def task(name, **knobs):
    knobs.setdefault("difficulty", 2)
    return build_task(TaskConfig(name=name, num_eval=50, num_train=300, **knobs))


@pytest.mark.parametrize("name", NAMES)
def test_splits_are_seeded_and_disjoint(name):
    a, b, other = task(name), task(name), task(name, seed=1)
    assert [s["prompt"] for s in a.train] == [s["prompt"] for s in b.train]
    assert [s["prompt"] for s in a.train] != [s["prompt"] for s in other.train]
    assert len(a.train) == 300 and len(a.eval) == 50
    assert not {s["prompt"] for s in a.train} & {s["prompt"] for s in a.eval}
    assert len({s["id"] for s in a.train + a.eval}) == 350
    assert {s["difficulty"] for s in a.train} == {2}


def graph(prompt):
    edges = [tuple(e.split("-")) for e in re.findall(r"\b[A-Z]-[A-Z]\b", prompt)]
    listed = re.search(r"the nodes ([A-Z, ]+) and", prompt)
    nodes = set(listed.group(1).replace(" ", "").split(",")) if listed else {n for e in edges for n in e}
    return nodes, edges


def floyd_warshall(nodes, edges):
    far = float("inf")
    dist = {(a, b): 0 if a == b else far for a in nodes for b in nodes}
    for a, b in edges:
        dist[a, b] = dist[b, a] = 1
    for k in nodes:
        for i in nodes:
            for j in nodes:
                dist[i, j] = min(dist[i, j], dist[i, k] + dist[k, j])
    return dist


def components(nodes, edges):
    parent = {n: n for n in nodes}

    def root(n):
        while parent[n] != n:
            n = parent[n]
        return n
    for a, b in edges:
        parent[root(a)] = root(b)
    return {n: root(n) for n in nodes}


def recomputed(name, sample):
    """The answer to sample's prompt, computed from the prompt's text by another method."""
    prompt = sample["prompt"]
    if name == "multi_digit":
        a, op, b = re.fullmatch(r"What is (\d+) ([-+*]) (\d+)\?", prompt).groups()
        return str(eval(f"{a}{op}{b}"))
    if name == "countdown":
        numbers = [int(n) for n in re.search(r"numbers ([\d, ]+), make", prompt).group(1).split(", ")]
        target = int(re.search(r"make (\d+)\.", prompt).group(1))
        assert Counter(int(n) for n in re.findall(r"\d+", sample["solution"])) == Counter(numbers)
        assert eval(sample["solution"]) == target  # the generator's own solution reaches it
        return str(target)
    if name == "shortest_path":
        source, target = re.search(r"from ([A-Z]) to ([A-Z])", prompt).groups()
        return str(floyd_warshall(*graph(prompt))[source, target])
    if name == "connectivity":
        source, target = re.search(r"from ([A-Z]) to ([A-Z])", prompt).groups()
        roots = components(*graph(prompt))
        return "yes" if roots[source] == roots[target] else "no"
    if name == "cycle":
        nodes, edges = graph(prompt)
        # a forest has exactly |V| - (number of components) edges; one more closes a cycle
        return "yes" if len(edges) > len(nodes) - len(set(components(nodes, edges).values())) else "no"
    if name == "sorting":
        return ", ".join(map(str, sorted(int(n) for n in re.findall(r"\d+", prompt))))
    if name == "letter_count":
        letter, text = re.fullmatch(r'How many times does the letter "(.)" appear in "(.*)"\?', prompt).groups()
        return str(sum(1 for c in text if c == letter))
    if name == "linear_equation":
        left, right = prompt.removeprefix("Solve for x: ").split(" = ")
        implicit = lambda side: re.sub(r"(\d)([x(])", r"\1*\2", side)  # noqa: E731
        x = sympy.Symbol("x")
        (solution,) = sympy.solve(sympy.sympify(implicit(left)) - sympy.sympify(implicit(right)), x)
        return str(int(solution))
    raise AssertionError(name)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("difficulty", [2, 3])
def test_every_answer_is_right(name, difficulty):
    t = task(name, difficulty=difficulty)
    for sample in t.train[:100] + t.eval:
        assert sample["answer"] == recomputed(name, sample), sample


@pytest.mark.parametrize("name", NAMES)
def test_the_verifier_pays_the_right_answer_and_not_a_wrong_one(name):
    from aha.rewards import resolve_function

    verify = resolve_function(BUILT_IN_TASKS[name])
    for sample in task(name).eval[:20]:
        right = sample.get("solution", sample["answer"])
        assert verify(f"Let me think.\nThe answer is {right}", sample) == 1.0, sample
        wrong = {"yes": "no", "no": "yes"}.get(sample["answer"], sample["answer"] + "1")
        if name == "countdown":
            wrong = sample["solution"] + " + 1"
        assert verify(f"The answer is {wrong}", sample) == 0.0, sample


def test_harder_held_out_problems_make_an_out_of_distribution_split():
    t = task("sorting", difficulty=1, eval_difficulty=4)
    assert {len(s["answer"].split(", ")) for s in t.train} == {3}
    assert {len(s["answer"].split(", ")) for s in t.eval} == {6}
    assert {s["difficulty"] for s in t.eval} == {4}
    counted = task("countdown", difficulty=1, eval_difficulty=3)
    assert {len(s["numbers"]) for s in counted.train} == {3} and {len(s["numbers"]) for s in counted.eval} == {5}


def test_a_space_too_small_for_the_split_is_an_error():
    with pytest.raises(TaskError, match="multi_digit at difficulty 1 has too few distinct problems for 200 eval ones "
                                        r"\(found 55\); lower task.num_eval or raise the difficulty"):
        build_task(TaskConfig(name="multi_digit", difficulty=1))


def test_a_built_in_task_trains_on_its_verifier_unless_the_config_names_a_reward(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model: tiny\ntask: {name: countdown}\n")
    assert [r.fn for r in load_config(path).reward] == ["aha.rewards:countdown"]
    path.write_text("model: tiny\ntask: {name: countdown}\nreward: [{fn: format}]\n")
    assert [r.fn for r in load_config(path).reward] == ["format"]
    path.write_text("model: tiny\ntask: {name: nonsense}\n")
    with pytest.raises(TaskError, match="unknown built-in task 'nonsense' .*countdown"):
        build_task(load_config(path).task)


@pytest.mark.parametrize("completion, score", [
    ("(9 + 8) + 1 = 18", 1.0),
    ("(8 + 1) * 2 = 18", 0.0),  # 2 is not given and 9 is left out
    ("Answer: 9 * 2", 0.0),  # 2 is not a given number
    ("\\boxed{8 * (9 / 1) / 4}", 0.0),  # 4 is not given, and 8 / 4 leaves out 9
    ("9 + 8 + 1", 1.0),
    ("9 * 8 * 1", 0.0),  # 72
    ("9 + 9", 0.0),  # 9 twice, 8 and 1 unused
    ("2 ** 4 + 2", 0.0),  # powers are not allowed
    ("__import__('os').system('true')", 0.0),
    ("9 / (1 - 1) + 8", 0.0),  # division by zero
    ("-9 + 8 + 1 + 18", 0.0),
    ("9 + 8 + 1\nso that makes 18, done", 1.0),
    ("Answer: 9+8+1 = 100", 0.0),  # a false equation
    ("Answer: 1 + 1 = 9 + 8 + 1", 0.0),
    ("8+1+9 = 8+1-9 = 9*8*1 = 18", 0.0),  # candidates chained by = pay nothing
    ("So, 9 + 8 + 1 = 18.", 1.0),
    ("**Answer:** 9 + 8 + 1", 1.0),
    ("Answer: $9 + 8 + 1 = 18$", 1.0),
    ("\\boxed{(9 - 1) \\times 1 + 8 + 1 - 1}", 0.0),  # 1 used three times
    ("The expression is: (9 + 8) + 1", 1.0),
    ("9 x 8 x 1", 0.0),  # 72, read as a product
])
def test_countdown_checks_the_numbers_and_the_value(completion, score):
    sample = {"numbers": [8, 1, 9], "target": 18, "answer": "18"}
    assert countdown(completion, sample) == score


@pytest.mark.parametrize("completion, answer, score", [
    ("Yes, there is a path.", "yes", 1.0), ("no", "yes", 0.0), ("There is no cycle here. Answer: no", "no", 1.0),
    ("Answer: yes. (Not no.)", "yes", 1.0), ("I cannot tell.", "no", 0.0), ("NO", "no", 1.0),
    ("The answer is not yes.", "yes", 0.0),  # a negated answer states nothing
    ("There is no edge from A to D, but A-C-D is a path, so yes.", "yes", 1.0),  # the verdict comes last
    ("Answer yes or no.\nNo.", "no", 1.0),
])
def test_yes_no(completion, answer, score):
    assert yes_no(completion, {"answer": answer}) == score


def test_a_reference_of_the_wrong_kind_is_an_error_not_a_zero():
    with pytest.raises(ValueError, match="yes_no needs sample\\['answer'\\] 'yes' or 'no'"):
        yes_no("yes", {"answer": "True"})
    with pytest.raises(ValueError, match="countdown needs sample\\['numbers'\\] a list of integers"):
        countdown("8 + 1 + 9", {"numbers": "8,1,9", "target": "18"})


@pytest.mark.parametrize("completion, score", [
    ("3, 5, 9", 1.0), ("The sorted list is [3, 5, 9].", 1.0), ("3, 9, 5", 0.0), ("3, 5", 0.0),
    ("Sorting 9, 3, 5 gives:\n3, 5, 9", 1.0), ("\\boxed{3,5,9}", 1.0), ("none", 0.0),
])
def test_list_answer(completion, score):
    assert list_answer(completion, {"answer": "3, 5, 9"}) == score


def test_an_rl_run_trains_on_a_procedural_task(tmp_path):
    from test_training import metrics

    from aha.training.loop import train

    (tmp_path / "c.yaml").write_text(
        f"model: tiny\noutput_dir: {tmp_path / 'run'}\ntask: {{name: countdown, num_eval: 4, num_train: 20}}\n"
        "rollout: {prompts_per_step: 2, group_size: 2, max_new_tokens: 4}\n"
        "train: {steps: 2, checkpoint_every: 0, report: false}\n")
    summary = train(load_config(tmp_path / "c.yaml"), echo=lambda *_: None)
    steps = [r for r in metrics(Path(summary.run_dir)) if "reward/mean" in r]
    assert len(steps) == 2 and "reward/countdown" in steps[0]


def test_eval_with_a_built_in_task_scores_it_by_its_own_verifier():
    from aha.cli.commands import task_override as _task_override

    config = load_config(Path(__file__).parent.parent / "configs" / "quickstart.yaml", _task_override("countdown"))
    assert config.task.name == "countdown" and config.eval.scorer == "aha.rewards:countdown"
    assert [r.fn for r in config.reward] == ["aha.rewards:numeric_answer"]  # what it trains with is the config's
