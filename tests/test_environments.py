"""Multi-turn environments (aha.envs): the interface, the built-ins, the token-in/token-out
rollout and its loss mask (checked token by token), the estimators over masks with gaps, and
training runs on the tiny model."""

import json

import pytest
import torch
import yaml
from test_interventions import learner_logprobs

from aha.algorithms import discounted_returns, gae_advantages, outcome_token_rewards
from aha.config import Config, ConfigError, RewardSpec, load_config
from aha.envs import (
    EnvError,
    ToolUse,
    TryAgain,
    Turn,
    TurnBridge,
    build_environment,
    calculate,
    check_turn,
    run_episodes,
)
from aha.models.tiny import tiny_model, tiny_tokenizer
from aha.rewards import build_reward
from aha.rewards.code import sandbox_support
from aha.rollout.hf_engine import HFEngine
from aha.tasks.base import Task

SAMPLES = [{"id": "p1", "prompt": "What is 2 * 3?", "answer": "6"},
           {"id": "p2", "prompt": "What is 12 * 4?", "answer": "48"}]


class Scripted:
    """An environment whose turns are fixed in advance: (reward, done, observation) per turn."""

    script = [(0.5, False, "first reply"), (0.25, False, "second, longer reply"), (1.0, True, "")]

    def __init__(self, reward=None):
        self.turn = 0

    def reset(self, sample):
        return sample["prompt"]

    def step(self, action):
        reward, done, observation = self.script[self.turn]
        self.turn += 1
        return Turn(reward, done, observation, info={"turn": float(self.turn)})


@pytest.fixture(scope="module")
def engine():
    tokenizer = tiny_tokenizer()
    model = tiny_model(len(tokenizer)).eval()
    return HFEngine(model, tokenizer, 6, 1.0, 1.0, 32, torch.float32)


def runs(mask_row: torch.Tensor) -> list[tuple[int, int, int]]:
    """(value, start, end) of each run of equal values in a 0/1 row."""
    out, start = [], 0
    values = mask_row.tolist()
    for j in range(1, len(values) + 1):
        if j == len(values) or values[j] != values[start]:
            out.append((int(values[start]), start, j))
            start = j
    return out


def test_the_loss_mask_covers_the_policy_tokens_only_token_by_token(engine):
    torch.manual_seed(0)
    played = run_episodes(engine, Task("t", [], []), Scripted, SAMPLES, group_size=2, max_turns=3)
    ro, bridge = played.rollouts, TurnBridge(engine.tokenizer)
    assert ro.observation_mask is not None and len(ro) == 4
    for i, episode in enumerate(played.episodes):
        length = len(episode.tokens)
        policy, observed = ro.completion_mask[i], ro.observation_mask[i]
        assert torch.equal(policy[:length] + observed[:length], torch.ones(length))  # every token is one or the other
        assert not policy[length:].any() and not observed[length:].any()  # padding is neither
        assert ro.completion_ids[i, :length].tolist() == episode.tokens
        # runs alternate: policy turn, observation, ..., ending on a policy turn
        pieces = [(v, s, e) for v, s, e in runs(policy[:length])]
        assert [v for v, _, _ in pieces] == [1, 0, 1, 0, 1]
        turns = [(s, e) for v, s, e in pieces if v == 1]
        gaps = [(s, e) for v, s, e in pieces if v == 0]
        for (s, e), action in zip(turns, episode.actions):  # the policy's tokens decode to its actions
            assert engine.tokenizer.decode(ro.completion_ids[i, s:e].tolist(), skip_special_tokens=True) == action
        for (s, e), turn_end, observation in zip(gaps, [t[1] for t in turns], episode.observations):
            last = int(ro.completion_ids[i, turn_end - 1])
            assert ro.completion_ids[i, s:e].tolist() == bridge.ids(observation, last)
            assert not ro.sampling_logprobs[i, s:e].any()  # nothing sampled there
        assert (ro.sampling_logprobs[i, :length][policy[:length].bool()] < 0).all()
        # each turn's reward sits on its last token; the return is their sum
        ends = [e - 1 for _, e in turns]
        assert played.turn_rewards[i].nonzero().view(-1).tolist() == ends
        assert played.turn_rewards[i, ends].tolist() == [0.5, 0.25, 1.0]
    assert played.result.total.tolist() == [1.75] * 4
    assert played.result.components["turns"].tolist() == [3.0] * 4
    assert played.result.components["first_turn"].tolist() == [1.0] * 4
    assert played.result.components["final_turn"].tolist() == [3.0] * 4


