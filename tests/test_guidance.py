"""ExPO's guidance (algorithm.guidance=expo): the placement maths by hand; on the tiny model,
that an unsolved group's answer-shown retry takes a wrong row's place as an answer to the prompt
without the hint, that its old log-probs become the policy's own there, that its advantage is
capped in a training run, that a resume is exact; and the config's refusals."""

import json
from types import SimpleNamespace

import pytest
import torch
from test_rft import RecordingEngine
from test_training import assert_resumes_exactly, metrics

from aha.algorithms.guidance import cap_guided_advantages, first_passing, guided_row, placement
from aha.config import ConfigError, load_config
from aha.errors import TaskError
from aha.models import load
from aha.prompts import hinted
from aha.rewards import RewardResult, build_reward
from aha.tasks import build_task, encode_prompts
from aha.training.loop import train
from aha.training.phases import Phases
from aha.training.rl.batch import Batch
from aha.training.rl.guidance import Guidance, merged_result
from aha.training.rl.method import RLMethod
from aha.training.rl.step import own_logprobs_of_guided
from aha.training.rl.update import Shape, forward_logprobs

QUIET = lambda *_: None  # noqa: E731
G, TRIES, PROMPTS = 4, 8, 2
# fails the completions of each round (PROMPTS x G) and passes the retries after them
# (PROMPTS x TRIES): every group goes unsolved and every retry that stops passes
CYCLE = (f"scored = []\ndef cycle(completion, sample):\n    scored.append(1)\n"
         f"    return float((len(scored) - 1) % {PROMPTS * (G + TRIES)} >= {PROMPTS * G})\n")


def test_first_passing_retry_of_each_block():
    assert first_passing([False, True, True, False, False, False, True, False, False], 3) == [1, None, 6]
    assert first_passing([], 2) == []
    with pytest.raises(ValueError, match="5 retries do not make whole blocks of 2"):
        first_passing([True] * 5, 2)


def test_placement_puts_each_guided_row_at_its_groups_last_row():
    assert guided_row(0, 4) == 3 and guided_row(2, 4) == 11
    # 3 groups of 4 sampled rows (0..11), guided completions appended at 12 and 13 for groups 2 and 0
    assert placement(12, 4, [2, 0]) == [0, 1, 2, 13, 4, 5, 6, 7, 8, 9, 10, 12]
    assert placement(8, 4, []) == list(range(8))
    with pytest.raises(ValueError, match="group 2 is outside 8 rows"):
        placement(8, 4, [2])


def test_a_guided_rows_advantage_is_capped_from_above_only():
    advantages = torch.tensor([[1.5, 1.5, 0.0], [2.6, 2.6, 2.6], [-0.5, -0.5, 0.0], [3.0, 0.0, 0.0]])
    guided = torch.tensor([False, True, True, False])
    capped = cap_guided_advantages(advantages, guided, 1.0)
    assert capped.tolist() == [[1.5, 1.5, 0.0], [1.0, 1.0, 1.0], [-0.5, -0.5, 0.0], [3.0, 0.0, 0.0]]


def test_merged_result_takes_the_retries_rows_in_placement_order():
    round_ = RewardResult(torch.tensor([0.0, 0.25, 0.5, 0.75]), {"a": torch.tensor([1.0, 2.0, 3.0, 4.0])},
                          torch.tensor([False, True, False, False]), {"a": 1})
    retries = RewardResult(torch.tensor([1.0]), {"a": torch.tensor([9.0])}, torch.tensor([False]), {})
    merged = merged_result(round_, retries, placement(4, 2, [1]))
    assert merged.total.tolist() == [0.0, 0.25, 0.5, 1.0] and merged.components["a"].tolist() == [1.0, 2.0, 3.0, 9.0]
    assert merged.failed.tolist() == [False, True, False, False] and merged.failures == {"a": 1}
    assert merged.steps is None


def overrides(tmp_path, *extra) -> list[str]:
    (tmp_path / "cycle.py").write_text(CYCLE)
    return ["model=tiny", f"output_dir={tmp_path / 'run'}", "task.name=arithmetic", "task.num_eval=4",
            f"rollout.prompts_per_step={PROMPTS}", f"rollout.group_size={G}", "rollout.max_new_tokens=24",
            "algorithm.truncated_reward=0.0",  # a cut retry is then no answer
            "algorithm.guidance=expo", f"algorithm.guidance_tries={TRIES}", "algorithm.guidance_hint='{prompt} Hint: "
            "{answer}.'", f"reward=[{{fn: '{tmp_path}/cycle.py:cycle'}}]", "eval.before=false", "eval.after=false",
            *extra]


