"""Tune a model's hyper-parameters with Optuna on the validation loss, then retrain the best with several seeds.

    python -m scripts.tune --trials 30 --workers 2 <run.py flags of the base configuration>
    python -m scripts.tune --trials 30 --space learning_rate=1e-4:1e-2:log --space d_model=64,128,256 ...

The search space is, by default, the learning rate (1e-5 to 1e-2, log scale) and every hyper-parameter the
model declares a range for (`hparam(..., search=Search(...))` in its Config: d_model, e_layers and dropout for
the models that have them); `--space NAME=LOW:HIGH[:log]` or `--space NAME=A,B,C` (repeatable) gives the whole
space instead; choices that are themselves lists are separated by `|` (`--space n_freq_downsample=168,24,1|24,12,1`).
With the seed in the space (`--space seed=1:10`, as N-HiTS's search draws it), the best trial's seed is part of its
configuration: the final run is that configuration, once. A trial is one run of the base configuration with the
trial's values (single process, in one of --workers long-lived processes; with --nproc N a torchrun job of N
ranks that such a process starts, whose main rank reports to the study and decides pruning for every rank); its
objective is its best validation loss,
reported to the pruner after every epoch, so a trial the median pruner finds worse than the finished ones at the
same epoch (from the second on, once --prune_after trials have finished) stops early. The test split never
drives the search: a trial's test is run (every run tests its best checkpoint) but not read.

The study lives in Optuna storage: by default a journal file in tune/<study>/ beside the results folder (the
trials' runs, logs and summary go there too, away from the final runs) that every
worker shares (`--storage sqlite:///PATH` or a database URL for workers on several nodes, started with the
same command). Running the command again continues the same study up to --trials. The TPE sampler is seeded
(--seed; worker w uses seed + w): with one worker a study is reproducible from its seed; with several, which
worker asks first depends on timing. At the end: trials.csv (every trial's values, state, best validation loss
and its curve), summary.md (the best configuration, the parameters' importances), history.png (the
optimisation history), then the best configuration is trained with --final_seeds through scripts.sweep
(into the base configuration's results folder) and the report printed.
"""
import argparse
import contextlib
import hashlib
import io
import json
import multiprocessing
import os
import sys

from scripts import sweep
from utils import cli
from utils.errors import ConfigError

DEFAULT_SPACE = {"learning_rate": (1e-5, 1e-2, True, None)}  # the framework's own: every model has an lr
FINAL_SEEDS = (2021, 2022, 2023)


def _flag_type(name: str):
    from exp.flags import build_parser  # noqa: PLC0415
    action = build_parser()._option_string_actions.get(f"--{name}")  # noqa: SLF001 - argparse has no public lookup
    if action is None:
        raise ConfigError(f"--space {name}: run.py has no flag --{name}")
    return action.type or str


def parse_space(specs: list) -> dict:
    """name -> (low, high, log, choices) from NAME=LOW:HIGH[:log], NAME=A,B,C or NAME=A1,A2|B1,B2 (choices that are
    lists); values typed as the flag."""
    space = {}
    for spec in specs:
        name, _, body = spec.partition("=")
        kind = _flag_type(name)

        def typed(text: str):
            try:
                return kind(text)
            except (ValueError, argparse.ArgumentTypeError):
                raise ConfigError(f"--space {spec}: {text!r} is not a value of --{name}") from None

        if not body:
            raise ConfigError(f"--space {spec}: give NAME=LOW:HIGH[:log], NAME=A,B,C or NAME=A1,A2|B1,B2")
        if "|" in body:
            space[name] = (None, None, False, tuple(typed(v) for v in body.split("|")))
        elif ":" in body:
            low, high, *log = body.split(":")
            if log not in ([], ["log"]) or kind not in (int, float):
                raise ConfigError(f"--space {spec}: a range is LOW:HIGH or LOW:HIGH:log, of a numeric flag")
            low, high = typed(low), typed(high)
            if not low < high or (log and low <= 0):
                raise ConfigError(f"--space {spec}: a range needs LOW < HIGH"
                                  + (", and LOW > 0 on a log scale" if log else ""))
            space[name] = (low, high, bool(log), None)
        else:
            space[name] = (None, None, False, tuple(typed(v) for v in body.split(",")))
    return space


