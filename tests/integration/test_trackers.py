"""--tracker mlflow|wandb for real: MLflow into a local file store, W&B offline; what they hold is read back with
MLflow's client and from the offline run's own records (W&B's protobuf), and compared with history and metrics.json."""
import glob
import json
import logging
import shutil
import struct

import pytest

import run
from tests.conftest import metrics_of
from utils import trackers


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch):
    """A client of a local MLflow store that runs log to (the file store MLflow 3 keeps behind a switch: no
    database to create, which costs seconds)."""
    mlflow = pytest.importorskip("mlflow")
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return mlflow.MlflowClient(uri)


@pytest.fixture
def wandb_dir(tmp_path, monkeypatch):
    """W&B offline, writing under this test's folder."""
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield tmp_path / "wandb"
    wandb.teardown()  # W&B reads its settings once per process: the next test's are read anew


def _only_run(client):
    (run_,) = client.search_runs([client.get_experiment_by_name(trackers.DEFAULT_PROJECT).experiment_id])
    return run_


def _curve(client, run_id, key) -> list:
    return [(m.step, m.value) for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


def _tested(metrics: dict) -> dict:
    """What a tracker gets of metrics.json: its numbers, under test/<test>/."""
    return {f"test/{metrics['test']}/{k}": v for k, v in trackers.numbers(metrics).items()}


class _Stop(Exception):
    pass


class _StopInEpoch:
    def __init__(self, epoch):
        self.epoch = epoch

    def on_epoch_end(self, epoch, row):  # before the row is saved or logged
        if epoch == self.epoch:
            raise _Stop


def _wandb_records(path) -> list:
    """The records of an offline run's .wandb file: a LevelDB-style log (a 7-byte file header, then 32 KiB blocks
    of chunks with a 7-byte header: checksum, length, type), each record one of W&B's own protobuf messages."""
    from wandb.proto.wandb_internal_pb2 import Record
    data, block, pos = open(path, "rb").read(), 32768, 7
    assert data[:4] == b":W&B"
    records, chunks = [], []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunks.append(data[pos + 7:pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or a record's last chunk
            records.append(Record.FromString(b"".join(chunks)))
            chunks = []
    return records


def _items(updates) -> dict:
    """W&B's key-value items, a name given as a key or as a path of one or more keys."""
    return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in updates}


def _wandb_run(folder) -> dict:
    """An offline run folder's run (id, name, group, config), history rows by step and summary."""
    (path,) = glob.glob(str(folder / "run-*.wandb"))
    found = {"history": {}, "summary": {}}
    for record in _wandb_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            found.update(id=record.run.run_id, name=record.run.display_name, group=record.run.run_group,
                         config=_items(record.run.config.update))
        elif kind == "history":
            found["history"][record.history.step.num] = _items(record.history.item)
        elif kind == "summary":
            found["summary"].update(_items(record.summary.update))
    return found


def _as_a_new_process(tmp_path, name: str, monkeypatch, exit_code=0):
    """W&B as the next process finds it: the runs of this one ended as its exit ends them, and (as a folder of an
    offline run is named by the second it started) another WANDB_DIR."""
    import wandb
    wandb.teardown(exit_code)
    (tmp_path / name).mkdir()
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / name))
    return tmp_path / name / "wandb"


