"""The W&B and trackio sinks, read back with each tool's own reader: W&B's offline run files with
`wandb leet inspect --json` (W&B's reader of its .wandb transaction log), trackio's local store
with its SQLiteStorage. W&B runs offline here, and trackio's store is in tmp_path."""

import json
import subprocess
import sys

import pytest

from aha.config import TrackingConfig
from aha.tracking.sinks import numeric_scalars, open_sinks

PARAMS = {"model": "tiny", "train": {"lr": 1e-5, "steps": 4}, "rewards": [{"name": "math"}], "note": None}
RECORD = {"train/flag": True, "eval/n": 8, "note": "text", "loss/total": None, "kl/ref": float("nan")}


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb_cache"))  # wandb-core's own logs, not in ~/.cache


@pytest.fixture
def trackio_store(tmp_path, monkeypatch):
    """trackio reads TRACKIO_DIR once, when it is imported: the test imports it afresh with its
    store in tmp_path, and forgets that import afterwards (nothing is written to ~/.cache)."""
    pytest.importorskip("trackio")
    store = tmp_path / "trackio_store"
    monkeypatch.setenv("TRACKIO_DIR", str(store))
    trackio_modules = lambda: [n for n in sys.modules if n == "trackio" or n.startswith("trackio.")]
    for name in trackio_modules():
        monkeypatch.delitem(sys.modules, name)  # put back when the test ends
    yield store
    for name in trackio_modules():
        del sys.modules[name]


def write(tmp_path, tracking, resume_step, steps, scale, params=PARAMS):
    sinks = open_sinks(tracking, tmp_path, resume_step=resume_step, run_name="demo", params=params)
    for step in steps:
        sinks.log({"step": step, "reward/mean": step * scale, **RECORD})
    sinks.close()


def wandb_lives(run_path) -> list[dict]:
    """Each offline W&B run file under run_path/wandb (one per life of the run), oldest first:
    its run record and its history rows {step: {key: value}} without W&B's own "_" keys."""
    lives = []
    for path in (run_path / "wandb").glob("offline-run-*/run-*.wandb"):
        out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(path)],
                             capture_output=True, text=True, timeout=60, check=True).stdout
        records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        history = {}
        for record in records:
            if record["type"] == "history":
                row = record["history"]["item"]
                history[row["_step"]] = {k: v for k, v in row.items() if not k.startswith("_")}
        run = next(r["run"] for r in records if r["type"] == "run")
        lives.append({"run": run, "history": history, "exit": [r["exit"] for r in records if r["type"] == "exit"]})
    return sorted(lives, key=lambda life: life["run"]["start_time"])


def wandb_config(life: dict) -> dict:
    return {k: v for k, v in life["run"]["config"]["update"].items() if k != "_wandb"}


def trackio_rows(project, run_id) -> dict[int, dict]:
    """{step: {key: value}} of a trackio run, the records of one step joined in logged order."""
    from trackio.sqlite_storage import SQLiteStorage

    rows = {}
    for row in SQLiteStorage.get_logs(project, run_id=run_id):
        rows.setdefault(row["step"], {}).update({k: v for k, v in row.items() if k not in ("step", "timestamp")})
    return rows


def test_wandb_offline_run_numbers_config_and_resume(tmp_path):
    import wandb

    stdout = sys.stdout
    tracking = TrackingConfig(wandb=True, wandb_project="sinks-test")
    assert tracking.wandb_mode == "offline"
    write(tmp_path, tracking, 0, [1, 2, 3, 4], 1.0)
    run_id = (tmp_path / "wandb_run_id").read_text().strip()
    assert wandb.run is None and sys.stdout is stdout  # no global run left, console not captured
    [first] = wandb_lives(tmp_path)
    assert first["run"]["run_id"] == run_id and first["run"]["project"] == "sinks-test"
    assert first["run"]["display_name"] == "demo" and not first["run"].get("resume")
    # exit codes only: W&B adds "runtime" to the exit record once a run lasts a second
    assert wandb_config(first) == PARAMS and [e["exit_code"] for e in first["exit"]] == [0]
    assert first["history"] == {s: {"reward/mean": s, "train/flag": 1, "eval/n": 8} for s in [1, 2, 3, 4]}

    write(tmp_path, tracking, 2, [3, 4, 5], 10.0, params={"model": "changed"})  # resumed from step 2
    assert (tmp_path / "wandb_run_id").read_text().strip() == run_id
    first, second = wandb_lives(tmp_path)
    assert second["run"]["run_id"] == run_id and second["run"]["resume"] is True  # the same W&B run
    assert wandb_config(second) == {"model": "changed"}  # the config the run resumed with
    assert {s: row["reward/mean"] for s, row in second["history"].items()} == {3: 30, 4: 40, 5: 50}

    write(tmp_path, tracking, 0, [1], 1.0)  # a fresh start in the same folder: a new W&B run
    assert (tmp_path / "wandb_run_id").read_text().strip() != run_id


