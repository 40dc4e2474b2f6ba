"""Multi-turn rollouts: the engine and the environments take turns, token in, token out.

Each episode is one row of a Rollouts: its first prompt, then a completion that holds every
policy turn and, between them, the environment's observations as the chat template writes a
new user turn. The policy's tokens are exactly those it sampled (nothing is decoded and
encoded again: a "<|im_end|>" the policy spelled out stays the characters it sampled, it never
becomes the template's end of turn in its next prompt), the observations are tokenised once
when they are appended, and the learner reads the very same ids: completion_mask marks the
policy's tokens (the only ones trained), observation_mask the environment's."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aha.envs.base import EnvError, EnvFactory, check_turn
from aha.prompts import PlainText
from aha.rewards.compose import RewardResult
from aha.rollout import Engine, Rollouts
from aha.rollout.rollouts import rollouts_with_inserts
from aha.tasks import Task, encode_prompts

_MARK = "\u2063aha-turn-end\u2063"  # an assistant message no template changes, to find where it ends
_OBSERVATION = "\u2063aha-observation\u2063"  # where the observation goes in the rendered bridge
_PROBE = 'aha "probe"\n\\ end'  # text a template that escapes or encodes a message would change


class TurnBridge:
    """The token ids that follow a policy turn when the environment speaks: the end of the
    assistant's message (unless the policy's own stop token already ended it) and a user
    message with the observation, then the start of the next assistant message.

    With a chat template these come from the template itself, rendered around a marker
    assistant message; without one (a base model) the turns are written out as labelled text,
    as aha writes a conversation for such a model. A tool's result (Turn.role "tool") is
    written in the template's tool message when the template has one (it names the tool role:
    Qwen's <tool_response> turn, Llama's ipython turn), else as a user message: a template that
    never names the role would write a turn its model never saw."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.plain = PlainText(tokenizer)  # the observation as ordinary text
        template = getattr(tokenizer, "chat_template", None)
        self.templated = template is not None
        # rendered once, before the first turn: a template that cannot write a second user turn fails here
        before, found, after = self.text(_OBSERVATION).partition(_OBSERVATION)
        if not found:
            raise EnvError("the tokenizer's chat template does not write user messages as given: "
                           "multi-turn episodes need one that does")
        self.around = {"user": (before, after)}
        self.around["tool"] = self._tool_around() if isinstance(template, str) else self.around["user"]

    def _tool_around(self) -> tuple[str, str]:
        """The bridge around a tool message, or the user message's where the template has no
        tool message of its own: it raises on the role, writes it as any role (the role's name
        in the user turn's place), rewrites the content (Llama 3.1's `tojson`: the bridge could
        not put text in verbatim), or does not open the next assistant message as it does after
        a user turn (DeepSeek-R1's template after a tool output)."""
        user = self.around["user"]
        try:
            before, found, after = self.text(_OBSERVATION, "tool").partition(_OBSERVATION)
            verbatim = self.text(_PROBE, "tool") == before + _PROBE + after
            generic = before + found + after == _OBSERVATION.join(user).replace("user", "tool")
            turn = [{"role": "user", "content": "?"}]
            render = lambda opened: self.tokenizer.apply_chat_template(turn, add_generation_prompt=opened,
                                                                       tokenize=False)
            opening = render(True).removeprefix(render(False))  # what opens the assistant's next message
        except Exception:  # noqa: BLE001 - a template that cannot write the role keeps the user turn
            return user
        return (before, after) if found and verbatim and after.endswith(opening) and not generic else user

    def text(self, observation: str, role: str = "user") -> str:
        if not self.templated:
            return f"\n\nUser: {observation}\n\nAssistant:"
        messages = [{"role": "user", "content": "?"}, {"role": "assistant", "content": _MARK},
                    {"role": role, "content": observation}]
        try:
            rendered = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception as err:  # noqa: BLE001 - a template that rejects a second user turn
            raise EnvError(f"the model's chat template cannot write a multi-turn conversation "
                           f"({type(err).__name__}: {str(err)[:300]})") from None
        if _MARK not in rendered:
            raise EnvError("the tokenizer's chat template does not write assistant messages as given: "
                           "multi-turn episodes need one that does")
        return rendered[rendered.index(_MARK) + len(_MARK):]

    def ids(self, observation: str, stop_token: int | None, role: str = "user") -> list[int]:
        """The bridge's token ids. The template's own markup is read with its special tokens;
        the observation itself never is (a tool that prints "<|im_end|>" shows that text, it
        does not end a turn): it is often the policy's own text again (a program's output, an
        echoed answer), so it is read as PlainText reads the policy's text, the template's turn
        markers that are not special tokens (DeepSeek-R1's "<｜User｜>") included. stop_token: the
        policy's turn ended on this stop token (None: it was cut at its budget), which the
        bridge then does not repeat. role: "tool" for a tool's result (the class's note)."""
        before, after = self.around.get(role, self.around["user"])
        encode = lambda text: list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        ids = encode(before) + (self.plain(observation)["input_ids"] if observation else []) + encode(after)
        # the policy's stop token is the template's end of turn
        if ids and stop_token is not None and ids[0] == stop_token:
            ids = ids[1:]
        return ids