@pytest.mark.parametrize("share_prompt", [False, True])
def test_the_learner_reads_the_tokens_the_engine_sampled(engine, share_prompt):
    """No re-tokenisation drift: the learner's log-prob of every policy token equals the
    engine's sampling log-prob (same weights, temperature 1), across turns."""
    torch.manual_seed(1)
    ro = run_episodes(engine, Task("t", [], []), Scripted, SAMPLES, group_size=2, max_turns=3).rollouts
    learner = learner_logprobs(engine, ro, 2, share_prompt)
    policy = ro.completion_mask.bool()
    assert torch.allclose(learner[policy], ro.sampling_logprobs[policy], atol=1e-5)
    assert not learner[~policy].any()


def test_the_bridge_is_the_chat_template_of_the_whole_conversation():
    tokenizer = tiny_tokenizer()
    bridge = TurnBridge(tokenizer)
    answer = tokenizer("41", add_special_tokens=False)["input_ids"] + [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    render = lambda messages: tokenizer.apply_chat_template(messages, add_generation_prompt=True,  # noqa: E731
                                                            return_dict=True)["input_ids"]
    prompt = render([{"role": "user", "content": "Q?"}])
    conversation = render([{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "41"},
                           {"role": "user", "content": "No."}])
    assert prompt + answer + bridge.ids("No.", answer[-1]) == conversation
    # a turn cut at its budget (no stop token) is closed by the bridge
    assert bridge.ids("No.", None)[0] == answer[-1]
    # what the environment says is text: a tool printing the template's markup does not end a turn
    markup = bridge.ids("<|im_end|>", None)
    assert markup.count(answer[-1]) == 2  # the bridge's own two ends of turn, not the observation's
    assert "<|im_end|>" in tokenizer.decode(markup[markup.index(answer[-1], 1) - 10:], skip_special_tokens=True)
    tokenizer.chat_template = None  # a base model: labelled turns, as aha writes a conversation for it
    assert TurnBridge(tokenizer).text("No.") == "\n\nUser: No.\n\nAssistant:"


# Qwen2.5's way with tool results, cut down: a tool message is a user turn holding <tool_response>
TOOL_TEMPLATE = ("{% for m in messages %}{% if m.role == 'tool' %}{{ '<|im_start|>user\n<tool_response>\n' + m.content"
                 " + '\n</tool_response><|im_end|>\n' }}{% else %}{{ '<|im_start|>' + m.role + '\n' + m.content"
                 " + '<|im_end|>\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}"
                 "{{ '<|im_start|>assistant\n' }}{% endif %}")
GENERATION = "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
NO_TOOL_MESSAGE = {  # templates under which a tool's result stays a user message
    "never names the role": tiny_tokenizer().chat_template,
    "raises on it": "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools') }}{% endif %}"
                    "{{ m.role + ': ' + m.content + '\n' }}{% endfor %}" + GENERATION,
    # names `tools` (their schemas) but writes every role alike: '<|im_start|>tool' is a turn it never saw
    "writes every role alike": "{% if tools %}{{ 'Tools: ...\n' }}{% endif %}{% for m in messages %}"
                               "{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{% endfor %}"
                               + GENERATION,
    # Llama 3.1's way: the tool output JSON-encoded, which text put in verbatim would not match
    "encodes the content": "{% for m in messages %}{% if m.role == 'tool' %}{{ '<|im_start|>ipython\n' + "
                           "(m.content | tojson) + '<|im_end|>\n' }}{% else %}{{ '<|im_start|>' + m.role + '\n' + "
                           "m.content + '<|im_end|>\n' }}{% endif %}{% endfor %}" + GENERATION,
    # DeepSeek-R1's way: no assistant opening after a tool output
    "does not open the assistant's turn after it": "{% set ns = namespace(tool=false) %}{% for m in messages %}"
        "{% set ns.tool = m.role == 'tool' %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}"
        "{% endfor %}{% if add_generation_prompt and not ns.tool %}{{ '<|im_start|>assistant\n' }}{% endif %}",
}


def test_a_tool_result_is_written_in_the_templates_tool_message_where_it_has_one():
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = TOOL_TEMPLATE
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    render = lambda messages: tokenizer.apply_chat_template(messages, add_generation_prompt=True,  # noqa: E731
                                                            return_dict=True)["input_ids"]
    answer = tokenizer("<lookup>k7</lookup>", add_special_tokens=False)["input_ids"] + [end]
    turns = [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "<lookup>k7</lookup>"}]
    bridge = TurnBridge(tokenizer)
    tool = render(turns + [{"role": "tool", "content": "Output: 42"}])
    assert render(turns[:1]) + answer + bridge.ids("Output: 42", end, "tool") == tool
    assert "<tool_response>" in tokenizer.decode(bridge.ids("Output: 42", end, "tool"))
    assert render(turns[:1]) + answer + bridge.ids("No.", end) == render(turns + [{"role": "user", "content": "No."}])


