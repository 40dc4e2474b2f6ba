"""The user's own tools in the tool_use environment (aha.envs.tools): the three call forms, the
worker process with its deadline, errors and timeouts counted, config errors naming the key,
the tool's output as environment tokens (never trained on), a chat template's tool format, and
the tool_lookup recipe on the tiny model."""

import json
import time
from pathlib import Path

import pytest
from test_environments import engine  # noqa: F401 - the tiny engine fixture
from tiny_recipes import tiny_overrides

from aha.config import Config, RewardSpec, load_config
from aha.envs import EnvError, ToolUse, build_environment, run_episodes
from aha.envs.tools import ToolCall, find_call
from aha.models.tiny import tiny_tokenizer
from aha.prompts import PlainText, encode_prompts
from aha.rewards import build_reward
from aha.tasks.base import Task
from aha.training.loop import train

TOOLS = '''
import time

def lookup(key):
    """Look up the number stored under a key."""
    return {"k1": "517", "k2": "42"}.get(key.strip(), "no such key")

def add(a: int, b: int):
    """Add two numbers."""
    return {"sum": a + b}

def slow(x):
    time.sleep(60)

def boom(x):
    raise KeyError(x)
'''
SAMPLE = {"id": "q1", "prompt": "What number is stored under k1?", "answer": "517"}


@pytest.fixture()
def tool_dir(tmp_path):
    (tmp_path / "mytools.py").write_text(TOOLS)
    return tmp_path


def make(tool_dir, **options):
    tools = {name: f"mytools.py:{name}" for name in ("lookup", "add", "slow", "boom")}
    reward = build_reward([RewardSpec(fn="numeric_answer")])
    return ToolUse(reward, tools={**tools, "calc": "calc"}, base_dir=str(tool_dir), timeout_s=1.0, **options)


def test_a_user_tool_is_called_in_each_form_and_its_output_shown(tool_dir):
    env = make(tool_dir)
    prompt = env.reset(SAMPLE)
    assert "- <lookup>key</lookup>: Look up the number stored under a key." in prompt
    assert '- <tool name="add">{"a": "...", "b": "..."}</tool>: Add two numbers.' in prompt
    assert env.step("I will look. <lookup>k1</lookup>").observation == "Output: 517"
    assert env.step('<tool name="lookup">{"key": "k2"}</tool>').observation == "Output: 42"
    hermes = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 40}}</tool_call>'
    assert env.step(hermes).observation == 'Output: {"sum": 42}'
    assert env.step("<calc>6 * 7</calc> then <lookup>k1</lookup>").observation == "Output: 42"  # the first call
    calc = '<tool_call>{"name": "calc", "arguments": {"expression": "6 * 7"}}</tool_call>'
    assert env.step(calc).observation == "Output: 42"  # a built-in in the template's format
    final = env.step("The number is 517.")
    assert (final.reward, final.done) == (1.0, True)
    assert final.info == {"tool_calls": 5.0, "tool_errors": 0.0, "tool_timeouts": 0.0, "correct": 1.0}


def test_tool_errors_and_timeouts_are_shown_and_counted(tool_dir):
    env = make(tool_dir)
    env.reset(SAMPLE)
    assert env.step("<boom>x</boom>").observation == "Output: error: KeyError: 'x'"
    assert env.step('<tool name="add">{"a": 1}</tool>').observation == \
        "Output: error: add: missing a required argument: 'b'"
    assert env.step("<tool name=\"add\">1 2</tool>").observation == \
        'Output: error: add takes 2 arguments: write <tool name="add">{...}</tool>'
    assert env.step("<tool_call>{name: lookup}</tool_call>").observation.startswith("Output: error: a <tool_call>")
    assert env.step('<tool name="shell">ls</tool>').observation == "Output: error: the shell tool is not available"
    start = time.monotonic()
    timed_out = env.step("<slow>x</slow>")
    assert timed_out.observation == "Output: error: slow timed out after 1 s"
    assert time.monotonic() - start < 10  # stopped at its deadline, not after the tool's 60 s
    assert env.step("<lookup>k2</lookup>").observation == "Output: 42"  # a fresh worker after the kill
    assert timed_out.info == {"tool_calls": 6.0, "tool_errors": 5.0, "tool_timeouts": 1.0}


def test_find_call_reads_the_three_forms():
    names = {"lookup", "calc", "python"}
    assert find_call("no call here", names) is None
    assert find_call("<lookup>k1", names) == ToolCall("lookup", "k1")  # cut at the token budget
    assert find_call('<tool name=\'lookup\'>{"key": "k1"}</tool>', names) == ToolCall("lookup", {"key": "k1"})
    args_as_text = '<tool_call>{"name": "lookup", "arguments": "{\\"key\\": \\"k1\\"}"}</tool_call>'
    assert find_call(args_as_text, names) == ToolCall("lookup", {"key": "k1"})
    assert find_call("<tool name=\"lookup\">{bad json</tool>", names).error.startswith("error: the arguments")
    assert find_call("<other>x</other>", names) is None  # an unknown short tag is text


