"""Experiment trackers beside TensorBoard (--tracker mlflow|wandb). On the main rank RunOutputs feeds them what it
writes itself: the identity (flattened config, config_id, seed) and provenance when a run starts, each history.csv
row, each test's metrics.json numbers. Their packages are optional: validation checks that they are installed, and
only runs that track import them.

results/<run>/trackers.json records each tracker's run (its id and how many history rows it holds): a resumed run
goes on in the same tracker run from the first row it lacks, and a re-test (--is_training 0, --resume auto) adds
its metrics there. A tracker that fails (a server gone away) is dropped with one warning: the run goes on without it.
"""
import json
import logging
import os
import time
import typing
import uuid
from importlib.util import find_spec

from utils.errors import ConfigError
from utils.files import write_atomic
from utils.provenance import provenance

log = logging.getLogger(__name__)
INSTALL = "pip install -r requirements-trackers.txt"
RECORD = "trackers.json"
DEFAULT_PROJECT = "tsforecast"


def check(args) -> list:
    """--tracker's values (repeated, comma-separated, or both) as a list of known names, each once; a missing package
    is one line naming the install command, at start-up rather than after the first epoch."""
    names = [n.strip() for value in args.tracker or () for n in value.split(",") if n.strip()]
    for name in names:
        if name not in TRACKERS:
            raise ConfigError(f"unknown --tracker {name!r}; available: {', '.join(TRACKERS)}")
        if find_spec(TRACKERS[name].package) is None:
            raise ConfigError(f"--tracker {name} needs the {TRACKERS[name].package} package: {INSTALL}")
    if names and not args.tracker_project:
        raise ConfigError("--tracker_project must not be empty")
    return list(dict.fromkeys(names))


def flat(config: dict) -> dict:
    """{"model": {"d_model": 16}} -> {"model.d_model": 16}: a tracker's parameters are flat."""
    return {f"{section}.{name}": value for section, flags in config.items() for name, value in flags.items()}


def numbers(values: dict) -> dict:
    """The entries that are numbers (a bool is a flag's value, not a metric)."""
    return {k: v for k, v in values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def row_step(row: dict) -> int:
    return row.get("step", row["epoch"])  # as TensorBoard: a run by steps has rows steps apart, not epochs


class Tracker(typing.Protocol):
    """What a tracker implements; its __init__(project, identity) imports its package."""
    package: str  # what validation checks is installed

    def open(self, recorded: dict | None) -> bool:
        """Continue the recorded run where the tracker still holds it (True), else start one with the identity."""

    def record(self) -> dict:
        """What finds this run again (kept in trackers.json)."""

    def log(self, values: dict, step: int) -> None:
        """One history row."""

    def summary(self, values: dict) -> None:
        """A test's metrics."""

    def finish(self) -> None:
        """The run is complete (until a re-test or a resumed run opens it again)."""


class MLflowTracker(Tracker):
    """One MLflow run per run: in the experiment --tracker_project of the store MLFLOW_TRACKING_URI names (MLflow's
    default otherwise), named after the run's setting; parameters: the identity; tags: provenance."""
    package = "mlflow"

    def __init__(self, project: str, identity):
        import mlflow  # optional: loaded only by runs that track to MLflow
        self.project, self.identity = project, identity
        self.uri = mlflow.get_tracking_uri()
        self.client = mlflow.MlflowClient(self.uri)
        self.run_id = None

    def open(self, recorded: dict | None) -> bool:
        """The recorded run when this store still holds it (True), else a new one (False)."""
        from mlflow.entities import Param, RunTag
        from mlflow.exceptions import MlflowException
        tags = [RunTag(k, str(v)) for k, v in provenance().items()]  # this process's: where the run goes on
        if recorded and recorded.get("uri") == self.uri:
            try:
                run = self.client.get_run(recorded["run_id"])
            except MlflowException:  # deleted from the store since
                run = None
            if run is not None and run.info.lifecycle_stage == "active":
                self.run_id = run.info.run_id
                self.client.update_run(self.run_id, status="RUNNING")
                self.client.log_batch(self.run_id, tags=tags)
                return True
        identity = self.identity
        self.run_id = self.client.create_run(self._experiment_id(), run_name=identity.setting).info.run_id
        params = [Param(k, str(v)) for k, v in {**flat(identity.config), "config_id": identity.config_id,
                                                 "seed": identity.seed}.items()]
        self.client.log_batch(self.run_id, tags=tags)
        for i in range(0, len(params), 100):  # MLflow takes at most 100 parameters per call
            self.client.log_batch(self.run_id, params=params[i:i + 100])
        return False

    def _experiment_id(self) -> str:
        from mlflow.exceptions import MlflowException
        experiment = self.client.get_experiment_by_name(self.project)
        if experiment is not None:
            return experiment.experiment_id
        try:
            return self.client.create_experiment(self.project)
        except MlflowException:  # created meanwhile by a run beside this one (a sweep)
            return self.client.get_experiment_by_name(self.project).experiment_id

    def record(self) -> dict:
        return {"uri": self.uri, "run_id": self.run_id}

    def log(self, values: dict, step: int) -> None:
        from mlflow.entities import Metric
        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, step) for k, v in values.items()])

    def summary(self, values: dict) -> None:
        self.log(values, 0)

    def finish(self) -> None:
        self.client.set_terminated(self.run_id)


