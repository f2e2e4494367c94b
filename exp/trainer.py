"""Training: optimizer steps in rows (an epoch, or --val_every steps with --train_steps), each row ended by its
evaluations, early stopping, checkpoints and outputs; one code path for one process, DDP and FSDP."""
import contextlib
import dataclasses
import logging
import math
import statistics
import time
from dataclasses import dataclass

import torch

from data_provider.factory import DataBundle
from data_provider.windows import train_loader
from exp.evaluator import Evaluator
from exp.forward import Forward
from exp.identity import RunPlan, start_clean, write_record
from exp.parallel import RunningModel
from exp.train_state import TrainState, lazy, load_weights
from utils import checkpoint, fsdp, interrupt
from utils.dist import (DistEnv, all_gather_floats, all_gather_object, all_reduce_min, barrier, global_mean,
                        slow_ranks)
from utils.early_stopping import EarlyStopping
from utils.errors import TrainingError
from utils.log import GROUP, NoProgress, progress_bar
from utils.memory import peak_rss_mb
from utils.schedules import ScheduleContext, build_scheduler, world_factor
from utils.timing import NoTimer, RegionTimer

log = logging.getLogger(__name__)
group_log = logging.getLogger(GROUP)
NO_STEP = float("inf")  # "no non-finite loss yet" in the first-bad-step reduction


@dataclass(frozen=True)
class TrainingSteps:
    """How long training goes and when it validates and saves, in optimizer steps. By epochs (the default): a
    validation (a history row) and a resumable checkpoint at the end of every epoch; by steps (--train_steps):
    every --val_every and --save_every steps, across epoch boundaries."""
    per_epoch: int
    total: int       # optimizer steps of the whole run
    every: int       # steps per history row
    save_every: int
    by_steps: bool

    @classmethod
    def of(cls, config, per_epoch: int) -> "TrainingSteps":
        if not config.train_steps:
            return cls(per_epoch, per_epoch * config.train_epochs, per_epoch, per_epoch, False)
        every = config.val_every or config.train_steps
        return cls(per_epoch, config.train_steps, every, config.save_every or every, True)

    @property
    def epochs(self) -> int:
        return math.ceil(self.total / self.per_epoch)

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
        return f"epoch {step // self.per_epoch + 1}"

    def progress(self, step: int) -> str:
        return f"step {step}/{self.total}" if self.by_steps else f"epoch {step // self.per_epoch}/{self.epochs}"

    def row_index(self, step: int, rows_done: int) -> dict:
        """What names a history row: its epoch; by steps, the step and the epochs it amounts to."""
        if self.by_steps:
            return {"step": step, "epoch": round(step / self.per_epoch, 4)}
        return {"epoch": rows_done + 1}

    def summary(self, history: list, best_row: int) -> dict:
        if self.by_steps:
            return {"best_epoch": history[best_row]["epoch"], "epochs_run": history[-1]["epoch"],
                    "best_step": history[best_row]["step"], "steps_run": history[-1]["step"]}
        return {"best_epoch": best_row + 1, "epochs_run": len(history)}