def test_user_tool_config_errors_name_the_key(tool_dir):
    reward = build_reward([RewardSpec(fn="numeric_answer")])

    def build(tools):
        return build_environment(Config(env={"name": "tool_use", "options": {"tools": tools}}).env, reward, tool_dir)

    with pytest.raises(EnvError, match=r"env.options.tools.look: cannot import 'nowhere'"):
        build({"look": "nowhere:lookup"})
    with pytest.raises(EnvError, match=r"env.options.tools.look: module 'mytools.py' has no function 'missing'"):
        build({"look": "mytools.py:missing"})
    with pytest.raises(EnvError, match=r"env.options.tools.look: 'look' and 'calc': a built-in tool keeps its name"):
        build({"look": "calc"})
    with pytest.raises(EnvError, match=r"env.options.tools.look: 'lookup' must be 'module:function'"):
        build({"look": "lookup"})
    with pytest.raises(EnvError, match=r"env.options.tools.my-tool: a tool's name is a Python identifier"):
        build({"my-tool": "mytools.py:lookup"})
    with pytest.raises(EnvError, match=r"unknown tool\(s\) \['lookup'\]"):
        build(["lookup"])
    runner = build({"lookup": "mytools.py:lookup"})  # a path next to the config (base_dir)
    env = runner.make()
    env.reset(SAMPLE)
    assert env.step("<lookup>k1</lookup>").observation == "Output: 517"


class OneCall:
    """tool_use whose policy turns are replaced: first a lookup call, then the answer."""

    def __init__(self, tool_dir):
        self.env = make(tool_dir)
        self.turn = 0
        self.tool_schemas = self.env.tool_schemas

    def reset(self, sample):
        return self.env.reset(sample)

    def step(self, action):
        self.turn += 1
        return self.env.step("<lookup>k1</lookup>" if self.turn == 1 else "517")


def test_the_tool_output_is_environment_tokens_never_trained_on(engine, tool_dir):  # noqa: F811
    played = run_episodes(engine, Task("t", [], []), lambda: OneCall(tool_dir), [SAMPLE], group_size=2, max_turns=2)
    ro = played.rollouts
    for i, episode in enumerate(played.episodes):
        assert episode.observations == ["Output: 517"]
        observed = ro.completion_ids[i][ro.observation_mask[i].bool()].tolist()
        text = engine.tokenizer.decode(observed, skip_special_tokens=False)
        assert "Output: 517" in text and "<|im_start|>user" in text  # the template's user turn around the output
        assert not (ro.completion_mask[i].bool() & ro.observation_mask[i].bool()).any()
        assert played.result.components["final_tool_calls"][i] == 1.0
        assert played.result.components["final_tool_errors"][i] == 0.0


TOOL_TEMPLATE = (  # a Hermes/Qwen-style template that shows the tools' schemas in a system turn
    "{% if tools %}{{ '<|im_start|>system\nTools: ' }}{% for t in tools %}{{ t['function']['name'] + ' ' }}"
    "{% endfor %}{{ '<|im_end|>\n' }}{% endif %}"
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def test_a_template_with_a_tool_format_is_given_the_tools(tool_dir):
    tokenizer = tiny_tokenizer()
    schemas = make(tool_dir).tool_schemas
    assert schemas[1] == {"type": "function", "function": {
        "name": "add", "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"]}}}
    plain = tokenizer.decode(encode_prompts(tokenizer, Task("t", [], []), [SAMPLE], schemas)[0])
    assert "Tools" not in plain  # the tiny model's template has no tool format: the tools change nothing
    tokenizer.chat_template = TOOL_TEMPLATE
    shown = tokenizer.decode(encode_prompts(tokenizer, Task("t", [], []), [SAMPLE], schemas)[0])
    assert shown.startswith("<|im_start|>system\nTools: lookup add slow boom <|im_end|>")
    assert PlainText(tokenizer)  # the template still reads as one


def test_the_tool_lookup_recipe_runs_on_the_tiny_model(tmp_path):
    root = Path(__file__).parent.parent
    config = load_config(root / "configs/tool_lookup.yaml", tiny_overrides(
        tmp_path / "run", "eval.limit=4", "eval.max_new_tokens=6", "algorithm.dynamic_sampling=false",
        "eval.before=false"))
    train(config, echo=lambda *_: None)
    steps = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    for key in ("reward/final_tool_calls", "reward/final_tool_errors", "reward/final_tool_timeouts"):
        assert key in steps[0]
    assert any("eval/final_tool_calls" in r for r in steps)
    assert [r["step"] for r in steps if "time/step_s" in r] == [1, 2]
