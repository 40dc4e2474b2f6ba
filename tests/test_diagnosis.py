"""The training diagnosis (aha/training/diagnosis.py): each detector on hand-made series with
the step it must name, noise that must not fire, real tiny-model runs built to show each flag,
and the quickstart demo, on which every flag stays silent."""

import copy
import json
import math
import random
from pathlib import Path

import pytest
import torch
from test_algorithm_runs import FP32, QUIET, say_seven
from test_training import metrics
from test_wiring import T, logprobs_of, make_rollouts, noise, parts_for

from aha.cli import main
from aha.config import AlgorithmConfig, Config, DiagnosisConfig, RolloutConfig, load_config
from aha.models import load
from aha.rollout.hf_engine import HFEngine
from aha.tracking.run_report import RunReportError, run_report_html
from aha.training import diagnosis as dx
from aha.training.diagnosis import Diagnosis, diagnose
from aha.training.loop import train
from aha.training.rl.batch import Batch
from aha.training.rl.step import prepare
from aha.training.rl.update import Learner, policy_update

DEMO_METRICS = Path(__file__).parent / "data" / "quickstart_metrics.jsonl"
# the hand-made series: a start of 2 steps, no smoothing, 2 steps in a row
PLAIN = DiagnosisConfig(baseline_steps=2, window=1, patience=2)


def records(**series) -> list[dict]:
    """Step records 1..n holding the given series (reward/mean 0 unless given: every step record has one)."""
    n = len(next(iter(series.values())))
    return [{"step": i + 1, "reward/mean": 0.0, **{k.replace("__", "/"): v[i] for k, v in series.items()}}
            for i in range(n)]


# ---------------------------------------------------------------- each detector, by hand


def test_entropy_collapse_needs_both_the_fall_and_the_floor():
    found = dx.entropy_collapse(records(entropy=[2.0, 2.0, 1.0, 0.5, 0.1, 0.04, 0.03, 0.02]), PLAIN)
    assert found.step == 6 and "2 -> 0.04" in found.detail  # 0.1 is under 10% of 2.0 but above 0.05 nats
    # the demo's kind of fall: 90% down, but 0.09 nats is not near-deterministic
    assert dx.entropy_collapse(records(entropy=[0.95, 0.95] + [0.09] * 10), PLAIN) is None
    # a policy that starts nearly deterministic has not collapsed
    assert dx.entropy_collapse(records(entropy=[0.04] * 10), PLAIN) is None


def test_reward_collapse_is_a_fall_after_a_rise():
    found = dx.reward_collapse(records(reward__mean=[0.1, 0.1, 0.2, 0.4, 0.6, 0.5, 0.3, 0.2, 0.2]), PLAIN)
    # best 0.6 at step 5 (gain 0.5): at or below 0.35 from step 7
    assert found.step == 7 and "0.1 at the start, 0.6 at step 5, 0.3 at step 7" in found.detail
    assert dx.reward_collapse(records(reward__mean=[0.1, 0.1, 0.25, 0.05, 0.05, 0.05]), PLAIN) is None  # rise < 0.2
    assert dx.reward_collapse(records(reward__mean=[0.1, 0.1, 0.5, 0.6, 0.4, 0.4, 0.4]), PLAIN) is None  # kept 60%


def test_informative_groups_gone_needs_informative_groups_at_the_start():
    zero_variance = [0.5, 0.5, 0.6, 0.8, 1.0, 1.0, 1.0]
    assert dx.informative_groups_gone(records(groups__zero_variance_frac=zero_variance), PLAIN).step == 5
    # never informative: the alarms' "nothing to train on", not this flag
    assert dx.informative_groups_gone(records(groups__zero_variance_frac=[1.0] * 7), PLAIN) is None


