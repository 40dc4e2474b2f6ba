"""method: dpo with the losses added after DPO/IPO/SimPO/ORPO, end to end on the tiny model: TDPO
(its per-token KL against a live reference, checked against plain forward passes of the
trained and the starting weights), the hinge loss, BCO pairs (with the running reward shift a
resume must continue), and ODPO's offset from the reward gap of file pairs and online pairs."""

import json
import math

import pytest
import torch
from test_dpo import PAIRS, dpo_config, online_config
from test_training import assert_resumes_exactly, metrics

from aha.config import ConfigError, load_config
from aha.models import load
from aha.tasks import TaskError, encode_prompts
from aha.tasks.base import Task
from aha.training.loop import train

quiet = dict(echo=lambda *_: None)
log_sigmoid = lambda x: -math.log1p(math.exp(-x))


def completion_stats(policy, reference, tokenizer, prompt: str, completion: str) -> tuple[float, float, float]:
    """Summed log pi and log ref of completion + EOS after the templated prompt, and the sum over
    its positions of KL(ref || pi) over the whole vocabulary, from plain full forward passes."""
    ids = encode_prompts(tokenizer, Task("t", [], []), [{"prompt": prompt}])[0]
    out = tokenizer(completion, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    with torch.no_grad():
        logp, ref = (torch.log_softmax(m(torch.tensor([ids + out])).logits[0].double(), dim=-1)
                     for m in (policy, reference))
    positions = [len(ids) + k - 1 for k in range(len(out))]
    kl = sum(float((ref[t].exp() * (ref[t] - logp[t])).sum()) for t in positions)
    return (sum(float(logp[t, tok]) for t, tok in zip(positions, out)),
            sum(float(ref[t, tok]) for t, tok in zip(positions, out)), kl)


def test_tdpo_starts_at_log_2_with_no_kl(tmp_path):
    train(dpo_config(tmp_path, "run", "dpo.loss=tdpo", "train.steps=1"), **quiet)
    record = metrics(tmp_path / "run")[0]
    assert record["pref/loss"] == pytest.approx(math.log(2), abs=1e-5)  # the policy is its reference
    assert record["tdpo/kl_chosen"] == pytest.approx(0.0, abs=1e-5)
    assert record["tdpo/kl_rejected"] == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize("version", [1, 2])
def test_tdpo_loss_after_an_update_matches_plain_forward_passes(tmp_path, version):
    # every step trains on all 6 pairs: step 2's loss is the TDPO loss of the step-1 weights against the
    # starting ones, written out here from full-vocabulary forward passes
    beta, alpha = 0.5, 0.3 if version == 2 else 0.5
    train(dpo_config(tmp_path, "run", "dpo.loss=tdpo", f"dpo.tdpo_version={version}", f"dpo.tdpo_alpha={alpha}",
                     f"dpo.beta={beta}", "train.steps=2", "train.checkpoint_every=1", "train.lr=3e-2"), **quiet)
    tiny, trained = load("tiny"), load(str(tmp_path / "run/checkpoints/step-1"))
    expected, kls = [], []
    for p in PAIRS:
        c, rc, kc = completion_stats(trained.model, tiny.model, tiny.tokenizer, p["prompt"], p["chosen"])
        r, rr, kr = completion_stats(trained.model, tiny.model, tiny.tokenizer, p["prompt"], p["rejected"])
        weight = 1.0 if version == 1 else alpha
        expected.append(-log_sigmoid(beta * ((c - rc) - (r - rr) - weight * (kr - kc))))
        kls.append(kc)
    record = metrics(tmp_path / "run")[1]
    assert min(kls) > 1e-4  # the update moved the policy: the KL term is not zero
    assert record["pref/loss"] == pytest.approx(sum(expected) / len(expected), rel=1e-4)
    assert record["tdpo/kl_chosen"] == pytest.approx(sum(kls) / len(kls), rel=1e-3)


def test_tdpo_learns_the_preferences_and_resumes_exactly(tmp_path):
    train(dpo_config(tmp_path, "run", "dpo.loss=tdpo", "train.steps=10", "train.lr=3e-3"), **quiet)
    steps = [r for r in metrics(tmp_path / "run") if "pref/loss" in r]
    assert steps[-1]["pref/loss"] < 0.5 * steps[0]["pref/loss"] and steps[-1]["pref/accuracy"] == 1.0
    assert steps[-1]["tdpo/kl_rejected"] > 0
    assert_resumes_exactly(tmp_path, dpo_config, "dpo.loss=tdpo")


def test_tdpo_trains_under_bf16_autocast_to_bf16_precision(tmp_path):
    # the heads run in fp32 under autocast too: policy and reference compute the same numbers at the first
    # step (KL 0, loss log 2) in either dtype, and the log-probs show which dtype the body ran in
    logps = {}
    for dtype in ("bfloat16", "float32"):
        train(dpo_config(tmp_path, dtype, "dpo.loss=tdpo", f"train.dtype={dtype}", "train.steps=2"), **quiet)
        first, second = metrics(tmp_path / dtype)[:2]
        assert first["pref/loss"] == pytest.approx(math.log(2), abs=1e-5) and abs(first["tdpo/kl_chosen"]) < 1e-5
        assert math.isfinite(second["pref/loss"]) and second["tdpo/kl_chosen"] > 0
        logps[dtype] = first["logps/chosen"]
    assert logps["bfloat16"] == pytest.approx(logps["float32"], rel=1e-2)
    assert logps["bfloat16"] != logps["float32"]


@pytest.mark.parametrize("loss, first", [("hinge", 1.0), ("bco_pair", 2 * math.log(2))])
def test_hinge_and_bco_pair_start_from_their_values_at_a_zero_margin(tmp_path, loss, first):
    # the policy is its reference: every implicit reward is 0, the hinge gives 1 - 0, BCO (with delta 0, the
    # mean of those rewards) 2 log 2; then both learn the preferences
    train(dpo_config(tmp_path, "run", f"dpo.loss={loss}", "train.steps=10", "train.lr=3e-3"), **quiet)
    steps = [r for r in metrics(tmp_path / "run") if "pref/loss" in r]
    assert steps[0]["pref/loss"] == pytest.approx(first, abs=1e-5)
    assert steps[-1]["pref/loss"] < 0.5 * first and steps[-1]["pref/accuracy"] == 1.0
    if loss == "bco_pair":
        assert steps[0]["bco/delta"] == pytest.approx(0.0, abs=1e-6) and steps[-1]["bco/delta"] != 0.0


def test_bco_pair_resumes_exactly_with_its_reward_shift(tmp_path):
    assert_resumes_exactly(tmp_path, dpo_config, "dpo.loss=bco_pair", "dpo.beta=1.0")
    shift = json.loads((tmp_path / "resumed/checkpoints/step-4/state.json").read_text())["bco_shift"]
    # micro-batches of 2 pairs (train.micro_batch_size=4 sequences): 3 updates a step
    assert shift["count"] == 12 and shift["mean"] == pytest.approx(metrics(tmp_path / "straight")[-1]["bco/delta"])


SCORED = [{**p, "chosen_score": 1.0, "rejected_score": s} for p, s in zip(PAIRS, [0.0, 0.5, 0.9, -1.0, 0.25, 0.75])]


def test_odpo_offsets_each_file_pair_by_its_score_gap(tmp_path):
    rows = SCORED[:3] + [{**{k: v for k, v in p.items() if not k.endswith("_score")}, "margin": 3.0}
                         for p in SCORED[3:]]
    train(dpo_config(tmp_path, "run", "dpo.offset=log", "dpo.offset_alpha=2.0", "train.steps=1", pairs=rows),
          **quiet)
    gaps = [1.0, 0.5, 0.1, 3.0, 3.0, 3.0]
    # at the first step every margin is 0: -log sigma(0 - 2 log gap)
    expected = sum(-log_sigmoid(-2.0 * math.log(g)) for g in gaps) / len(gaps)
    record = metrics(tmp_path / "run")[0]
    assert record["pref/loss"] == pytest.approx(expected, rel=1e-5)
    assert record["odpo/offset"] == pytest.approx(sum(2.0 * math.log(g) for g in gaps) / 6, rel=1e-6)


@pytest.mark.parametrize("change, message", [
    ({"rejected_score": 1.0}, r"pairs.jsonl:1: dpo.offset needs the chosen completion to score above"),
    ({"rejected_score": "low"}, r"pairs.jsonl:1: dpo.offset needs finite numbers in chosen_score and rejected_score"),
])
def test_odpo_refuses_pairs_without_a_positive_reward_gap(tmp_path, change, message):
    with pytest.raises(TaskError, match=message):
        train(dpo_config(tmp_path, "run", "dpo.offset=linear", pairs=[{**SCORED[0], **change}] + SCORED[1:]), **quiet)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(TaskError, match=r"pairs.jsonl:1: dpo.offset needs finite numbers in margin"):
        train(dpo_config(plain, "run", "dpo.offset=log"), **quiet)


def test_online_odpo_offsets_pairs_by_the_runs_reward_gap(tmp_path):
    train(online_config(tmp_path, "run", "train.steps=1", "dpo.offset=linear", "dpo.offset_alpha=3.0"), **quiet)
    record = metrics(tmp_path / "run")[0]
    samples = [json.loads(line) for line in (tmp_path / "run/samples.jsonl").read_text().splitlines()]
    vowels = lambda text: sum(c in "aeiou" for c in text) / max(len(text), 1)
    offsets = [3.0 * (vowels(s["chosen"]) - vowels(s["rejected"])) for s in samples]
    assert len(samples) == record["online/pairs"] >= 1
    assert record["pref/loss"] == pytest.approx(sum(-log_sigmoid(-o) for o in offsets) / len(offsets), rel=1e-5)


def test_online_tdpo_reads_its_reference_live(tmp_path):
    train(online_config(tmp_path, "run", "train.steps=2", "dpo.loss=tdpo"), **quiet)
    first, second = metrics(tmp_path / "run")
    assert first["pref/loss"] == pytest.approx(math.log(2), abs=1e-5) and abs(first["tdpo/kl_rejected"]) < 1e-5
    assert second["online/pairs"] == 0 or second["tdpo/kl_rejected"] > 0


@pytest.mark.parametrize("overrides, message", [
    (["dpo.loss=ipo", "dpo.offset=log"], "dpo.offset .* needs dpo.loss=dpo, not ipo"),
    (["dpo.loss=hinge", "dpo.label_smoothing=0.1"], "dpo.label_smoothing is not part of dpo.loss=hinge"),
    (["dpo.loss=tdpo", "dpo.tdpo_version=1", "dpo.tdpo_alpha=0.2"], "dpo.tdpo_alpha weighs TDPO2's KL term"),
])
def test_settings_a_loss_would_ignore_are_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["method=dpo", "dpo.data=x.jsonl", *overrides])