@pytest.mark.parametrize("template", list(NO_TOOL_MESSAGE), ids=list(NO_TOOL_MESSAGE))
def test_under_a_template_without_a_tool_message_of_its_own_a_tool_result_is_a_user_message(template):
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = NO_TOOL_MESSAGE[template]
    bridge = TurnBridge(tokenizer)
    assert bridge.ids("Output: 42", None, "tool") == bridge.ids("Output: 42", None, "user")


def test_an_episode_writes_a_tool_turn_as_the_template_does(engine):
    class ToolTurn(Scripted):
        script = [(0.0, False, "Output: 42"), (1.0, True, "")]

        def step(self, action):
            reward, done, observation = self.script[self.turn]
            self.turn += 1
            return Turn(reward, done, observation, role="tool")

    engine.tokenizer.chat_template, template = TOOL_TEMPLATE, engine.tokenizer.chat_template
    try:
        played = run_episodes(engine, Task("t", [], []), ToolTurn, SAMPLES[:1], group_size=1, max_turns=2)
    finally:
        engine.tokenizer.chat_template = template
    ro = played.rollouts
    observed = ro.completion_ids[0][ro.observation_mask[0].bool()].tolist()
    assert "<tool_response>\nOutput: 42\n</tool_response>" in engine.tokenizer.decode(observed)


def test_a_turn_with_an_unknown_role_is_refused():
    with pytest.raises(EnvError, match="Turn.role must be one of user, tool, got 'system'"):
        check_turn(Turn(0.0, False, "hi", role="system"), "mine")


def test_episodes_stop_when_done_or_out_of_turns(engine):
    class DoneAtTwo(Scripted):
        script = [(0.0, False, "again"), (1.0, True, "")]

    played = run_episodes(engine, Task("t", [], []), DoneAtTwo, SAMPLES, group_size=1, max_turns=5)
    assert [len(e.actions) for e in played.episodes] == [2, 2]
    capped = run_episodes(engine, Task("t", [], []), Scripted, SAMPLES, group_size=1, max_turns=1)
    assert [len(e.actions) for e in capped.episodes] == [1, 1]
    assert capped.rollouts.observation_mask.sum() == 0
    assert capped.result.total.tolist() == [0.5, 0.5]


def test_an_environment_that_breaks_its_contract_is_named(engine):
    class Raises(Scripted):
        def step(self, action):
            raise KeyError("boom")

    class Wrong(Scripted):
        def step(self, action):
            return 1.0

    with pytest.raises(RuntimeError, match=r"environment mine: step\(\) raised KeyError.*sample p1"):
        run_episodes(engine, Task("t", [], []), Raises, SAMPLES, 1, 2, env_name="mine")
    with pytest.raises(EnvError, match="must return an aha.envs.Turn, got float"):
        run_episodes(engine, Task("t", [], []), Wrong, SAMPLES, 1, 2)
    with pytest.raises(EnvError, match=r"Turn.info\['x'\] must be a finite number"):
        from aha.envs import check_turn
        check_turn(Turn(0.0, True, info={"x": float("nan")}), "e")


def test_a_failed_verdict_is_a_failed_episode(engine):
    """The reward raised on the answer: the turn's reward is NaN and the episode ends, so the
    step counts it in reward/failed and gives it no advantage (not a silent 0)."""
    env = TryAgain(build_reward([RewardSpec(fn="numeric_answer")]))
    env.reset({"id": "x", "prompt": "What?", "answer": "not a number"})  # numeric_answer raises on this reference
    turn = env.step("42")
    assert turn.done and turn.reward != turn.reward  # NaN
    played = run_episodes(engine, Task("t", [], []), lambda: TryAgain(build_reward([RewardSpec(fn="numeric_answer")])),
                          [{"id": "x", "prompt": "What?", "answer": "n/a"}], 2, 3)
    assert played.result.failed.all() and [len(e.actions) for e in played.episodes] == [1, 1]


