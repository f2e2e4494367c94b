"""Forecasting experiment: one code path for single-process and DDP training, validation and test."""
import contextlib
import dataclasses
from dataclasses import dataclass
import logging
import math
import statistics
import time

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import models
from data_provider.factory import DataBundle
from data_provider.windows import Batch, eval_loader, eval_windows, sampled, train_loader
from exp.identity import RunPlan, clear_run, features_code, write_record
from models.base import Capabilities
from utils import checkpoint, fsdp, interrupt, threads
from utils.dist import (DistEnv, all_gather_floats, all_gather_object, all_reduce_max, all_reduce_min, all_reduce_sum,
                        barrier, global_mean, slow_ranks)
from utils.early_stopping import EarlyStopping
from utils.errors import ConfigError, TrainingError
from utils.log import GROUP, NoProgress, progress_bar
from utils.memory import peak_rss_mb
from utils.metrics import log_line, metrics_from_windows, names as metric_names, window_errors
from utils.outputs import make_outputs
from utils.schedules import Horizon, build_scheduler, world_factor
from utils.seeding import rank_seed, rng_state, seed_everything, set_rng_state
from utils.sync_batchnorm import sync_batchnorm
from utils.timing import RegionTimer

log = logging.getLogger(__name__)
group_log = logging.getLogger(GROUP)
NO_STEP = float("inf")  # "no non-finite loss yet" in the first-bad-step reduction


def expected_output_shape(args, n_channels: int, batch: int) -> tuple:
    """What a model's forward must return: one output token per input token for token models, in every mode;
    otherwise the forecast of output_token_len points after the window (the target alone for an exogenous
    model in covariate mode)."""
    caps = models.capabilities(args.model)
    if caps.token_input:
        return batch, args.seq_len // args.input_token_len * args.output_token_len, n_channels
    return batch, args.output_token_len, 1 if caps.exogenous and args.covariate else n_channels


def model_inputs(args, caps: Capabilities, x: torch.Tensor, batch: Batch, shift: int) -> tuple[tuple, dict]:
    """(args, kwargs) of a model's forward for inputs x that start `shift` points after the batch's windows:
    the calendar features of the window (and of the horizon, for future_marks), the windows' positions."""
    kwargs = {"position": batch.position + shift} if caps.positions else {}
    if batch.x_mark is None:
        return (x, None), kwargs
    length = args.seq_len + (args.output_token_len if caps.future_marks else 0)
    marks = batch.x_mark[:, shift:shift + length]
    if marks.shape[1] < length:
        # a rolled forecast's last step reaches past the test horizon: the points it adds there are cut,
        # and the calendar row they see is the last one repeated
        marks = torch.cat([marks, marks[:, -1:].expand(-1, length - marks.shape[1], -1)], dim=1)
    return (x, marks), kwargs


@torch.no_grad()
def one_window(model: nn.Module, args, data: DataBundle) -> torch.Tensor:
    """The model's output for the first training window, on the CPU, in eval mode (no randomness drawn, no
    statistics updated)."""
    batch = Batch(*(None if t is None else t.cpu() for t in data.datasets["train"].gather(torch.tensor([0]))))
    inputs, kwargs = model_inputs(args, models.capabilities(args.model), batch.x, batch, 0)
    model.eval()
    out = model(*inputs, **kwargs)
    model.train()
    return out


def model_blocks(model: nn.Module, args, data: DataBundle) -> list:
    """The blocks --fsdp shards and --activation_checkpointing recomputes one at a time (utils/fsdp.py)."""
    return fsdp.blocks(model, lambda: one_window(model, args, data))


def check_output_shape(model: nn.Module, args, data: DataBundle) -> None:
    """One training window through the model before any step, so a model that returns the wrong shape fails
    with one line instead of training on a slice; one that --activation_checkpointing cannot apply to, too."""
    out = one_window(model, args, data)
    expected = expected_output_shape(args, data.n_channels, 1)
    if tuple(out.shape) != expected:
        raise ConfigError(f"model {args.model} returned shape {tuple(out.shape)} for one window, expected {expected} "
                          "(batch, time, channels); see 'Adding a model' in README.md")
    if args.activation_checkpointing and not model_blocks(model, args, data):
        raise ConfigError(f"--activation_checkpointing recomputes a model's blocks (the layers of an nn.ModuleList "
                          f"it calls): model {args.model} has none")


