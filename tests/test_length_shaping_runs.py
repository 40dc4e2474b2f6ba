"""LASER-D and per-prompt A-DLP in the real loop on the tiny model: each step's rewards are
shaped with the state the previous steps taught, checked against every completion's length
recorded by the reward itself; the state resumes exactly; bad combinations are refused."""

import json
from pathlib import Path

import pytest
from test_training import assert_resumes_exactly, metrics, tiny_config

from aha.config import ConfigError
from aha.training.loop import train

QUIET = lambda *_: None
G, P = 4, 3  # the tiny config's group_size and prompts_per_step
# the random tiny model stops on its own rarely (~1% a token): 48 tokens give lengths that vary
MAX, LONG = 48, "rollout.max_new_tokens=48"


def recording_reward(tmp_path: Path, right: str) -> str:
    """A reward override whose value is the expression `right` (of completion, sample and
    completion_tokens); it writes each row's prompt id, generated tokens and value, in order."""
    log = tmp_path / "rows.jsonl"
    (tmp_path / "rec.py").write_text(
        "import json\n"
        "def value(completion, sample, completion_tokens=None):\n"
        f"    right = bool({right})\n"
        f"    with open({str(log)!r}, 'a') as f:\n"
        "        f.write(json.dumps({'id': str(sample['id']), 'tokens': completion_tokens, 'right': right}) + '\\n')\n"
        "    return float(right)\n")
    return f"reward=[{{fn: '{tmp_path / 'rec.py'}:value'}}]"


def steps_of(tmp_path: Path) -> list[list[dict]]:
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    return [rows[i:i + G * P] for i in range(0, len(rows), G * P)]


def bucket(right: int) -> str:
    return "easy" if 3 * right >= 2 * G else "medium" if 3 * right >= G else "hard"


FEWEST = {"easy": 3, "medium": 2, "hard": 1}  # G = 4: ceil(2G/3), ceil(G/3), and the paper's 1


def ecr(lengths: list[int], fewest: int) -> int:
    """The shortest length n whose coverage (share of lengths <= n) times fewest reaches one answer."""
    return min((n for n in lengths if sum(x <= n for x in lengths) * fewest >= len(lengths)), default=MAX)


def test_laser_d_targets_follow_the_last_steps_buckets_in_the_loop(tmp_path):
    # right on even lengths for prompts of even answer (mostly easy: a cut completion has 48 tokens),
    # on odd ones for the others (mostly hard): all three buckets
    parity = "(completion_tokens + int(sample['answer'])) % 2 == 0"
    config = tiny_config(tmp_path, "laser", recording_reward(tmp_path, parity),
                         "algorithm.length_shaping=laser_d", "algorithm.laser_bonus=0.5", LONG,
                         "eval.before=false", "eval.after=false")
    records = [r for r in metrics(Path(train(config, echo=QUIET).run_dir)) if "reward/mean" in r]
    targets = {"easy": MAX, "medium": MAX, "hard": MAX}  # no limit before any group is seen
    assert len(records) == 4
    for record, rows in zip(records, steps_of(tmp_path), strict=True):
        groups = [rows[g * G:(g + 1) * G] for g in range(P)]
        buckets = [bucket(sum(r["right"] for r in group)) for group in groups]
        for name in targets:
            assert record[f"laser/target_{name}"] == targets[name]
            assert record[f"laser/groups_{name}"] == buckets.count(name)
        shaped = [r["right"] + 0.5 * (r["right"] and r["tokens"] <= targets[b])
                  for group, b in zip(groups, buckets) for r in group]
        assert record["reward/mean"] == pytest.approx(sum(shaped) / len(shaped), abs=1e-6)
        for name in targets:  # the next step's targets, from this step's groups of each bucket
            lengths = [r["tokens"] for group, b in zip(groups, buckets) if b == name for r in group]
            if lengths:
                targets[name] = ecr(lengths, FEWEST[name])
    assert any(r[f"laser/target_{name}"] < MAX for r in records for name in targets)  # the rule set a limit
    assert {name for r in records for name in targets if r[f"laser/groups_{name}"]} == set(targets)