def test_kl_blowup_takes_the_first_of_kl_ref_and_kl_old():
    kl_ref = [0.0, 0.1, 0.5, 1.2, 1.5, 2.0, 2.0]
    assert dx.kl_blowup(records(kl__ref=kl_ref), PLAIN).step == 4
    found = dx.kl_blowup(records(kl__ref=kl_ref, kl__old=[0.0, 0.0, 0.3, 0.3, 0.0, 0.0, 0.0]), PLAIN)
    assert found.step == 3 and found.detail.startswith("kl/old 0.3")
    assert dx.kl_blowup(records(kl__ref=[0.0, 0.1, 2.0, 0.5, 2.0, 0.5]), PLAIN) is None  # never 2 steps in a row


def test_clip_blowup():
    assert dx.clip_blowup(records(policy__clip_frac=[0.0, 0.1, 0.35, 0.4, 0.2, 0.5, 0.5]), PLAIN).step == 3


def test_grad_norm_spike_against_the_median_of_the_steps_that_trained():
    config = DiagnosisConfig(baseline_steps=2, window=5)
    norms = [1.0, 1.2, 0.9, 1.1, 1.0, 1.05, 15.0, 1.0]
    found = dx.grad_norm_spike(records(grad_norm=norms), config)
    assert found.step == 7 and "the median 1.05 of the 5 steps before" in found.detail
    assert dx.grad_norm_spike(records(grad_norm=[1.0] * 6 + [9.0]), config) is None  # under 10x
    # steps that trained nothing (gradient 0) are neither the spike nor what it is compared with
    idle = [{"step": 7 + k, "reward/mean": 0.0, "grad_norm": 0.0, "train/nothing_to_train": 1.0} for k in range(5)]
    steps = records(grad_norm=[1.0] * 6) + idle + [{"step": 12, "reward/mean": 0.0, "grad_norm": 1.5}]
    assert dx.grad_norm_spike(steps, config) is None


def test_logprob_gap_grows_from_its_least_start():
    gap = [0.001, 0.001, 0.002, 0.003, 0.01, 0.03, 0.04, 0.05]
    found = dx.logprob_gap(records(logprobs__engine_trainer_abs_diff=gap), PLAIN)
    assert found.step == 6 and "0.001 -> 0.03" in found.detail
    # a steady gap (bf16 engine vs trainer) is not a growing one
    assert dx.logprob_gap(records(logprobs__engine_trainer_abs_diff=[0.03] * 10), PLAIN) is None
    # an engine stuck on the first weights: exact at step 1, off from step 2 on
    stale = [0.0, 0.18, 0.2, 0.21, 0.22, 0.22]
    assert dx.logprob_gap(records(logprobs__engine_trainer_abs_diff=stale), PLAIN).step == 2


def test_one_outlying_step_passes_the_median_window():
    config = DiagnosisConfig(baseline_steps=2, window=3, patience=1)
    reward = [0.1] * 4 + [150.0] + [0.1] * 5  # one step's reward in another scale
    assert dx.reward_collapse(records(reward__mean=reward), config) is None
    assert dx.kl_blowup(records(kl__ref=[0.01] * 4 + [9.0] + [0.01] * 5), config) is None
    # two steps of three are a trend: the median carries them, one step later
    assert dx.kl_blowup(records(kl__ref=[0.01] * 4 + [9.0, 9.0] + [0.01] * 5), config).step == 6


def test_eval_records_and_missing_or_nonfinite_values_are_skipped():
    steps = records(entropy=[2.0, 2.0, math.nan, 0.01, 0.01]) + [{"step": 5, "eval/accuracy": 0.5}]
    assert dx.points(dx.step_records(steps), "entropy") == [(1, 2.0), (2, 2.0), (4, 0.01), (5, 0.01)]
    assert dx.entropy_collapse(steps, PLAIN).step == 4


def noisy_run(seed: int, steps: int = 200) -> list[dict]:
    """Steady training with the step-to-step noise of the demo's metrics (64 samples of a 0/1
    reward, 16 groups), and a little more."""
    rng = random.Random(seed)
    return [{"step": s, "reward/mean": sum(rng.random() < 0.3 for _ in range(64)) / 64,
             "entropy": 1.0 + rng.gauss(0, 0.05), "groups/zero_variance_frac": sum(rng.random() < 0.6
                                                                                  for _ in range(16)) / 16,
             "kl/ref": abs(rng.gauss(0.05, 0.01)), "kl/old": abs(rng.gauss(0, 1e-3)),
             "policy/clip_frac": rng.uniform(0, 0.05), "grad_norm": math.exp(rng.gauss(0, 0.5)),
             "logprobs/engine_trainer_abs_diff": abs(rng.gauss(0.01, 0.003))} for s in range(1, steps + 1)]


