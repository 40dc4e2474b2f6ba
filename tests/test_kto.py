"""KTO (dpo.loss=kto) on the tiny model: the loss against one written out from plain forward
passes (reference point on mismatched sequences included), learning, both data forms, exact
resume with the cached reference, and bad input named by file and line."""

import json
import math

import pytest
import torch
from test_dpo import PAIRS, dpo_config, sequence_logps
from test_training import assert_resumes_exactly, metrics

from aha.config import ConfigError, load_config
from aha.models import load
from aha.tasks import TaskError
from aha.training.loop import train
from aha.training.supervised.kto import mismatched_partners

# each pair gives two labelled completions: 12 rows, a step of 12 sees all of them
KTO = ("dpo.loss=kto", "dpo.batch_size=12")


def kto_config(tmp_path, name, *overrides, pairs=PAIRS):
    return dpo_config(tmp_path, name, *KTO, *overrides, pairs=pairs)


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_the_kto_loss_matches_one_written_out_from_plain_forward_passes(tmp_path):
    # step 2 uses the weights after step 1: log-ratios and the reference point are no longer 0
    beta, w_d, w_u = 0.5, 1.5, 0.8
    train(kto_config(tmp_path, "run", f"dpo.beta={beta}", f"dpo.kto_desirable_weight={w_d}",
                     f"dpo.kto_undesirable_weight={w_u}", "train.steps=2", "train.checkpoint_every=1"),
          echo=lambda *_: None)
    reference, policy = load("tiny"), load(str(tmp_path / "run/checkpoints/step-1"))
    rows = [(p["prompt"], p[key], key == "chosen") for p in PAIRS for key in ("chosen", "rejected")]
    log_ratio = lambda prompt, completion: (sequence_logps(policy.model, policy.tokenizer, prompt, completion)[0]
                                            - sequence_logps(reference.model, reference.tokenizer, prompt,
                                                             completion)[0])
    # the mismatched sequence of row i: its prompt with the completion of the next row whose prompt
    # differs and whose label is the same: chosen rows borrow chosen completions, rejected rows rejected ones
    partner = lambda i: next(j % 12 for j in range(i + 1, i + 12) if rows[j % 12][0] != rows[i][0]
                             and rows[j % 12][2] == rows[i][2])
    z0 = max(0.0, sum(log_ratio(rows[i][0], rows[partner(i)][1]) for i in range(12)) / 12)
    losses = []
    for prompt, completion, desirable in rows:
        r = log_ratio(prompt, completion)
        losses.append(w_d * (1 - sigmoid(beta * (r - z0))) if desirable else w_u * (1 - sigmoid(beta * (z0 - r))))
    record = metrics(tmp_path / "run")[1]
    assert record["kto/z0"] == pytest.approx(z0, rel=1e-4, abs=1e-6)
    assert record["kto/loss"] == pytest.approx(sum(losses) / 12, rel=1e-5)
    first = metrics(tmp_path / "run")[0]  # the policy is its reference: every r and z0 are 0
    assert first["kto/z0"] == 0.0 and first["kto/loss"] == pytest.approx((6 * w_d + 6 * w_u) * 0.5 / 12, rel=1e-6)


def test_a_batch_that_repeats_rows_estimates_the_reference_point_from_each_of_them(tmp_path):
    # 20 rows a step from 12: the batch repeats some. With lr = 0 the policy stays its reference,
    # so every log-ratio, z0 included, is exactly 0 at every step
    train(kto_config(tmp_path, "run", "dpo.batch_size=20", "train.lr=0", "train.steps=3"), echo=lambda *_: None)
    assert [r["kto/z0"] for r in metrics(tmp_path / "run")] == [0.0, 0.0, 0.0]


def test_kto_learns_from_pairs_and_reports_held_out_pairs_per_subset(tmp_path):
    train(kto_config(tmp_path, "run", "train.steps=12", "train.lr=3e-3", "eval.before=true", "eval.after=true",
                     "eval.limit=2"), echo=lambda *_: None)
    records = metrics(tmp_path / "run")
    steps = [r for r in records if "kto/loss" in r]
    assert steps[-1]["kto/loss"] < 0.6 * steps[0]["kto/loss"]  # from 0.5: every r = z0 = 0 at step 1
    assert steps[-1]["kto/reward_desirable"] > 0 > steps[-1]["kto/reward_undesirable"]
    before, after = records[0], records[-1]
    assert before["pref_eval/accuracy"] == 0.0 and before["kto_eval/reward_desirable"] == 0.0  # policy = reference
    assert after["pref_eval/accuracy"] == 1.0 and after["pref_eval/likelier_chosen"] == 1.0
    assert after["pref_eval/accuracy/near"] == 1.0 and after["pref_eval/accuracy/far"] == 1.0
    assert after["kto_eval/reward_desirable"] > 0 > after["kto_eval/reward_undesirable"]
    assert "eval/accuracy" in after