def guided_round(tmp_path, *extra):
    """A round of PROMPTS unsolved groups on the tiny model, and guidance applied to it."""
    config = load_config(None, overrides(tmp_path, *extra))
    lm = load("tiny", seed=0)
    task = build_task(config.task, config.base_dir)
    reward = build_reward(config.reward, config.base_dir)
    engine = RecordingEngine(lm.model, lm.tokenizer, config.rollout.max_new_tokens)
    torch.manual_seed(0)
    chosen = task.train[:PROMPTS]
    prompts = encode_prompts(engine.tokenizer, task, chosen)
    sampled = engine.generate(prompts, group_size=G)
    result = reward.score(sampled.texts, [chosen[i] for i in sampled.prompt_index.tolist()])
    assert result.total.tolist() == [0.0] * (PROMPTS * G)
    parts = SimpleNamespace(engine=engine, task=task, reward=reward)
    done = Guidance(config.algorithm, G).apply(parts, chosen, sampled, result, Phases())
    return config, lm, engine, task, chosen, prompts, sampled, done


def test_a_cut_retry_is_used_where_the_run_pays_cut_completions_their_score(tmp_path):
    *_, engine, _, _, _, _, done = guided_round(tmp_path, "algorithm.truncated_reward=null")
    _, retries = engine.calls[-1]
    assert bool(retries.truncated[TRIES])  # the second group's first retry was cut: it is used all the same
    for group in range(PROMPTS):
        row, first = guided_row(group, G), group * TRIES
        assert done.rollouts.texts[row] == retries.texts[first]
        assert bool(done.rollouts.truncated[row]) == bool(retries.truncated[first])


def test_an_unsolved_groups_retry_takes_its_last_row_as_an_answer_to_the_prompt_without_the_hint(tmp_path):
    config, lm, engine, task, chosen, prompts, sampled, done = guided_round(tmp_path)
    asked, retries = engine.calls[-1]
    assert asked == encode_prompts(engine.tokenizer, task, [hinted(s, "{prompt} Hint: {answer}.") for s in chosen])
    assert (done.unsolved, done.retried, done.found) == (PROMPTS, PROMPTS * TRIES, PROMPTS)
    assert done.guided.tolist() == [False, False, False, True] * PROMPTS
    for group in range(PROMPTS):
        row = guided_row(group, G)
        first = next(r for r in range(group * TRIES, (group + 1) * TRIES) if not bool(retries.truncated[r]))
        n = int(retries.completion_mask[first].sum())
        assert done.rollouts.completion_ids[row, :n].tolist() == retries.completion_ids[first, :n].tolist()
        assert int(done.rollouts.completion_mask[row].sum()) == n and done.rollouts.texts[row] == retries.texts[first]
        own_prompt = done.rollouts.prompt_ids[row][done.rollouts.prompt_mask[row].bool()].tolist()
        assert own_prompt == prompts[group] and "Hint" not in engine.tokenizer.decode(own_prompt)
        assert int(done.rollouts.prompt_index[row]) == group and float(done.result.total[row]) == 1.0
        for r in range(group * G, row):  # the group's sampled rows are untouched
            assert done.rollouts.texts[r] == sampled.texts[r] and float(done.result.total[r]) == 0.0
    # the guided rows' sampling log-probs become the policy's own on the prompt without the hint
    batch = Batch(done.rollouts, done.result.total, guided=done.guided)
    shape = Shape(G, 8, False, config.rollout.temperature, torch.float32)
    hinted_logprobs = done.rollouts.sampling_logprobs.clone()
    own_logprobs_of_guided(batch, lm.model, shape)
    own = forward_logprobs(lm.model, batch, shape)
    mask = done.rollouts.completion_mask.bool()
    for row in range(len(done.rollouts)):
        now = batch.rollouts.sampling_logprobs[row][mask[row]]
        expected = own[row][mask[row]] if done.guided[row] else hinted_logprobs[row][mask[row]]
        assert torch.allclose(now, expected, atol=1e-6)
    assert not torch.allclose(own[3][mask[3]], hinted_logprobs[3][mask[3]], atol=1e-3)  # the hint did change them