def test_episodes_whose_first_prompts_differ_are_not_scored_on_a_shared_prompt(engine):
    """An environment may start each episode differently; the learner then runs each row's
    own prompt (train.share_prompt would otherwise score a group on its first row's)."""
    class Varied(Scripted):
        count = 0

        def reset(self, sample):
            Varied.count += 1
            return f"{sample['prompt']} (variant {Varied.count})"

    torch.manual_seed(2)
    ro = run_episodes(engine, Task("t", [], []), Varied, SAMPLES, group_size=2, max_turns=2).rollouts
    learner = learner_logprobs(engine, ro, 2, share_prompt=True)
    policy = ro.completion_mask.bool()
    assert torch.allclose(learner[policy], ro.sampling_logprobs[policy], atol=1e-5)


def test_try_again_pays_fewer_turns_more():
    env = TryAgain(build_reward([RewardSpec(fn="numeric_answer")]), discount=0.5)
    assert env.reset(SAMPLES[0]) == "What is 2 * 3?"
    first, second, third = env.step("5"), env.step("It is 7."), env.step("The answer is 6.")
    assert (first.reward, first.done, first.observation, first.info) == (0.0, False, "That is not correct. Try again.",
                                                                         {"correct": 0.0})
    assert (second.reward, second.done) == (0.0, False)
    assert (third.reward, third.done, third.info) == (0.25, True, {"correct": 1.0})
    env.reset(SAMPLES[1])
    assert env.step("48").reward == 1.0
    with pytest.raises(ValueError, match="discount must be in"):
        TryAgain(None, discount=2)


@pytest.mark.parametrize("expression, value", [
    ("2 + 3 * 4", "14"), ("(2 + 3) * 4", "20"), ("7 / 2", "3.5"), ("-3 ** 2", "-9"), ("2 ^ 10", "1024"),
    ("1,234 * 2", "2468"), ("17 // 5", "3"), ("17 % 5", "2"), ("0.1 + 0.2", "0.3"), ("1 / 3", "0.3333333333"),
    ("12 × 3", "36"),
])
def test_calculate(expression, value):
    assert calculate(expression) == value


@pytest.mark.parametrize("expression, error", [
    ("1 / 0", "division by zero"), ("__import__('os')", "Call is not arithmetic"), ("x + 1", "Name is not arithmetic"),
    ("9 ** 9 ** 9", "too large"), ("2 ** 0.5", "powers need a whole exponent"), ("", "empty"),
    ("(1/3**999)**999 + (1/7**999)**999", "too large"),  # exact fractions of half a million digits: refused at once
    ("1 +", "not an arithmetic expression"), ("1" * 400, "longer than 300"),
])
def test_calculate_refuses(expression, error):
    assert calculate(expression).startswith("error:") and error in calculate(expression)


