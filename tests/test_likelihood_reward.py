"""VeriFree's likelihood reward (likelihood_reward): the aggregates by hand, where the reasoning
is cut, the config's refusals, and on the tiny model the reward equal to a plain forward pass
and an RL run trained on it alone."""

import json
import math
import typing

import pytest
import torch
from test_training import metrics

from aha.algorithms.likelihood import LIKELIHOOD_AGGREGATES, answer_likelihood
from aha.config import ConfigError, LikelihoodRewardConfig, from_dict, load_config
from aha.models import load
from aha.rewards.likelihood import split_reasoning
from aha.rollout.rollouts import rollouts_from_samples
from aha.training.loop import train
from aha.training.rl.likelihood import build_likelihood_reward, reasoning_ids


def test_aggregates_by_hand():
    logprobs = torch.tensor([[-1.0, -2.0, -9.0], [-0.5, -9.0, -9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert answer_likelihood(logprobs, mask, "sum").tolist() == [-3.0, -0.5]
    assert answer_likelihood(logprobs, mask, "mean").tolist() == [-1.5, -0.5]
    assert answer_likelihood(logprobs, mask, "prob").tolist() == pytest.approx([math.exp(-3.0), math.exp(-0.5)])
    with pytest.raises(ValueError, match="unknown aggregate 'max'"):
        answer_likelihood(logprobs, mask, "max")


def test_the_config_names_every_aggregate():
    allowed = typing.get_args(LikelihoodRewardConfig.model_fields["aggregate"].annotation)
    assert set(allowed) == set(LIKELIHOOD_AGGREGATES)


@pytest.mark.parametrize("completion, reasoning, gap", [
    ("23 * 8 = 184.", "23 * 8 =", " "),  # the last number, its space going with the answer
    ("23 * 8 = 184. Then 23 * 9 = 207", "23 * 8 = 184. Then 23 * 9 =", " "),  # the last one, not the right one
    ("So the total is \\boxed{184}.", "So the total is \\boxed{", ""),  # the box's content
    ("The answer is 12, or 13 maybe", "The answer is", " "),  # a stated answer before any later number
    ("<answer>\n12</answer>", "<answer>", "\n"),
    ("Answer: x + 1", "Answer:", " "),
    ("I do not know.", "I do not know.\nThe answer is", " "),  # nothing stated: no_answer is read, not scored
])
def test_where_the_reasoning_ends(completion, reasoning, gap):
    assert split_reasoning(completion) == (reasoning, gap)


def test_no_answer_is_scored_only_when_asked():
    assert split_reasoning("I do not know.", score_no_answer=True) == ("I do not know.", "\nThe answer is ")
    assert split_reasoning("23 * 8 = 184.", cut="end", score_no_answer=True) == ("23 * 8 = 184.", "\nThe answer is ")
    assert split_reasoning("23 * 8 = 184.", score_no_answer=True) == ("23 * 8 =", " ")  # an answer: no no_answer


def test_cut_end_keeps_the_whole_completion():
    assert split_reasoning("23 * 8 = 184.", cut="end", no_answer=" So: ") == ("23 * 8 = 184. So:", " ")
    with pytest.raises(ValueError, match="cut"):
        split_reasoning("x", cut="middle")


def test_reasoning_ids_keep_the_sampled_tokens():
    from aha.prompts import PlainText

    tokenizer = load("tiny").tokenizer
    plain = PlainText(tokenizer)
    sampled = [40, 41, 42] + tokenizer.encode("23 * 8 = 184.", add_special_tokens=False)  # 40-42: any ids
    text = tokenizer.decode(sampled)
    reasoning, _ = split_reasoning(text)
    assert reasoning_ids(tokenizer, plain, sampled, reasoning) == sampled[:len(sampled) - 5]  # " 184." dropped
    # text that is not the sampled ids' own is encoded anew after their longest matching prefix
    assert reasoning_ids(tokenizer, plain, sampled[:3], tokenizer.decode(sampled[:2]) + "xy") == \
        sampled[:2] + tokenizer.encode("xy", add_special_tokens=False)


def _plain_likelihood(model, tokenizer, prompt: list[int], completion: str, answer: str, scored: bool = False) -> float:
    """exp of the summed log-probs of answer's tokens after prompt and the reasoning, from the
    logits of one plain forward pass over the whole sequence."""
    reasoning, gap = split_reasoning(completion, score_no_answer=scored)
    context = prompt + tokenizer.encode(reasoning, add_special_tokens=False)
    target = tokenizer.encode(gap + answer, add_special_tokens=False)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([context + target])).logits[0].double()
    logp = torch.log_softmax(logits, dim=-1)
    return math.exp(sum(float(logp[len(context) - 1 + i, t]) for i, t in enumerate(target)))


@pytest.mark.parametrize("micro_batch, scored", [(1, False), (8, False), (8, True)])
def test_the_reward_equals_a_plain_forward_pass(micro_batch, scored):
    loaded = load("tiny")
    tok = loaded.tokenizer
    config = from_dict({"model": "tiny", "likelihood_reward": {"weight": 1.0, "score_no_answer": scored},
                        "train": {"micro_batch_size": micro_batch}})
    prompts = [tok.encode("What is 23 * 8?", add_special_tokens=False), tok.encode("2+2?", add_special_tokens=False)]
    texts = ["23 * 8 = 184.", "I think 23 * 8 is 100, so", "\\boxed{4}", "four"]
    completions = [(tok.encode(t, add_special_tokens=False) + [tok.eos_token_id], []) for t in texts]
    rows = [prompts[0], prompts[0], prompts[1], prompts[1]]  # one prompt a row, left-padded
    rollouts = rollouts_from_samples(rows, completions, [False] * 4, torch.tensor([0, 0, 1, 1]), tok, tok.pad_token_id)
    samples = [{"answer": "184"}] * 2 + [{"answer": "4"}] * 2
    task = type("T", (), {"train": samples})()
    reward = build_likelihood_reward(config, loaded.model, tok, tok.pad_token_id, task, torch.float32)
    scores = reward.scores(rollouts, samples)
    expected = [_plain_likelihood(loaded.model, tok, prompts[i // 2], texts[i], samples[i]["answer"], scored)
                for i in range(4)]
    assert scores.tolist() == pytest.approx(expected, rel=1e-4)
    assert all(0.0 < s < 1.0 for s in scores.tolist())


@pytest.mark.parametrize("change, message", [
    ({"method": "sft"}, "likelihood_reward.weight pays RL samples by the policy's likelihood: method=rl only"),
    ({"rollout": {"partial_rollouts": 2}}, "likelihood_reward.weight does not work with rollout.partial_rollouts"),
    ({"algorithm": {"advantage": "remax"}}, "likelihood_reward.weight does not work with algorithm.advantage=remax"),
    ({"reward": [], "eval": {"scorer": "reward"}}, "likelihood_reward.weight with reward: [] (the likelihood is the"),
    ({"reward": [{"fn": "numeric_answer", "name": "likelihood"}]}, "a reward component is already named 'likelihood'"),
    ({"likelihood_reward": {"weight": 1.0, "aggregate": "max"}}, "likelihood_reward.aggregate"),
    ({"likelihood_reward": {"weight": 1.0, "cut": "middle"}}, "likelihood_reward.cut"),
])
def test_bad_likelihood_configs_name_the_key(change, message):
    with pytest.raises(ConfigError) as err:
        from_dict({"model": "tiny", "likelihood_reward": {"weight": 1.0}, **change})
    assert message in str(err.value)


RL = """
model: tiny
output_dir: {out}
task: {{name: arithmetic, a_max: 20, num_eval: 4}}
reward: []
rollout: {{prompts_per_step: 4, group_size: 4, max_new_tokens: 6}}
train: {{steps: 2, lr: 1.0e-3, micro_batch_size: 8, report: false, dtype: float32, checkpoint_every: 0}}
algorithm: {{dynamic_sampling: false}}
eval: {{before: false, after: false, scorer: numeric_answer}}
monitor: {{gold: [{{fn: numeric_answer}}]}}
likelihood_reward: {{weight: 1.0}}
"""


def test_an_rl_run_trains_on_the_likelihood_alone(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(RL.format(out=tmp_path / "run"))
    config = load_config(path, [])
    train(config, echo=lambda *_: None)
    records = [r for r in metrics(tmp_path / "run") if "reward/mean" in r]
    assert len(records) == 2
    for r in records:
        assert 0.0 < r["reward/likelihood"] < 1.0 and r["reward/mean"] == pytest.approx(r["reward/likelihood"])
        assert "monitor/gold/numeric_answer" in r and r["train/nothing_to_train"] == 0.0
    samples = [json.loads(line) for line in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    first = next(s for s in samples if s.get("split") == "train")
    loaded = load("tiny")
    from aha.prompts import encode_prompts
    from aha.tasks import build_task

    prompt = encode_prompts(loaded.tokenizer, build_task(config.task), [{"prompt": first["prompt"]}])[0]
    assert first["likelihood"] == pytest.approx(
        _plain_likelihood(loaded.model, loaded.tokenizer, prompt, first["completion"], str(first["answer"])), rel=1e-4)


def test_a_sample_without_a_reference_is_refused_before_training():
    config = from_dict({"model": "tiny", "likelihood_reward": {"weight": 1.0}})
    task = type("T", (), {"train": [{"id": "q1", "prompt": "hi"}]})()
    with pytest.raises(ConfigError, match="training sample 'q1' has no 'answer'"):
        build_likelihood_reward(config, None, None, 0, task, torch.float32)
