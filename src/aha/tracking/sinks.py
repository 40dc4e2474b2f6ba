"""Optional metric sinks besides metrics.jsonl: TensorBoard and MLflow, one config key each
(and W&B and trackio, in sinks_hosted.py).

metrics.jsonl (RunDir.log_metrics) stays the record the report and resume read; a sink is a
view of it for people who already watch runs in TensorBoard or MLflow. Each sink's package is
imported only when its key is on, so a run without sinks pulls in nothing. All sinks get the
same numbers: finite ints and floats (bools as 0/1); strings, None, NaN and inf are left to
metrics.jsonl (a gap in a chart rather than a broken axis).

A resume from step N continues the same TensorBoard folder and the same MLflow run. TensorBoard
hides the earlier life's steps after N (purge_step), so a chart reads as one unbroken run.
MLflow cannot delete metric points: a re-logged step keeps its old point next to the new one.
"""

from __future__ import annotations

import importlib
import math
import re
import time
from pathlib import Path

from aha.config import TrackingConfig
from aha.tracking.sinks_hosted import TrackioSink, WandbSink

INSTALL = "pip install 'aha[tracking]'"
RUN_ID_FILE = "mlflow_run_id"


class Sinks:
    """The open sinks of one run; with none open, log and close do nothing."""

    def __init__(self, sinks: list):
        self.sinks = sinks

    def log(self, record: dict) -> None:
        """One metrics record, the dict RunDir.log_metrics writes: an int "step" and metrics."""
        step = int(record["step"])
        scalars = numeric_scalars(record)
        for sink in self.sinks:
            sink.log(step, scalars)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def open_sinks(tracking: TrackingConfig, run_path: Path, resume_step: int, run_name: str, params: dict) -> Sinks:
    """The sinks tracking switches on, for the run in run_path; resume_step is 0 at a fresh
    start, else the step the run resumes from (later steps of its earlier life are dropped).
    params (the resolved config) go to MLflow once, when its run is created, and to W&B and
    trackio at each start."""
    run_path = Path(run_path)
    openers = {"tensorboard": lambda: TensorBoardSink(run_path, resume_step),
               "mlflow": lambda: MlflowSink(tracking, run_path, resume_step, run_name, params),
               "wandb": lambda: WandbSink(tracking, run_path, resume_step, run_name, params),
               "trackio": lambda: TrackioSink(tracking, run_path, resume_step, run_name, params)}
    sinks = Sinks([])
    try:
        for key, opener in openers.items():
            if getattr(tracking, key):
                if key in ("wandb", "trackio"):  # their sinks import them: say first how to install them
                    require(key, key)
                sinks.sinks.append(opener())
    except BaseException:
        sinks.close()  # the sinks already open: no MLflow or W&B run is left running
        raise
    return sinks


def numeric_scalars(record: dict) -> dict[str, float]:
    """The record's metrics a chart can draw: finite numbers, bools as 0/1; not "step"."""
    scalars = {}
    for key, value in record.items():
        if key == "step" or not isinstance(value, (bool, int, float)):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            continue
        scalars[key] = float(value)
    return scalars


def flatten(params: dict, prefix: str = "") -> dict[str, str]:
    """Nested config -> {"train.lr": "1e-05", ...}: MLflow params are flat strings."""
    flat = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = str(value)
    return flat


def require(key: str, package: str) -> None:
    """Import package (a sink imports it again when it opens), or say how to install it."""
    try:
        importlib.import_module(package)
    except ImportError as error:
        raise missing(key, package, error) from error


def missing(key: str, package: str, error: ImportError) -> ImportError:
    return ImportError(f"tracking.{key} is on but {package} is not installed ({error}); "
                       f"install it with: {INSTALL}, or set tracking.{key}: false")