def test_trackio_numbers_config_and_resume(tmp_path, trackio_store):
    import trackio
    from trackio.sqlite_storage import SQLiteStorage

    tracking = TrackingConfig(trackio=True, trackio_project="sinks-test")
    write(tmp_path, tracking, 0, [1, 2, 3, 4], 1.0)
    run_id = (tmp_path / "trackio_run_id").read_text().strip()
    assert (trackio_store / "sinks-test.db").exists()
    assert trackio.context_vars.current_run.get() is None  # no global run left
    assert trackio_rows("sinks-test", run_id) == {s: {"reward/mean": s, "train/flag": 1, "eval/n": 8}
                                                 for s in [1, 2, 3, 4]}
    config = SQLiteStorage.get_run_config("sinks-test", run_id=run_id)
    assert {k: v for k, v in config.items() if not k.startswith("_")} == PARAMS

    write(tmp_path, tracking, 2, [3, 4, 5], 10.0, params={"model": "changed"})
    assert (tmp_path / "trackio_run_id").read_text().strip() == run_id  # the same trackio run
    assert [run.id for run in trackio.Api().runs("sinks-test")] == [run_id]
    config = SQLiteStorage.get_run_config("sinks-test", run_id=run_id)
    assert {k: v for k, v in config.items() if not k.startswith("_")} == {"model": "changed"}  # the resumed config
    # trackio cannot delete points: a re-logged step keeps its old row next to the new one
    steps = [(row["step"], row["reward/mean"]) for row in SQLiteStorage.get_logs("sinks-test", run_id=run_id)]
    assert steps == [(1, 1), (2, 2), (3, 3), (4, 4), (3, 30), (4, 40), (5, 50)]


def test_trackio_resume_never_writes_into_another_folders_run(tmp_path, trackio_store):
    """Two run folders of one name: the newest trackio run "demo" is the other folder's, so a
    resume of the first starts a new trackio run instead of continuing that one."""
    tracking = TrackingConfig(trackio=True, trackio_project="sinks-test")
    write(tmp_path / "a", tracking, 0, [1, 2], 1.0)
    write(tmp_path / "b", tracking, 0, [1, 2], 2.0)
    other = (tmp_path / "b" / "trackio_run_id").read_text().strip()
    write(tmp_path / "a", tracking, 1, [2, 3], 3.0)
    resumed = (tmp_path / "a" / "trackio_run_id").read_text().strip()
    assert resumed != other
    assert trackio_rows("sinks-test", other) == {1: {"reward/mean": 2, "train/flag": 1, "eval/n": 8},
                                                 2: {"reward/mean": 4, "train/flag": 1, "eval/n": 8}}


@pytest.mark.parametrize("key", ["wandb", "trackio"])
def test_missing_package_names_key_and_install(tmp_path, monkeypatch, key):
    for name in [n for n in sys.modules if n == key or n.startswith(key + ".")] + [key]:
        monkeypatch.setitem(sys.modules, name, None)  # importing a None entry raises ImportError
    with pytest.raises(ImportError, match=rf"tracking\.{key} is on.*pip install 'aha\[tracking\]'"):
        open_sinks(TrackingConfig(**{key: True}), tmp_path, 0, "demo", {})


def test_a_sink_that_cannot_open_closes_those_already_open(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "trackio", None)
    with pytest.raises(ImportError, match=r"tracking\.trackio is on"):
        open_sinks(TrackingConfig(wandb=True, trackio=True), tmp_path, 0, "demo", {})
    [life] = wandb_lives(tmp_path)
    assert [e["exit_code"] for e in life["exit"]] == [0]  # the W&B run opened first was finished


def test_wandb_mode_is_offline_or_online():
    assert TrackingConfig().wandb_mode == "offline" and TrackingConfig(wandb_mode="online").wandb_mode == "online"
    with pytest.raises(ValueError, match="wandb_mode"):
        TrackingConfig(wandb_mode="disabled")


def test_a_training_run_sends_every_metric_to_wandb_and_trackio(tmp_path, trackio_store):
    """Wired into the loop, one stream for both: each number of metrics.jsonl (the same set
    numeric_scalars gives every sink) is in W&B and in trackio at its step with the same value,
    the resolved config is logged, and a resume continues both runs."""
    from aha.config import load_config
    from aha.training.loop import train

    def run(steps):
        config = load_config(None, ["model=tiny", f"output_dir={tmp_path}", f"train.steps={steps}",
                                    "train.checkpoint_every=1",
                                    "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4",
                                    "algorithm.advantage_scale=none", "algorithm.dynamic_sampling=false",
                                    "eval.limit=4", "train.report=false", "tracking.wandb=true",
                                    "tracking.trackio=true", "tracking.trackio_project=tiny",
                                    "task.name=arithmetic", "task.a_max=20", "task.num_eval=12"])
        train(config, echo=lambda *_: None)
        return config

    first_config = run(2).model_dump(mode="json")
    assert first_config["train"]["steps"] == 2
    wandb_id = (tmp_path / "wandb_run_id").read_text().strip()
    trackio_id = (tmp_path / "trackio_run_id").read_text().strip()
    config = run(3).model_dump(mode="json")
    expected = {}
    for line in (tmp_path / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        expected.setdefault(record["step"], {}).update(numeric_scalars(record))
    assert sorted(expected) == [0, 1, 2, 3] and len(expected[3]) > 20

    first, second = wandb_lives(tmp_path)
    assert first["run"]["run_id"] == second["run"]["run_id"] == wandb_id
    assert {**first["history"], **second["history"]} == expected
    assert sorted(second["history"]) == [3]  # the resumed life logged only what came after step 2
    assert wandb_config(first) == first_config and wandb_config(second) == config  # train.steps: 2, then 3

    assert (tmp_path / "trackio_run_id").read_text().strip() == trackio_id
    assert trackio_rows("tiny", trackio_id) == expected
    from trackio.sqlite_storage import SQLiteStorage

    logged = SQLiteStorage.get_run_config("tiny", run_id=trackio_id)
    assert {k: v for k, v in logged.items() if not k.startswith("_")} == config
