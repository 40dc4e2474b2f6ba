"""The TensorBoard and MLflow sinks, read back with each tool's own reader."""

import sys

import pytest

from aha.config import TrackingConfig
from aha.tracking.sinks import flatten, mlflow_name, numeric_scalars, open_sinks

PARAMS = {"model": "tiny", "train": {"lr": 1e-5, "steps": 4}, "rewards": [{"name": "math"}], "note": "x" * 7000}


def write(tmp_path, tracking, resume_step, steps, scale, params=PARAMS):
    sinks = open_sinks(tracking, tmp_path, resume_step=resume_step, run_name="demo", params=params)
    for step in steps:
        sinks.log({"step": step, "reward/mean": step * scale, "train/flag": step % 2 == 0,
                   "eval/n": 8, "note": "text", "loss/total": None, "kl/ref": float("nan")})
    sinks.close()


def tensorboard_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    tags = events.Tags()["scalars"]
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in tags}


def test_tensorboard_reads_back_numbers_only(tmp_path):
    write(tmp_path, TrackingConfig(tensorboard=True), 0, [1, 2, 3], 0.25)
    scalars = tensorboard_scalars(tmp_path)
    assert sorted(scalars) == ["eval/n", "reward/mean", "train/flag"]  # text, None, NaN skipped
    assert scalars["reward/mean"] == [(1, 0.25), (2, 0.5), (3, 0.75)]
    assert scalars["train/flag"] == [(1, 0.0), (2, 1.0), (3, 0.0)]
    assert scalars["eval/n"] == [(1, 8.0), (2, 8.0), (3, 8.0)]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlflow_run_id").exists()


def test_tensorboard_seen_before_close(tmp_path):
    sinks = open_sinks(TrackingConfig(tensorboard=True), tmp_path, 0, "demo", {})
    sinks.log({"step": 1, "reward/mean": 0.5})
    assert tensorboard_scalars(tmp_path)["reward/mean"] == [(1, 0.5)]
    sinks.close()


def test_tensorboard_resume_shows_each_step_once(tmp_path):
    tracking = TrackingConfig(tensorboard=True)
    write(tmp_path, tracking, 0, [1, 2, 3, 4], 1.0)
    write(tmp_path, tracking, 2, [3, 4, 5], 10.0)  # resumed from step 2: 3 and 4 logged anew
    assert tensorboard_scalars(tmp_path)["reward/mean"] == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0), (5, 50.0)]


def test_mlflow_params_metrics_and_resume(tmp_path):
    """One test, one store: creating MLflow's sqlite tables takes seconds."""
    from mlflow.tracking import MlflowClient
    from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

    tracking = TrackingConfig(mlflow=True, mlflow_experiment="sinks-test")
    write(tmp_path, tracking, 0, [1, 2, 3, 4], 1.0)
    run_id = (tmp_path / "mlflow_run_id").read_text().strip()
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path.resolve()}/mlflow.db")
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "demo"
    assert client.get_experiment(run.info.experiment_id).name == "sinks-test"
    assert run.data.params["train.lr"] == "1e-05" and run.data.params["model"] == "tiny"
    assert run.data.params["rewards"] == "[{'name': 'math'}]"
    assert run.data.params["note"] == "x" * MAX_PARAM_VAL_LENGTH  # cut to MLflow's limit
    assert sorted(run.data.metrics) == ["eval/n", "reward/mean", "train/flag"]
    history = lambda key: [(m.step, m.value) for m in client.get_metric_history(run_id, key)]
    assert history("reward/mean") == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]
    assert history("train/flag") == [(1, 0.0), (2, 1.0), (3, 0.0), (4, 1.0)]

    write(tmp_path, tracking, 2, [3, 4, 5], 10.0, params={"model": "changed"})
    assert (tmp_path / "mlflow_run_id").read_text().strip() == run_id  # the same MLflow run
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params["model"] == "tiny"  # params logged once
    assert len(client.search_runs([run.info.experiment_id])) == 1
    # MLflow cannot delete points: a re-logged step keeps its old value next to the new one
    assert sorted(history("reward/mean")) == [(1, 1.0), (2, 2.0), (3, 3.0), (3, 30.0), (4, 4.0), (4, 40.0), (5, 50.0)]
    assert run.data.metrics["reward/mean"] == 50.0


def test_both_off_does_nothing(tmp_path):
    run_path = tmp_path / "run"
    sinks = open_sinks(TrackingConfig(), run_path, 0, "demo", PARAMS)
    sinks.log({"step": 1, "reward/mean": 0.5})
    sinks.close()
    assert sinks.sinks == [] and not run_path.exists()


@pytest.mark.parametrize("key, module", [("tensorboard", "torch.utils.tensorboard"), ("mlflow", "mlflow")])
def test_missing_package_names_key_and_install(tmp_path, monkeypatch, key, module):
    for name in [n for n in sys.modules if n == module or n.startswith(module + ".")] + [module]:
        monkeypatch.setitem(sys.modules, name, None)  # importing a None entry raises ImportError
    with pytest.raises(ImportError, match=rf"tracking\.{key} is on.*pip install 'aha\[tracking\]'"):
        open_sinks(TrackingConfig(**{key: True}), tmp_path, 0, "demo", {})


def test_numeric_scalars_flatten_and_names():
    record = {"step": 3, "a": 1, "b": True, "c": 0.5, "d": "x", "e": None, "f": float("inf"), "g": [1]}
    assert numeric_scalars(record) == {"a": 1.0, "b": 1.0, "c": 0.5}
    assert flatten({"a": {"b": {"c": 1}}, "d": None, "e": {}}) == {"a.b.c": "1", "d": "None", "e": "{}"}
    assert mlflow_name("reward/len<=10 (x)") == "reward/len__10 _x_"


def test_a_training_run_with_tensorboard_on_writes_every_metric_it_logs(tmp_path):
    """Wired into the loop: each record of metrics.jsonl (steps and held-out evaluations) is in
    TensorBoard with the same value, and a resume shows each step once."""
    import json

    from aha.config import load_config
    from aha.training.loop import train

    def run(steps):
        config = load_config(None, ["model=tiny", f"output_dir={tmp_path}", f"train.steps={steps}",
                                    "train.checkpoint_every=1",
                                    "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4",
                                    "algorithm.advantage_scale=none", "algorithm.dynamic_sampling=false",
                                    "eval.limit=4", "train.report=false", "tracking.tensorboard=true",
                                    "task.name=arithmetic", "task.a_max=20", "task.num_eval=12"])
        train(config, echo=lambda *_: None)

    run(2)
    run(3)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    scalars = tensorboard_scalars(tmp_path)
    logged = [(r["step"], pytest.approx(r["reward/mean"])) for r in records if "reward/mean" in r]
    assert scalars["reward/mean"] == logged
    assert [s for s, _ in scalars["reward/mean"]] == [1, 2, 3]
    assert [s for s, _ in scalars["eval/accuracy"]] == [0, 2, 3]