@dataclass
class Episode:
    """One episode as it is played: its prompt's ids, then completion tokens with, for each,
    whether the policy sampled it and its sampling log-prob (0 for the environment's)."""

    sample_index: int
    env: object
    prompt: list[int]
    tokens: list[int]
    policy: list[bool]
    logprobs: list[float]
    rewards: list[float]  # one a policy turn
    turn_ends: list[int]  # the index in tokens of each policy turn's last token
    actions: list[str]
    observations: list[str]
    infos: list[dict]
    truncated: bool = False
    done: bool = False

    def record(self) -> dict:
        """The episode as text, turn by turn (samples.jsonl, evaluation records)."""
        return {"turns": [{"action": a, "reward": r, **({"observation": o} if o is not None else {})}
                          for a, r, o in zip(self.actions, self.rewards, self.observations + [None])]}


@dataclass
class Episodes:
    rollouts: Rollouts  # one row an episode; completion_mask: the policy's tokens
    result: RewardResult  # total: each episode's return; components: turns, first_/final_<info key>
    turn_rewards: torch.Tensor  # (N, T) each turn's reward on its last policy token
    episodes: list[Episode]


@dataclass(frozen=True)
class EpisodeRunner:
    """A configured environment (config.env): plays episodes of task samples with an engine."""

    name: str
    make: EnvFactory
    max_turns: int

    def play(self, engine: Engine, task: Task, samples: list[dict], group_size: int = 1,
             greedy: bool = False, max_new_tokens: int | None = None) -> Episodes:
        return run_episodes(engine, task, self.make, samples, group_size, self.max_turns, greedy, self.name,
                            max_new_tokens)


def run_episodes(engine: Engine, task: Task, make_env: EnvFactory, samples: list[dict], group_size: int,
                 max_turns: int, greedy: bool = False, env_name: str = "env",
                 max_new_tokens: int | None = None) -> Episodes:
    """group_size episodes of each sample (consecutive), each up to max_turns policy turns of at
    most max_new_tokens (default engine.max_new_tokens) tokens. A turn whose environment raises stops the run with an
    error naming the environment and the sample."""
    tokenizer, bridge = engine.tokenizer, TurnBridge(engine.tokenizer)
    episodes = []
    for index, sample in enumerate(samples):
        for _ in range(group_size):
            env = make_env()
            first = _call(env_name, sample, "reset", lambda: env.reset(sample))
            schemas = getattr(env, "tool_schemas", None)  # a template with a tool-call format shows the tools
            prompt = encode_prompts(tokenizer, task, [{**sample, "prompt": first}], schemas)[0]
            episodes.append(Episode(index, env, prompt, [], [], [], [], [], [], [], []))
    for turn in range(1, max_turns + 1):
        active = [e for e in episodes if not e.done]
        if not active:
            break
        out = engine.generate([e.prompt + e.tokens for e in active], group_size=1, greedy=greedy,
                              max_new_tokens=max_new_tokens)
        for row, episode in enumerate(active):
            length = int(out.completion_mask[row].sum())
            ids = out.completion_ids[row, :length].tolist()
            episode.tokens += ids
            episode.policy += [True] * length
            episode.logprobs += out.sampling_logprobs[row, :length].tolist()
            episode.turn_ends.append(len(episode.tokens) - 1)
            episode.truncated = bool(out.truncated[row])
            action = out.texts[row]
            result = _call(env_name, samples[episode.sample_index], "step", lambda: episode.env.step(action))
            result = check_turn(result, env_name)
            episode.actions.append(action)
            episode.rewards.append(float(result.reward))
            episode.infos.append(dict(result.info))
            episode.done = result.done or turn == max_turns
            if not episode.done:
                stopped = bool(ids) and ids[-1] in engine.eos_ids and not episode.truncated
                bridge_ids = bridge.ids(result.observation, ids[-1] if stopped else None, result.role)
                episode.observations.append(result.observation)
                episode.tokens += bridge_ids
                episode.policy += [False] * len(bridge_ids)
                episode.logprobs += [0.0] * len(bridge_ids)
    return _assemble(episodes, engine)


def _call(name: str, sample: dict, what: str, fn):
    try:
        return fn()
    except Exception as err:  # noqa: BLE001 - reported with the environment and the sample
        raise RuntimeError(f"environment {name}: {what}() raised {type(err).__name__}: {err} "
                           f"(sample {sample.get('id', '?')})") from err


def _assemble(episodes: list[Episode], engine: Engine) -> Episodes:
    rollouts = rollouts_with_inserts([e.prompt for e in episodes], [e.tokens for e in episodes],
                                     [e.policy for e in episodes], [e.logprobs for e in episodes],
                                     torch.tensor([e.sample_index for e in episodes]),
                                     [e.truncated for e in episodes], engine.tokenizer, engine.pad_id)
    turn_rewards = torch.zeros(rollouts.completion_ids.shape)
    for i, e in enumerate(episodes):
        for end, reward in zip(e.turn_ends, e.rewards):
            if end >= 0:  # a turn with no token at all (none so far) has nowhere to be paid
                turn_rewards[i, end] += reward
    keys = sorted({k for e in episodes for info in e.infos for k in info})
    components = {"turns": torch.tensor([float(len(e.actions)) for e in episodes])}
    for key in keys:  # a key an episode's turn did not report counts as 0 there
        components[f"first_{key}"] = torch.tensor([float(e.infos[0].get(key, 0.0)) for e in episodes])
        components[f"final_{key}"] = torch.tensor([float(e.infos[-1].get(key, 0.0)) for e in episodes])
    total = torch.tensor([sum(e.rewards) for e in episodes])
    result = RewardResult(total, components, ~torch.isfinite(total))
    return Episodes(rollouts, result, turn_rewards, episodes)
