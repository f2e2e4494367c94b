"""Every evaluation of a run: which windows, when, how they are forecast, and the exact global reductions that make
N ranks score as one process.

`evaluations(config)` is the one place that says what is evaluated: the validation loss after each history row
(early stopping and the best checkpoint read it), the test loss beside it, the best model's validation on more
windows at the end, and the test. Each names a split, how many of its windows (a fixed seeded subset, or all),
whether forecasts are rolled out as a test scores them, and whether incomplete global batches are dropped.
"""
import math
from dataclasses import dataclass

import torch
from torch import nn

from data_provider.factory import DataBundle
from data_provider.windows import eval_loader, eval_windows, sampled
from exp.forward import Forward
from utils.dist import DistEnv, all_reduce_max, all_reduce_sum, global_mean
from utils.metrics import (calibration, calibration_summary, metrics_from_windows, names, point_forecast,
                           reported_names, sample_forecast, window_errors)
from utils.m4 import owa
from utils.metrics.short_term import RELATIVE


@dataclass(frozen=True)
class Evaluation:
    split: str         # val or test
    windows: int       # a fixed seeded subset of this many (0: all)
    rollout: bool      # forecast as a test is scored: the horizon after the window, rolled out
    drop_last: bool    # only the windows that fill whole global batches (--test_drop_last)


ROW = ("validation", "row test")  # scored after every history row, in this order
BANDS = (90, 80, 50)  # the central intervals --visualize shades, widest first


def evaluations(config) -> dict:
    """name -> Evaluation of what this run evaluates (None: not evaluated)."""
    c = config
    test = Evaluation("test", c.test_windows, True, c.test_drop_last)
    return {
        "validation": Evaluation("val", c.val_windows, c.valid_last, False),
        # the test split scored as the test scores it, or on the validation's number of windows
        "row test": None if c.no_epoch_test else
        Evaluation("test", c.val_windows, True, False) if c.val_windows else test,
        # --val_windows chose the best model on a subset: score it on more
        "final validation": Evaluation("val", c.val_windows_end, c.valid_last, False) if c.val_windows else None,
        "test": test,
    }


