"""Rollout interventions: multi-temperature groups (rollout.temperatures) and forced
continuation after an early stop (rollout.force_continue, budget forcing)."""

import json

import pytest
import torch

from aha.config import Config, load_config
from aha.models.tiny import tiny_model, tiny_tokenizer
from aha.rollout.hf_engine import HFEngine
from aha.rollout.interventions import continuations, force_continuation, generate_mixed, group_temperatures
from aha.training.logprobs import rollout_hidden, token_stats


@pytest.fixture
def engine():
    tokenizer = tiny_tokenizer()
    return HFEngine(tiny_model(len(tokenizer)).eval(), tokenizer, 5, 1.0, 1.0, 32, torch.float32)


def prompts_of(tokenizer, *texts):
    return [tokenizer(t)["input_ids"] for t in texts]


def learner_logprobs(engine, ro, group_size, share_prompt=True):
    """The learner's log-probs of ro's completion tokens (each row at its temperature, if any)."""
    with torch.no_grad():
        hidden = rollout_hidden(engine.model.model, ro, slice(0, len(ro)), ro.completion_ids.shape[1], group_size,
                                share_prompt)
        return token_stats(engine.model, hidden, ro.completion_ids, ro.completion_mask,
                           ro.temperature if ro.temperature is not None else 1.0).logprobs


def test_group_temperatures_cycle():
    assert group_temperatures([0.5, 1.0, 1.5], 5) == [0.5, 1.0, 1.5, 0.5, 1.0]
    assert group_temperatures([0.7], 3) == [0.7, 0.7, 0.7]


def test_a_mixed_group_keeps_each_rows_temperature_for_the_learner(engine):
    torch.manual_seed(0)
    prompts = prompts_of(engine.tokenizer, "hi", "hello", "hey you")
    ro = generate_mixed(engine, prompts, 5, [0.3, 3.0])
    assert ro.prompt_index.tolist() == [0] * 5 + [1] * 5 + [2] * 5  # groups stay consecutive
    assert torch.allclose(ro.temperature, torch.tensor([0.3, 3.0, 0.3, 3.0, 0.3] * 3))
    # every row's log-probs at its own temperature: the learner's equal the engine's
    policy = ro.completion_mask.bool()
    learner = learner_logprobs(engine, ro, 5)
    assert torch.allclose(learner[policy], ro.sampling_logprobs[policy], atol=1e-5)
    # and not at one temperature for all: the hot rows' tokens are far less likely at 0.3
    at_one = token_stats(engine.model, rollout_hidden(engine.model.model, ro, slice(0, 15), ro.completion_ids.shape[1],
                                                      5, True), ro.completion_ids, ro.completion_mask, 0.3).logprobs
    hot = ro.temperature > 1
    assert not torch.allclose(at_one[hot][policy[hot]], ro.sampling_logprobs[hot][policy[hot]], atol=1e-2)


def test_the_hot_rows_of_a_group_are_more_varied(engine):
    torch.manual_seed(0)
    ro = generate_mixed(engine, prompts_of(engine.tokenizer, "hi"), 64, [0.05, 5.0])
    cold = {t for t, temp in zip(ro.texts, ro.temperature.tolist()) if temp < 1}
    hot = {t for t, temp in zip(ro.texts, ro.temperature.tolist()) if temp > 1}
    assert len(cold) < len(hot)


def test_forced_continuation_token_by_token(engine):
    """A completion that stops is made to go on: its stop token is replaced by "Wait" (not
    the policy's: log-prob 0, out of the loss) and sampling continues; the last stop stays."""
    stop = engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    wait = engine.tokenizer("Wait", add_special_tokens=False)["input_ids"]
    assert len(wait) == 4
    torch.manual_seed(0)
    prompts = prompts_of(engine.tokenizer, "hi", "hey")
    engine.eos_ids = [stop, *engine.tokenizer("aeiou", add_special_tokens=False)["input_ids"]]  # vowels stop too
    first = engine.generate(prompts, group_size=8)
    stopped = [i for i in range(16) if not first.truncated[i]]
    assert stopped and len(stopped) < 16
    row_prompts = [prompts[i] for i in first.prompt_index.tolist()]
    ro = force_continuation(engine, row_prompts, first, 1, "Wait")
    for i in range(16):
        n = int(first.lengths()[i])
        ids, policy = ro.completion_ids[i].tolist(), ro.completion_mask[i].tolist()
        if i not in stopped:  # cut at its budget: left as it was
            assert ids[:n] == first.completion_ids[i, :n].tolist() and policy[:n] == [1.0] * n and sum(policy) == n
            continue
        # its tokens up to the stop, "Wait" in the stop's place, then the continuation
        assert ids[:n - 1] == first.completion_ids[i, :n - 1].tolist() and ids[n - 1:n + 3] == wait
        assert policy[:n - 1] == [1.0] * (n - 1) and policy[n - 1:n + 3] == [0.0] * 4
        assert ro.observation_mask[i, n - 1:n + 3].tolist() == [1.0] * 4
        assert ro.sampling_logprobs[i, n - 1:n + 3].eq(0).all()
        assert ro.completion_mask[i, n + 3:].sum() >= 1  # at least one token sampled after it
        assert ro.texts[i].count("Wait") >= 1
    assert continuations(ro, 4).tolist() == [float(i in stopped) for i in range(16)]
    assert ro.prompt_index.tolist() == first.prompt_index.tolist()
    policy = ro.completion_mask.bool()
    assert torch.allclose(learner_logprobs(engine, ro, 8)[policy], ro.sampling_logprobs[policy], atol=1e-5)


