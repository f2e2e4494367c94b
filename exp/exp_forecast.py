"""Forecasting experiment: one code path for single-process and DDP training, validation and test."""
import logging
import math
import os
import time

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from tqdm import tqdm

from data_provider.factory import DataBundle
from data_provider.windows import Batch, eval_loader, train_loader
from utils import checkpoint
from utils.dist import DistEnv, all_reduce_sum, barrier, global_mean
from utils.early_stopping import EarlyStopping
from utils.metrics import error_sums, metrics_from_sums
from utils.outputs import make_outputs
from utils.schedule import build_scheduler, world_factor

log = logging.getLogger(__name__)


def features_code(args) -> str:
    """M: multivariate, MS: covariates -> target, U: every channel its own series."""
    return "U" if args.univariate else ("MS" if args.covariate else "M")


def setting_name(args, itr: int = 0) -> str:
    """Identity of a trained model: its checkpoint folder, and the start of its results folders."""
    mode = "direct" if args.nonautoregressive else "ar"
    return (f"{args.model_id}_{args.model}_{args.data}_{features_code(args)}_{mode}_sl{args.seq_len}_it{args.input_token_len}"
            f"_ot{args.output_token_len}_lr{args.learning_rate}_bt{args.batch_size}_wd{args.weight_decay}"
            f"_el{args.e_layers}_dm{args.d_model}_dff{args.d_ff}_nh{args.n_heads}_{args.des}_{itr}")


