"""Train and test forecasting models.

    python run.py --model dlinear --nonautoregressive ...               # one process (CPU or one GPU)
    torchrun --nproc_per_node=N run.py --ddp --model timer_xl ...       # N processes, one node
    torchrun --nnodes=M --node_rank=i --rdzv_backend=c10d --rdzv_endpoint=HOST:PORT \\
             --nproc_per_node=N run.py --ddp ...                        # M nodes

Run `python run.py --help` for every flag.
"""
import gc
import logging
import os
import signal
import sys
import traceback

import torch

import models
from data_provider.factory import DataBundle, build_data
from data_provider.windows import eval_windows
from exp import dialects, pretrained
from exp.experiment import Experiment
from exp.config import parse_args, resolve
from exp.flags import model_hparams
from exp.identity import check_pretrained, model_section, plan_runs
from exp.parallel import model_blocks
from models.contract import output_problem
from utils import checkpoint, dist, interrupt, losses, runlock, threads
from utils.errors import ConfigError, TrainingError
from utils.log import setup_logging
from utils.peers import Peers
from utils.process import prepare_training_process
from utils.seeding import rank_seed, seed_everything

log = logging.getLogger("run")
FIT_BATCH = 1024  # training windows a model's fit_training_windows reads at a time


def build_model(args, data: DataBundle) -> torch.nn.Module:
    task = {**args.as_dict(), "enc_in": data.n_channels, "n_marks": data.n_marks,
            "n_outputs": losses.objective(args.loss, args.quantiles).outputs}
    try:
        model = models.build(args.model, task, model_hparams(args))
    except ValueError as e:
        raise ConfigError(f"model {args.model}: {e}") from None
    fit = getattr(model, "fit_training_windows", None)
    if fit is not None:  # a statistic of the training windows the model is built with (Koopa's frequencies)
        train = data.datasets["train"]
        fit(train.gather(idx).x for idx in torch.arange(len(train)).split(FIT_BATCH))
    if args.pretrain_model_path:  # --adaptation fine-tunes these weights; a zero-shot test tests them
        state = checkpoint.load(args.pretrain_model_path)
        check_pretrained(args.pretrain_model_path, state, model_section(args))
        # a checkpoint of this framework keeps the weights under "model"; a plain state_dict is the weights
        checkpoint.load_trainable_state(model, state["model"] if isinstance(state.get("model"), dict) else state,
                                        args.pretrain_model_path)
        log.info("loaded pretrained weights from %s", args.pretrain_model_path)
    if args.pretrained:
        pretrained.load_published(model, args)
    return pretrained.adapt(model, args)


def _check_writable(path: str, flag: str) -> None:
    """A file created and removed there: permissions alone pass folders where no file can be made (/proc, /sys,
    a read-only mount), which would fail only when the first epoch is saved."""
    probe = os.path.join(path, f".tsf-probe-{os.getpid()}")
    try:
        os.makedirs(path, exist_ok=True)
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot write there ({e.strerror or e})") from None


def preflight(args, env: dist.DistEnv, data: DataBundle) -> None:
    """File-system and group-size checks before the first collective: the group's on every rank alike, the
    output folders' on the main rank, the only one that writes (Startup checks that every rank sees them)."""
    if env.is_main:
        _check_writable(args.results_dir, "--results_dir")
        _check_writable(args.checkpoints, "--checkpoints")
    if args.resume not in (None, "auto") and not os.path.isfile(args.resume):
        raise ConfigError(f"--resume {args.resume}: no such checkpoint (use --resume auto to start fresh if absent)")
    if args.pretrain_model_path and not os.path.isfile(args.pretrain_model_path):
        raise ConfigError(f"--pretrain_model_path {args.pretrain_model_path}: no such file")
    per_step = args.batch_size * args.accum_steps * env.world_size
    if args.is_training and len(data.datasets["train"]) < per_step:
        raise ConfigError(f"the train split has {len(data.datasets['train'])} windows, fewer than one step of "
                          f"batch_size x accum_steps x world size = {per_step}; use a smaller batch or more data")
    n_test = min(len(data.datasets["test"]), args.test_windows or len(data.datasets["test"]))
    if not eval_windows(n_test, args.batch_size, env.world_size, args.test_drop_last):
        raise ConfigError(f"--test_drop_last keeps no test window: {n_test} windows, fewer than one global batch "
                          f"of batch_size x world size = {args.batch_size * env.world_size}")
    channels = len(data.columns)
    if args.visualize and not args.univariate and not -channels <= args.plot_channel < channels:
        raise ConfigError(f"--plot_channel {args.plot_channel} is out of range: the data has {channels} channels "
                          f"(0..{channels - 1}, or -{channels}..-1 from the end)")


def check_model(model: torch.nn.Module, args, data: DataBundle) -> None:
    """One training window through the model before any step (models/contract.py), so a model that returns the
    wrong shape fails with one line instead of training on a slice; one that --activation_checkpointing cannot
    apply to, too."""
    problem = output_problem(model, args, data.first_window(), data.n_channels,
                             losses.objective(args.loss, args.quantiles).outputs)
    if problem:
        raise ConfigError(problem)
    if args.activation_checkpointing and not model_blocks(model, args, data.first_window()):
        raise ConfigError(f"--activation_checkpointing recomputes a model's blocks (the layers of an nn.ModuleList "
                          f"it calls): model {args.model} has none")


