"""Forecasting experiment: one code path for single-process and DDP training, validation and test."""
import contextlib
import logging
import math
import os
import statistics
import time

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

from data_provider.factory import DataBundle
from data_provider.windows import Batch, eval_loader, train_loader
from utils import checkpoint
from utils.dist import DistEnv, all_gather_floats, all_reduce_min, all_reduce_sum, barrier, global_mean, slow_ranks
from utils.early_stopping import EarlyStopping
from utils.errors import TrainingError
from utils.log import GROUP
from utils.metrics import error_sums, metrics_from_sums
from utils.outputs import make_outputs
from utils.schedule import build_scheduler, world_factor
from utils.sync_batchnorm import sync_batchnorm
from utils.timing import RegionTimer

log = logging.getLogger(__name__)
group_log = logging.getLogger(GROUP)
NO_STEP = float("inf")  # "no non-finite loss yet" in the first-bad-step reduction


def features_code(args) -> str:
    """M: multivariate, MS: covariates -> target, U: every channel its own series."""
    return "U" if args.univariate else ("MS" if args.covariate else "M")


def setting_name(args, itr: int = 0) -> str:
    """Identity of a trained model: its checkpoint folder, and the start of its results folders."""
    mode = "direct" if args.nonautoregressive else "ar"
    return (f"{args.model_id}_{args.model}_{args.data}_{features_code(args)}_{mode}_sl{args.seq_len}"
            f"_it{args.input_token_len}_ot{args.output_token_len}_lr{args.learning_rate}_bt{args.batch_size}_wd{args.weight_decay}"
            f"_el{args.e_layers}_dm{args.d_model}_dff{args.d_ff}_nh{args.n_heads}_{args.des}_{itr}")