def model_space(model: str) -> dict:
    """The default space: the learning rate and the ranges the model declares for its hyper-parameters."""
    import models  # noqa: PLC0415
    space = dict(DEFAULT_SPACE)
    for f in models.hyperparameter_fields(models.model_class(model)):
        search = f.metadata.get("search")
        if search is not None:
            space[f.name] = (search.low, search.high, search.log, search.choices)
    return space


def suggest(trial, name: str, spec: tuple):
    low, high, log, choices = spec
    if choices is not None:
        return trial.suggest_categorical(name, list(choices))
    if isinstance(low, int) and isinstance(high, int):
        return trial.suggest_int(name, low, high, log=log)
    return trial.suggest_float(name, float(low), float(high), log=log)


def _flags(params: dict) -> list:
    out = []
    for name, value in params.items():
        if isinstance(value, bool):
            out.append(f"--{name}" if value else f"--no-{name}")
        else:
            out += [f"--{name}", str(value)]
    return out


class PruneOnValidation:
    """Exp callback: each epoch's validation loss to the trial; stops the run when the pruner says so. Under DDP
    only the main rank holds the trial (trial None elsewhere): it reports and decides, and every rank takes its
    decision (a collective in the epoch hook, which every rank reaches with the same row), so no rank asks the
    study at another moment and comes to another answer."""

    def __init__(self, trial):
        self.trial, self.curve = trial, []

    def on_epoch_end(self, epoch: int, row: dict) -> None:
        import optuna  # noqa: PLC0415
        from utils.dist import all_gather_object  # noqa: PLC0415
        self.curve.append(row["vali_loss"])
        prune = False
        if self.trial is not None:
            self.trial.report(row["vali_loss"], epoch)
            prune = self.trial.should_prune()
        if all_gather_object(prune)[0]:
            raise optuna.TrialPruned(f"pruned after epoch {epoch}: validation loss {row['vali_loss']:.6f}")


def objective(trial, base: list, space: dict, tune_dir: str, options) -> float:
    """One trial: the base run with the trial's values; its best validation loss."""
    params = {name: suggest(trial, name, spec) for name, spec in space.items()}
    # each trial its own run (--des): two trials that draw the same values must not share a run folder
    argv = [*base, *_flags(params), "--des", f"trial{trial.number}", "--results_dir", os.path.join(tune_dir, "trials"),
            "--checkpoints", os.path.join(tune_dir, "checkpoints"), "--resume", "auto"]
    trial.set_user_attr("command", " ".join(argv))
    trial.set_user_attr("worker", os.getpid())
    log_path = os.path.join(tune_dir, "logs", f"trial_{trial.number:04d}.log")
    if options.nproc > 1:
        return _ddp_trial(trial, argv, tune_dir, log_path, options)
    import run  # noqa: PLC0415
    hook = PruneOnValidation(trial)
    with sweep.logged_to(log_path):
        try:
            history = run.main(argv, callbacks=[hook])[0]["history"]
        finally:
            trial.set_user_attr("vali_curve", hook.curve)
    return min(h["vali_loss"] for h in history)


def _ddp_trial(trial, argv: list, tune_dir: str, log_path: str, options) -> float:
    """A trial as a torchrun job of --nproc ranks (scripts/tune_rank.py): its main rank reports to the study;
    the job's outcome file says how the trial ended."""
    import optuna  # noqa: PLC0415
    base = os.path.join(tune_dir, "logs", f"trial_{trial.number:04d}")
    # Optuna has no public accessor for a running trial's storage id, which another process needs to join it
    spec = {"study": trial.study.study_name, "storage": options.storage, "tune_dir": tune_dir,
            "trial_id": trial._trial_id, "pruner": options.pruner, "prune_after": options.prune_after,  # noqa: SLF001
            "outcome": base + ".json"}
    os.makedirs(os.path.dirname(base), exist_ok=True)
    with open(base + ".spec.json", "w") as f:
        json.dump(spec, f)
    with open(log_path, "a") as log:
        code = sweep.torchrun(options.nproc, ["-m", "scripts.tune_rank", base + ".spec.json", "--ddp", *argv], log)
    outcome = {}
    if os.path.isfile(spec["outcome"]):
        with open(spec["outcome"]) as f:
            outcome = json.load(f)
    trial.set_user_attr("vali_curve", outcome.get("curve", []))
    if code or not outcome:
        raise RuntimeError(f"trial {trial.number}: {sweep.last_error(log_path)}")
    if outcome["state"] == "pruned":
        raise optuna.TrialPruned(outcome["reason"])
    return outcome["best"]