def test_adaptive_length_penalty_per_prompt_in_the_loop(tmp_path):
    # a prompt is always right (even answer) or always wrong: its own coefficient climbs or falls
    config = tiny_config(tmp_path, "per_prompt", recording_reward(tmp_path, "int(sample['answer']) % 2 == 0"),
                         "algorithm.length_adaptive=true", "algorithm.length_adaptive_per=prompt",
                         "algorithm.length_coef=0.3", "algorithm.length_coef_rate=0.1",
                         "algorithm.length_target_acc=0.5", "eval.before=false", "eval.after=false")
    records = [r for r in metrics(Path(train(config, echo=QUIET).run_dir)) if "reward/mean" in r]
    coefs: dict[str, float] = {}
    for record, rows in zip(records, steps_of(tmp_path), strict=True):
        groups = [rows[g * G:(g + 1) * G] for g in range(P)]
        used = [coefs.get(group[0]["id"], 0.3) for group in groups]
        assert record["length/penalty_coef"] == pytest.approx(sum(used) / P, abs=1e-9)
        # reward = right - coef * tokens / 6 (max_new_tokens) on the correct ones
        shaped = [r["right"] - c * r["tokens"] / 6 * r["right"] for group, c in zip(groups, used) for r in group]
        assert record["reward/mean"] == pytest.approx(sum(shaped) / len(shaped), abs=1e-6)
        for group in groups:
            accuracy = sum(r["right"] for r in group) / G
            coefs[group[0]["id"]] = min(max(coefs.get(group[0]["id"], 0.3) + 0.1 * (accuracy - 0.5), 0.0), 1.0)
        assert record["length/prompts_tracked"] == len(coefs)
    assert len({round(c, 6) for c in coefs.values()}) > 1  # the prompts' coefficients went apart


def test_length_shaping_state_resumes_exactly(tmp_path):
    (tmp_path / "parity.py").write_text(
        "def parity(completion, sample, completion_tokens=None):\n"
        "    return float((completion_tokens + int(sample['answer'])) % 2 == 0)\n")
    assert_resumes_exactly(tmp_path, tiny_config, f"reward=[{{fn: '{tmp_path / 'parity.py'}:parity'}}]",
                           "algorithm.length_shaping=laser_d", "algorithm.length_adaptive=true",
                           "algorithm.length_adaptive_per=prompt", "algorithm.length_coef=0.2",
                           "algorithm.length_coef_rate=0.3", "rollout.max_new_tokens=24", "eval.before=false",
                           "eval.after=false")
    saved = json.loads((tmp_path / "resumed/checkpoints/step-2/state.json").read_text())["length_shaping"]
    assert saved["coefs"] and len(saved["targets"]) == 3


@pytest.mark.parametrize("overrides, message", [
    (["algorithm.length_shaping=laser_d", "rollout.group_size=1", "algorithm.advantage_scale=none"],
     "laser_d reads a prompt's difficulty from its group's pass rate: rollout.group_size must be >= 2"),
    (["algorithm.length_shaping=laser_d", "algorithm.advantage=remax"],
     "laser_d does not work with advantage=remax"),
    (["algorithm.length_shaping=laser_d", "rollout.force_continue=1"],
     "laser_d is not supported with rollout.force_continue"),
    (["algorithm.length_shaping=laser_d", "method=sft", "sft.data=x.jsonl"], "laser_d shapes the rewards of RL groups"),
    (["algorithm.length_adaptive_per=prompt"], "length_adaptive_per=prompt .* set algorithm.length_adaptive=true"),
    (["algorithm.length_shaping=laser"], "length_shaping"),
    (["algorithm.laser_expected_correct=0"], "laser_expected_correct"),
])
def test_bad_length_shaping_settings_are_refused_at_load(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config(tmp_path, "bad", *overrides)
