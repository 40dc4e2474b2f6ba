"""The Weights & Biases and trackio sinks (tracking.wandb, tracking.trackio): the same numbers
as the TensorBoard and MLflow sinks (tracking/sinks.py), for people who watch runs there.

W&B runs offline by default: the run goes to <run>/wandb only, and `wandb sync` uploads it when
wanted, so a run never waits on the network unless tracking.wandb_mode is "online". trackio
writes to its own local store (TRACKIO_DIR, by default ~/.cache/huggingface/trackio), where
`trackio show` finds every run of a project: trackio reads its directory once, when it is
imported, so it cannot be pointed at each run's folder. (trackio's own TRACKIO_SPACE_ID or
TRACKIO_SERVER_URL, where set, sends the run to that Space or server instead.)

Both sinks log through their run object, not the package's global run. W&B's run is made with
reinit="create_new", which leaves alone a W&B run the user has open in the same process;
trackio.init makes its run the current one (ending one the user had open), and close() unsets it.
A resume continues the same W&B run (its id is kept in <run>/wandb_run_id) and the same trackio
run (found again by name, checked against the id kept in <run>/trackio_run_id). The config is
logged at each start, so a resumed run shows the config it resumed with (MLflow keeps its first
params, which it cannot change). Neither tool deletes points: a step logged again after a
resume keeps its earlier value in trackio next to the new one, and W&B, whose history only goes
forward, may drop the new values of steps it already has.
"""

from __future__ import annotations

import logging
from pathlib import Path

from aha.config import TrackingConfig

log = logging.getLogger(__name__)
WANDB_ID_FILE = "wandb_run_id"
TRACKIO_ID_FILE = "trackio_run_id"


def stored_id(path: Path, resume_step: int) -> str | None:
    """The run id a resume continues; None at a fresh start or when none was kept."""
    if resume_step <= 0 or not path.exists():
        return None
    return path.read_text().strip() or None


class WandbSink:
    """One W&B run per aha run, its files in <run>/wandb. Console capture is off (log.txt has
    the output), so sys.stdout is left as it is. W&B's service process, one per Python process
    and shared by its runs, ends with the process."""

    def __init__(self, tracking: TrackingConfig, run_path: Path, resume_step: int, run_name: str, params: dict):
        import wandb  # open_sinks has checked that it is installed

        run_id = stored_id(run_path / WANDB_ID_FILE, resume_step)
        run_path.mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(console="off", reinit="create_new")
        self.run = wandb.init(project=tracking.wandb_project, name=run_name, dir=str(run_path),
                              mode=tracking.wandb_mode, id=run_id, resume="allow" if run_id else None,
                              config=params, settings=settings)
        (run_path / WANDB_ID_FILE).write_text(self.run.id + "\n")

    def log(self, step: int, scalars: dict[str, float]) -> None:
        # records of one step (a training step, then its held-out evaluation) join in one W&B row
        self.run.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()


class TrackioSink:
    """One trackio run per aha run, named as the run folder, in tracking.trackio_project.
    trackio finds a run to resume by its name alone: when the newest run of that name is
    another one (a run folder of the same name elsewhere), a resume starts a new trackio run
    rather than writing into that one."""

    def __init__(self, tracking: TrackingConfig, run_path: Path, resume_step: int, run_name: str, params: dict):
        import trackio

        project = tracking.trackio_project
        run_id = stored_id(run_path / TRACKIO_ID_FILE, resume_step)
        if run_id is not None and newest_id(project, run_name) != run_id:
            log.warning("trackio run %s of %s is not the newest named %s: a new trackio run starts",
                        run_id, project, run_name)
            run_id = None
        self.run = trackio.init(project=project, name=run_name, config=params,
                                resume="allow" if run_id else "never", embed=False)
        run_path.mkdir(parents=True, exist_ok=True)
        (run_path / TRACKIO_ID_FILE).write_text(self.run.id + "\n")

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=step)

    def close(self) -> None:
        from trackio import context_vars

        self.run.finish()
        if context_vars.current_run.get() is self.run:  # trackio.init made it the process's current run
            context_vars.current_run.set(None)


def newest_id(project: str, name: str) -> str | None:
    """The id of the newest run called name in the local store: the one trackio.init resumes."""
    from trackio.sqlite_storage import SQLiteStorage

    record = SQLiteStorage.get_latest_run_record_by_name(project, name)
    return None if record is None else record["id"]