def main(argv=None, callbacks=(), peers=None) -> list:
    """Returns {"history", "metrics", "epoch_seconds"} of every repetition, on every rank: epoch_seconds is the
    training and evaluation time of the epochs this call ran (not those a resumed or tested run inherited).
    callbacks: see exp.trainer.Trainer. peers: this rank's messages to the others (utils/peers.py; cli's, which
    reports its failures to them)."""
    peers = peers or Peers.of_this_process()
    prepare_training_process()  # for every caller: the command line, a sweep's workers, the tests
    load = threads.LoadProbe()  # what other processes do on this machine while this one starts
    draft = parse_args(argv)  # resolution leaves the runtime flags read before it as they are
    env = dist.detect(draft.ddp, draft.device)
    setup_logging(env.rank, env.is_main)
    locks = runlock.run_locks(env.is_main, draft.checkpoints, draft.results_dir)
    try:
        # Everything that can fail on bad input happens before the first collective, on every rank; a rank that
        # fails makes the others stop at the end of this block instead of waiting for it.
        with peers.startup(env, draft.dist_timeout, {"--checkpoints": draft.checkpoints,
                                                     "--results_dir": draft.results_dir}) as startup:
            args = resolve(draft)  # frozen; it reads --test_dir's checkpoint
            adopted = args.origin.adopted
            data = build_data(args, env.device, env.is_main, models.capabilities(args.model).time_marks,
                              peers.wait_for_main)
            dialects.check_channels(args.origin.declared_channels, data.n_channels, args.covariate, data.file)
            preflight(args, env, data)
            plans = plan_runs(args, data, env.world_size, adopted, locks.acquire)
            seed_everything(plans[0].identity.seed)
            model = build_model(args, data)
            check_model(model, args, data)
            log.info("intra-op threads: %d (%s)", *threads.configure(args.threads, load))
            startup.decided = {"data file": f"{data.file} {data.fingerprint}",
                               "runs": " ".join(plan.digest() for plan in plans)}

        dist.init(env, peers, args.dist_timeout)
        results = []
        for i, plan in enumerate(plans):
            if i:
                seed_everything(plan.identity.seed)  # parameters: initialised alike on every rank
                model = build_model(args, data)
            seed_everything(rank_seed(plan.identity.seed, env.rank))  # training randomness: each rank its own
            results.append(Experiment(args, env, data, model, plan, callbacks).run())
            del model
            if env.ddp:
                # DDP's reducer must go while the process group is still registered: freed after it, the group's
                # destructor would join gloo threads under the GIL they wait for (a hang at exit)
                gc.collect()
        return results
    finally:
        locks.release()
        dist.destroy()


def cli(argv=None, callbacks=(), passthrough=()) -> list:
    """main() for the command line: user errors, interruptions and failures of the group end in one line and a
    non-zero exit code, not a traceback; returns main's results otherwise. Exceptions of the types in
    passthrough (a callback's way to end the run, every rank alike) reach the caller.

    Errors leave through os._exit: after a failed collective, tearing down a process group can block.
    (Run as a script, a successful run leaves through it too, see the end of this file.)
    """
    peers = Peers.of_this_process()
    rank = os.environ.get("RANK", "0")
    prefix = "" if rank == "0" else f"[rank {rank}] "
    interrupt.install(lambda signum: _exit(128 + signum, _interrupted(peers, prefix, rank, signum)))
    try:
        try:
            return main(argv, callbacks, peers)
        except passthrough:
            raise
        except ConfigError as e:
            _fail(peers, 2, prefix, rank, str(e))
        except TrainingError as e:
            _fail(peers, 1, prefix, rank, str(e))
        except Exception as e:  # noqa: BLE001 - a bug keeps its traceback, a failed collective gets one line
            interrupt.ending()  # torchrun's stop of the group, arriving now, must not hide what happened
            failure = dist.describe_failure(e)
            peer = failure and peers.failure()
            if peer:
                _exit(1, f"{prefix}error: a peer rank stopped: {peer}")
            _fail(peers, 1, prefix, rank, failure or f"{type(e).__name__}: {e}",
                  None if failure else traceback.format_exc())
    except interrupt.Interrupted as e:  # also one that arrives while another error is being reported
        _exit(128 + e.signum, _interrupted(peers, prefix, rank, e.signum))


def _interrupted(peers, prefix: str, rank: str, signum: int) -> str:
    """torchrun stops the other ranks with SIGTERM when one fails: then that rank's error is the news. Otherwise
    this rank was interrupted, and says so to peers whose collectives it leaves hanging."""
    peer = peers.failure(interruptions=False)
    if peer:
        return f"{prefix}error: a peer rank stopped: {peer}"
    peers.publish(f"rank {rank} was interrupted ({signal.Signals(signum).name})", interruption=True)
    return f"{prefix}{interrupt.message()}"


def _fail(peers, code: int, prefix: str, rank: str, error: str, trace: str | None = None) -> None:
    """Print this rank's error (a bug: its traceback) and leave it for the other ranks to report.

    Printed first: while this rank waits for its peers to read its error, torchrun may stop it (a peer that
    failed alike has read it and exited), and that stop ends the wait, not the report."""
    interrupt.ending()
    sys.stderr.write((trace.rstrip() if trace else f"{prefix}error: {error}") + "\n")
    sys.stderr.flush()
    peers.publish(f"rank {rank}: {error.splitlines()[0]}")
    _exit(code)


def _exit(code: int, message: str | None = None) -> None:
    if message:
        sys.stderr.write(message + "\n")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    cli()
    # Every output is written and closed by now. Skipping the interpreter's teardown of torch's module graph
    # saves time on every run, which adds up over hundreds of short jobs (docs/performance.md).
    _exit(0)