def storage_of(url: str | None, tune_dir: str):
    """Optuna storage: a database URL as given, else the study's journal file (shared by the workers)."""
    import optuna  # noqa: PLC0415
    if url:
        return url
    os.makedirs(tune_dir, exist_ok=True)
    backend = optuna.storages.journal.JournalFileBackend(os.path.join(tune_dir, "journal.log"))
    return optuna.storages.JournalStorage(backend)


def _worker(study_name: str, tune_dir: str, base: list, space: dict, n_trials: int, seed: int, threads: int,
            options, parent: int) -> None:
    import optuna  # noqa: PLC0415
    sweep.end_with_parent(parent)
    sweep.prepare_worker(threads)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name=study_name, storage=storage_of(options.storage, tune_dir),
                              sampler=optuna.samplers.TPESampler(seed=seed),
                              pruner=make_pruner(options.pruner, options.prune_after))
    study.optimize(lambda t: objective(t, base, space, tune_dir, options), n_trials=n_trials, catch=(Exception,))


def make_pruner(name: str, after: int):
    """The median pruner: from its second epoch on, a trial stops when its validation loss is worse than the
    median of the finished trials' at the same epoch, once `after` trials have finished."""
    import optuna  # noqa: PLC0415
    if name == "none":
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=after, n_warmup_steps=2)


def summarise(study, tune_dir: str) -> str:
    """trials.csv, history.png and summary.md; returns the summary's text."""
    import optuna  # noqa: PLC0415
    from utils.files import write_atomic, write_csv  # noqa: PLC0415
    names = sorted({p for t in study.trials for p in t.params})
    fields = ["trial", "state", "best_vali_loss", *names, "epochs", "vali_curve"]
    rows = []
    for t in study.trials:
        curve = t.user_attrs.get("vali_curve", [])
        rows.append(dict(zip(fields, [t.number, t.state.name, "" if t.value is None else f"{t.value:.6f}",
                                      *[t.params.get(n, "") for n in names], len(curve),
                                      json.dumps([round(v, 6) for v in curve])])))
    write_csv(os.path.join(tune_dir, "trials.csv"), fields, rows)
    states = {s.name: sum(t.state == s for t in study.trials) for s in optuna.trial.TrialState}
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    lines = [f"# Study {study.study_name}", "",
             "Trials: " + ", ".join(f"{n} {k.lower()}" for k, n in states.items() if n) + "."]
    if complete:
        best = study.best_trial
        lines += ["", f"Best: trial {best.number}, validation loss {best.value:.6f}, with "
                  + " ".join(_flags(best.params)), "", f"`{best.user_attrs.get('command', '')}`"]
        try:
            importances = optuna.importance.get_param_importances(study)
            lines += ["", "| parameter | importance (fANOVA) |", "|---|---|"]
            lines += [f"| {k} | {v:.3f} |" for k, v in importances.items()]
        except (RuntimeError, ValueError) as e:  # too few trials, or nothing varied
            lines += ["", f"Importances: not computed ({e})."]
        from optuna.visualization.matplotlib import plot_optimization_history  # noqa: PLC0415
        with contextlib.redirect_stderr(io.StringIO()):  # its experimental-API warning
            axes = plot_optimization_history(study)
        axes.figure.savefig(os.path.join(tune_dir, "history.png"), dpi=100, bbox_inches="tight")
        import matplotlib.pyplot as plt  # noqa: PLC0415
        plt.close(axes.figure)
    summary = "\n".join(lines) + "\n"
    write_atomic(os.path.join(tune_dir, "summary.md"), lambda f: f.write(summary.encode()))
    return summary