def test_a_run_trains_on_guided_groups_with_the_capped_advantage(tmp_path):
    train(load_config(None, overrides(tmp_path, "train.steps=2", "algorithm.guidance_cap=0.5")), echo=QUIET)
    records = [r for r in metrics(tmp_path / "run") if "reward/mean" in r]
    for r in records:
        assert (r["guidance/unsolved_groups"], r["guidance/retries"], r["guidance/guided_groups"]) == \
            (PROMPTS, PROMPTS * TRIES, PROMPTS)
        assert r["groups/trained"] == PROMPTS and r["groups/zero_variance_frac"] == 1.0
        assert r["reward/mean"] == 0.0  # the step's statistics are the policy's own samples
        # one right among G = 4 has advantage (1 - 1/4) / std([0, 0, 0, 1]) = 0.75 / 0.5 = 1.5: capped at 0.5
        assert r["guidance/advantage_mean"] == pytest.approx(0.5)
        assert r["train/nothing_to_train"] == 0.0


def test_a_guided_run_resumes_exactly(tmp_path):
    def make(tmp, name, *extra):
        return load_config(None, [*overrides(tmp), f"output_dir={tmp / name}", "train.checkpoint_every=2", *extra])
    assert_resumes_exactly(tmp_path, make)


@pytest.mark.parametrize("extra, message", [
    (["method=sft", "sft.data=x.jsonl"], "algorithm.guidance=expo adds answer-shown retries to RL groups: method=rl"),
    (["rollout.group_size=1", "algorithm.advantage=rloo"], "replaces one wrong completion of a group: rollout.group"),
    (["algorithm.guidance_hint='{prompt} (no answer)'"], "algorithm.guidance_hint must show the answer with {answer}"),
    (["algorithm.guidance_hint='{prompt} {solution} {answer}'"], "name no field but {prompt} and {answer}"),
    (["rollout.temperatures=[0.6, 1.0]"], "algorithm.guidance=expo does not work with rollout.temperatures"),
    (["rollout.partial_rollouts=true"], "algorithm.guidance=expo does not work with rollout.partial_rollouts"),
])
def test_the_config_refuses_guidance_where_it_cannot_work(tmp_path, extra, message):
    with pytest.raises(ConfigError, match=message.replace("{", r"\{").replace("}", r"\}").replace("=", "=")):
        load_config(None, [*overrides(tmp_path), *extra])


def test_guidance_needs_an_answer_for_every_training_prompt(tmp_path):
    data = tmp_path / "train.jsonl"
    rows = [{"prompt": "Say hi.", "answer": "hi"}, {"prompt": "Write f.", "tests": "assert f() == 1"}]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = load_config(None, ["algorithm.guidance=expo", f"task.data={data}", f"task.eval_data={data}",
                                "reward=[{fn: exact_match}]"])
    task = build_task(config.task, config.base_dir)
    with pytest.raises(TaskError, match=r"guidance=expo shows each prompt's answer.*'train.jsonl:2' has none"):
        RLMethod.prepare(config, task, None)


# a dict reward that names a diagnostic part only where it fails: the round's completions fail
# ({correct: 0, miss: 0}), the retries after them (2 a group) pass ({correct: 1})
VARYING = (f"scored = []\ndef varying(completion, sample):\n    scored.append(1)\n"
           f"    if (len(scored) - 1) % {PROMPTS * (G + 2)} < {PROMPTS * G}:\n"
           f"        return {{'correct': 0.0, 'miss': 0.0}}\n    return {{'correct': 1.0}}\n")


def test_guidance_keeps_the_parts_of_a_dict_reward_that_only_the_round_or_the_retries_name(tmp_path):
    """A dict reward may name a part on some rows only (CompositeReward builds a component from
    the rows that give it): the merged result keeps every part, 0 where a row did not name it."""
    (tmp_path / "varying.py").write_text(VARYING)
    *_, done = guided_round(tmp_path, f"reward=[{{fn: '{tmp_path}/varying.py:varying'}}]", "algorithm.guidance_tries=2",
                            "rollout.max_new_tokens=8", "algorithm.truncated_reward=null")
    assert done.found == PROMPTS and {k.rsplit("/", 1)[-1] for k in done.result.components} == {"correct", "miss"}
    miss = next(v for k, v in done.result.components.items() if k.endswith("miss"))
    assert miss.tolist() == [0.0] * (PROMPTS * G)


def test_a_hint_whose_answer_braces_are_escaped_is_refused():
    """An escaped "{{answer}}" is shown as the text "{answer}": the retries would never see the
    answer, so the config refuses it."""
    hint = "{prompt} Hint: {{answer}}"
    assert "{answer}" in hint.format(prompt="q", answer="42")  # the answer is never shown
    with pytest.raises(ConfigError, match="guidance_hint"):
        load_config(None, ["model=tiny", "algorithm.guidance=expo", f"algorithm.guidance_hint='{hint}'"])