def test_kto_trains_on_unpaired_labelled_completions(tmp_path):
    # more undesirable than desirable completions, and no pairs: what KTO is for
    rows = [{"prompt": p["prompt"], "completion": p["chosen"], "label": True} for p in PAIRS[:2]]
    rows += [{"prompt": p["prompt"], "completion": p["rejected"], "label": False} for p in PAIRS]
    # lambda_D * n_D / (lambda_U * n_U) = 3 * 2 / 6 = 1: the paper's advice for unbalanced data
    train(kto_config(tmp_path, "run", "dpo.batch_size=8", "dpo.kto_desirable_weight=3", "train.steps=6",
                     "train.lr=3e-3", pairs=rows), echo=lambda *_: None)
    steps = metrics(tmp_path / "run")
    assert steps[-1]["kto/loss"] < 0.6 * steps[0]["kto/loss"]
    assert steps[-1]["kto/reward_desirable"] > 0 > steps[-1]["kto/reward_undesirable"]
    samples = [json.loads(line) for line in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    label = {(json.dumps(r["prompt"]), r["completion"]): r["label"] for r in rows}
    assert samples and all(label[(json.dumps(s["prompt"]), s["completion"])] == s["desirable"] for s in samples)


def test_kto_resumes_exactly_with_its_cached_reference(tmp_path):
    assert_resumes_exactly(tmp_path, kto_config, "dpo.batch_size=5")  # 12 rows: the resume is inside an epoch
    held = torch.load(tmp_path / "resumed/checkpoints/step-4/trainer.pt",
                      weights_only=False)["extra"]["reference_logps"]
    assert set(held) == {"train", "train_mismatched", "eval"} and len(held["train"]) == 12


@pytest.mark.parametrize("line, message", [
    ('{"prompt": "What is 2 * 3?", "completion": "6", "label": "yes"}',
     r"data.jsonl:2: label must be true .* got 'yes'"),
    ('{"prompt": "What is 2 * 3?", "completion": "6"}', r"data.jsonl:2: missing field\(s\) label"),
    ('{"prompt": "What is 2 * 3?", "completion": "", "label": true}', "data.jsonl:2: completion must be a non-empty "
            "string"),
    ('{"prompt": "What is 2 * 3?", "completion": "6", "label": true, "chosen": "6"}',
     "data.jsonl:2: a row holds either completion \\+ label or chosen \\+ rejected, not both"),
    ('{"completion": "6", "label": true}', r"data.jsonl:2: missing field\(s\) prompt"),
    ('{"chosen": "6", "rejected": "7"}', r"data.jsonl:2: missing field\(s\) prompt"),
    ('{"prompt": "What is 2 * 3?", "chosen": "6", "rejected": "6"}', "data.jsonl:2: chosen and rejected are the same"),
])
def test_bad_kto_rows_name_file_and_line(tmp_path, line, message):
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps(PAIRS[0]) + "\n" + line + "\n")
    config = load_config(None, ["method=dpo", *KTO, "model=tiny", f"output_dir={tmp_path / 'run'}", f"dpo.data={data}"])
    with pytest.raises(TaskError, match=message):
        train(config, echo=lambda *_: None)
    assert not (tmp_path / "run").exists()


def test_kto_needs_two_prompts_for_its_reference_point(tmp_path):
    rows = [{"prompt": "What is 2 * 3?", "completion": text, "label": label} for text,
            label in (("6", True), ("7", False))]
    with pytest.raises(TaskError, match="needs completions of at least two different prompts"):
        train(kto_config(tmp_path, "run", pairs=rows), echo=lambda *_: None)


@pytest.mark.parametrize("option", ["dpo.online=true", "dpo.nll_coef=1.0", "dpo.label_smoothing=0.1"])
def test_kto_refuses_the_pair_only_options(option):
    with pytest.raises(ConfigError, match="dpo.loss=kto trains offline on labelled completions"):
        load_config(None, ["method=dpo", "dpo.loss=kto", "dpo.data=x.jsonl", option])


def test_each_row_borrows_the_next_completion_of_another_prompt_and_the_same_label():
    # the linear search against the plain definition, on rows with runs of repeated prompts
    import random

    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(2, 12)
        rows = [{"prompt": f"p{rng.randint(0, 2)}", "desirable": rng.random() < 0.5} for _ in range(n)]
        if len({r["prompt"] for r in rows}) < 2:
            continue
        expected = []
        for i, row in enumerate(rows):
            after = [j % n for j in range(i + 1, i + n) if rows[j % n]["prompt"] != row["prompt"]]
            same = [j for j in after if rows[j]["desirable"] == row["desirable"]]
            expected.append(same[0] if same else after[0])
        assert mismatched_partners(rows, "x.jsonl") == expected, rows


def test_a_resume_over_edited_data_is_refused_instead_of_reading_stale_reference_logps(tmp_path):
    train(kto_config(tmp_path, "run", "train.steps=2"), echo=lambda *_: None)
    edited = [dict(PAIRS[0], chosen="12, surely."), *PAIRS[1:]]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in edited))
    with pytest.raises(ValueError, match="reference log-probs in this kto run's checkpoint were computed on other"):
        train(kto_config(tmp_path, "run", "train.steps=4", "train.allow_config_change=true"), echo=lambda *_: None)
    assert [r["step"] for r in metrics(tmp_path / "run")] == [1, 2]  # nothing written lost