def test_noise_alone_raises_no_flag():
    assert {seed: list(diagnose(noisy_run(seed), DiagnosisConfig())) for seed in range(20)} == {
        seed: [] for seed in range(20)}


def test_a_detector_reads_only_the_steps_up_to_the_one_it_judges():
    """So the flags raised step by step are the ones a replay of the whole run finds."""
    run = noisy_run(0, 60)
    for r in run[30:]:  # the reward falls back and entropy collapses from step 31
        r["reward/mean"], r["entropy"] = 0.0, 0.001
    for r in run[20:30]:
        r["reward/mean"] = 0.9
    live = Diagnosis(DiagnosisConfig())
    said = []
    for r in run:
        live.observe(r, said.append)
    assert live.flags == Diagnosis.replay(DiagnosisConfig(), run).flags
    assert sorted(live.flags) == ["entropy_collapse", "reward_collapse"]
    assert len(said) == 2 and all(line.startswith("warning: diagnosis: ") and "Usually: " in line for line in said)


# ---------------------------------------------------------------- the gap the RL update measures


def test_the_update_measures_the_engine_trainer_gap_before_its_first_step():
    tiny = load("tiny", seed=0)
    ro = make_rollouts(len(tiny.tokenizer), seed=11)
    mask = ro.completion_mask
    policy = copy.deepcopy(tiny.model)
    with torch.no_grad():
        trainer = logprobs_of(policy, ro)
    ro.sampling_logprobs = (trainer + noise(12, -0.4, 0.4)) * mask
    expected = float(((trainer - ro.sampling_logprobs).abs() * mask).sum() / mask.sum())
    # two passes with a large step: the second one's gap (after an update) would differ
    config = Config(model="tiny", rollout=RolloutConfig(group_size=4), algorithm=AlgorithmConfig(epochs=2))
    learner = Learner(policy, torch.optim.SGD(policy.parameters(), lr=1.0))
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.25, 0.0, 1.0, 1.0, 0.0])
    batch, stats = prepare(parts_for(config, learner), Batch(ro, rewards))
    assert dx.GAP not in stats  # old_logprobs=engine: prepare computes no trainer log-probs
    out = policy_update(learner, batch, config.algorithm, parts_for(config, learner).shape, 1e9, T)
    assert out[dx.GAP] == pytest.approx(expected, abs=1e-5)  # the first pass's alone, before any step


# ---------------------------------------------------------------- real runs built to show each flag


def flags_of(run: Path) -> dict[str, int]:
    """{flag: step} of a run's diagnosis.json, checked against a replay of its metrics.jsonl."""
    written = json.loads((run / "diagnosis.json").read_text())["flags"]
    replayed = Diagnosis.replay(load_config(run / "config.yaml").diagnosis, metrics(run)).summary()["flags"]
    assert written == replayed
    return {name: flag["step"] for name, flag in written.items()}


# 'say 7' (a reward per token that says 7) at a high rate, every group kept, no evaluation:
# entropy_collapse and informative_groups_gone at steps 10-13 (fp32 and bf16, seeds 0-2)
ENTROPY_COLLAPSE = ("train.lr=3e-2", "algorithm.dynamic_sampling=false", "eval.after=false")


def counting_reward(tmp_path: Path, body: str) -> str:
    """A reward keyed on the step: it counts its calls (4 prompts x 8 completions a step, no
    dynamic sampling, no held-out evaluation). Returns the override that trains on it."""
    (tmp_path / "stepped.py").write_text(
        "calls = 0\n\n\ndef hits(completion, sample):\n    global calls\n    step = calls // 32 + 1\n"
        f"    calls += 1\n{body}")
    return f"reward=[{{fn: '{tmp_path / 'stepped.py'}:hits'}}]"


