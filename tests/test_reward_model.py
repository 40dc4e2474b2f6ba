"""method: rm on the tiny model: the Bradley-Terry loss (with data margins and PCRM's cap) is
checked against a plain forward pass, it learns, resumes exactly, reports held-out accuracy
per subset, ensembles score as documented, and a trained reward model is a reward in an rl
run and in eval.rank_by; bad data and bad reward specs are errors naming what is wrong."""

import json
import math
import os
import shutil

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from test_training import assert_resumes_exactly, config_with_data, metrics

from aha.cli import main
from aha.config import ConfigError, RewardSpec, load_config
from aha.models import load
from aha.models.reward_model import ensemble_score, reward_head
from aha.rewards import RewardError, build_reward
from aha.tasks import TaskError, encode_prompts
from aha.tasks.base import Task
from aha.training.loop import train
from aha.training.methods import METHODS

# a signal the tiny model can learn in a few steps: chosen answers say "yes", rejected ones "no"
PAIRS = [{"prompt": f"Is {a} * {b} = {a * b}?", "chosen": f"yes, {a * b}", "rejected": f"no, {a * b + 1}",
          "margin": 0.5 * (a % 3), "subset": "even" if a % 2 == 0 else "odd"} for a, b in
         [(3, 4), (5, 6), (7, 8), (2, 9), (6, 6), (4, 7), (8, 3), (9, 2)]]

RM = """
method: rm
model: tiny
output_dir: {out}
task: {{name: arithmetic, a_max: 20, num_eval: 4}}
rm: {{data: {data}, eval_data: {data}, batch_size: 8}}
train: {{steps: 4, lr: 3.0e-3, checkpoint_every: 2, keep_checkpoints: 5, micro_batch_size: 4, report: false,
        dtype: float32}}
eval: {{before: false, after: false}}
"""


def rm_config(tmp, name="run", *overrides, rows=PAIRS):
    return config_with_data(tmp, RM, name, overrides, "pairs.jsonl", rows)


def quiet(*_):
    pass


@pytest.fixture(scope="module")
def rm_run(tmp_path_factory):
    """A trained reward model (3 heads) shared by the tests that use one as a reward."""
    tmp = tmp_path_factory.mktemp("rm")
    train(rm_config(tmp, "run", "train.steps=10", "rm.heads=3"), echo=quiet)
    return tmp / "run"


