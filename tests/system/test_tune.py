"""scripts.tune: search spaces, a 2-worker Optuna study on a shared journal file with pruning, DDP trials."""
import csv
import json
import os
import subprocess
import sys

from scripts import tune
from tests.conftest import REPO, metrics_of


def _tune(tiny_args, tmp_path, options: list) -> tuple:
    """scripts.tune on a tiny DLinear of 3 epochs choosing between lr 0.01 and 1e-7 (which barely trains):
    (the finished process, the study's folder)."""
    flags = ["--model", "dlinear", "--nonautoregressive", "--train_epochs", "3", *tiny_args[:6], "--seq_len", "48",
             "--output_token_len", "16", "--device", "cpu", "--results_dir", str(tmp_path / "results"),
             "--checkpoints", str(tmp_path / "ckpt")]
    proc = subprocess.run([sys.executable, "-m", "scripts.tune", *options, "--space", "learning_rate=0.01,0.0000001",
                           "--final_seeds", "1", *flags], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (study,) = os.listdir(tmp_path / "tune")
    return proc, tmp_path / "tune" / study


def test_two_workers_share_a_journal_study_prune_bad_trials_and_retrain_the_best(tiny_args, tmp_path):
    """lr 1e-7 barely trains: once two trials have finished, such a trial is pruned at its second epoch. With
    seed 44 the sampler gives each worker good, good, bad (worker w's sampler is seeded 44 + w)."""
    proc, folder = _tune(tiny_args, tmp_path, ["--trials", "6", "--workers", "2", "--seed", "44", "--prune_after", "2"])
    study = folder.name
    assert (folder / "journal.log").stat().st_size > 0 and (folder / "history.png").stat().st_size > 0
    trials = list(csv.DictReader(open(folder / "trials.csv")))
    assert len(trials) == 6 and "Trials: 4 complete, 2 pruned." in proc.stdout
    for t in trials:
        good = float(t["learning_rate"]) == 0.01
        assert (t["state"], t["epochs"]) == (("COMPLETE", "3") if good else ("PRUNED", "2")), t
    assert "Best: trial" in proc.stdout and "--learning_rate 0.01" in (folder / "summary.md").read_text()
    import optuna
    loaded = optuna.load_study(study_name=study, storage=tune.storage_of(None, str(folder)))
    by_worker = {}
    for t in sorted(loaded.trials, key=lambda t: t.number):
        by_worker.setdefault(t.user_attrs["worker"], []).append(t.params["learning_rate"] == 0.01)
    assert sorted(by_worker.values()) == [[True, True, False]] * 2  # two workers, each its seeded draws
    # the best configuration, trained again with the final seed, is the one run in the results folder
    (final,) = metrics_of(tmp_path / "results")
    assert final["seed"] == 1 and final["effective_lr"] == 0.01


def test_a_searched_seed_makes_the_final_run_the_best_trial_again(tiny_args, tmp_path):
    """N-HiTS's protocol: the seed is one of the searched values, and the test of the best trial is the result."""
    flags = ["--model", "dlinear", "--nonautoregressive", "--train_epochs", "2", *tiny_args[:6], "--seq_len", "48",
             "--output_token_len", "16", "--device", "cpu", "--results_dir", str(tmp_path / "results"),
             "--checkpoints", str(tmp_path / "ckpt")]
    proc = subprocess.run([sys.executable, "-m", "scripts.tune", "--trials", "3", "--workers", "1", "--pruner", "none",
                           "--space", "seed=1:1000", "--space", "moving_avg=5|13", *flags], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (study,) = os.listdir(tmp_path / "tune")
    trials = list(csv.DictReader(open(tmp_path / "tune" / study / "trials.csv")))
    best = min(trials, key=lambda t: float(t["best_vali_loss"]))
    (final,) = metrics_of(tmp_path / "results")
    (again,) = [m for m in metrics_of(tmp_path / "tune" / study / "trials") if m["seed"] == int(best["seed"])]
    assert final["seed"] == int(best["seed"]) and final["mse"] == again["mse"], "the best trial, run once more"


def test_ddp_trials_report_from_the_main_rank_and_every_rank_stops_on_its_pruning(tiny_args, tmp_path):
    """--nproc 2: each trial a 2-rank torchrun job. With seed 11 one worker draws good, then bad: the bad trial
    (one trial has finished) is pruned at its second epoch on both ranks; the best is retrained as a 2-rank run."""
    proc, folder = _tune(tiny_args, tmp_path, ["--trials", "2", "--nproc", "2", "--seed", "11", "--prune_after", "1"])
    assert "2 trials to run on 1 workers" in proc.stdout
    trials = list(csv.DictReader(open(folder / "trials.csv")))
    assert [(t["learning_rate"], t["state"], t["epochs"]) for t in trials] == \
           [("0.01", "COMPLETE", "3"), ("1e-07", "PRUNED", "2")]
    pruned_log = (folder / "logs" / "trial_0001.log").read_text()
    assert "world size 2" in pruned_log and "error" not in pruned_log.lower()  # the job ended cleanly
    assert json.loads((folder / "logs" / "trial_0001.json").read_text())["state"] == "pruned"
    for t in trials:  # the curve the main rank reported is the run's own history
        assert len(json.loads(t["vali_curve"])) == int(t["epochs"])
    (final,) = metrics_of(tmp_path / "results")
    assert final["seed"] == 1 and final["world_size"] == 2 and final["effective_lr"] == 0.02