def test_a_high_learning_rate_collapses_entropy(tmp_path):
    """'Say 7' at lr 3e-2 with every group kept: the tiny model learns to say 7 at every token,
    then says the same tokens every time (entropy ~1e-3 nats), its groups all score 1 and nothing
    more is learned. Every flag is said once, logged, written and reported. (A reward that pays
    per token keeps pushing until the policy is deterministic, in fp32 and in bf16 alike; the
    arithmetic task's format point let fp32 runs stop at a tie with entropy ~0.4.)"""
    said = []
    config = say_seven(tmp_path, *ENTROPY_COLLAPSE, "train.report=true")
    run = Path(train(config, echo=said.append).run_dir)
    flags = flags_of(run)
    assert set(flags) == {"entropy_collapse", "informative_groups_gone"}
    steps = {r["step"]: r for r in metrics(run)}
    assert steps[flags["entropy_collapse"]]["entropy"] < 0.05 < steps[1]["entropy"] / 50
    raised = [line for line in said if line.startswith("warning: diagnosis: ")]
    assert len(raised) == 2 and any("entropy_collapse from step" in line and "lower train.lr" in line
                                    for line in raised)
    summary = [line for line in said if line.startswith("diagnosis: ")]  # the end's: each flag and its step
    assert len(summary) == 1 and f"entropy_collapse from step {flags['entropy_collapse']}" in summary[0]
    assert "WARNING aha.training.diagnosis: diagnosis: entropy_collapse from step" in (run / "log.txt").read_text()
    page = (run / "report.html").read_text()
    assert f"<b>entropy_collapse</b> from step {flags['entropy_collapse']}" in page and "Usually: lower" in page


def test_a_reward_that_stops_paying_is_a_reward_collapse(tmp_path):
    """'Say 7' pays until step 20, then only '3' does: the mean reward the policy had won falls."""
    reward = counting_reward(tmp_path, "    digit = '7' if step <= 20 else '3'\n"
                                       "    return completion.count(digit) / max(len(completion), 1)\n")
    run = Path(train(say_seven(tmp_path, reward, "algorithm.dynamic_sampling=false", "eval.after=false"),
                     echo=QUIET).run_dir)
    flags = flags_of(run)
    assert set(flags) == {"reward_collapse"}
    assert flags["reward_collapse"] == 23  # the third step of the fall, where the 5-step median turns


def test_a_reward_out_of_scale_for_one_step_is_a_gradient_spike(tmp_path):
    """Step 12's rewards are 1000x the others', and advantage_scale=none passes the scale on."""
    reward = counting_reward(tmp_path, "    score = completion.count('7') / max(len(completion), 1)\n"
                                       "    return 1000 * score if step == 12 else score\n")
    run = Path(train(say_seven(tmp_path, reward, "algorithm.dynamic_sampling=false", "algorithm.advantage_scale=none",
                               "train.steps=20", "eval.after=false"), echo=QUIET).run_dir)
    assert flags_of(run) == {"grad_norm_spike": 12}  # the reward's own outlier is no reward collapse


def test_large_steps_blow_up_the_kl_and_the_clip_fraction(tmp_path):
    """lr 1e-2 with four passes over each batch: the ratio leaves the clip range and the policy
    runs away from its reference despite kl_coef 0.1."""
    run = Path(train(say_seven(tmp_path, "train.lr=1e-2", "algorithm.epochs=4", "algorithm.kl_coef=0.1",
                               "eval.after=false"), echo=QUIET).run_dir)
    flags = flags_of(run)
    assert set(flags) == {"clip_blowup", "kl_blowup"}
    assert {r["step"]: r for r in metrics(run)}[flags["kl_blowup"]]["kl/ref"] > 1.0