def test_mlflow_and_wandb_runs_hold_the_identity_rows_and_test_metrics_and_a_retest_adds_to_them(
        tiny_args, tmp_path, mlflow_store, wandb_dir, monkeypatch):
    history = run.main([*tiny_args, "--tracker", "mlflow,wandb"])[0]["history"]
    (metrics,) = metrics_of(tmp_path / "results")
    curves = ("train_loss", "vali_loss", "test_loss", "lr")
    logged = _only_run(mlflow_store)
    assert logged.info.run_name == metrics["setting"] and logged.info.status == "FINISHED"
    params, tags = logged.data.params, logged.data.tags
    assert params["config_id"] == metrics["config_id"] and params["seed"] == str(metrics["seed"])
    assert params["model.d_model"] == "16" and params["data.fingerprint"] == metrics["config"]["data"]["fingerprint"]
    assert tags["git_commit"] == str(metrics["provenance"]["git_commit"]) and tags["host"]
    for key in curves:
        assert _curve(mlflow_store, logged.info.run_id, key) == [(row["epoch"], row[key]) for row in history]
    assert {k: v for k, v in logged.data.metrics.items() if k.startswith("test/")} == _tested(metrics)
    (folder,) = wandb_dir.glob("offline-run-*")
    wandb_run = _wandb_run(folder)
    assert wandb_run["name"] == metrics["setting"] and wandb_run["group"] == metrics["config_id"]
    assert wandb_run["config"]["config_id"] == metrics["config_id"] and wandb_run["config"]["model"]["d_model"] == 16
    assert wandb_run["config"]["provenance"]["git_commit"] == metrics["provenance"]["git_commit"]
    assert {step: {k: row[k] for k in curves} for step, row in wandb_run["history"].items()} == \
           {row["epoch"]: {k: row[k] for k in curves} for row in history}
    assert {k: v for k, v in wandb_run["summary"].items() if k.startswith("test/")} == _tested(metrics)

    retest_dir = _as_a_new_process(tmp_path, "retest", monkeypatch)
    run.main([*tiny_args, "--tracker", "mlflow,wandb", "--is_training", "0", "--test_pred_len", "32"])
    (retested,) = metrics_of(tmp_path / "results", "tp32")
    logged = _only_run(mlflow_store)  # the same run, its curves as they were
    assert logged.info.status == "FINISHED"
    assert len(_curve(mlflow_store, logged.info.run_id, "vali_loss")) == len(history)
    assert {k: v for k, v in logged.data.metrics.items() if k.startswith("test/")} == {**_tested(metrics),
                                                                                       **_tested(retested)}
    (folder,) = retest_dir.glob("offline-run-*")
    wandb_retest = _wandb_run(folder)
    assert wandb_retest["id"] == wandb_run["id"] and not wandb_retest["history"]
    assert {k: v for k, v in wandb_retest["summary"].items() if k.startswith("test/")} == _tested(retested)


def test_a_resumed_run_logs_each_epoch_once_in_the_tracker_runs_it_started(tiny_args, tmp_path, mlflow_store,
                                                                           wandb_dir, monkeypatch):
    """Interrupted in epoch 2 (epoch 1 logged), then continued with --resume auto: the same MLflow run and W&B id,
    epoch 2 logged once."""
    args = [*tiny_args, "--tracker", "mlflow", "--tracker", "wandb", "--resume", "auto"]
    with pytest.raises(_Stop):
        run.main(args, callbacks=[_StopInEpoch(2)])
    resumed_dir = _as_a_new_process(tmp_path, "resumed", monkeypatch, exit_code=1)
    history = run.main(args)[0]["history"]
    logged = _only_run(mlflow_store)
    assert logged.info.status == "FINISHED"
    assert _curve(mlflow_store, logged.info.run_id, "vali_loss") == [(r["epoch"], r["vali_loss"]) for r in history]
    (first,), (second,) = wandb_dir.glob("offline-run-*"), resumed_dir.glob("offline-run-*")
    first, second = _wandb_run(first), _wandb_run(second)
    assert first["id"] == second["id"] and sorted(first["history"]) == [1] and sorted(second["history"]) == [2]
    assert second["history"][2]["vali_loss"] == history[1]["vali_loss"]
    (metrics,) = metrics_of(tmp_path / "results")
    assert {k: v for k, v in second["summary"].items() if k.startswith("test/")} == _tested(metrics)


def test_a_tracker_that_fails_mid_run_is_one_warning_and_training_goes_on(tiny_args, tmp_path, mlflow_store,
                                                                         caplog):
    """The store goes away during epoch 2 (a server that went down): one warning, then the run without MLflow."""
    class RemoveStore:
        def on_epoch_end(self, epoch, row):
            if epoch == 2:
                shutil.rmtree(tmp_path / "mlruns")

    logging.getLogger(trackers.__name__).addHandler(caplog.handler)  # run.main sets the root logger's handlers
    try:
        run.main([*tiny_args, "--tracker", "mlflow"], callbacks=[RemoveStore()])
    finally:
        logging.getLogger(trackers.__name__).removeHandler(caplog.handler)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and warnings[0].startswith("--tracker mlflow failed, the run goes on without it")
    assert "\n" not in warnings[0]
    (metrics,) = metrics_of(tmp_path / "results")
    assert metrics["epochs_run"] == 2