class Trainer:
    def __init__(self, config, env: DistEnv, data: DataBundle, running: RunningModel, plan: RunPlan, forward: Forward,
                 loss, evaluator: Evaluator, outputs, scaler, callbacks=()):
        """The run's repetition of `plan`: its seed shuffles the training windows, as it initialised the model.

        callbacks: objects with any of on_train_step(epoch, step, loss) -> loss (after each forward; epochs and
        steps count from 1; may return a replacement loss) and on_epoch_end(epoch, row) (after validation, with
        the history row, identical on every rank)."""
        self.config, self.env, self.data, self.running, self.plan = config, env, data, running, plan
        self.forward, self.loss, self.evaluator, self.outputs = forward, loss, evaluator, outputs
        self.step_hooks = [c.on_train_step for c in callbacks if hasattr(c, "on_train_step")]
        self.epoch_hooks = [c.on_epoch_end for c in callbacks if hasattr(c, "on_epoch_end")]
        self.world_factor = world_factor(config.lr_scale, env.world_size)
        self.loader = train_loader(data.datasets["train"], config.batch_size, env.rank, env.world_size,
                                   plan.identity.seed, config.accum_steps)
        self.steps = TrainingSteps.of(config, len(self.loader) // config.accum_steps)  # whole accumulation groups
        optimizer = self.build_optimizer()
        context = ScheduleContext(self.steps.per_epoch, self.steps.epochs, config.learning_rate, config.pct_start,
                                  config.train_steps)
        scheduler = build_scheduler(optimizer, config.lradj, context, self.world_factor, config.warmup_epochs)
        self.state = TrainState(running, optimizer, scheduler, scaler, EarlyStopping(config.patience), env,
                                plan.identity.seed, config.zero and env.ddp)
        # rank-dependent choices, made once: only the main rank writes and reports progress
        self.write = checkpoint.save_lazily if env.is_main else (lambda make_payload, path: None)
        self.record = (lambda **status: write_record(plan.checkpoint_dir, plan.identity, **status)) \
            if env.is_main else (lambda **status: None)
        self.progress = progress_bar if env.is_main else NoProgress
        # a rank's own compute, before the gradient all-reduce: what names a straggler, where there are ranks
        self.forward_timer = RegionTimer(env.device) if env.world_size > 1 else NoTimer()
        self.rows_resumed = 0  # history rows a resumed run found in its checkpoint: trained by an earlier process
        self.summary = {}

    def build_optimizer(self) -> torch.optim.Optimizer:
        trainable = [p for p in self.running.model.parameters() if p.requires_grad]  # frozen layers stay out
        # fused: one kernel for all parameters instead of a loop of small ones per tensor
        kwargs = {"lr": self.config.learning_rate * self.world_factor, "weight_decay": self.config.weight_decay,
                  "fused": True}
        if self.config.zero and self.env.ddp:
            # imported here: it loads FSDP and DTensor, start-up time that only --zero needs
            from torch.distributed.optim import ZeroRedundancyOptimizer
            return ZeroRedundancyOptimizer(trainable, optimizer_class=torch.optim.Adam, **kwargs)
        if self.config.zero:
            log.info("--zero shards optimizer state across ranks: one process keeps all of it")
        return torch.optim.Adam(trainable, **kwargs)

    # ---- the loop ----------------------------------------------------------------------------------
    def train(self) -> dict:
        """Train to the end or to early stopping, then load the best weights; returns the training summary."""
        state, steps = self.state, self.steps
        unfinished = self._begin()
        batches = self._micro_batches(state.step)
        while state.step < steps.total and not state.stopper.stop:  # a resumed run may have stopped already
            interrupt.doing(f"during {steps.span(state.step)}", "continue with --resume auto")
            row = self._row(batches, unfinished)
            unfinished = None
            self._end_row(row)
        return self._finish()

    def _begin(self) -> torch.Tensor | None:
        """Clear what an earlier attempt left, resume, and open the outputs; returns this rank's step losses of a
        row resumed in its middle."""
        if self.plan.start_clean and self.env.is_main:
            start_clean(self.plan)
        unfinished = self._resume() if self.plan.resume_from else None
        self.outputs.start_training(self.state.history)
        self.record(status="training", epochs_done=len(self.state.history))
        c, env, steps = self.config, self.env, self.steps
        train = self.data.datasets["train"]
        drawn = "" if train.epoch_windows is None else f" ({len(self.loader.order) * env.world_size} drawn per epoch)"
        log.info("world size %d | global batch %d | lr %.3g x %.3g (%s) = %.3g | %d train windows%s, %d steps/epoch%s",
                 env.world_size, c.batch_size * c.accum_steps * env.world_size, c.learning_rate, self.world_factor,
                 c.lr_scale, c.learning_rate * self.world_factor, len(train), drawn, steps.per_epoch,
                 f" | {steps.total} steps, validating every {steps.every}" if steps.by_steps else "")
        return unfinished

    def _row(self, batches, unfinished) -> dict:
        """Train up to the next validation (an epoch, or --val_every steps), then evaluate: one history row."""
        first, last = self.state.step, self.steps.row_end(self.state.step)
        # the lr of the row's first and last steps (per-step schedules change it inside a row), also when resumed
        # inside the row
        lr, lr_last = self.state.scheduler.lr_at(self.steps.row_start(first)), self.state.scheduler.lr_at(last - 1)
        start = time.perf_counter()
        self.forward_timer.reset()
        train = self._train_steps(batches, last, unfinished)
        trained = time.perf_counter()
        self._warn_slow_ranks(self.steps.span(first),
                              self.forward_timer.total() / ((last - first) * self.config.accum_steps))
        scores = self.evaluator.row_losses(self.running.raw)
        return {**self.steps.row_index(last, len(self.state.history)), "train_loss": train.pop("train_loss"),
                **scores, "lr": lr, "lr_last": lr_last, "train_seconds": trained - start,
                "eval_seconds": time.perf_counter() - trained, **train}

    def _end_row(self, row: dict) -> None:
        """The row's callbacks, early stopping, checkpoints (best and last), outputs and log line."""
        state, c = self.state, self.config
        for hook in self.epoch_hooks:
            hook(len(state.history) + 1, row)
        improved = state.stopper.step(row["vali_loss"], len(state.history))
        state.history.append(row)
        saved = state.state_dict()
        if improved:
            self._save(saved, self.plan.best_path)
        self._save(saved, self.plan.last_path)  # what a restarted job resumes from
        self.outputs.epoch(row)
        self.record(status="training", epochs_done=len(state.history))
        log.info("%s | train %.6f | vali %.6f%s | lr %.3g | %.1fs + %.1fs eval%s", self.steps.progress(state.step),
                 row["train_loss"], row["vali_loss"], "" if c.no_epoch_test else f" | test {row['test_loss']:.6f}",
                 row["lr"], row["train_seconds"], row["eval_seconds"], " | best" if improved else "")
        if state.stopper.stop and state.step < self.steps.total:
            log.info("early stopping: no improvement for %d %s", c.patience, self.steps.unit)

    def _finish(self) -> dict:
        """Close the outputs, report memory, load the best weights and score them on more validation windows where
        --val_windows chose them on a subset; returns the training summary."""
        if self.config.visualize:
            self.outputs.loss_curves()
        self.outputs.close()
        self.record(status="trained", epochs_done=len(self.state.history))
        peaks = all_gather_floats(peak_rss_mb(), self.env.device)
        states = all_gather_floats(fsdp.state_mb(self.running.model, self.state.optimizer), self.env.device)
        log.info("peak memory (RSS) per rank: %s MB | parameters + optimizer state per rank: %s MB",
                 ", ".join(f"{p:.0f}" for p in peaks), ", ".join(f"{m:.2f}" for m in states))
        if self.env.device.type == "cuda":
            gpu_peaks = all_gather_floats(torch.cuda.max_memory_allocated(self.env.device) / 2 ** 20, self.env.device)
            on_gpu = all_gather_floats(fsdp.state_mb(self.running.model, self.state.optimizer, "cuda"),
                                       self.env.device)
            log.info("peak GPU memory per rank: %s MB | parameters + optimizer state on the GPU per rank: %s MB",
                     ", ".join(f"{p:.0f}" for p in gpu_peaks), ", ".join(f"{m:.2f}" for m in on_gpu))
        barrier()  # the best checkpoint is on disk before any rank reads it
        load_weights(self.running, self.plan.best_path, self.env.device)
        return {**self.steps.summary(self.state.history, self.state.stopper.best_epoch), "peak_rss_mb": max(peaks),
                "state_mb": max(states), **self.evaluator.final_validation(self.running.raw)}

    # ---- steps -------------------------------------------------------------------------------------
    def _micro_batches(self, step: int):
        """(epoch, micro-batch of the epoch, batch) from optimizer step `step` on, one epoch after another."""
        accum = self.config.accum_steps
        epoch, done = divmod(step, self.steps.per_epoch)
        while True:
            self.loader.set_epoch(epoch)
            yield from ((epoch, i, batch) for i, batch in enumerate(self.loader.batches(done * accum), done * accum))
            epoch, done = epoch + 1, 0

    def _train_steps(self, batches, last: int, unfinished) -> dict:
        """Optimizer steps up to step `last`: the global mean train_loss of the row (and aux_<name> of each loss
        term the model adds). With accum_steps N, one optimizer step per N micro-batches, each micro-loss divided
        by N (the loader yields whole groups of equal batches), so the update equals one N-times larger batch.

        Step losses stay on the device (no per-step sync) and are read once, at the end of the row; a checkpoint
        saved inside the row (--save_every) keeps every rank's so far (unfinished: this rank's, resumed).
        """
        state, accum, model = self.state, self.config.accum_steps, self.running.model
        model.train()
        losses, names = [] if unfinished is None else list(unfinished.to(self.env.device)), ()
        micro = (last - state.step) * accum
        bar = self.progress(micro, self.steps.span(state.step))
        for _, (epoch, i, batch) in zip(range(micro), batches):
            last_micro = (i + 1) % accum == 0
            with contextlib.nullcontext() if last_micro else self.running.no_sync():  # all-reduce once per group
                with self.forward_timer:  # hooks count as forward time: a slow hook makes a straggler
                    pred, true, terms = self.forward(model, batch)
                    loss = self.loss(pred, true, batch.x)
                    for hook in self.step_hooks:
                        loss = hook(epoch + 1, i + 1, loss)
                    objective = loss + sum(terms.values()) if terms else loss
                state.scaler.scale(objective if accum == 1 else objective / accum).backward()
            names = tuple(terms)
            losses.append(torch.stack([loss.detach(), *(t.detach().float() for t in terms.values())]))
            if last_micro:
                self._optimizer_step()
                if state.step < last and state.step % self.steps.save_every == 0:
                    row_so_far = all_gather_object(torch.stack(losses).cpu())  # every rank's, for the resume
                    self._save(state.state_dict(row_so_far), self.plan.last_path)
            bar.update()
        bar.close()
        means = self._row_loss(torch.stack(losses), [self.config.batch_size] * len(losses),
                               self.steps.span(last - 1))
        return {"train_loss": means[0], **{f"aux_{name}": m for name, m in zip(names, means[1:], strict=True)}}

    def _optimizer_step(self) -> None:
        state = self.state
        state.scaler.step(state.optimizer)
        state.scaler.update()
        state.optimizer.zero_grad(set_to_none=True)
        state.scheduler.step()

    def _row_loss(self, losses: torch.Tensor, sizes: list, where: str) -> list:
        """Global means of the (steps, terms) training losses (the loss's, then a model's own terms); every rank
        alike raises if any rank had a non-finite one."""
        bad = ~torch.isfinite(losses).all(-1)
        first_bad = torch.where(bad.any(), bad.double().argmax() + 1, NO_STEP)
        first_bad = all_reduce_min(first_bad).item()
        if first_bad < NO_STEP:
            raise TrainingError(f"non-finite training loss at {where}, step {int(first_bad)} of "
                                f"{len(losses)}: lower --learning_rate, try --use_amp off, or check the data")
        sizes = torch.tensor(sizes, dtype=torch.float64, device=self.env.device)
        return global_mean((losses.double() * sizes[:, None]).sum(0), sizes.sum()).tolist()

    def _warn_slow_ranks(self, where: str, seconds_per_step: float) -> None:
        """A GPU shared with another job slows the whole group: name the ranks well behind the median.

        Compared is each rank's forward time, which the gradient all-reduce has not yet evened out.
        """
        times = all_gather_floats(seconds_per_step, self.env.device)
        for rank in slow_ranks(times):
            group_log.warning("%s: rank %d takes %.4fs per forward, %.1fx the median %.4fs: the group waits for it",
                              where, rank, times[rank], times[rank] / statistics.median(times),
                              statistics.median(times))

    # ---- checkpoints -------------------------------------------------------------------------------
    def _save(self, state: dict, path: str) -> None:
        """A checkpoint: the train state and what the run is (its identity and flags); written by the main rank."""
        self.write(lambda: {**lazy(state), "identity": dataclasses.asdict(self.plan.identity),
                            "args": self.config.as_dict()}, path)

    def _resume(self) -> torch.Tensor | None:
        path = self.plan.resume_from
        saved = load_weights(self.running, path, self.env.device)
        unfinished = self.state.load_state_dict(saved)
        self.rows_resumed = len(self.state.history)
        inside, stopper = saved.get("row_so_far"), self.state.stopper
        log.info("resumed from %s: %s done, step %d, best vali %.6f at row %d", path,
                 f"{len(self.state.history)} rows and {len(inside[0])} micro-batches" if inside else
                 f"epoch {saved['epoch'] + 1}" if not self.config.train_steps else f"{len(self.state.history)} rows",
                 saved["step"], stopper.best, stopper.best_epoch + 1)
        return unfinished