def test_tool_use_shows_a_calculation_and_judges_the_answer():
    env = ToolUse(build_reward([RewardSpec(fn="numeric_answer")]), tools=["calc"])
    prompt = env.reset(SAMPLES[1])
    assert prompt.startswith("What is 12 * 4?\n\nYou may use tools") and "<calc>" in prompt
    call = env.step("Let me compute. <calc>12 * 4</calc>")
    counts = {"tool_calls": 1.0, "tool_errors": 0.0, "tool_timeouts": 0.0}
    assert (call.reward, call.done, call.observation, call.info) == (0.0, False, "Output: 48", counts)
    # cut at the budget
    assert env.step("<calc>12 *").observation == "Output: error: not an arithmetic expression: 12 *"
    assert env.step("<python>print(1)</python>").observation == "Output: error: the python tool is not available"
    final = env.step("The answer is 48.")
    # the cut calculation and the missing python tool are errors
    assert (final.reward, final.done, final.info) == (1.0, True, {"tool_calls": 3.0, "tool_errors": 2.0,
                                                                  "tool_timeouts": 0.0, "correct": 1.0})
    chat = ToolUse(None).reset({"prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]})
    assert chat[0] == {"role": "system", "content": "S"} and chat[1]["content"].startswith("Q\n\nYou may use tools")
    with pytest.raises(ValueError, match="unknown tool"):
        ToolUse(None, tools=["shell"])


@pytest.mark.skipif(bool(sandbox_support()), reason="the code sandbox cannot confine programs here")
def test_tool_use_runs_python_in_the_sandbox():
    env = ToolUse(build_reward([RewardSpec(fn="numeric_answer")]))
    env.reset(SAMPLES[0])
    assert env.step("<python>print(sum(range(10)))</python>").observation == "Output: 45"
    crashed = env.step("<python>\nimport os\nos.listdir('/root')\n</python>").observation
    assert "PermissionError" in crashed or "FileNotFoundError" in crashed
    assert "ZeroDivisionError" in env.step("<python>1/0</python>").observation


def test_returns_and_gae_step_over_the_environments_tokens():
    # one row: policy tokens at 0, 1, then the environment's at 2, 3, then the policy's at 4; padding at 5
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0, 1.0, 0.0]])
    rewards = torch.tensor([[0.0, 1.0, 0.0, 0.0, 2.0, 0.0]])
    gamma = 0.5
    # in policy tokens: r = (0, 1, 2) -> G = (0 + .5 * (1 + .5 * 2), 1 + .5 * 2, 2) = (1, 2, 2)
    assert discounted_returns(rewards, mask, gamma).tolist() == [[1.0, 2.0, 0.0, 0.0, 2.0, 0.0]]
    values = torch.tensor([[0.5, 0.25, 9.0, 9.0, 1.0, 9.0]])  # the environment's and the padding's are never read
    adv, returns = gae_advantages(rewards, values, mask, gamma=0.5, lam=0.5)
    # deltas over policy tokens: d2 = 2 - 1 = 1; d1 = 1 + .5 * 1 - .25 = 1.25; d0 = 0 + .5 * .25 - .5 = -.375
    # A2 = 1, A1 = 1.25 + .25 * 1 = 1.5, A0 = -.375 + .25 * 1.5 = 0
    assert adv.tolist() == [[0.0, 1.5, 0.0, 0.0, 1.0, 0.0]]
    assert returns.tolist() == [[0.5, 1.75, 0.0, 0.0, 2.0, 0.0]]
    # the same numbers as the row without its gap
    compact = torch.tensor([[1.0, 1.0, 1.0]])
    adv_c, _ = gae_advantages(rewards[:, [0, 1, 4]], values[:, [0, 1, 4]], compact, 0.5, 0.5)
    assert torch.equal(adv_c, adv[:, [0, 1, 4]])
    # the outcome reward goes on the last policy token, after the gap
    assert outcome_token_rewards(torch.tensor([3.0]), mask).tolist() == [[0.0, 0.0, 0.0, 0.0, 3.0, 0.0]]


def test_env_config_errors_name_the_key(tmp_path):
    with pytest.raises(ValueError, match="env.name plays multi-turn episodes for online RL: method=rl only"):
        Config(method="sft", env={"name": "try_again"})
    with pytest.raises(ValueError, match="rollout.partial_rollouts is not supported with multi-turn episodes"):
        Config(env={"name": "try_again"}, rollout={"partial_rollouts": 2})
    with pytest.raises(ValueError, match="algorithm.length_coef is not supported"):
        Config(env={"name": "try_again"}, algorithm={"length_coef": 0.1})
    reward = build_reward([RewardSpec(fn="numeric_answer")])
    with pytest.raises(EnvError, match=r"env.options: got an unexpected keyword argument 'discont'"):
        build_environment(Config(env={"name": "try_again", "options": {"discont": 0.5}}).env, reward)
    with pytest.raises(EnvError, match=r"env.options: environment try_again refused them: ValueError: "
                                       r"env.options.discount must be in \[0, 1\]"):
        build_environment(Config(env={"name": "try_again", "options": {"discount": 2}}).env, reward)
    with pytest.raises(EnvError, match=r"unknown tool\(s\) \['shell'\]"):
        build_environment(Config(env={"name": "tool_use", "options": {"tools": ["shell"]}}).env, reward)
    with pytest.raises(ValueError, match="algorithm.length_adaptive is not supported with multi-turn episodes"):
        Config(env={"name": "try_again"}, algorithm={"length_adaptive": True})
    with pytest.raises(Exception, match=r"env.name: cannot import 'nowhere'"):
        build_environment(Config(env={"name": "nowhere:Env"}).env, reward)
    assert build_environment(Config().env, reward) is None
    (tmp_path / "myenv.py").write_text(
        "from aha.envs import Turn\n"
        "class Echo:\n"
        "    def __init__(self, reward, bonus=0.0):\n        self.bonus = bonus\n"
        "    def reset(self, sample):\n        return sample['prompt']\n"
        "    def step(self, action):\n        return Turn(1.0 + self.bonus, True)\n")
    runner = build_environment(Config(env={"name": "myenv.py:Echo", "options": {"bonus": 1}}).env, reward, tmp_path)
    env = runner.make()
    assert env.step("x").reward == 2.0 and runner.max_turns == 3