@dataclass(frozen=True)
class Course:
    """How long training goes and when it validates and saves, in optimizer steps. By epochs (the default):
    a validation (a history row) and a resumable checkpoint at the end of every epoch; by steps
    (--train_steps): every --val_every and --save_every steps, across epoch boundaries."""
    steps_per_epoch: int
    total: int       # optimizer steps of the whole run
    every: int       # steps per history row
    save_every: int
    by_steps: bool

    @classmethod
    def of(cls, args, steps_per_epoch: int) -> "Course":
        if not args.train_steps:
            return cls(steps_per_epoch, steps_per_epoch * args.train_epochs, steps_per_epoch, steps_per_epoch, False)
        every = args.val_every or args.train_steps
        return cls(steps_per_epoch, args.train_steps, every, args.save_every or every, True)

    @property
    def epochs(self) -> int:
        return math.ceil(self.total / self.steps_per_epoch)

    @property
    def unit(self) -> str:
        return "validations" if self.by_steps else "epochs"

    def row_start(self, step: int) -> int:
        return step // self.every * self.every

    def row_end(self, step: int) -> int:
        return min((step // self.every + 1) * self.every, self.total)

    def span(self, step: int) -> str:
        """The row that step `step` (0-based) is in: its epoch, or its range of steps."""
        if self.by_steps:
            return f"steps {self.row_start(step) + 1}-{self.row_end(step)}"
        return f"epoch {step // self.steps_per_epoch + 1}"

    def progress(self, step: int) -> str:
        return f"step {step}/{self.total}" if self.by_steps else f"epoch {step // self.steps_per_epoch}/{self.epochs}"

    def row_index(self, step: int, rows_done: int) -> dict:
        """What names a history row: its epoch; by steps, the step and the epochs it amounts to."""
        if self.by_steps:
            return {"step": step, "epoch": round(step / self.steps_per_epoch, 4)}
        return {"epoch": rows_done + 1}

    def summary(self, history: list, best_row: int) -> dict:
        if self.by_steps:
            return {"best_epoch": history[best_row]["epoch"], "epochs_run": history[-1]["epoch"],
                    "best_step": history[best_row]["step"], "steps_run": history[-1]["step"]}
        return {"best_epoch": best_row + 1, "epochs_run": len(history)}


class ExpForecast:
    def __init__(self, args, env: DistEnv, data: DataBundle, model: nn.Module, plan: RunPlan, callbacks=()):
        """One run (repetition) of the plan: its seed shuffles the training windows, as it initialised the model.

        callbacks: objects with any of on_train_step(epoch, step, loss) -> loss (after each forward; epochs and
        steps count from 1; may return a replacement loss) and on_epoch_end(epoch, row) (after validation, with
        the history row, identical on every rank).
        """
        self.args, self.env, self.data, self.plan = args, env, data, plan
        self.step_hooks = [c.on_train_step for c in callbacks if hasattr(c, "on_train_step")]
        self.epoch_hooks = [c.on_epoch_end for c in callbacks if hasattr(c, "on_epoch_end")]
        self.device = env.device
        self.caps = models.capabilities(args.model)
        self.sharded = args.fsdp
        # fp16 needs loss scaling; bf16 (used on CPU, and for sharded states, whose loss scale every shard would
        # have to agree on) keeps fp32's range and does not
        amp_dtype = torch.float16 if self.device.type == "cuda" and not self.sharded else torch.bfloat16
        self.model, self.no_sync = self._distribute(model, amp_dtype)
        self.shards_optimizer = args.zero and env.ddp  # ZeroRedundancyOptimizer
        self.criterion = nn.MSELoss()
        self.world_factor = world_factor(args.lr_scale, env.world_size)
        self.effective_lr = args.learning_rate * self.world_factor
        self.autocast = torch.autocast(self.device.type, dtype=amp_dtype, enabled=args.use_amp)  # reused each call
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=args.use_amp and amp_dtype == torch.float16)
        sets, bs = data.datasets, args.batch_size
        self.loaders = {"train": train_loader(sets["train"], bs, env.rank, env.world_size, plan.identity.seed,
                                              args.accum_steps),
                        "val_end": eval_loader(sampled(sets["val"], args.val_windows_end, args.seed), bs, env.rank,
                                               env.world_size),
                        "test": eval_loader(sampled(sets["test"], args.test_windows, args.seed), bs, env.rank,
                                            env.world_size, args.test_drop_last)}
        # evaluation during training: all windows (the test's as the test scores them), or a fixed seeded subset
        # of --val_windows of each
        self.loaders["val"] = eval_loader(sampled(sets["val"], args.val_windows, args.seed), bs, env.rank,
                                          env.world_size)
        self.loaders["test_rows"] = eval_loader(sampled(sets["test"], args.val_windows, args.seed), bs, env.rank,
                                                env.world_size) if args.val_windows else self.loaders["test"]
        # the payload is built lazily, so ranks that do not write never serialise state
        self.save_checkpoint = checkpoint.save_lazily if env.is_main else (lambda make_payload, path: None)
        self.write_record = (lambda **status: write_record(plan.checkpoint_dir, plan.identity, **status)) \
            if env.is_main else (lambda **status: None)
        self.outputs = make_outputs(env.is_main, args.results_dir, plan.identity, args.tracker, args.tracker_project)
        self.progress = progress_bar if env.is_main else NoProgress  # (total, what) -> update(), close()
        self.forward_timer = RegionTimer(self.device)  # a rank's own compute, before the gradient all-reduce
        self.history = []  # per-epoch records, kept on every rank
        self.rows_resumed = 0  # history rows a resumed run found in its checkpoint: trained by an earlier process
        self.train_summary = {}

    def _distribute(self, model: nn.Module, amp_dtype: torch.dtype) -> tuple:
        """(the model as trained: sharded, DDP-wrapped or as is, on the device; its no-sync context for
        micro-batches before the last of a step)."""
        args, env = self.args, self.env
        log.info("%s: %d parameters, %d trainable%s", args.model, sum(p.numel() for p in model.parameters()),
                 sum(p.numel() for p in model.parameters() if p.requires_grad),
                 f" | sharded across {env.world_size} ranks (FSDP{', gathered in bf16' if args.use_amp else ''})"
                 if self.sharded else "")
        blocks = model_blocks(model, args, self.data) if self.sharded or args.activation_checkpointing else []
        if args.activation_checkpointing:
            fsdp.checkpoint_activations(blocks)
        if args.compile:
            model.compile()  # in place: state_dict keys and model.module stay as they are
        if self.sharded:  # every forward gathers parameters from every rank: evaluations run in lockstep
            model = sync_batchnorm(model, self.device).to(self.device)
            fsdp.shard(model, blocks, amp_dtype if args.use_amp else None, args.cpu_offload)
            return model, lambda: fsdp.no_gradient_sync(model)
        if env.ddp and env.world_size > 1:  # with one rank there is nothing to all-reduce: DDP would only cost
            # BatchNorm statistics are synchronised, so every rank's buffers are equal: no per-step broadcast
            model = DDP(sync_batchnorm(model, self.device).to(self.device),
                        device_ids=[self.device.index] if self.device.type == "cuda" else None,
                        find_unused_parameters=args.find_unused_parameters, forward_sync_buffers=False)
            return model, model.no_sync
        return model.to(self.device), contextlib.nullcontext

    @property
    def raw_model(self) -> nn.Module:
        return self.model.module if isinstance(self.model, DDP) else self.model

    def _select_optimizer(self) -> torch.optim.Optimizer:
        trainable = [p for p in self.model.parameters() if p.requires_grad]  # frozen layers stay out
        # fused: one kernel for all parameters instead of a loop of small ones per tensor
        kwargs = {"lr": self.effective_lr, "weight_decay": self.args.weight_decay, "fused": True}
        if self.shards_optimizer:
            # imported here: it loads FSDP and DTensor, start-up time that only --zero needs
            from torch.distributed.optim import ZeroRedundancyOptimizer
            return ZeroRedundancyOptimizer(trainable, optimizer_class=torch.optim.Adam, **kwargs)
        if self.args.zero:
            log.info("--zero shards optimizer state across ranks: one process keeps all of it")
        return torch.optim.Adam(trainable, **kwargs)

    # ---- forward: shared by train, vali and test -------------------------------------------------
    def _call(self, model: nn.Module, x: torch.Tensor, batch: Batch, shift: int) -> tuple[torch.Tensor, dict]:
        """The model's prediction, and the loss terms a model with aux_loss adds in training ({} otherwise)."""
        inputs, kwargs = model_inputs(self.args, self.caps, x, batch, shift)
        with self.autocast:
            out = model(*inputs, **kwargs)
        pred, terms = out if self.caps.aux_loss and model.training else (out, {})
        return pred.float(), terms

    def _forward(self, model: nn.Module, batch: Batch, rollout: bool = False):
        """(prediction, target, the model's own loss terms) of a batch, cut to what the loss and the metrics
        compare.

        rollout: feed forecasts back in steps of output_token_len until the target is covered (test).
        """
        a, true, terms = self.args, batch.y, {}
        if rollout:
            pred = self._rollout(model, batch, true.shape[1])
        else:
            # autoregressive: one output token per input token; direct: the forecast after the window
            pred, terms = self._call(model, batch.x, batch, 0)
            pred = pred[:, -true.shape[1]:]
            if a.last_token:
                pred, true = pred[:, -a.output_token_len:], true[:, -a.output_token_len:]
        if a.covariate:
            pred, true = pred[..., -1:], true[..., -1:]
        return pred, true, terms

    def _rollout(self, model: nn.Module, batch: Batch, horizon: int) -> torch.Tensor:
        step, x, preds = self.args.output_token_len, batch.x, []
        n_steps = math.ceil(horizon / step)
        for i in range(n_steps):
            out = self._call(model, x, batch, i * step)[0][:, -step:]
            preds.append(out)
            if i + 1 < n_steps:  # an exogenous model's one-channel forecast is never fed back: one step only
                x = torch.cat([x, out], dim=1)[:, -self.args.seq_len:]
        return torch.cat(preds, dim=1)[:, :horizon]

    # ---- train / vali / test ---------------------------------------------------------------------
    def train(self) -> nn.Module:
        a, env, plan = self.args, self.env, self.plan
        loader = self.loaders["train"]
        optimizer = self._select_optimizer()
        course = Course.of(a, len(loader) // a.accum_steps)  # the loader yields whole accumulation groups
        horizon = Horizon(course.steps_per_epoch, course.epochs, a.learning_rate, a.pct_start, a.train_steps)
        scheduler = build_scheduler(optimizer, a.lradj, horizon, self.world_factor, a.warmup_epochs)
        stopper = EarlyStopping(a.patience)
        if plan.clear and env.is_main:
            clear_run(plan)
        unfinished = self._resume(optimizer, scheduler, stopper)
        self.outputs.start_training(self.history)
        self.write_record(status="training", epochs_done=len(self.history))
        log.info("world size %d | global batch %d | lr %.3g x %.3g (%s) = %.3g | %d train windows, %d steps/epoch%s",
                 env.world_size, a.batch_size * a.accum_steps * env.world_size, a.learning_rate, self.world_factor,
                 a.lr_scale, self.effective_lr, len(self.data.datasets["train"]), course.steps_per_epoch,
                 f" | {course.total} steps, validating every {course.every}" if course.by_steps else "")
        batches = self._micro_batches(loader, scheduler.steps, course.steps_per_epoch)
        while scheduler.steps < course.total and not stopper.stop:  # a resumed run may have stopped already
            interrupt.doing(f"during {course.span(scheduler.steps)}", "continue with --resume auto")
            row = self._row(course, batches, optimizer, scheduler, stopper, unfinished)
            unfinished = None
            for hook in self.epoch_hooks:
                hook(len(self.history) + 1, row)
            improved = stopper.step(row["vali_loss"], len(self.history))
            self.history.append(row)
            rng = all_gather_object(rng_state(self.device))  # every rank's stream, for an exact resume
            if improved:
                self._save(plan.best_path, optimizer, scheduler, stopper, rng)
            self._save(plan.last_path, optimizer, scheduler, stopper, rng)  # what a restarted job resumes from
            self.outputs.epoch(row)
            self.write_record(status="training", epochs_done=len(self.history))
            log.info("%s | train %.6f | vali %.6f%s | lr %.3g | %.1fs + %.1fs eval%s",
                     course.progress(scheduler.steps), row["train_loss"], row["vali_loss"],
                     "" if a.no_epoch_test else f" | test {row['test_loss']:.6f}", row["lr"], row["train_seconds"],
                     row["eval_seconds"], " | best" if improved else "")
            if stopper.stop and scheduler.steps < course.total:
                log.info("early stopping: no improvement for %d %s", a.patience, course.unit)
        if a.visualize:
            self.outputs.loss_curves()
        self.outputs.close()
        self.write_record(status="trained", epochs_done=len(self.history))
        peaks = all_gather_floats(peak_rss_mb(), self.device)
        states = all_gather_floats(fsdp.state_mb(self.model, optimizer), self.device)
        log.info("peak memory (RSS) per rank: %s MB | parameters + optimizer state per rank: %s MB",
                 ", ".join(f"{p:.0f}" for p in peaks), ", ".join(f"{m:.2f}" for m in states))
        self.train_summary = {**course.summary(self.history, stopper.best_epoch), "peak_rss_mb": max(peaks),
                              "state_mb": max(states)}
        barrier()  # the best checkpoint is on disk before any rank reads it
        self._load(plan.best_path)
        if a.val_windows:  # the best model, scored on more validation windows than chose it
            self.train_summary["vali_loss_end"] = self.vali(self.loaders["val_end"], self.criterion,
                                                            is_test=a.valid_last)
            self.train_summary["vali_windows_end"] = len(self.loaders["val_end"].dataset)
        return self.model

    def _micro_batches(self, loader, step: int, steps_per_epoch: int):
        """(epoch, micro-batch of the epoch, batch) from optimizer step `step` on, one epoch after another."""
        accum = self.args.accum_steps
        epoch, done = divmod(step, steps_per_epoch)
        while True:
            loader.set_epoch(epoch)
            yield from ((epoch, i, batch) for i, batch in enumerate(loader.batches(done * accum), done * accum))
            epoch, done = epoch + 1, 0

    def _row(self, course: Course, batches, optimizer, scheduler, stopper, unfinished) -> dict:
        """Train up to the next validation (an epoch, or --val_every steps), validate and test: one history row."""
        first, last = scheduler.steps, course.row_end(scheduler.steps)
        # the lr of the row's first and last steps (per-step schedules change it inside a row), also when resumed
        # inside the row
        lr, lr_last = scheduler.lr_at(course.row_start(first)), scheduler.lr_at(last - 1)
        start = time.perf_counter()
        self.forward_timer.reset()
        train = self._train_steps(course, batches, last, optimizer, scheduler, stopper, unfinished)
        trained = time.perf_counter()
        self._warn_slow_ranks(course.span(first), self.forward_timer.total() / ((last - first) * self.args.accum_steps))
        vali_loss = self.vali(self.loaders["val"], self.criterion, is_test=self.args.valid_last)
        test_loss = math.nan if self.args.no_epoch_test else \
            self.vali(self.loaders["test_rows"], self.criterion, is_test=True)
        return {**course.row_index(last, len(self.history)), "train_loss": train.pop("train_loss"),
                "vali_loss": vali_loss, "test_loss": test_loss, "lr": lr, "lr_last": lr_last,
                "train_seconds": trained - start, "eval_seconds": time.perf_counter() - trained, **train}

    def _train_steps(self, course: Course, batches, last: int, optimizer, scheduler, stopper, unfinished) -> dict:
        """Optimizer steps up to step `last`: the global mean train_loss of the row (and aux_<name> of each loss
        term the model adds). With accum_steps N, one optimizer step per N micro-batches, each micro-loss divided
        by N (the loader yields whole groups of equal batches), so the update equals one N-times larger batch.

        Step losses stay on the device (no per-step sync) and are read once, at the end of the row; a checkpoint
        saved inside the row (--save_every) keeps every rank's so far (unfinished: this rank's, resumed).
        """
        self.model.train()
        accum = self.args.accum_steps
        losses, names = [] if unfinished is None else list(unfinished.to(self.device)), ()
        micro = (last - scheduler.steps) * accum
        bar = self.progress(micro, course.span(scheduler.steps))
        for _, (epoch, i, batch) in zip(range(micro), batches):
            last_micro = (i + 1) % accum == 0
            with contextlib.nullcontext() if last_micro else self.no_sync():  # all-reduce once per group
                with self.forward_timer:  # hooks count as forward time: a slow hook makes a straggler
                    pred, true, terms = self._forward(self.model, batch)
                    loss = self.criterion(pred, true)
                    for hook in self.step_hooks:
                        loss = hook(epoch + 1, i + 1, loss)
                    objective = loss + sum(terms.values()) if terms else loss
                self.scaler.scale(objective if accum == 1 else objective / accum).backward()
            names = tuple(terms)
            losses.append(torch.stack([loss.detach(), *(t.detach().float() for t in terms.values())]))
            if last_micro:
                self.scaler.step(optimizer)
                self.scaler.update()
                optimizer.zero_grad(set_to_none=True)
                scheduler.step()
                if scheduler.steps < last and scheduler.steps % course.save_every == 0:
                    rng = all_gather_object(rng_state(self.device))
                    row_so_far = all_gather_object(torch.stack(losses).cpu())
                    self._save(self.plan.last_path, optimizer, scheduler, stopper, rng, row_so_far)
            bar.update()
        bar.close()
        means = self._epoch_loss(torch.stack(losses), [self.args.batch_size] * len(losses), course.span(last - 1))
        return {"train_loss": means[0], **{f"aux_{name}": m for name, m in zip(names, means[1:], strict=True)}}

    def _epoch_loss(self, losses: torch.Tensor, sizes: list, where: str) -> list:
        """Global means of the (steps, terms) training losses (the criterion's, then a model's own terms);
        every rank alike raises if any rank had a non-finite one."""
        bad = ~torch.isfinite(losses).all(-1)
        first_bad = torch.where(bad.any(), bad.double().argmax() + 1, NO_STEP)
        first_bad = all_reduce_min(first_bad).item()
        if first_bad < NO_STEP:
            raise TrainingError(f"non-finite training loss at {where}, step {int(first_bad)} of "
                                f"{len(losses)}: lower --learning_rate, try --use_amp off, or check the data")
        sizes = torch.tensor(sizes, dtype=torch.float64, device=self.device)
        return global_mean((losses.double() * sizes[:, None]).sum(0), sizes.sum()).tolist()

    def _warn_slow_ranks(self, where: str, seconds_per_step: float) -> None:
        """A GPU shared with another job slows the whole group: name the ranks well behind the median.

        Compared is each rank's forward time, which the gradient all-reduce has not yet evened out.
        """
        times = all_gather_floats(seconds_per_step, self.device)
        for rank in slow_ranks(times):
            group_log.warning("%s: rank %d takes %.4fs per forward, %.1fx the median %.4fs: the group waits for it",
                              where, rank, times[rank], times[rank] / statistics.median(times),
                              statistics.median(times))

    def _save(self, path: str, optimizer, scheduler, stopper: EarlyStopping, rng: list,
              row_so_far: list | None = None) -> None:
        """Everything a resumed run needs, and what the run is (its identity); written by the main rank only.
        row_so_far: inside a row, every rank's step losses since its start."""
        if self.shards_optimizer:
            optimizer.consolidate_state_dict(to=0)  # a collective: every rank takes part, rank 0 gets the state
        # sharded: gathered for the main rank by every rank (a collective), in the unsharded format; otherwise
        # read by the main rank alone
        model_state, optimizer_state = fsdp.full_state(self.model, optimizer) if self.sharded else (None, None)
        self.save_checkpoint(lambda: {
            "model": checkpoint.trainable_state(self.raw_model, model_state),
            "optimizer": optimizer.state_dict() if optimizer_state is None else optimizer_state,
            "scheduler": scheduler.state_dict(), "scaler": self.scaler.state_dict(), "epoch": len(self.history) - 1,
            "step": scheduler.steps, "row_so_far": row_so_far, "early_stopping": stopper.state_dict(),
            "history": list(self.history), "rng": rng, "world_size": self.env.world_size,
            "threads": torch.get_num_threads(),
            "identity": dataclasses.asdict(self.plan.identity), "args": vars(self.args)}, path)

    def _resume(self, optimizer, scheduler, stopper: EarlyStopping) -> torch.Tensor | None:
        """Restore a full checkpoint (the plan's resume_from), at the step it was saved at; returns this rank's
        step losses of the row it was saved inside (None: saved at a row's end, or a fresh start)."""
        path = self.plan.resume_from
        if path is None:
            return None
        state = self._load(path)
        if self.sharded:
            fsdp.load_optimizer_state(self.model, optimizer, state["optimizer"])
        else:
            optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        stopper.load_state_dict(state["early_stopping"])
        self.history[:] = state["history"]
        self.rows_resumed = len(self.history)
        self._restore_rng(state["rng"], state["epoch"])
        if "threads" in state:  # absent from checkpoints written before thread counts were chosen
            threads.resume_with(state["threads"])
        inside = state.get("row_so_far")  # absent from checkpoints written before runs by steps
        log.info("resumed from %s: %s done, step %d, best vali %.6f at row %d", path,
                 f"{len(self.history)} rows and {len(inside[0])} micro-batches" if inside else
                 f"epoch {state['epoch'] + 1}" if not self.args.train_steps else f"{len(self.history)} rows",
                 state["step"], stopper.best, stopper.best_epoch + 1)
        if inside is None:
            return None
        return inside[self.env.rank] if self.env.rank < len(inside) else torch.zeros(0, inside[0].shape[1])

    def _restore_rng(self, saved: list, epoch: int) -> None:
        """Each rank continues its own random stream, so a resumed run equals an uninterrupted one. A group of
        another size cannot: ranks beyond the saved ones start fresh streams (seeded by seed, rank and epoch),
        and the continuation is equal in distribution only."""
        rank, world = self.env.rank, self.env.world_size
        if rank < len(saved):
            set_rng_state(saved[rank], self.device)
        else:
            seed_everything(rank_seed(self.plan.identity.seed, rank, epoch))
        if len(saved) != world:
            group_log.warning("resuming a run of %d ranks with %d: the random streams of the ranks continue only "
                              "where both have them, so this continuation is not bit-identical to an "
                              "uninterrupted run", len(saved), world)

    @torch.no_grad()
    def vali(self, vali_loader, criterion, is_test: bool = False) -> float:
        """Exact global mean of the per-window loss over the whole split, identical on every rank.

        Runs on model.module under DDP; is_test evaluates like test (rolled forecast after the window).
        """
        model = self.raw_model
        model.eval()
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        count = 0
        for batch, scored in self._lockstep(vali_loader):
            pred, true, _ = self._forward(model, batch, rollout=is_test)
            if scored:
                total += criterion(pred, true).double() * len(pred)
                count += len(pred)
        model.train()
        return global_mean(total, torch.tensor(count, device=self.device)).item()

    @torch.no_grad()
    def test(self) -> dict:
        a, env, plan = self.args, self.env, self.plan
        interrupt.doing(f"while testing {plan.identity.setting}",
                        "its checkpoint is saved: test it again with --is_training 0")
        if plan.test_checkpoint is None:  # zero-shot: the pretrained weights, untrained here
            self.train_summary = {"best_epoch": None, "epochs_run": 0}
        elif not plan.train:
            state = self._load(plan.test_checkpoint)
            self.history = state["history"]
            # the best checkpoint knows its epoch, not how long training went on after it
            self.train_summary = {**Course.of(a, 1).summary(self.history, state["early_stopping"]["best_epoch"]),
                                  "epochs_run": None}
        model = self.raw_model
        model.eval()
        errors = self._window_errors(model, self.loaders["test"])
        metrics = metrics_from_windows(errors)
        identity = plan.identity
        trained_on = identity.config["training"].get("world_size")  # None: zero-shot, nothing trained here
        training = {} if trained_on is None else dict(
            global_batch_size=a.batch_size * a.accum_steps * trained_on, learning_rate=a.learning_rate,
            effective_lr=a.learning_rate * world_factor(a.lr_scale, trained_on))
        metrics.update(
            setting=identity.setting, test=plan.test, config_id=identity.config_id, seed=identity.seed,
            model=a.model, dataset=self.data.name, features=features_code(a),
            seq_len=a.seq_len, output_token_len=a.output_token_len, test_pred_len=a.test_pred_len,
            world_size=trained_on, test_world_size=env.world_size, **training, n_test_windows=len(errors),
            checkpoint=plan.test_checkpoint or a.pretrain_model_path, **self.train_summary, config=identity.config)
        # only rank 0 plots; under FSDP every rank takes part in its forwards
        forecasts = self._sample_forecasts(model) if a.visualize and (env.is_main or self.sharded) else ()
        by_window = {name: column.float().cpu().numpy() for name, column in zip(metric_names(), errors.T)}
        self.outputs.test(plan.test, metrics, by_window, forecasts)
        log.info("test (%d windows, horizon %d): %s", metrics["n_test_windows"], a.test_pred_len, log_line(metrics))
        return metrics

    def _window_errors(self, model: nn.Module, loader) -> torch.Tensor:
        """(windows of the split, metrics): every window's errors, on every rank. Each rank fills the rows of its
        own windows and zeros elsewhere, so the all_reduce puts every window's errors in place unchanged."""
        rows = loader.indices().to(self.device)
        computed = [(window_errors(*self._forward(model, batch, rollout=True)[:2]), scored)
                    for batch, scored in self._lockstep(loader)]
        scored = [errors for errors, keep in computed if keep]
        n = eval_windows(len(loader.dataset), self.args.batch_size, self.env.world_size, self.args.test_drop_last)
        table = torch.zeros(n, len(metric_names()), dtype=torch.float64, device=self.device)
        if scored:
            table[rows] = torch.cat(scored)
        return all_reduce_sum(table)

    def _lockstep(self, loader):
        """(batch, scored) of an evaluation. Under FSDP a forward is a collective (each block gathers its
        parameters from every rank), so every rank runs as many as the rank with the most batches: one with fewer
        adds forwards of a filler batch (the split's first window) whose output is not scored."""
        # agreed before the first forward: a rank that reached the reduction after its batches would wait there
        # for a rank still gathering parameters for its own
        most = int(all_reduce_max(torch.tensor(len(loader), device=self.device)).item()) if self.sharded else 0
        yield from ((batch, True) for batch in loader)
        if most > len(loader):
            filler = loader.dataset.gather(torch.tensor([0]))
            yield from ((filler, False) for _ in range(most - len(loader)))

    def _sample_forecasts(self, model: nn.Module, count: int = 4) -> list:
        """A few test windows spread over the test split, rolled out like the test, all channels kept."""
        ds, a = self.data.datasets["test"], self.args
        idx = torch.linspace(0, len(ds) - 1, min(count, len(ds))).round().long()
        batch = ds.gather(idx)
        pred = self._rollout(model, batch, batch.y.shape[1])
        columns = self.data.columns
        if pred.shape[-1] < batch.y.shape[-1]:  # an exogenous model forecasts the target (last) channel alone
            pred = torch.nn.functional.pad(pred, (batch.y.shape[-1] - pred.shape[-1], 0), value=float("nan"))
        windows = []
        for i, window in enumerate(idx.tolist()):
            if a.univariate:
                panels = [(ds.series_name(window, columns), 0)]
            else:
                panels = [(f"{columns[-1]} (target)", len(columns) - 1)]
                chosen = a.plot_channel % len(columns)  # in range: checked at start-up
                if chosen != len(columns) - 1:
                    panels.append((columns[chosen], chosen))
            windows.append((f"{self.data.name}: test window {window} of {len(ds)}, horizon {a.test_pred_len}",
                            batch.x[i].cpu().numpy(), batch.y[i].cpu().numpy(), pred[i].cpu().numpy(), panels))
        return windows

    def _load(self, path: str) -> dict:
        if not self.sharded:
            state = checkpoint.load(path, self.device)
            checkpoint.load_trainable_state(self.raw_model, state["model"], path)
            return state
        # mapped, on the CPU: a rank reads the parts it uses, and its device receives only its shards
        state = checkpoint.load(path, mmap=True)
        fsdp.load_model_state(self.model, checkpoint.matching_state(self.model, state["model"], path))
        return state