class ExpForecast:
    def __init__(self, args, env: DistEnv, data: DataBundle, model: nn.Module, repetition: int = 0):
        """repetition i of --itr shuffles the training windows with seed + i, as it initialises the model."""
        self.args, self.env, self.data = args, env, data
        self.device = env.device
        if args.compile:
            model.compile()  # in place: state_dict keys and model.module stay as they are
        if env.ddp and env.world_size > 1:  # with one rank there is nothing to all-reduce: DDP would only cost
            # BatchNorm statistics are synchronised, so every rank's buffers are equal: no per-step broadcast
            model = DDP(sync_batchnorm(model, self.device).to(self.device),
                        device_ids=[self.device.index] if self.device.type == "cuda" else None,
                        find_unused_parameters=args.find_unused_parameters, forward_sync_buffers=False)
            self.no_sync = model.no_sync
        else:
            model = model.to(self.device)
            self.no_sync = contextlib.nullcontext
        self.model = model
        self.shards_optimizer = args.zero and env.ddp  # ZeroRedundancyOptimizer
        self.criterion = nn.MSELoss()
        self.world_factor = world_factor(args.lr_scale, env.world_size)
        self.effective_lr = args.learning_rate * self.world_factor
        # fp16 needs loss scaling; bf16 (used on CPU) keeps fp32's range and does not
        amp_dtype = torch.float16 if self.device.type == "cuda" else torch.bfloat16
        self.autocast = torch.autocast(self.device.type, dtype=amp_dtype, enabled=args.use_amp)  # reused each call
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=args.use_amp and amp_dtype == torch.float16)
        sets, bs = data.datasets, args.batch_size
        self.loaders = {"train": train_loader(sets["train"], bs, env.rank, env.world_size,
                                              args.seed + repetition, args.accum_steps),
                        "val": eval_loader(sets["val"], bs, env.rank, env.world_size),
                        "test": eval_loader(sets["test"], bs, env.rank, env.world_size)}
        # the payload is built lazily, so ranks that do not write never serialise state
        self.save_checkpoint = checkpoint.save_lazily if env.is_main else (lambda make_payload, path: None)
        self.forward_timer = RegionTimer(self.device)  # a rank's own compute, before the gradient all-reduce
        self.history = []  # per-epoch records, kept on every rank
        self.train_summary = {}

    @property
    def raw_model(self) -> nn.Module:
        return self.model.module if isinstance(self.model, DDP) else self.model

    def _select_optimizer(self) -> torch.optim.Optimizer:
        trainable = [p for p in self.model.parameters() if p.requires_grad]  # frozen layers stay out
        # fused: one kernel for all parameters instead of a loop of small ones per tensor
        kwargs = {"lr": self.effective_lr, "weight_decay": self.args.weight_decay, "fused": True}
        if self.shards_optimizer:
            # imported here: it loads FSDP and DTensor, 0.2 s of every run's start-up that only --zero needs
            from torch.distributed.optim import ZeroRedundancyOptimizer
            return ZeroRedundancyOptimizer(trainable, optimizer_class=torch.optim.Adam, **kwargs)
        if self.args.zero:
            log.info("--zero shards optimizer state across ranks: one process keeps all of it")
        return torch.optim.Adam(trainable, **kwargs)

    def _best_path(self, setting: str) -> str:
        return os.path.join(self.args.checkpoints, setting, "checkpoint.pth")

    def _test_path(self, setting: str) -> str:
        """The checkpoint a test-only run evaluates: this setting's best, or --test_dir/--test_file_name."""
        a = self.args
        return os.path.join(a.checkpoints, a.test_dir or setting, a.test_file_name)

    def _run_name(self, setting: str) -> str:
        return f"{setting}_tp{self.args.test_pred_len}"

    # ---- forward: shared by train, vali and test -------------------------------------------------
    def _call(self, model: nn.Module, x: torch.Tensor, batch: Batch, shift: int) -> torch.Tensor:
        x_mark = None if batch.x_mark is None else batch.x_mark[:, shift:shift + self.args.seq_len]
        with self.autocast:
            return model(x, x_mark).float()

    def _forward(self, model: nn.Module, batch: Batch, rollout: bool = False):
        """(prediction, target) of a batch, cut to what the loss and the metrics compare.

        rollout: feed forecasts back in steps of output_token_len until the target is covered (test).
        """
        a, true = self.args, batch.y
        if rollout:
            pred = self._rollout(model, batch, true.shape[1])
        else:
            # autoregressive: one output token per input token; direct: the forecast after the window
            pred = self._call(model, batch.x, batch, 0)[:, -true.shape[1]:]
            if a.last_token:
                pred, true = pred[:, -a.output_token_len:], true[:, -a.output_token_len:]
        if a.covariate:
            pred, true = pred[..., -1:], true[..., -1:]
        return pred, true

    def _rollout(self, model: nn.Module, batch: Batch, horizon: int) -> torch.Tensor:
        step, x, preds = self.args.output_token_len, batch.x, []
        for i in range(math.ceil(horizon / step)):
            out = self._call(model, x, batch, i * step)[:, -step:]
            preds.append(out)
            x = torch.cat([x, out], dim=1)[:, -self.args.seq_len:]
        return torch.cat(preds, dim=1)[:, :horizon]

    # ---- train / vali / test ---------------------------------------------------------------------
    def train(self, setting: str) -> nn.Module:
        a, env = self.args, self.env
        loader = self.loaders["train"]
        optimizer = self._select_optimizer()
        steps_per_epoch = math.ceil(len(loader) / a.accum_steps)
        scheduler = build_scheduler(optimizer, a.lradj, a.learning_rate, a.train_epochs, self.world_factor,
                                    steps_per_epoch, a.warmup_epochs)
        stopper = EarlyStopping(a.patience)
        best_path, last_path = self._best_path(setting), os.path.join(a.checkpoints, setting, "last.pth")
        start_epoch = self._resume(last_path, optimizer, scheduler, stopper)
        outputs = make_outputs(env.is_main, a.results_dir, self._run_name(setting), self.history)
        log.info("world size %d | global batch %d | lr %.3g x %.3g (%s) = %.3g | %d train windows, %d steps/epoch",
                 env.world_size, a.batch_size * a.accum_steps * env.world_size, a.learning_rate, self.world_factor,
                 a.lr_scale, self.effective_lr, len(self.data.datasets["train"]), steps_per_epoch)
        last_epoch = start_epoch if stopper.stop else a.train_epochs  # a resumed run may have stopped already
        for epoch in range(start_epoch, last_epoch):
            row = self._epoch(epoch, loader, optimizer, scheduler)
            improved = stopper.step(row["vali_loss"], epoch)
            self.history.append(row)
            if improved:
                self._save(best_path, optimizer, scheduler, stopper, epoch)
            self._save(last_path, optimizer, scheduler, stopper, epoch)  # what a restarted job resumes from
            outputs.epoch(row)
            log.info("epoch %d/%d | train %.6f | vali %.6f | test %.6f | lr %.3g | %.1fs + %.1fs eval%s",
                     epoch + 1, a.train_epochs, row["train_loss"], row["vali_loss"], row["test_loss"], row["lr"],
                     row["train_seconds"], row["eval_seconds"], " | best" if improved else "")
            if stopper.stop:
                log.info("early stopping: no improvement for %d epochs", a.patience)
                break
        if a.visualize:
            outputs.loss_curves()
        outputs.close()
        self.train_summary = {"best_epoch": stopper.best_epoch + 1, "epochs_run": len(self.history)}
        barrier()  # the best checkpoint is on disk before any rank reads it
        self._load(best_path)
        return self.model

    def _epoch(self, epoch: int, loader, optimizer, scheduler) -> dict:
        """Train one epoch, then validate and test: one history row."""
        loader.set_epoch(epoch)
        lr = optimizer.param_groups[0]["lr"]
        start = time.perf_counter()
        self.forward_timer.reset()
        train_loss = self._train_epoch(loader, optimizer, scheduler, epoch)
        trained = time.perf_counter()
        self._warn_slow_ranks(epoch, self.forward_timer.total() / len(loader))
        vali_loss = self.vali(self.loaders["val"], self.criterion, is_test=self.args.valid_last)
        test_loss = self.vali(self.loaders["test"], self.criterion, is_test=True)
        return {"epoch": epoch + 1, "train_loss": train_loss, "vali_loss": vali_loss, "test_loss": test_loss,
                "lr": lr, "train_seconds": trained - start, "eval_seconds": time.perf_counter() - trained}

    def _train_epoch(self, loader, optimizer, scheduler, epoch: int) -> float:
        """One pass over the training windows; with accum_steps N, one optimizer step per N micro-batches,
        each micro-loss divided by N (the loader yields whole groups of equal batches), so the update equals
        one N-times larger batch.

        Step losses stay on the device (no per-step sync) and are read once, at the end of the epoch.
        """
        self.model.train()
        accum = self.args.accum_steps
        losses = []
        batches = tqdm(loader, desc=f"epoch {epoch + 1}", leave=False, disable=not self.env.is_main or None)
        for i, batch in enumerate(batches):
            last_micro = (i + 1) % accum == 0
            with contextlib.nullcontext() if last_micro else self.no_sync():  # all-reduce once per group
                with self.forward_timer:
                    pred, true = self._forward(self.model, batch)
                    loss = self.criterion(pred, true)
                self.scaler.scale(loss if accum == 1 else loss / accum).backward()
            if last_micro:
                self.scaler.step(optimizer)
                self.scaler.update()
                optimizer.zero_grad(set_to_none=True)
                scheduler.step()
            losses.append(loss.detach())
        return self._epoch_loss(torch.stack(losses), loader.batch_sizes(), epoch)

    def _epoch_loss(self, losses: torch.Tensor, sizes: list, epoch: int) -> float:
        """Global mean training loss; every rank alike raises if any rank had a non-finite step loss."""
        bad = ~torch.isfinite(losses)
        first_bad = torch.where(bad.any(), bad.double().argmax() + 1, NO_STEP)
        first_bad = all_reduce_min(first_bad).item()
        if first_bad < NO_STEP:
            raise TrainingError(f"non-finite training loss at epoch {epoch + 1}, step {int(first_bad)} of "
                                f"{len(losses)}: lower --learning_rate, try --use_amp off, or check the data")
        sizes = torch.tensor(sizes, dtype=torch.float64, device=self.device)
        return global_mean((losses.double() * sizes).sum(), sizes.sum()).item()

    def _warn_slow_ranks(self, epoch: int, seconds_per_step: float) -> None:
        """A GPU shared with another job slows the whole group: name the ranks well behind the median.

        Compared is each rank's forward time, which the gradient all-reduce has not yet evened out.
        """
        times = all_gather_floats(seconds_per_step, self.device)
        for rank in slow_ranks(times):
            group_log.warning("epoch %d: rank %d takes %.4fs per forward, %.1fx the median %.4fs: the group waits "
                              "for it",
                        epoch + 1, rank, times[rank], times[rank] / statistics.median(times),
                        statistics.median(times))

    def _save(self, path: str, optimizer, scheduler, stopper: EarlyStopping, epoch: int) -> None:
        """Everything a resumed run needs; written by the main rank only."""
        if self.shards_optimizer:
            optimizer.consolidate_state_dict(to=0)  # a collective: every rank takes part, rank 0 gets the state
        self.save_checkpoint(lambda: {
            "model": checkpoint.trainable_state(self.raw_model), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "scaler": self.scaler.state_dict(), "epoch": epoch,
            "step": scheduler.steps, "early_stopping": stopper.state_dict(), "history": list(self.history),
            "rng": checkpoint.rng_state(), "args": vars(self.args)}, path)

    def _resume(self, last_path: str, optimizer, scheduler, stopper: EarlyStopping) -> int:
        """Restore the latest full checkpoint (--resume); returns the epoch to start from."""
        a = self.args
        if a.resume is None:
            return 0
        path = last_path if a.resume == "auto" else a.resume
        if not os.path.isfile(path):  # only --resume auto gets here: a first run has nothing to resume
            log.info("no checkpoint at %s yet: starting from scratch", path)
            return 0
        state = self._load(path)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        stopper.load_state_dict(state["early_stopping"])
        self.history[:] = state["history"]
        checkpoint.set_rng_state(state["rng"])
        log.info("resumed from %s: epoch %d done, step %d, best vali %.6f at epoch %d", path, state["epoch"] + 1,
                 state["step"], stopper.best, stopper.best_epoch + 1)
        return state["epoch"] + 1

    @torch.no_grad()
    def vali(self, vali_loader, criterion, is_test: bool = False) -> float:
        """Exact global mean of the per-window loss over the whole split, identical on every rank.

        Runs on model.module under DDP; is_test evaluates like test (rolled forecast after the window).
        """
        model = self.raw_model
        model.eval()
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        count = 0
        for batch in vali_loader:
            pred, true = self._forward(model, batch, rollout=is_test)
            total += criterion(pred, true).double() * len(pred)
            count += len(pred)
        model.train()
        return global_mean(total, torch.tensor(count, device=self.device)).item()

    @torch.no_grad()
    def test(self, setting: str, load: bool = False) -> dict:
        a, env = self.args, self.env
        path = self._test_path(setting) if load else self._best_path(setting)
        if load:
            state = self._load(path)
            # the best checkpoint knows its epoch, not how long training went on after it
            self.train_summary = {"best_epoch": state["early_stopping"]["best_epoch"] + 1, "epochs_run": None}
        model = self.raw_model
        model.eval()
        sums = torch.zeros(5, dtype=torch.float64, device=self.device)
        for batch in self.loaders["test"]:
            sums += error_sums(*self._forward(model, batch, rollout=True))
        metrics = metrics_from_sums(all_reduce_sum(sums))
        metrics.update(
            setting=setting, model=a.model, dataset=self.data.name,
            features=features_code(a),
            seq_len=a.seq_len, output_token_len=a.output_token_len, test_pred_len=a.test_pred_len,
            world_size=env.world_size, global_batch_size=a.batch_size * a.accum_steps * env.world_size,
            learning_rate=a.learning_rate, effective_lr=self.effective_lr,
            n_test_windows=len(self.data.datasets["test"]), checkpoint=path,
            **self.train_summary)
        outputs = make_outputs(env.is_main, a.results_dir, self._run_name(setting))
        outputs.metrics(metrics)
        if a.visualize:
            outputs.forecasts(self._sample_forecasts(model))
        outputs.close()
        log.info("test (%d windows, horizon %d): mse %.6f | mae %.6f | rmse %.6f | mape %.6f | mspe %.6f",
                 metrics["n_test_windows"], a.test_pred_len, metrics["mse"], metrics["mae"], metrics["rmse"],
                 metrics["mape"], metrics["mspe"])
        return metrics

    def _sample_forecasts(self, model: nn.Module, count: int = 4) -> list:
        """A few test windows spread over the test split, rolled out like the test, all channels kept."""
        ds, a = self.data.datasets["test"], self.args
        idx = torch.linspace(0, len(ds) - 1, min(count, len(ds))).round().long()
        batch = ds.gather(idx)
        pred = self._rollout(model, batch, batch.y.shape[1])
        columns = self.data.columns
        windows = []
        for i, window in enumerate(idx.tolist()):
            if a.univariate:
                panels = [(columns[window // ds.n_starts], 0)]
            else:
                panels = [(f"{columns[-1]} (target)", len(columns) - 1)]
                chosen = a.plot_channel % len(columns)
                if chosen != len(columns) - 1:
                    panels.append((columns[chosen], chosen))
            windows.append((f"{self.data.name}: test window {window} of {len(ds)}, horizon {a.test_pred_len}",
                            batch.x[i].cpu().numpy(), batch.y[i].cpu().numpy(), pred[i].cpu().numpy(), panels))
        return windows

    def _load(self, path: str) -> dict:
        state = checkpoint.load(path, self.device)
        checkpoint.load_trainable_state(self.raw_model, state["model"])
        return state