RUN = """
model: tiny
output_dir: {run}
task: {{name: arithmetic, num_eval: 8}}
rollout: {{prompts_per_step: 4, group_size: 4, max_new_tokens: 5, batch_size: 32}}
train: {{steps: {steps}, lr: 1.0e-2, checkpoint_every: 2, report: false}}
algorithm: {{dynamic_sampling: false, advantage: {advantage}}}
reward: [{{fn: '{scorer}:has_a'}}]
env: {{name: try_again, max_turns: 3}}
eval: {{before: true, after: true, scorer: '{scorer}:has_a'}}
"""


def _env_run(tmp_path, advantage="grpo", steps=3):
    from aha.training.loop import train

    scorer = tmp_path / "score.py"
    scorer.write_text("def has_a(completion, sample):\n    return float('a' in completion.lower())\n")
    path = tmp_path / f"{advantage}.yaml"
    path.write_text(RUN.format(run=tmp_path / advantage, scorer=scorer, advantage=advantage, steps=steps))
    summary = train(load_config(path), echo=lambda *_: None)
    metrics = [json.loads(line) for line in (tmp_path / advantage / "metrics.jsonl").read_text().splitlines()]
    return summary, metrics


def test_try_again_trains_first_turn_and_final_accuracy_up(tmp_path):
    """GRPO on try_again episodes (tiny model, reward: an 'a' in the answer): held-out
    first-turn and final accuracy both rise, and every turn's numbers are logged. 8 steps of 4
    prompts: with 2 prompts a step, bf16 autocast (picked on Zen 4 and AMX CPUs) had learned
    nothing after 8 steps in 3 of 6 seeds; with 4 every one of 8 seeds reached 100%, in bf16 and
    in fp32 (on an AVX2 AMD EPYC)."""
    summary, metrics = _env_run(tmp_path, steps=8)
    before, after = metrics[0], metrics[-1]
    assert before["step"] == 0 and after["step"] == 8
    assert before["eval/first_turn_accuracy"] < 0.5 and before["eval/accuracy"] < 0.5
    assert after["eval/first_turn_accuracy"] >= 0.75 and after["eval/accuracy"] >= 0.75
    assert after["eval/turns"] < before["eval/turns"]
    steps = [m for m in metrics if "reward/mean" in m]
    assert {"reward/turns", "reward/first_correct", "reward/final_correct"} <= set(steps[0])
    samples = [json.loads(line) for line in (tmp_path / "grpo" / "samples.jsonl").read_text().splitlines()]
    train_sample = next(s for s in samples if s["split"] == "train")
    assert train_sample["turns"][0]["action"] and "reward" in train_sample["turns"][0]


@pytest.mark.parametrize("advantage", ["reinforce_pp", "gae", "rloo", "remax"])
def test_every_estimator_trains_on_episodes(tmp_path, advantage):
    _, metrics = _env_run(tmp_path, advantage, steps=2)
    steps = [m for m in metrics if "reward/mean" in m]
    assert len(steps) == 2 and all(m["tokens/trained"] > 0 for m in steps)


def test_a_resumed_env_run_continues(tmp_path):
    """Episodes hold no state across steps: a run stopped at its checkpoint resumes from it."""
    _env_run(tmp_path, steps=2)
    config = yaml.safe_load((tmp_path / "grpo.yaml").read_text())
    config["train"]["steps"] = 3
    (tmp_path / "grpo.yaml").write_text(yaml.safe_dump(config))
    from aha.training.loop import train

    summary = train(load_config(tmp_path / "grpo.yaml"), echo=lambda *_: None)
    assert summary.steps == 3
    steps = [json.loads(line)["step"] for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert steps.count(3) >= 1 and steps.count(1) == 1


def test_config_error_names_env(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("env: {name: try_again, max_turns: 0}\n")
    with pytest.raises(ConfigError, match="env.max_turns"):
        load_config(path)