def plain_rewards(model, tokenizer, head, rows) -> tuple[torch.Tensor, torch.Tensor]:
    """Each pair's (chosen, rejected) head outputs from one plain forward pass per sequence:
    the chat-templated prompt, the completion's tokens, EOS; the last position's hidden state."""
    out = []
    with torch.no_grad():
        for row in rows:
            prompt = encode_prompts(tokenizer, Task("t", [], []), [row])[0]
            for key in ("chosen", "rejected"):
                ids = prompt + tokenizer(row[key], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
                hidden = model.base_model(torch.tensor([ids])).last_hidden_state[0, -1]
                out.append(head(hidden))
    rewards = torch.stack(out).view(len(rows), 2, -1)
    return rewards[:, 0, 0], rewards[:, 1, 0]


def common_prefix_ratio(a: str, b: str) -> float:
    """PCRM's length ratio for the one-token-a-character tiny tokenizer (+ EOS on each)."""
    start = len(os.path.commonprefix([a, b]))
    x, y = len(a) + 1 - start, len(b) + 1 - start
    return min(x, y) / max(x, y)


@pytest.mark.parametrize("overrides", [[], ["rm.margin=data"], ["rm.pcrm=true", "rm.pcrm_beta1=0.5",
                                                                "rm.pcrm_beta3=-0.3"]])
def test_the_step_1_loss_is_bradley_terry_on_a_plain_forward(tmp_path, overrides):
    # lr 0: the logged loss is the starting model's loss over the whole data (batch = all 8 pairs)
    train(rm_config(tmp_path, "run", "train.lr=0", "train.steps=1", *overrides), echo=quiet)
    record = metrics(tmp_path / "run")[0]
    tiny = load("tiny")
    chosen, rejected = plain_rewards(tiny.model, tiny.tokenizer, reward_head(64, 1, seed=0), PAIRS)
    margin = torch.tensor([r["margin"] for r in PAIRS]) if "rm.margin=data" in overrides else 0.0
    loss = -F.logsigmoid(chosen - rejected - margin)
    if "rm.pcrm=true" in overrides:
        cap = torch.tensor([0.5 / (common_prefix_ratio(r["chosen"], r["rejected"]) + 0.001) - 0.3 for r in PAIRS])
        loss = loss - F.logsigmoid(cap - (chosen - rejected))
        assert record["rm/pcrm_cap"] == pytest.approx(float(cap.mean()), rel=1e-6)
    assert record["rm/loss"] == pytest.approx(float(loss.mean()), rel=1e-5)
    assert record["rm/accuracy"] == pytest.approx(float((chosen > rejected).float().mean()))
    assert record["rm/margin"] == pytest.approx(float((chosen - rejected).mean()), rel=1e-4, abs=1e-7)


def test_it_learns_the_preference_and_reports_held_out_accuracy_per_subset(tmp_path):
    train(rm_config(tmp_path, "run", "train.steps=30", "eval.before=true", "eval.after=true"), echo=quiet)
    records = metrics(tmp_path / "run")
    held = [r for r in records if "rm_eval/accuracy" in r]
    assert [r["step"] for r in held] == [0, 30]
    assert held[-1]["rm_eval/accuracy"] > 0.9 and held[-1]["rm_eval/margin"] > held[0]["rm_eval/margin"]
    assert {"rm_eval/accuracy/even", "rm_eval/accuracy/odd"} <= set(held[-1])
    even = [r for r in PAIRS if r["subset"] == "even"]
    assert held[-1]["rm_eval/accuracy/even"] in {k / len(even) for k in range(len(even) + 1)}
    assert not any("eval/accuracy" in r for r in records)  # no greedy generation for a reward model
    losses = [r["rm/loss"] for r in records if "rm/loss" in r]
    assert losses[-1] < 0.5 * losses[0]


def test_it_resumes_exactly_with_an_ensemble_and_pcrm(tmp_path):
    extra = ["rm.heads=2", "rm.pcrm=true", "rm.pcrm_similarity=cosine", "rm.batch_size=3"]
    assert_resumes_exactly(tmp_path, rm_config, *extra, weights=("model", "reward_head"))
    about = json.loads((tmp_path / "straight/checkpoints/step-4/reward_model.json").read_text())
    assert about["heads"] == 2 and about["score"] == "mean" and about["max_length"] == 512


def test_ensemble_heads_differ_and_score_as_documented():
    rewards = torch.tensor([[1.0, 2.0, 6.0], [0.0, 0.0, 0.0]])
    spread = math.sqrt(((1 - 3) ** 2 + (2 - 3) ** 2 + (6 - 3) ** 2) / 3)  # population std over heads
    assert ensemble_score(rewards, "mean").tolist() == pytest.approx([3.0, 0.0])
    assert ensemble_score(rewards, "min").tolist() == pytest.approx([1.0, 0.0])
    assert ensemble_score(rewards, "mean_minus_std", 0.5).tolist() == pytest.approx([3 - 0.5 * spread, 0.0])
    head = reward_head(64, 3, seed=0)
    assert torch.equal(head.weight, reward_head(64, 3, seed=0).weight)  # seeded
    assert not torch.allclose(head.weight[0], head.weight[1])  # each head its own direction


@pytest.mark.parametrize("score, k, expected", [("mean", 1.0, 3.0), ("min", 1.0, 1.0),
                                                ("mean_minus_std", 0.5, 3 - 0.5 * math.sqrt(14 / 3))])
def test_a_reward_model_reward_scores_with_its_ensemble(rm_run, tmp_path, score, k, expected):
    # hand-set heads: weights 0, biases 1, 2, 6, so every completion gets those three rewards
    checkpoint = tmp_path / "rm"
    shutil.copytree(rm_run / "checkpoints/step-10", checkpoint)
    save_file({"weight": torch.zeros(3, 64), "bias": torch.tensor([1.0, 2.0, 6.0])},
              checkpoint / "reward_head.safetensors")
    (checkpoint / "manifest.json").unlink()  # hand-edited: no longer the checkpoint its manifest describes
    spec = RewardSpec(model=str(checkpoint), args={"score": score, "k": k})
    result = build_reward([spec]).score(["yes", "no"], [{"id": "a", "prompt": "Is it?"}] * 2)
    assert result.total.tolist() == pytest.approx([expected] * 2, rel=1e-6)


def test_a_reward_model_is_a_reward_in_an_rl_run(rm_run, tmp_path):
    # the reward's score of a training pair equals the trainer's: same template, same last token
    reward = build_reward([RewardSpec(model=str(rm_run))])
    scored = reward.score([PAIRS[0]["chosen"], PAIRS[0]["rejected"]], [PAIRS[0]] * 2).components["reward_model"]
    lm = load(str(rm_run / "checkpoints/step-10"))
    head = reward_head(64, 3, seed=0)
    head.load_state_dict(load_file(rm_run / "checkpoints/step-10/reward_head.safetensors"))
    with torch.no_grad():
        prompt = encode_prompts(lm.tokenizer, Task("t", [], []), [PAIRS[0]])[0]
        ids = prompt + lm.tokenizer(PAIRS[0]["chosen"],
                                    add_special_tokens=False)["input_ids"] + [lm.tokenizer.eos_token_id]
        by_hand = head(lm.model.base_model(torch.tensor([ids])).last_hidden_state[0, -1]).mean()
    # rel 1e-4: the reward scores both completions padded into one batch, by_hand one alone; on an
    # Intel Xeon with AMX fp32 kernels the two differ by 1.0e-5 relative (also at af7e397)
    assert float(scored[0]) == pytest.approx(float(by_hand), rel=1e-4)

    rl = load_config(None, [f"output_dir={tmp_path / 'rl'}", "model=tiny", "train.steps=1",
                            "rollout.prompts_per_step=2",
                            "rollout.group_size=2", "rollout.max_new_tokens=4", "eval.before=false", "eval.after=false",
                            "train.report=false", "task.name=arithmetic", "task.a_max=20", "task.num_eval=4",
                            "algorithm.dynamic_sampling=false",
                            f"reward=[{{model: {rm_run}, weight: 2.0, clip_max: 0.1, name: rm}}]"])
    train(rl, echo=quiet)
    record = metrics(tmp_path / "rl")[0]
    assert "reward/rm" in record and record["reward/failed"] == 0
    assert record["reward/verifier_mean"] <= 2.0 * 0.1 + 1e-6  # clipped before weighting
    samples = [json.loads(line) for line in (tmp_path / "rl/samples.jsonl").read_text().splitlines()]
    assert all(s["reward"] == pytest.approx(2.0 * min(s["rm"], 0.1), rel=1e-5) for s in samples)


def test_a_reward_model_ranks_samples_in_eval_rank_by(rm_run, tmp_path, capsys):
    checkpoint = tmp_path / "rm"
    shutil.copytree(rm_run / "checkpoints/step-10", checkpoint)
    config = tmp_path / "eval.yaml"
    config.write_text(f"model: tiny\ntask: {{name: arithmetic, num_eval: 3}}\nrollout: {{max_new_tokens: 4}}\n"
                      f"eval: {{rank_by: [{{model: {checkpoint}, name: rm}}]}}\n")
    out = tmp_path / "out"
    args = ["eval", str(config), "--samples", "4", "--model", "tiny", "--out", str(out), "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert "best_of_k (rm)" in report["models"]["tiny"]["curves"]
    ranks = list((out / "samples/tiny/ranks").iterdir())
    scores = [json.loads(line)["score"] for line in ranks[0].read_text().splitlines()]
    assert len(scores) == 12 and all(math.isfinite(s) for s in scores)
    # the same weights: the cached scores serve; other weights in the same folder: scored anew
    assert main(args) == 0 and len(list((out / "samples/tiny/ranks").iterdir())) == 1
    weights = load_file(checkpoint / "model.safetensors")
    save_file({k: v * 1.01 for k, v in weights.items()}, checkpoint / "model.safetensors")
    # hand-edited: no longer the checkpoint its manifest describes
    (checkpoint / "manifest.json").unlink(missing_ok=True)
    assert main(args) == 0 and len(list((out / "samples/tiny/ranks").iterdir())) == 2


@pytest.mark.parametrize("line, overrides, message", [
    ('{"prompt": "Hi", "chosen": "a"}', [], "pairs.jsonl:2: missing field(s) rejected"),
    ('{"prompt": "Hi", "chosen": "a", "rejected": "a"}', [], "pairs.jsonl:2: chosen and rejected are the same"),
    ('{"prompt": "Hi", "chosen": "a", "rejected": ""}', [], "pairs.jsonl:2: rejected must be a non-empty string"),
    ('{"prompt": "Hi", "chosen": "a", "rejected": "b", "margin": "big"}', ["rm.margin=data"],
     "pairs.jsonl:2: rm.margin=data needs a finite number"),
    ('not json', [], "pairs.jsonl:2: not valid JSON"),
])
def test_bad_pairs_name_file_and_line_and_leave_no_run_folder(tmp_path, line, overrides, message):
    (tmp_path / "pairs.jsonl").write_text(json.dumps(PAIRS[0]) + "\n" + line + "\n")
    with pytest.raises(TaskError, match=message.replace("(", r"\(").replace(")", r"\)")):
        train(rm_config(tmp_path, "run", *overrides), echo=quiet)
    assert not (tmp_path / "run").exists()


def test_a_reward_spec_needs_exactly_one_of_fn_and_model(tmp_path):
    for reward in ["[{fn: numeric_answer, model: runs/rm}]", "[{weight: 1.0}]"]:
        with pytest.raises(ConfigError, match="'reward.0'.*a reward needs exactly one of fn .a function. and model"):
            load_config(None, [f"reward={reward}"])
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(RewardError, match=r"reward\[0\].model: .* holds no reward_model.json: not a reward model"):
        build_reward([RewardSpec(model=str(tmp_path))])
    with pytest.raises(RewardError, match=r"reward\[0\].args: a reward model takes"):
        build_reward([RewardSpec(model=str(tmp_path), args={"temperature": 1})])
    with pytest.raises(RewardError, match=r"reward\[0\].workers: a reward model scores in this process"):
        build_reward([RewardSpec(model=str(tmp_path), workers=2)])


def test_the_config_allows_the_registered_methods():
    from typing import get_args

    from aha.config import Config

    assert set(get_args(Config.model_fields["method"].annotation)) == set(METHODS)
    with pytest.raises(ConfigError, match="method=rm needs rm.data"):
        load_config(None, ["method=rm"])


@pytest.mark.parametrize("policy_dtype, args, expected", [
    ("bfloat16", {}, torch.bfloat16),  # by default a reward model computes as the policy does
    ("float32", {}, torch.float32),
    ("float32", {"dtype": "bfloat16"}, torch.bfloat16),  # its own args.dtype wins
])
def test_a_reward_model_computes_in_the_policys_dtype_unless_told(rm_run, monkeypatch, policy_dtype, args, expected):
    from aha.models.reward_model import RewardModel

    seen, forward = [], RewardModel.forward

    def recording(self, sequences, dtype=torch.float32, with_hidden=False):
        seen.append(dtype)
        return forward(self, sequences, dtype, with_hidden)

    monkeypatch.setattr(RewardModel, "forward", recording)
    reward = build_reward([RewardSpec(model=str(rm_run), args=args)], dtype=policy_dtype)
    reward.score(["6."], [{"id": "a", "prompt": "What is 2 * 3?"}])
    assert seen == [expected]