def test_an_engine_left_on_stale_weights_opens_a_logprob_gap(tmp_path, monkeypatch):
    """The classic weight-sync bug: the engine samples from a copy of the first weights that is
    never updated, so the trainer's log-probs of its samples drift away from the engine's."""
    build = HFEngine.__init__
    monkeypatch.setattr(HFEngine, "__init__", lambda self, model, *a, **k: build(self, copy.deepcopy(model), *a, **k))
    monkeypatch.setattr(HFEngine, "sync_weights", lambda self, model: None)
    run = Path(train(say_seven(tmp_path, "eval.after=false", FP32), echo=QUIET).run_dir)
    flags = flags_of(run)
    assert flags["logprob_gap"] == 3 and set(flags) <= {"logprob_gap", "clip_blowup"}  # the first step judged
    assert metrics(run)[0][dx.GAP] < 1e-5  # the same fp32 weights at the first step


def test_a_resumed_run_rebuilds_its_diagnosis_without_saying_it_again(tmp_path, capsys):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    straight.mkdir(), resumed.mkdir()
    overrides = [*ENTROPY_COLLAPSE, "train.checkpoint_every=5"]
    train(say_seven(straight, *overrides, "train.steps=30"), echo=QUIET)
    train(say_seven(resumed, *overrides, "train.steps=25"), echo=QUIET)
    said = []
    train(say_seven(resumed, *overrides, "train.steps=30", "train.allow_config_change=true"), echo=said.append)
    straight, resumed = straight / "run", resumed / "run"
    assert flags_of(resumed) == flags_of(straight) and max(flags_of(straight).values()) < 20
    assert not [line for line in said if line.startswith("warning: diagnosis: ")]  # raised before the resume
    capsys.readouterr()
    assert main(["monitor", str(straight)]) == 0
    out = capsys.readouterr().out
    assert "hacking monitor: no flags" in out and "diagnosis: entropy_collapse from step" in out
    assert main(["monitor", "--json", str(straight), "diagnosis.entropy_min=1e-9"]) == 0
    assert "entropy_collapse" not in json.loads(capsys.readouterr().out)["diagnosis"]


# ---------------------------------------------------------------- silent on the demo


def test_the_quickstart_demo_raises_no_flag():
    """configs/quickstart.yaml's 20 steps as one run logged them (tests/data, from
    `aha train configs/quickstart.yaml`): healthy learning, and no flag."""
    demo = [json.loads(line) for line in DEMO_METRICS.read_text().splitlines()]
    steps = dx.step_records(demo)
    assert len(steps) == 20 and steps[-1]["reward/mean"] > steps[0]["reward/mean"] + 0.3
    assert all(dx.GAP in r for r in steps)
    assert diagnose(demo, load_config(Path(__file__).parents[1] / "configs/quickstart.yaml").diagnosis) == {}


def test_the_report_lists_the_flags_in_its_warnings(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text((Path(__file__).parents[1] / "configs/quickstart.yaml").read_text())
    (run / "metrics.jsonl").write_text(DEMO_METRICS.read_text())
    diagnosis = Diagnosis(DiagnosisConfig(), flags={"kl_blowup": dx.Flag("kl_blowup", 7, "kl/ref 1.5 <nats>")})
    diagnosis.write(run / dx.FILE)
    page = run_report_html(run)
    warnings = page[page.index("<h2>Warnings</h2>"):]
    assert "<b>kl_blowup</b> from step 7 (kl/ref 1.5 &lt;nats&gt;): the policy moved far" in warnings
    assert "Usually: lower train.lr; raise algorithm.kl_coef" in warnings
    (run / dx.FILE).write_text(json.dumps({"flags": {"kl_blowup": {"step": 7}}}))
    with pytest.raises(RunReportError, match="diagnosis.json: not the mapping a run writes"):
        run_report_html(run)


def test_a_healthy_tiny_run_raises_no_flag(tmp_path):
    run = Path(train(say_seven(tmp_path, "eval.after=false"), echo=QUIET).run_dir)
    assert flags_of(run) == {}


@pytest.mark.slow
def test_the_quickstart_demo_trains_without_a_flag(tmp_path):
    said = []
    config = load_config(Path(__file__).parents[1] / "configs/quickstart.yaml", [f"output_dir={tmp_path / 'run'}"])
    train(config, echo=said.append)
    assert flags_of(tmp_path / "run") == {}
    assert not [line for line in said if "diagnosis" in line]