def parse(argv: list) -> tuple:
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                           allow_abbrev=False)  # an abbreviation would take a run.py flag for one of ours
    p.add_argument("--trials", type=cli.at_least(1), required=True,
                   help="trials of the study in all (counting earlier runs)")
    p.add_argument("--workers", type=cli.at_least(1),
                   help="processes running trials at once (default: one per CPU core)")
    p.add_argument("--threads", type=cli.at_least(1), help="CPU threads per worker (default: the cores shared out)")
    p.add_argument("--nproc", type=cli.at_least(1), default=1, help="processes per trial: more runs each trial as a "
                   "torchrun DDP job of that size (its main rank reports to the study and decides pruning for every "
                   "rank)")
    p.add_argument("--space", action="append", default=[], help="NAME=LOW:HIGH[:log], NAME=A,B,C or NAME=A1,A2|B1,B2 "
                   "(choices that are lists) (repeatable): the whole search space instead of the default one")
    p.add_argument("--storage", help="Optuna storage URL (default: a journal file in the study's folder)")
    p.add_argument("--study", help="study name (default: from the model, data and a hash of the command)")
    p.add_argument("--tune_dir", help="folder of the studies (default: tune/ beside the results folder)")
    p.add_argument("--seed", type=int, default=0, help="seed of the TPE sampler (worker w: seed + w)")
    p.add_argument("--pruner", choices=("median", "none"), default="median")
    p.add_argument("--prune_after", type=cli.at_least(0), default=3,
                   help="finished trials before the pruner compares (3)")
    p.add_argument("--final_seeds", type=cli.int_list, help="seeds the best configuration is trained with ('' to "
                   "skip; default 2021,2022,2023, or the best trial's own where the seed is searched)")
    return p.parse_known_args(argv)


def main(argv=None) -> dict:
    import optuna  # noqa: PLC0415
    import models  # noqa: PLC0415
    from exp.config import parse_args, resolve  # noqa: PLC0415
    from exp.flags import parser  # noqa: PLC0415
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    options, tokens = parse(sys.argv[1:] if argv is None else argv)
    cells = sweep.expand(tokens, sweep.list_valued_flags())
    if len(cells) != 1:
        raise ConfigError(f"tuning starts from one configuration; the flags make {len(cells)} (a list of values is "
                          "a sweep's axis: use --space for what is searched)")
    base = cells[0]
    args = parse_args(base)
    resolve(args)  # bad flags stop the study before it starts; its name keeps them as given (resolve copies them)
    space = parse_space(options.space) if options.space else model_space(args.model)
    if "seed" in space and options.final_seeds:
        raise ConfigError("--final_seeds: the seed is searched (--space seed=...), so the final run is the best "
                          "trial's configuration with its own seed ('' skips it)")
    declared = models.hyperparameters(args.model)
    foreign = [name for name in space if name in parser().model_flag_defaults and name not in declared]
    if foreign:
        raise ConfigError(f"--space {foreign[0]}: not a hyper-parameter of {args.model}, so every trial would "
                          "ignore it")
    digest = hashlib.sha256(json.dumps([base, sorted(space.items())], default=str).encode()).hexdigest()[:8]
    study_name = options.study or f"{args.model}_{args.data}_{digest}"
    # beside the results folder, not in it: the report of the final runs must not average the trials with them
    tune_dir = os.path.join(options.tune_dir or os.path.join(os.path.dirname(os.path.abspath(args.results_dir)),
                                                             "tune"), study_name)
    storage = storage_of(options.storage, tune_dir)
    study = optuna.create_study(study_name=study_name, storage=storage, direction="minimize", load_if_exists=True)
    remaining = options.trials - sum(t.state.is_finished() for t in study.trials)
    workers, threads, gpus = sweep.plan_workers(options.nproc, None)
    workers, threads = max(min(options.workers or workers, remaining), 1), options.threads or threads
    print(f"study {study_name}: {remaining} trials to run on {workers} workers; space "
          + ", ".join(f"{k} {v[3] if v[3] else f'{v[0]}..{v[1]}' + (' log' if v[2] else '')}" for k, v in space.items()))
    if remaining > 0:
        context = multiprocessing.get_context("spawn")
        share = [remaining // workers + (w < remaining % workers) for w in range(workers)]
        processes = []
        for w, n in enumerate(share):
            with sweep.spawn_environment(threads, gpus[w % len(gpus)] if gpus else None):
                processes.append(context.Process(target=_worker, args=(study_name, tune_dir, base, space, n,
                                                                       options.seed + w, threads, options,
                                                                       os.getpid())))
                processes[-1].start()
        for p in processes:
            p.join()
    study = optuna.load_study(study_name=study_name, storage=storage)
    summary = summarise(study, tune_dir)
    print(summary, end="")
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    seeds = [] if "seed" in space else ["--seed", ",".join(map(str, FINAL_SEEDS if options.final_seeds is None
                                                                  else options.final_seeds))]
    if complete and options.final_seeds != []:
        sweep.main(["--quiet", "--nproc", str(options.nproc), *base, *_flags(study.best_trial.params), *seeds])
    return {"study": study, "tune_dir": tune_dir}


if __name__ == "__main__":
    cli.run(main)