class ExpForecast:
    def __init__(self, args, env: DistEnv, data: DataBundle, model: nn.Module):
        self.args, self.env, self.data = args, env, data
        self.device = env.device
        model = model.to(self.device)
        if env.ddp:
            model = DDP(model, device_ids=[self.device.index] if self.device.type == "cuda" else None,
                        find_unused_parameters=args.find_unused_parameters)
        self.model = model
        self.criterion = nn.MSELoss()
        self.world_factor = world_factor(args.lr_scale, env.world_size)
        self.effective_lr = args.learning_rate * self.world_factor
        # fp16 needs loss scaling; bf16 (used on CPU) keeps fp32's range and does not
        self.amp_dtype = torch.float16 if self.device.type == "cuda" else torch.bfloat16
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=args.use_amp and self.amp_dtype == torch.float16)
        sets, bs = data.datasets, args.batch_size
        self.loaders = {"train": train_loader(sets["train"], bs, env.rank, env.world_size, args.seed),
                        "val": eval_loader(sets["val"], bs, env.rank, env.world_size),
                        "test": eval_loader(sets["test"], bs, env.rank, env.world_size)}
        self.save_checkpoint = checkpoint.save_atomic if env.is_main else (lambda payload, path: None)
        self.history = []  # per-epoch records, kept on every rank
        self.train_summary = {}

    @property
    def raw_model(self) -> nn.Module:
        return self.model.module if isinstance(self.model, DDP) else self.model

    def _select_optimizer(self) -> torch.optim.Optimizer:
        trainable = [p for p in self.model.parameters() if p.requires_grad]  # frozen layers stay out
        return torch.optim.Adam(trainable, lr=self.effective_lr, weight_decay=self.args.weight_decay)

    def _checkpoint_path(self, setting: str) -> str:
        a = self.args
        return os.path.join(a.checkpoints, a.test_dir or setting, a.test_file_name)

    def _run_name(self, setting: str) -> str:
        return f"{setting}_tp{self.args.test_pred_len}"

    # ---- forward: shared by train, vali and test -------------------------------------------------
    def _call(self, model: nn.Module, x: torch.Tensor, batch: Batch, shift: int) -> torch.Tensor:
        x_mark = None if batch.x_mark is None else batch.x_mark[:, shift:shift + self.args.seq_len]
        with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.args.use_amp):
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
        scheduler = build_scheduler(optimizer, a.lradj, a.learning_rate, a.train_epochs, self.world_factor,
                                    len(loader), a.warmup_epochs)
        stopper = EarlyStopping(a.patience)
        outputs = make_outputs(env.is_main, a.results_dir, self._run_name(setting))
        path = self._checkpoint_path(setting)
        log.info("world size %d | global batch %d | lr %.3g x %.3g (%s) = %.3g | %d train windows, %d steps/epoch",
                 env.world_size, a.batch_size * env.world_size, a.learning_rate, self.world_factor, a.lr_scale,
                 self.effective_lr, len(self.data.datasets["train"]), len(loader))
        for epoch in range(a.train_epochs):
            loader.set_epoch(epoch)
            lr = optimizer.param_groups[0]["lr"]
            start = time.perf_counter()
            train_loss = self._train_epoch(loader, optimizer, scheduler, epoch)
            trained = time.perf_counter()
            vali_loss = self.vali(self.loaders["val"], self.criterion, is_test=a.valid_last)
            test_loss = self.vali(self.loaders["test"], self.criterion, is_test=True)
            row = {"epoch": epoch + 1, "train_loss": train_loss, "vali_loss": vali_loss, "test_loss": test_loss,
                   "lr": lr, "train_seconds": trained - start, "eval_seconds": time.perf_counter() - trained}
            if stopper.step(vali_loss, epoch):
                self.save_checkpoint({"model": checkpoint.trainable_state(self.raw_model),
                                      "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                                      "scaler": self.scaler.state_dict(), "epoch": epoch,
                                      "early_stopping": stopper.state_dict(), "args": vars(a)}, path)
            self.history.append(row)
            outputs.epoch(row)
            log.info("epoch %d/%d | train %.6f | vali %.6f | test %.6f | lr %.3g | %.1fs + %.1fs eval%s",
                     epoch + 1, a.train_epochs, train_loss, vali_loss, test_loss, lr, row["train_seconds"],
                     row["eval_seconds"], "" if stopper.counter else " | best")
            if stopper.stop:
                log.info("early stopping: no improvement for %d epochs", a.patience)
                break
        outputs.close()
        self.train_summary = {"best_epoch": stopper.best_epoch + 1, "epochs_run": epoch + 1}
        barrier()  # the best checkpoint is on disk before any rank reads it
        self._load(path)
        return self.model

    def _train_epoch(self, loader, optimizer, scheduler, epoch: int) -> float:
        self.model.train()
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        count = 0
        for batch in tqdm(loader, desc=f"epoch {epoch + 1}", leave=False, disable=not self.env.is_main or None):
            optimizer.zero_grad(set_to_none=True)
            pred, true = self._forward(self.model, batch)
            loss = self.criterion(pred, true)
            self.scaler.scale(loss).backward()
            self.scaler.step(optimizer)
            self.scaler.update()
            scheduler.step()
            total += loss.detach() * len(pred)  # stays on the device: no per-step sync
            count += len(pred)
        return global_mean(total, torch.tensor(count, device=self.device)).item()

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
        if load:
            state = self._load(self._checkpoint_path(setting))
            self.train_summary = {"best_epoch": state["early_stopping"]["best_epoch"] + 1, "epochs_run": None}
        model = self.raw_model
        model.eval()
        sums = torch.zeros(5, dtype=torch.float64, device=self.device)
        for batch in self.loaders["test"]:
            sums += error_sums(*self._forward(model, batch, rollout=True))
        metrics = metrics_from_sums(all_reduce_sum(sums))
        metrics.update(
            setting=setting, model=a.model, data=a.data,
            features=features_code(a),
            seq_len=a.seq_len, output_token_len=a.output_token_len, test_pred_len=a.test_pred_len,
            world_size=env.world_size, global_batch_size=a.batch_size * env.world_size,
            learning_rate=a.learning_rate, effective_lr=self.effective_lr,
            n_test_windows=len(self.data.datasets["test"]), checkpoint=self._checkpoint_path(setting),
            **self.train_summary)
        outputs = make_outputs(env.is_main, a.results_dir, self._run_name(setting))
        outputs.metrics(metrics)
        outputs.close()
        log.info("test (%d windows, horizon %d): mse %.6f | mae %.6f | rmse %.6f | mape %.6f | mspe %.6f",
                 metrics["n_test_windows"], a.test_pred_len, metrics["mse"], metrics["mae"], metrics["rmse"],
                 metrics["mape"], metrics["mspe"])
        return metrics

    def _load(self, path: str) -> dict:
        state = checkpoint.load(path, self.device)
        checkpoint.load_trainable_state(self.raw_model, state["model"])
        return state
