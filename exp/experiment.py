"""One repetition of a run, put together: the model as it runs, the forward, the loss, the evaluator, the trainer
when the plan trains, and the test that ends every run (what it scores, and what it records beside the metrics)."""
import logging
import os

import torch

from data_provider.factory import DataBundle
from exp.evaluator import Evaluator
from exp.forward import Forward
from exp.identity import RunPlan, features_code
from exp.parallel import amp_dtype, distribute
from exp.train_state import load_weights
from exp.trainer import Trainer, TrainingSteps
from utils import interrupt, losses
from utils.dist import DistEnv
from utils.metrics import ORIGINAL, log_line
from utils.outputs import make_outputs
from utils.schedules import world_factor

log = logging.getLogger(__name__)


class Experiment:
    def __init__(self, config, env: DistEnv, data: DataBundle, model: torch.nn.Module, plan: RunPlan, callbacks=()):
        self.config, self.env, self.data, self.plan = config, env, data, plan
        self.running = distribute(model, config, env, data.first_window())
        dtype = amp_dtype(config, env.device)
        # fp16 needs its gradients scaled; bf16 keeps fp32's range (parallel.amp_dtype)
        scaler = torch.amp.GradScaler(env.device.type, enabled=config.use_amp and dtype == torch.float16)
        loss = losses.objective(config.loss, config.quantiles, data.season)
        self.forward = Forward(config, torch.autocast(env.device.type, dtype=dtype, enabled=config.use_amp),
                               loss)
        self.evaluator = Evaluator(config, env, data, self.forward, loss, self.running.sharded)
        self.outputs = make_outputs(env.is_main, config.results_dir, plan.identity, config.tracker,
                                    config.tracker_project)
        self.trainer = Trainer(config, env, data, self.running, plan, self.forward, loss, self.evaluator,
                               self.outputs, scaler, callbacks) if plan.train else None

    def run(self) -> dict:
        """{"history", "metrics", "epoch_seconds"}: epoch_seconds is the training and evaluation time of the rows
        this call trained (not those a resumed or tested run inherited)."""
        summary, history, trained_here = {}, [], []
        if self.trainer is not None:
            log.info(">>> training %s", self.plan.identity.setting)
            summary = self.trainer.train()
            history = self.trainer.state.history
            trained_here = history[self.trainer.rows_resumed:]
        metrics, history = self.test(summary, history)
        log.info("outputs of %s: results %s | checkpoint %s", self.plan.identity.setting,
                 os.path.join(self.plan.results_dir, self.plan.test),
                 self.plan.test_checkpoint or self.config.pretrain_model_path)
        return {"history": history, "metrics": metrics,
                "epoch_seconds": sum(h["train_seconds"] + h["eval_seconds"] for h in trained_here)}

    @torch.no_grad()
    def test(self, summary: dict, history: list) -> tuple:
        """(the test's metrics with what the run is and how it was trained, the run's history). A test-only run
        loads the checkpoint the plan names (zero-shot: the pretrained weights are loaded already)."""
        c, plan = self.config, self.plan
        interrupt.doing(f"while testing {plan.identity.setting}",
                        "its checkpoint is saved: test it again with --is_training 0")
        if plan.test_checkpoint is None:
            summary = {"best_epoch": None, "epochs_run": 0}
        elif not plan.train:
            state = load_weights(self.running, plan.test_checkpoint, self.env.device)
            history = state["history"]
            # the best checkpoint knows its epoch, not how long training went on after it
            summary = {**TrainingSteps.of(c, 1).summary(history, state["early_stopping"]["best_epoch"]),
                       "epochs_run": None}
        model = self.running.raw
        scores, by_window = self.evaluator.test(model)
        metrics = {**scores, **self._record(summary)}
        # only rank 0 plots; under FSDP every rank takes part in its forwards
        plotted = c.visualize and (self.env.is_main or self.running.sharded)
        self.outputs.test(plan.test, metrics, by_window, self.evaluator.sample_forecasts(model) if plotted else ())
        log.info("test (%d windows, horizon %d): %s", metrics["n_test_windows"], c.test_pred_len, log_line(metrics))
        if "owa" in metrics:
            log.info("%s: smape %.4f | mase %.4f | owa %.4f (%s on the same windows: smape %.4f, mase %.4f)",
                     self.data.name, metrics["smape"], metrics["mase"], metrics["owa"], self.data.reference,
                     *(metrics[name] for name in self.evaluator.reference_names))
        if self.data.scaler is not None:
            log.info("on the original scale (%s_original): %s", "<metric>", log_line(metrics, ORIGINAL))
        log.info("calibration, the share of points below each quantile: %s (mean gap %.4f)",
                 " | ".join(f"{q} {share:.3f}" for q, share in metrics["calibration"].items()),
                 metrics["calibration_error"])
        if not self.evaluator.loss.probabilistic:
            log.info("a point forecast is a point mass: its crps is its mae, its intervals have no width")
        return metrics, history

    def _record(self, summary: dict) -> dict:
        """What metrics.json records beside the scores: the run's identity and how it was trained and tested."""
        c, identity = self.config, self.plan.identity
        trained_on = identity.config["training"].get("world_size")  # None: zero-shot, nothing trained here
        training = {} if trained_on is None else dict(
            global_batch_size=c.batch_size * c.accum_steps * trained_on, learning_rate=c.learning_rate,
            effective_lr=c.learning_rate * world_factor(c.lr_scale, trained_on))
        return dict(setting=identity.setting, test=self.plan.test, config_id=identity.config_id, seed=identity.seed,
                    model=c.model, dataset=self.data.name, features=features_code(c), seq_len=c.seq_len,
                    output_token_len=c.output_token_len, test_pred_len=c.test_pred_len, world_size=trained_on,
                    test_world_size=self.env.world_size, **training,
                    checkpoint=self.plan.test_checkpoint or c.pretrain_model_path, **summary, config=identity.config)