class TensorBoardSink:
    """Event files in <run>/tensorboard. On resume from N the new writer's purge_step=N+1
    makes readers drop the earlier life's events at steps > N, which this life logs again."""

    def __init__(self, run_path: Path, resume_step: int):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:
            raise missing("tensorboard", "the tensorboard package", error) from error
        purge = resume_step + 1 if resume_step > 0 else None
        self.writer = SummaryWriter(log_dir=str(run_path / "tensorboard"), purge_step=purge)

    def log(self, step: int, scalars: dict[str, float]) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()  # one record per step: a reader sees each step as soon as it is logged

    def close(self) -> None:
        self.writer.close()


class MlflowSink:
    """One MLflow run per aha run, through MlflowClient (no global active run or tracking URI).
    The default store is sqlite:///<run>/mlflow.db: MLflow 3 refuses its file store unless
    MLFLOW_ALLOW_FILE_STORE is set process-wide. The run id is kept in <run>/mlflow_run_id so
    a resume continues the same MLflow run."""

    def __init__(self, tracking: TrackingConfig, run_path: Path, resume_step: int, run_name: str, params: dict):
        uri = tracking.mlflow_uri or f"sqlite:///{(run_path / 'mlflow.db').resolve()}"
        try:
            from mlflow.entities import Metric, Param
            from mlflow.exceptions import MlflowException
            from mlflow.tracking import MlflowClient
            from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH
            if uri.startswith("sqlite:"):
                import alembic  # noqa: F401  (mlflow-skinny's sqlite store needs both)
                import sqlalchemy  # noqa: F401
        except ImportError as error:
            raise missing("mlflow", "mlflow (with sqlalchemy and alembic for its sqlite store)", error) from error
        self.Metric = Metric
        self.client = MlflowClient(tracking_uri=uri)
        self.run_id = self._resumed_run(run_path / RUN_ID_FILE, resume_step, MlflowException)
        if self.run_id is None:
            experiment = self.client.get_experiment_by_name(tracking.mlflow_experiment)
            if experiment is not None:
                experiment_id = experiment.experiment_id
            else:  # under the default store, artifacts too stay in the run folder, not the cwd
                artifacts = None if tracking.mlflow_uri else (run_path / "mlflow_artifacts").resolve().as_uri()
                experiment_id = self.client.create_experiment(tracking.mlflow_experiment, artifact_location=artifacts)
            run = self.client.create_run(experiment_id, run_name=run_name,
                                         tags={"aha.run_dir": str(run_path.resolve())})
            self.run_id = run.info.run_id
            (run_path / RUN_ID_FILE).write_text(self.run_id + "\n")
            flat = [Param(mlflow_name(k), v[:MAX_PARAM_VAL_LENGTH]) for k, v in sorted(flatten(params).items())]
            for start in range(0, len(flat), 100):  # MLflow takes at most 100 params per batch
                self.client.log_batch(self.run_id, params=flat[start:start + 100])

    def _resumed_run(self, id_path: Path, resume_step: int, MlflowException) -> str | None:
        """The MLflow run to continue: the stored one on a resume, if this store still has it."""
        if resume_step <= 0 or not id_path.exists():
            return None
        run_id = id_path.read_text().strip()
        try:
            self.client.get_run(run_id)
        except MlflowException:  # the store was moved or deleted: start a new MLflow run
            return None
        self.client.update_run(run_id, status="RUNNING")
        return run_id

    def log(self, step: int, scalars: dict[str, float]) -> None:
        now = int(time.time() * 1000)
        metrics = [self.Metric(mlflow_name(k), v, now, step) for k, v in scalars.items()]
        for start in range(0, len(metrics), 1000):  # MLflow takes at most 1000 metrics per batch
            self.client.log_batch(self.run_id, metrics=metrics[start:start + 1000])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def mlflow_name(key: str) -> str:
    """MLflow refuses metric and param names outside [A-Za-z0-9_-. :/]; a reward or a config
    map key named by the user may hold another character."""
    return re.sub(r"[^\w.\- :/]", "_", key)
