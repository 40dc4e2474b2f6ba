"""The findings' runner and pages (bench/findings/): runs are trained once and kept, a page's
tables are the runs' numbers, and the index agrees with every page's verdict and key number."""

import json
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
sys.path.insert(0, str(ROOT / "bench" / "findings"))

import runner  # noqa: E402
from pages import NOT_MEASURED, index_text, page_text, plot_curves, read_marker, write_index  # noqa: E402
from runner import Claim, Condition, finished, last, measure, run_claim, run_folder, tail_mean  # noqa: E402

TINY = ("model=tiny", "train.steps=2", "eval.limit=4", "rollout.max_new_tokens=4", "eval.max_new_tokens=4",
        "train.report=false", "rollout.prompts_per_step=2", "rollout.group_size=4", "train.checkpoint_every=1")


def records(folder: Path) -> list[dict]:
    return [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]


def test_a_claim_runs_each_seed_once_and_its_page_holds_their_numbers(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    shared = Condition("Base run (shared)", (), runs="shared")
    claim = Claim("demo-check", "A check of the runner", "none", "the runner keeps what it ran",
                  "configs/quickstart.yaml", [shared], seeds=(0, 1), common=TINY)
    said = []
    run_claim(claim, tmp_path, echo=said.append)
    folders = [run_folder(claim, shared, seed, tmp_path) for seed in (0, 1)]
    assert [f.relative_to(tmp_path).as_posix() for f in folders] == ["shared/base-run-shared-s0",
                                                                      "shared/base-run-shared-s1"]
    assert all(finished(f) for f in folders)
    stamps = [os.stat(f / "metrics.jsonl").st_mtime_ns for f in folders]
    other = Claim("other", "Another claim on the same runs", "none", "shared runs are trained once",
                  "configs/quickstart.yaml", [shared], seeds=(0, 1), common=TINY)
    run_claim(claim, tmp_path, echo=said.append)  # finished runs are kept, not run again
    run_claim(other, tmp_path, echo=said.append)  # nor by another claim that shares them
    assert [os.stat(f / "metrics.jsonl").st_mtime_ns for f in folders] == stamps
    assert said[-4:] == [f"{f}: finished, kept" for f in folders * 2]
    changed = Claim("changed", "The same runs asked with another setting", "none", "refused",
                    "configs/quickstart.yaml", [Condition(shared.name, ("train.lr=1e-4",), runs="shared")],
                    seeds=(0,), common=TINY)
    with pytest.raises(RuntimeError, match="base-run-shared-s0 was trained with other settings than its command's "
                                           r"\(train.lr\)"):
        run_claim(changed, tmp_path, echo=said.append)

    accuracy = measure(claim, tmp_path, last("eval/accuracy"))
    assert accuracy == {shared.name: [[r for r in records(f) if "eval/accuracy" in r][-1]["eval/accuracy"]
                                      for f in folders]}
    length = measure(claim, tmp_path, tail_mean("length/mean", 5))  # 2 steps: the mean of both
    assert length[shared.name] == pytest.approx([sum(r["length/mean"] for r in records(f) if "time/step_s" in r) / 2
                                                 for f in folders])
    assert runner.curves(claim, tmp_path, "length/mean")[shared.name][1] == {
        r["step"]: r["length/mean"] for r in records(folders[1]) if "length/mean" in r}
    with pytest.raises(ValueError, match="base-run-shared-s0: no eval/nothing logged"):
        measure(claim, tmp_path, last("eval/nothing"))
    assert all("eval/length" in r for r in records(folders[0]) if "eval/accuracy" in r)  # the greedy length

    page = page_text(claim, {"held-out accuracy": accuracy}, "not testable here", "a check", "n/a", tmp_path,
                     "this CPU", "img/demo-check.png", notes="A note.")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/demo-check.md").write_text(page)
    assert read_marker(tmp_path / "docs/demo-check.md") == ("none", "not testable here", "n/a")
    values = accuracy[shared.name]
    assert f"| {shared.name} | {values[0]:.3f} | {values[1]:.3f} | {sum(values) / 2:.3f} |" in page
    folder = tmp_path / "shared/base-run-shared-s1"
    assert f"aha train configs/quickstart.yaml {' '.join(TINY)} seed=1 output_dir={folder} train.resume=true" in page
    assert page.rstrip().endswith("A note.") and "![A check of the runner](img/demo-check.png)" in page
    index = write_index(tmp_path / "docs").read_text()
    assert "| [A check of the runner](demo-check.md) | none | not testable here | n/a |" in index
    assert "## Not measured yet" in index
    plot = plot_curves(claim, tmp_path, {"length/mean": "length", "eval/accuracy": "accuracy"}, tmp_path / "p.png")
    assert plot.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(ValueError, match="verdict 'maybe'"):
        page_text(claim, {}, "maybe", "", "", tmp_path, "this CPU")


def test_a_page_whose_claim_is_still_listed_as_not_measured_is_refused(tmp_path):
    name = NOT_MEASURED[0][0]
    (tmp_path / f"{name}.md").write_text('# T\n<!-- finding: source="s" verdict="mixed" key="k" -->\n')
    with pytest.raises(ValueError, match=f"{name}.md: its claim is still listed in NOT_MEASURED"):
        index_text(tmp_path)


def test_table_cells():
    from pages import cell, summary_cells

    assert [cell(0.25), cell(float("inf")), cell(float("nan")), cell(5.0, whole=True), cell(7.5, whole=True)] == [
        "0.250", "never", "-", "5", "7.5"]
    assert summary_cells([5.0, float("inf")], whole=True) == "- | -"  # some seeds never got there
    assert summary_cells([5.0, 15.0], whole=True) == "10 | 10"


def test_condition_names_become_plain_folder_names():
    assert runner.slug("GRPO + ReDit (gaussian, std 0.05)") == "grpo-redit-gaussian-std-0.05"
    assert runner.slug("symmetric + temperatures 0.6/1.0/1.4") == "symmetric-temperatures-0.6-1.0-1.4"


def test_the_index_agrees_with_every_page():
    """docs/findings/README.md is what the pages' comments say: rewrite it with write_index."""
    folder = ROOT / "docs" / "findings"
    assert (folder / "README.md").read_text() == index_text(folder)


def test_every_page_has_the_script_that_writes_it():
    """docs/findings/<slug>.md comes from bench/findings/<slug with _>.py, whose claim has that slug."""
    import importlib

    for page in sorted((ROOT / "docs" / "findings").glob("*.md")):
        if page.name == "README.md":
            continue
        script = ROOT / "bench" / "findings" / f"{page.stem.replace('-', '_')}.py"
        assert script.is_file(), f"{page}: no {script}"
        assert importlib.import_module(script.stem).CLAIM.slug == page.stem


def test_an_evaluation_command_names_the_model_and_its_output(tmp_path):
    claim = Claim("c", "t", "s", "claim", "configs/quickstart.yaml", [Condition("A b")], seeds=(3,))
    base, run = runner.eval_commands(claim, tmp_path, 20, "greedy", ("eval.limit=4",))
    assert base == ["aha", "eval", "configs/quickstart.yaml", "eval.limit=4", "--output", str(tmp_path / "c" /
                                                                                              "base-greedy.jsonl")]
    assert run == ["aha", "eval", "configs/quickstart.yaml", "eval.limit=4", "--checkpoint",
                   str(tmp_path / "c" / "a-b-s3" / "checkpoints" / "step-20"), "--output",
                   str(tmp_path / "c" / "a-b-s3-greedy.jsonl")]


def test_calibration_of_an_evaluation_by_hand(tmp_path):
    """Four answers: right at 0.8, wrong at 0.8, right at 0.2, wrong with no confidence."""
    import calibration_reward

    out = tmp_path / "base-greedy.jsonl"
    rows = [("184 <confidence>0.8</confidence>", 1.0), ("190 <confidence>0.8</confidence>", 0.0),
            ("184 <confidence>20%</confidence>", 1.0), ("190", 0.0)]
    out.write_text("".join(json.dumps({"completion": text, "score": score}) + "\n" for text, score in rows))
    got = calibration_reward.calibration(["aha", "eval", "x.yaml", "--output", str(out)])
    assert got["accuracy"] == 0.5 and got["stated"] == 0.75 and got["n"] == 4
    assert got["confidence"] == pytest.approx(0.6)
    # bins: 0.8 holds one right and one wrong (|0.5 - 0.8| x 2/3), 0.2 holds one right (|1 - 0.2| x 1/3)
    assert got["ece"] == pytest.approx(0.3 * 2 / 3 + 0.8 / 3)
    # (0.04 + 0.64 + 0.64 + 1) / 4: the missing confidence of a wrong answer counts as 1
    assert got["brier"] == pytest.approx((0.04 + 0.64 + 0.64 + 1.0) / 4)


def test_a_page_names_the_cpus_that_made_its_runs_not_the_one_writing_it(tmp_path, monkeypatch):
    import pages

    with pytest.raises(FileNotFoundError, match=f"{tmp_path / 'c' / 'machines.txt'} is missing"):
        pages.machines(tmp_path / "c")
    for cpu in ("AMD EPYC (fp32, no native bf16, 2 cores)", "AMD EPYC (fp32, no native bf16, 2 cores)",
                "Intel Xeon (bf16 autocast, 2 cores)"):
        monkeypatch.setattr(pages, "cpu_description", lambda cpu=cpu: cpu)
        pages.record_machine(tmp_path / "c")  # the script trained or evaluated something there
    monkeypatch.setattr(pages, "cpu_description", lambda: "a third CPU, only writing the page")
    assert pages.machines(tmp_path / "c") == ("AMD EPYC (fp32, no native bf16, 2 cores) and Intel Xeon (bf16 "
                                              "autocast, 2 cores)")


def test_a_condition_with_its_own_config_starts_from_an_earlier_conditions_run_of_its_seed(tmp_path, monkeypatch):
    """SFT, then GRPO from the SFT run's checkpoint of the same seed ({seed} and {root} in an override)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sft = Condition("SFT", (), config="configs/sft_arithmetic.yaml")
    then = Condition("SFT then GRPO", ("model={root}/c/sft-s{seed}/checkpoints/step-2",))
    claim = Claim("c", "t", "s", "claim", "configs/quickstart.yaml", [sft, then], seeds=(0, 1),
                  common=(*TINY, "sft.batch_size=2"))
    assert runner.command(claim, then, 1, tmp_path)[:3] == ["aha", "train", "configs/quickstart.yaml"]
    assert f"model={tmp_path}/c/sft-s1/checkpoints/step-2" in runner.command(claim, then, 1, tmp_path)
    assert runner.command(claim, sft, 0, tmp_path)[2] == "configs/sft_arithmetic.yaml"
    said = []
    run_claim(claim, tmp_path, echo=said.append)
    import yaml

    for seed in (0, 1):
        folder = run_folder(claim, then, seed, tmp_path)
        assert finished(folder)
        assert yaml.safe_load((folder / "config.yaml").read_text())["model"] == str(
            tmp_path / "c" / f"sft-s{seed}" / "checkpoints" / "step-2")
        assert yaml.safe_load((run_folder(claim, sft, seed, tmp_path) / "config.yaml").read_text())["method"] == "sft"
    run_claim(claim, tmp_path, echo=said.append)  # each kept: its config is the one its command makes
    assert said[-4:] == [f"{run_folder(claim, c, s, tmp_path)}: finished, kept" for c in (sft, then) for s in (0, 1)]


def test_a_condition_prepares_its_data_from_an_earlier_conditions_run_once(tmp_path, monkeypatch):
    """LIMR's shape: `aha select` on the full-set run of the same seed writes the prompts the next run
    trains on, and the held-out problems as a file; each prepared once, and the page shows the commands."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    task = ("task.a_max=4", "task.b_max=3", "task.num_eval=2")  # 6 problems, a few to train on: epochs in 4 steps
    full = Condition("full", task)
    subset = Condition("subset", ("task.name=null", "task.data={root}/p/subset-s{seed}.jsonl",
                                  "task.eval_data={root}/p/held.jsonl", "reward=[{fn: aha.rewards:numeric_answer}]"),
                       prepare=(("aha", "eval", "configs/quickstart.yaml", "model=tiny", "eval.max_new_tokens=4", *task,
                                 "--output", "{root}/p/held.jsonl"),
                                ("aha", "select", "{root}/p/full-s{seed}", "--threshold", "-1",
                                 "--out", "{root}/p/subset-s{seed}.jsonl")))
    claim = Claim("p", "t", "s", "claim", "configs/quickstart.yaml", [full, subset], seeds=(0,),
                  common=(*TINY, "train.steps=4", "algorithm.dynamic_sampling=false"))
    said = []
    run_claim(claim, tmp_path, echo=said.append)
    held, chosen = tmp_path / "p" / "held.jsonl", tmp_path / "p" / "subset-s0.jsonl"
    from aha.algorithms.selection import learning_impact
    from aha.eval.selection import trajectories

    scored = learning_impact(trajectories(run_folder(claim, full, 0, tmp_path)))
    picked = [json.loads(line) for line in chosen.read_text().splitlines()]
    assert sorted(str(row["id"]) for row in picked) == sorted(scored)  # threshold -1: every scored prompt kept
    assert len(held.read_text().splitlines()) == records(run_folder(claim, subset, 0, tmp_path))[0]["eval/n"]
    assert all(finished(run_folder(claim, c, 0, tmp_path)) for c in (full, subset))
    assert said.count(f"$ aha select {tmp_path}/p/full-s0 --threshold -1 --out {chosen}") == 1
    run_claim(claim, tmp_path, echo=said.append)  # finished: nothing prepared or trained again
    assert said[-2:] == [f"{run_folder(claim, c, 0, tmp_path)}: finished, kept" for c in (full, subset)]
    text = page_text(claim, {}, "mixed", "r", "k", tmp_path, "a CPU")
    assert text.index(f"--output {held}") < text.index(f"task.data={chosen}")


def test_wall_time_curves_by_hand():
    """Two steps of 30 s and 90 s, evaluations before, after the first and after the second."""
    import sft_then_rl

    records = [{"step": 0, "eval/accuracy": 0.1}, {"step": 1, "time/step_s": 30.0}, {"step": 1, "eval/accuracy": 0.3},
               {"step": 2, "time/step_s": 90.0}, {"step": 2, "eval/accuracy": 0.5}]
    points = sft_then_rl.timeline(records, start=2.0)
    assert points == [(2.0, 0.1), (2.5, 0.3), (4.0, 0.5)]
    assert sft_then_rl.accuracy_at(points, 2.25) == pytest.approx(0.2)
    assert sft_then_rl.accuracy_at(points, 3.25) == pytest.approx(0.4)
    assert sft_then_rl.accuracy_at(points, 9.0) == 0.5  # after its last evaluation: where it ended
    assert sft_then_rl.accuracy_at(points, 1.0) == 0.1  # before it started: where it started


def test_sampled_completions_and_the_per_size_bar_by_hand():
    import ppo_grpo_expert_iteration as claim

    assert claim.sampled([{"groups/sampled": 8}, {"step": 2, "groups/sampled": 16}, {"eval/accuracy": 0.5}]) == 192
    assert claim.sampled([{"rft/sampled_total": 128}, {"rft/sampled_total": 256}, {"eval/accuracy": 0.5}]) == 256
    grpo, ppo, ei = claim.SMALL
    # best 0.40 on 200 problems: two standard errors 2 * sqrt(0.4 * 0.6 / 200) = 0.0693
    final = {grpo.name: [0.40, 0.40], ppo.name: [0.35, 0.35], ei.name: [0.34, 0.34]}
    best, margin, said = claim.judge(final, claim.SMALL, 200)
    assert (best, round(margin, 4), said) == (grpo.name, 0.0693, "held")
    final[ei.name] = [0.33, 0.33]
    assert claim.judge(final, claim.SMALL, 200)[2] == "failed"
    # the tiny runs start from the tiny SFT run of their own seed
    assert f"model={Path('r')}/ppo-grpo-expert-iteration/tiny-sft-warm-start-s1/checkpoints/step-170" in \
        runner.command(claim.CLAIM, claim.TINY[0], 1, Path("r"))
    assert runner.run_folder(claim.CLAIM, claim.TINY_SFT, 1, Path("r")).name == "tiny-sft-warm-start-s1"


def test_verifier_error_rates_and_reward_changes_by_hand(tmp_path):
    import verifier_errors as claim10

    (tmp_path / "verifier-errors").mkdir()

    def write(argv, rows):
        Path(argv[-1]).write_text("".join(json.dumps(row) + "\n" for row in rows))

    naive, checked = (claim10.audit_command(tmp_path, name, reward) for name, reward in claim10.RULES.items())
    write(naive, [{"error": "false_negative"}] * 171)
    write(checked, [{"error": "false_negative"}] * 2)
    # the judge: every wrong answer graded 0.25 (one it failed to grade: 0), right ones 0.6 or 0.25
    everything, nothing = (claim10.audit_command(tmp_path, claim10.JUDGE_NAME, claim10.JUDGE_REWARD, t)
                           for t in claim10.JUDGE_THRESHOLDS)
    assert everything[-3:] == ["0", "--output", str(tmp_path / "verifier-errors" /
                                                      "audit-135m-judge-shown-the-reference-model-t0.jsonl")]
    write(everything, [{"error": "false_positive", "reward": 0.25, "failed": False}] * 137)
    write(nothing, [{"error": "false_negative", "reward": 0.6, "failed": False}] * 133
          + [{"error": "false_negative", "reward": 0.25, "failed": False}] * 133)
    assert claim10.label_counts() == (266, 138)  # the labels: 266 right answers, 138 near misses
    right, wrong = claim10.judge_grades(tmp_path, 266, 138)
    rates = claim10.error_rates(tmp_path, 266, 138, (right, wrong))
    assert rates == {"numeric_answer (rule)": (171 / 266, 0.0), "math_answer (rule, math-verify)": (2 / 266, 0.0),
                     claim10.JUDGE_NAME: (0.5, 0.0)}
    assert sorted(set(wrong)) == [0.0, 0.25] and len(wrong) == 138
    # half the right answers above every wrong one; the other half tie 137 of them and beat the failed one
    assert claim10.auc(right, wrong) == pytest.approx(0.5 + 0.5 * (137 * 0.5 + 1) / 138)
    rewards = [0.1, 0.2, 0.3, 0, 0, 1, 1, 1, 1, 1]  # the first 3 average 0.2, the last 5 average 1
    steps = [{"step": s, "time/step_s": 1.0, "reward/mean": r} for s, r in enumerate(rewards)]
    assert claim10.change("reward/mean")(steps + [{"step": 10, "eval/accuracy": 0.5}]) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="reward/mean logged at 7 steps, fewer than 8"):
        claim10.change("reward/mean")(steps[:7])


def test_graph_transfer_reads_the_most_common_answers_by_hand(tmp_path):
    import graph_transfer as claim12b

    path = tmp_path / "eval.jsonl"
    rows = [("yes", "Yes, there is a path."), ("yes", "no"), ("no", "The answer is no. 3"), ("yes", "NO")]
    path.write_text("".join(json.dumps({"answer": a, "completion": c}) + "\n" for a, c in rows))
    assert claim12b.majority(["aha", "eval", "--output", str(path)]) == 0.75  # "yes": 3 of the 4 references
    # the model's last yes, no or number: yes, no, 3, no
    assert claim12b.modal_share(path, claim12b.ANSWER) == 0.5