def test_a_continuation_that_stops_at_once_is_forced_again(engine):
    engine.eos_ids = list(range(len(engine.tokenizer)))  # every token stops: one token a generation
    prompts = prompts_of(engine.tokenizer, "hi")
    first = engine.generate(prompts, group_size=2)
    ro = force_continuation(engine, prompts * 2, first, 2, "Wait")
    wait = engine.tokenizer("Wait", add_special_tokens=False)["input_ids"]
    for i in range(2):  # twice the sampled stop gave way: Wait Wait, then the last stop
        assert ro.completion_ids[i].tolist()[:8] == wait * 2 and ro.completion_mask[i].tolist() == [0.0] * 8 + [1.0]
    assert continuations(ro, 4).tolist() == [2.0, 2.0]


def test_a_completion_cut_at_its_budget_is_not_forced(engine):
    engine.eos_ids = []  # nothing stops: every row runs to its budget
    first = engine.generate(prompts_of(engine.tokenizer, "hi"), group_size=3)
    ro = force_continuation(engine, [first.prompt_ids[0][first.prompt_mask[0].bool()].tolist()] * 3, first, 3, "Wait")
    assert continuations(ro, 4).tolist() == [0.0] * 3 and ro.truncated.all()
    assert torch.equal(ro.completion_ids, first.completion_ids)


def test_intervention_config_errors():
    with pytest.raises(ValueError, match="rollout.temperatures does not work with env.name yet"):
        Config(rollout={"temperatures": [0.5, 1.0]}, env={"name": "try_again"})
    with pytest.raises(ValueError, match="rollout.force_continue does not work with rollout.partial_rollouts yet"):
        Config(rollout={"force_continue": 1, "partial_rollouts": 2})
    with pytest.raises(ValueError, match="algorithm.overlong_buffer measures a completion against max_new_tokens"):
        Config(rollout={"force_continue": 1}, algorithm={"overlong_buffer": 4})
    with pytest.raises(ValueError, match="greater than 0"):
        Config(rollout={"temperatures": [0.0]})
    with pytest.raises(ValueError,
                       match="rollout.temperatures lists 3 temperatures for groups of rollout.group_size=2"):
        Config(rollout={"temperatures": [0.5, 1.0, 1.5], "group_size": 2})
    with pytest.raises(ValueError, match="rollout.force_continue changes how RL samples its groups: method=rl only"):
        Config(method="dpo", dpo={"online": True}, rollout={"force_continue": 1})
    with pytest.raises(ValueError, match="algorithm.length_coef measures a completion against max_new_tokens"):
        Config(rollout={"force_continue": 1}, algorithm={"length_coef": 0.1})


def test_an_rl_run_with_both_interventions_logs_them(tmp_path):
    from aha.training.loop import train

    (tmp_path / "parity.py").write_text("def parity(completion, sample):\n    return float(len(completion) % 2)\n")
    config = load_config(None, [
        "model=tiny", f"output_dir={tmp_path / 'run'}", "train.steps=2", "train.checkpoint_every=0",
        "rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=6", "task.num_eval=4",
        "eval.before=false", "eval.after=false", f"reward=[{{fn: '{tmp_path / 'parity.py'}:parity'}}]",
        "rollout.temperatures=[0.5, 1.5]", "rollout.force_continue=1", "algorithm.dynamic_sampling=false",
    ])
    train(config, echo=lambda *_: None)
    steps = [json.loads(line) for line in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2
    for record in steps:
        for key in ("temperature/0.5/verifier_mean", "temperature/1.5/length_mean", "rollout/continued_frac",
                    "rollout/continuations_mean"):
            assert key in record
        assert record["tokens/trained"] > 0
    samples = [json.loads(line) for line in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    assert {s["temperature"] for s in samples} <= {0.5, 1.5} and all("continuations" in s for s in samples)