class Evaluator:
    def __init__(self, config, env: DistEnv, data: DataBundle, forward: Forward, loss, lockstep: bool):
        """loss: the training loss (utils.losses.Objective), which validation reports and whose forecasts the
        metrics read. lockstep: a forward is a collective (FSDP gathers each block's parameters from every rank)."""
        self.config, self.env, self.data, self.forward, self.loss = config, env, data, forward, loss
        self.lockstep = lockstep
        scaler = data.scaler  # its statistics as tensors once, for every test batch's original-scale metrics
        self.standardisation = None if scaler is None else tuple(
            torch.as_tensor(v, dtype=torch.float64, device=env.device) for v in (scaler.std, scaler.mean))
        self.plan = evaluations(config)
        # the metrics of the data's reference forecast (M4's Naive2) that OWA divides by, named after it
        self.reference_names = () if data.reference is None else tuple(f"{m}_{data.reference}" for m in RELATIVE)
        self.loaders = {name: self._loader(e) for name, e in self.plan.items() if e is not None}

    def _loader(self, e: Evaluation):
        windows = sampled(self.data.datasets[e.split], e.windows, self.config.seed)
        return eval_loader(windows, self.config.batch_size, self.env.rank, self.env.world_size, e.drop_last)

    def row_losses(self, model: nn.Module) -> dict:
        """vali_loss and test_loss of a history row (test_loss nan when not scored)."""
        return {"vali_loss": self.mean_loss(model, "validation"),
                "test_loss": self.mean_loss(model, "row test") if self.plan["row test"] else math.nan}

    def final_validation(self, model: nn.Module) -> dict:
        if not self.plan["final validation"]:
            return {}
        return {"vali_loss_end": self.mean_loss(model, "final validation"),
                "vali_windows_end": len(self.loaders["final validation"].dataset)}

    @torch.no_grad()
    def mean_loss(self, model: nn.Module, name: str) -> float:
        """Exact global mean of the per-window loss over the evaluation's windows, identical on every rank."""
        rollout = self.plan[name].rollout
        model.eval()
        total = torch.zeros((), dtype=torch.float64, device=self.env.device)
        count = 0
        for batch, scored in self._batches(self.loaders[name]):
            pred, true, _ = self.forward(model, batch, rollout=rollout)
            if scored:
                total += self.loss(pred, true, batch.x).double() * len(pred)
                count += len(pred)
        model.train()
        return global_mean(total, torch.tensor(count, device=self.env.device)).item()

    @torch.no_grad()
    def test(self, model: nn.Module) -> tuple:
        """(metrics, each window's errors as metric name -> float32 array), the same on every rank. Data with a
        reference forecast (M4's Naive2) add its sMAPE and MASE on the same windows and OWA, the ratio to them."""
        model.eval()
        table = self.window_errors(model, "test")
        columns = reported_names() + self.reference_names
        errors, shares = table[:, :len(columns)], table[:, len(columns):]
        by_window = {name: column.float().cpu().numpy() for name, column in zip(columns, errors.T)}
        scores = metrics_from_windows(errors[:, :len(reported_names())])
        if self.reference_names:
            scores.update(zip(self.reference_names, errors[:, len(reported_names()):].mean(0).tolist()))
            scores["owa"] = owa(*(scores[name] for name in (*RELATIVE, *self.reference_names)))
        return {**scores, "n_test_windows": len(errors), **calibration_summary(shares, self.config.quantiles)}, \
            by_window

    def window_errors(self, model: nn.Module, name: str) -> torch.Tensor:
        """(windows of the evaluation, metrics on the scaled data, on the original scale, the reference's relative
        metrics where the data have a reference forecast, then the quantile grid's levels): every window's errors
        and calibration shares, on every rank. Each rank fills the rows of its own windows and zeros elsewhere, so
        the all_reduce puts every window's values in place unchanged."""
        loader, drop_last = self.loaders[name], self.plan[name].drop_last
        rows = loader.indices()
        scored, done = [], 0
        for batch, keep in self._batches(loader):  # a window's number seeds its sample paths (--num_samples)
            windows = rows[done:done + len(batch.x)] if keep else torch.zeros(len(batch.x), dtype=torch.long)
            errors = self._errors(loader.dataset, batch, windows,
                                  *self.forward(model, batch, rollout=True, windows=windows)[:2])
            if keep:
                scored.append(errors)
                done += len(batch.x)
        n = eval_windows(len(loader.dataset), self.config.batch_size, self.env.world_size, drop_last)
        width = len(reported_names()) + len(self.reference_names) + len(self.config.quantiles)
        table = torch.zeros(n, width, dtype=torch.float64, device=self.env.device)
        if scored:
            table[rows.to(self.env.device)] = torch.cat(scored)
        return all_reduce_sum(table)

    def _errors(self, dataset, batch, windows: torch.Tensor, pred: torch.Tensor, true: torch.Tensor) -> torch.Tensor:
        """Each window's metrics, on the scaled data and the original scale, its reference's relative metrics, and
        calibration shares; the scaled metrics read its input on the forecast's channels (the target's alone in
        covariate mode), or the scale the data give."""
        scale = dataset.window_scale(windows)
        forecast = (sample_forecast(pred, self.config.quantiles) if self.config.num_samples else
                    self.loss.forecast(pred)).given(batch.x[:, :, -true.shape[2]:], self.data.season, scale)
        parts = [window_errors(forecast, true, self._scale(dataset, windows, true))]
        if self.reference_names:
            reference = point_forecast(dataset.window_reference(windows)).given(batch.x, self.data.season, scale)
            parts.append(window_errors(reference, true)[:, [names().index(m) for m in RELATIVE]])
        return torch.cat([*parts, calibration(forecast, true)], dim=1)

    def _scale(self, dataset, windows: torch.Tensor, true: torch.Tensor) -> tuple:
        """(std, mean) of the standardisation of each window's forecast channels, broadcastable to its points: the
        target's in covariate mode, a univariate window's own channel's; (None, None) for a corpus, scaled per
        series or window."""
        if self.standardisation is None:
            return None, None
        std, mean = self.standardisation
        if self.config.univariate:
            channel = dataset.channels(windows).to(true.device)  # positions in the evaluation's (sampled) view
            return std[channel].view(-1, 1, 1), mean[channel].view(-1, 1, 1)
        return std[-true.shape[2]:], mean[-true.shape[2]:]

    def _batches(self, loader):
        """(batch, scored) of an evaluation. In lockstep every rank runs as many forwards as the rank with the most
        batches: one with fewer adds forwards of a filler batch (the split's first window) whose output is not
        scored."""
        # agreed before the first forward: a rank that reached the reduction after its batches would wait there
        # for a rank still gathering parameters for its own
        most = int(all_reduce_max(torch.tensor(len(loader), device=self.env.device)).item()) if self.lockstep else 0
        yield from ((batch, True) for batch in loader)
        if most > len(loader):
            filler = loader.dataset.gather(torch.tensor([0]))
            yield from ((filler, False) for _ in range(most - len(loader)))

    def sample_forecasts(self, model: nn.Module, count: int = 4) -> list:
        """A few test windows spread over the test split, rolled out like the test, all channels kept: (title,
        history, truth, forecast, panels, bands) for the plots of --visualize; bands: central interval percent ->
        (low, high), for a probabilistic forecast whose quantiles reach them."""
        ds, c, columns = self.data.datasets["test"], self.config, self.data.columns
        idx = torch.linspace(0, len(ds) - 1, min(count, len(ds))).round().long()
        batch = ds.gather(idx)
        if c.num_samples:
            forecast = sample_forecast(self.forward.sample_paths(model, batch, batch.y.shape[1], idx), c.quantiles)
        else:
            forecast = self.loss.forecast(self.forward.rollout(model, batch, batch.y.shape[1]))
        pred, bands = forecast.point.float(), {}
        if self.loss.probabilistic:
            levels = torch.tensor([q for p in BANDS for q in (0.5 - p / 200, 0.5 + p / 200)], dtype=torch.float64)
            quantiles = forecast.quantile(levels).float()
            bands = {p: (quantiles[..., 2 * i], quantiles[..., 2 * i + 1]) for i, p in enumerate(BANDS)
                     if not quantiles[..., 2 * i:2 * i + 2].isnan().any()}
        missing = batch.y.shape[-1] - pred.shape[-1]  # an exogenous model forecasts the target (last) channel alone
        pad = (lambda t: torch.nn.functional.pad(t, (missing, 0), value=float("nan"))) if missing else (lambda t: t)
        pred, bands = pad(pred), {p: (pad(low), pad(high)) for p, (low, high) in bands.items()}
        windows = []
        for i, window in enumerate(idx.tolist()):
            if c.univariate:
                panels = [(ds.series_name(window, columns), 0)]
            else:
                panels = [(f"{columns[-1]} (target)", len(columns) - 1)]
                chosen = c.plot_channel % len(columns)  # in range: checked at start-up
                if chosen != len(columns) - 1:
                    panels.append((columns[chosen], chosen))
            if self.data.standardised:
                panels = [(f"{name} (scaled)", channel) for name, channel in panels]
            windows.append((f"{self.data.name}: test window {window} of {len(ds)}, horizon {c.test_pred_len}",
                            batch.x[i].cpu().numpy(), batch.y[i].cpu().numpy(), pred[i].cpu().numpy(), panels,
                            {p: (low[i].cpu().numpy(), high[i].cpu().numpy()) for p, (low, high) in bands.items()}))
        return windows