class WandbTracker(Tracker):
    """One W&B run per run: in project --tracker_project, named after the run's setting and grouped by config_id
    (the seeds of one configuration); config: the identity and provenance. WANDB_MODE, WANDB_DIR, ... apply."""
    package = "wandb"

    def __init__(self, project: str, identity):
        import wandb  # optional: loaded only by runs that track to W&B
        self.wandb, self.project, self.identity = wandb, project, identity
        self.run = None

    def open(self, recorded: dict | None) -> bool:
        """The recorded run (True; offline, its records go to a new folder with the same id), else a new one (False).
        The id is random, not the setting's: an --overwrite run is a new W&B run, not the old one continued."""
        resumed = bool(recorded) and recorded.get("project") == self.project
        identity = self.identity
        config = None if resumed else {**identity.config, "config_id": identity.config_id, "seed": identity.seed,
                                       "setting": identity.setting, "provenance": provenance()}
        # create_new: never handed another active run (the caller's own, or one an exception left unfinished)
        self.run = self.wandb.init(project=self.project, name=identity.setting, group=identity.config_id,
                                   id=recorded["id"] if resumed else uuid.uuid4().hex[:16], resume="allow",
                                   config=config, reinit="create_new")
        return resumed

    def record(self) -> dict:
        return {"project": self.project, "id": self.run.id}

    def log(self, values: dict, step: int) -> None:
        self.run.log(values, step=step, commit=True)  # sent now, not when the next step begins

    def summary(self, values: dict) -> None:
        self.run.summary.update(values)

    def finish(self) -> None:
        self.run.finish()


TRACKERS = {"mlflow": MLflowTracker, "wandb": WandbTracker}


class Trackers:
    """The trackers of one run (main rank only), and the record in results/<run>/trackers.json of what each holds:
    {name: {its run's id and store, "rows": history rows logged}}. Opened when training starts, or by a test that
    follows none (a re-test); finished after the test."""

    def __init__(self, names, project: str, identity, folder: str):
        self.names, self.project, self.identity = list(names or ()), project, identity
        self.path = os.path.join(folder, RECORD)
        self.open: dict[str, Tracker] = {}  # while it works
        self.record = None  # read when the run starts: an --overwrite run has removed the earlier one by then

    def start(self, history: list) -> None:
        """Open each tracker's run and log the restored rows it lacks. A recorded run holding more rows than were
        restored (--resume from an earlier checkpoint) would show epochs twice: a new tracker run gets them all."""
        self.record = self._recorded()
        for name in self.names:
            recorded = self.record.get(name)
            if self._open(name, recorded if recorded and recorded["rows"] <= len(history) else None):
                for row in history[self.record[name]["rows"]:]:
                    if not self._log_row(name, row):
                        break
        self._write()

    def epoch(self, row: dict) -> None:
        for name in list(self.open):
            self._log_row(name, row)
        self._write()

    def test(self, test: str, metrics: dict) -> None:
        """Every number of the test's metrics.json, as test/<test>/<key>; then the tracker runs are finished."""
        if self.record is None:  # a re-test: the recorded runs, or new ones without history rows
            self.record = self._recorded()
            for name in self.names:
                self._open(name, self.record.get(name))
            self._write()
        values = {f"test/{test}/{k}": v for k, v in numbers(metrics).items()}
        for name, tracker in list(self.open.items()):
            self._guarded(name, lambda: (tracker.summary(values), tracker.finish()))
        self.open = {}

    def _open(self, name: str, recorded: dict | None) -> bool:
        def open_run():
            tracker = TRACKERS[name](self.project, self.identity)
            if not tracker.open(recorded):
                self.record[name] = {**tracker.record(), "rows": 0}
            self.open[name] = tracker
        return self._guarded(name, open_run)

    def _log_row(self, name: str, row: dict) -> bool:
        """Every history.csv column but the step, which is the x-axis."""
        def log_row():
            self.open[name].log({k: v for k, v in numbers(row).items() if k != "step"}, row_step(row))
            self.record[name]["rows"] += 1
        return self._guarded(name, log_row)

    def _guarded(self, name: str, action) -> bool:
        """Whether action() succeeded; a failure is one warning, and the tracker is not used again."""
        try:
            action()
        except Exception as e:  # anything a tracker's package raises: never worth a long training run
            lines = str(e).strip().splitlines()
            log.warning("--tracker %s failed, the run goes on without it: %s%s", name, type(e).__name__,
                        f": {lines[0]}" if lines else "")
            self.open.pop(name, None)
            return False
        return True

    def _recorded(self) -> dict:
        if not self.names or not os.path.isfile(self.path):
            return {}
        with open(self.path) as f:
            return json.load(f)

    def _write(self) -> None:
        if self.names:
            text = json.dumps(self.record, indent=2) + "\n"
            write_atomic(self.path, lambda f: f.write(text.encode()))
