"""Zero-shot throughput of the published forecasters: our wrappers against their publishers' own APIs.

    python scripts/benchmark/foundation.py                       # every package model, CPU (or the GPU)
    python scripts/benchmark/foundation.py --models chronos_bolt --windows 256 --device cuda

For each model it builds a random network with the publisher's own classes (the sizes below: Chronos-Bolt at
chronos-bolt-tiny's published size, Chronos-2, TiRex and TimesFM shrunk so that a CPU runs them in seconds), saves
it in the published format, loads it through --pretrained's path (published() and load_published()), and forecasts
the same windows (windows x channels series, seq_len points, horizon points) both ways, batch by batch:
    ours         the framework's forward: every channel of a batch of windows in one call, on the device
    publisher    ChronosBoltPipeline.predict, Chronos2Pipeline.predict_quantiles, TiRex's forecast or TimesFM's
                 forecast on the same series, as a user calls them (tensors or lists of arrays in, CPU arrays out)
timed in turns after a warm-up of each, and prints the median windows/s of each, their ratio and the largest
difference between the two forecasts. Numbers only; nothing is asserted. Measured numbers live in
docs/foundation.md.
"""
import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import models  # noqa: E402
from models.layers.published import REQUIREMENTS  # noqa: E402
from utils import cli  # noqa: E402
from utils.errors import ConfigError  # noqa: E402

MODELS = ("chronos_bolt", "chronos2", "tirex", "timesfm")
DECILES = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]


def chronos_bolt(folder: str, device: torch.device):
    """amazon/chronos-bolt-tiny's configuration (8.6M parameters), random weights."""
    from chronos.chronos_bolt import ChronosBoltModelForForecasting, ChronosBoltPipeline
    from transformers import T5Config
    config = {"chronos_pipeline_class": "ChronosBoltPipeline", "architectures": ["ChronosBoltModelForForecasting"],
              "chronos_config": {"context_length": 2048, "input_patch_size": 16, "input_patch_stride": 16,
                                 "prediction_length": 64, "quantiles": DECILES, "use_reg_token": True},
              "d_model": 256, "d_ff": 1024, "d_kv": 64, "num_heads": 4, "num_layers": 4, "num_decoder_layers": 4,
              "dropout_rate": 0.1, "feed_forward_proj": "relu", "decoder_start_token_id": 0, "pad_token_id": 0,
              "eos_token_id": 1, "is_encoder_decoder": True, "initializer_factor": 0.05}
    ChronosBoltModelForForecasting(T5Config(**config)).save_pretrained(folder)
    pipeline = ChronosBoltPipeline.from_pretrained(folder, device_map=str(device))

    def publisher(windows: torch.Tensor, horizon: int) -> np.ndarray:
        return pipeline.predict(_series(windows), prediction_length=horizon)[:, DECILES.index(0.5)].numpy()
    return folder, publisher


def chronos2(folder: str, device: torch.device):
    """amazon/chronos-2's layout at 4 layers of width 256 (the published: 12 of 768), its 21 quantile levels,
    random weights; each window's channels one multivariate task, as the pipeline takes a (windows, channels, time)
    tensor."""
    from chronos.chronos2 import Chronos2CoreConfig, Chronos2Model, Chronos2Pipeline
    levels = [0.01, 0.05] + [round(0.1 + 0.05 * i, 2) for i in range(17)] + [0.95, 0.99]
    config = {"chronos_pipeline_class": "Chronos2Pipeline", "architectures": ["Chronos2Model"],
              "chronos_config": {"context_length": 2048, "input_patch_size": 16, "input_patch_stride": 16,
                                 "output_patch_size": 16, "max_output_patches": 4, "quantiles": levels,
                                 "time_encoding_scale": 2048, "use_arcsinh": True, "use_reg_token": True},
              "d_model": 256, "d_ff": 1024, "d_kv": 64, "num_heads": 4, "num_layers": 4, "dropout_rate": 0.1,
              "feed_forward_proj": "relu", "initializer_factor": 0.05, "layer_norm_epsilon": 1e-6,
              "model_type": "t5", "pad_token_id": 0, "reg_token_id": 1, "rope_theta": 10000.0, "vocab_size": 2}
    Chronos2Model(Chronos2CoreConfig(**config)).save_pretrained(folder)
    pipeline = Chronos2Pipeline.from_pretrained(folder, device_map=str(device))

    def publisher(windows: torch.Tensor, horizon: int) -> np.ndarray:
        _, median = pipeline.predict_quantiles(windows.transpose(1, 2), prediction_length=horizon,
                                               quantile_levels=[0.5])
        return torch.stack(median).numpy()  # (windows, channels, horizon)
    return folder, publisher


def tirex(folder: str, device: torch.device):
    """TiRex's published block layout at 4 blocks of width 128 (the published: 12 of 512), random weights."""
    import tirex as package
    from tirex.models.tirex import TiRexZero
    config = {"model_config": {"input_patch_size": 32, "output_patch_size": 32, "quantiles": DECILES,
                               "block_kwargs": {"embedding_dim": 128, "num_heads": 4, "num_blocks": 4},
                               "input_ff_dim": 512}, "train_ctx_len": 2048}
    network = TiRexZero(backend="torch", **config)
    with torch.no_grad():
        for parameter in network.parameters():  # its sLSTM weights start empty, for a checkpoint to fill
            parameter.normal_(0.0, 0.1)
    state = {f"block_stack.{k}" if k.startswith("blocks.") else k: v for k, v in network.state_dict().items()}
    path = os.path.join(folder, "NX-AI", "TiRex")
    os.makedirs(path)
    torch.save({"hyper_parameters": config, "state_dict": state}, os.path.join(path, "model.ckpt"))
    with _cwd(folder):  # its load_model reads the model's name from the path
        api = package.load_model(os.path.join("NX-AI", "TiRex", "model.ckpt"), device=str(device), backend="torch")

    def publisher(windows: torch.Tensor, horizon: int) -> np.ndarray:
        series = _series(windows)
        return api.forecast(series, prediction_length=horizon, batch_size=len(series))[1].numpy()
    return path, publisher


def timesfm(folder: str, device: torch.device):  # its API takes CUDA when there is one
    """TimesFM 2.5's published layout at 4 layers of width 256 (the published: 20 of 1280), random weights, forecast
    with the model card's options."""
    from timesfm import ForecastConfig, configs
    from timesfm.timesfm_2p5 import timesfm_2p5_base, timesfm_2p5_torch
    residual = configs.ResidualBlockConfig
    definition = timesfm_2p5_base.TimesFM_2p5_200M_Definition(
        stacked_transformers=configs.StackedTransformersConfig(num_layers=4, transformer=configs.TransformerConfig(
            model_dims=256, hidden_dims=256, num_heads=4, attention_norm="rms", feedforward_norm="rms",
            qk_norm="rms", use_bias=False, use_rotary_position_embeddings=True, ff_activation="swish",
            fuse_qkv=True)),
        tokenizer=residual(input_dims=64, hidden_dims=256, output_dims=256, use_bias=True, activation="swish"),
        output_projection_point=residual(input_dims=256, hidden_dims=256, output_dims=1280, use_bias=False,
                                         activation="swish"),
        output_projection_quantiles=residual(input_dims=256, hidden_dims=256, output_dims=10240, use_bias=False,
                                             activation="swish"))

    class Module(timesfm_2p5_torch.TimesFM_2p5_200M_torch_module):
        config = definition

    original = timesfm_2p5_torch.TimesFM_2p5_200M_torch_module
    timesfm_2p5_torch.TimesFM_2p5_200M_torch_module = Module  # its wrapper builds the class its file names
    try:
        wrapper = timesfm_2p5_torch.TimesFM_2p5_200M_torch(torch_compile=False)
        with torch.no_grad():
            for parameter in wrapper.model.parameters():
                parameter.normal_(0.0, 0.05)
        wrapper.save_pretrained(folder)
        api = timesfm_2p5_torch.TimesFM_2p5_200M_torch.from_pretrained(folder, torch_compile=False)
    finally:
        timesfm_2p5_torch.TimesFM_2p5_200M_torch_module = original
    options = {"normalize_inputs": True, "use_continuous_quantile_head": True, "force_flip_invariance": True,
               "infer_is_positive": True, "fix_quantile_crossing": True}
    compiled = {}

    def publisher(windows: torch.Tensor, horizon: int) -> np.ndarray:
        series = _series(windows)
        shape = (series.shape[1], horizon, len(series))
        if compiled.get("shape") != shape:
            api.compile(ForecastConfig(max_context=series.shape[1], max_horizon=horizon,
                                       per_core_batch_size=len(series), **options))
            compiled["shape"] = shape
        return api.forecast(horizon, list(series.double().numpy()))[0]
    return folder, publisher, options


def _series(windows: torch.Tensor) -> torch.Tensor:
    """(windows, time, channels) -> (windows x channels, time): every channel a series, as a univariate API takes
    them."""
    return windows.transpose(1, 2).reshape(-1, windows.shape[1])


@contextlib.contextmanager
def _cwd(path: str):
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def ours(name: str, path: str, seq_len: int, horizon: int, channels: int, device: torch.device, extra: dict):
    found = models.model_class(name).published(path)
    task = {"seq_len": seq_len, "input_token_len": 1, "output_token_len": horizon, "enc_in": channels,
            "covariate": False, "n_outputs": 1}
    own = {f.name: f.default for f in models.hyperparameter_fields(models.model_class(name))}
    model = models.build(name, task, {**own, **found.defaults, **extra, **found.hparams})
    model.load_published(path)
    return model.to(device).eval()


def _seconds(fn, device: torch.device) -> tuple:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, out


def _paired(ours_fn, theirs_fn, repeats: int, device: torch.device) -> tuple:
    """Median seconds of each, timed in turns after a warm-up of each, the order swapped every turn (ours first,
    then theirs first), so that neither always follows the other and a machine whose speed drifts slows both alike;
    and the outputs of the last turn."""
    ours_fn(), theirs_fn()  # warm-up: lazy initialisation, allocator, kernels, compiled shapes
    times, outputs = {ours_fn: [], theirs_fn: []}, {}
    for turn in range(repeats):
        for fn in (ours_fn, theirs_fn) if turn % 2 == 0 else (theirs_fn, ours_fn):
            seconds, outputs[fn] = _seconds(fn, device)
            times[fn].append(seconds)
    return statistics.median(times[ours_fn]), statistics.median(times[theirs_fn]), outputs[ours_fn], outputs[theirs_fn]


def bench(name: str, args, device: torch.device) -> dict:
    builders = {"chronos_bolt": chronos_bolt, "chronos2": chronos2, "tirex": tirex, "timesfm": timesfm}
    with tempfile.TemporaryDirectory() as folder:
        torch.manual_seed(0)
        built = builders[name](folder, device)
        path, publisher, extra = built if len(built) == 3 else (*built, {})
        model = ours(name, path, args.seq_len, args.horizon, args.channels, device, extra)
        generator = torch.Generator().manual_seed(1)
        windows = torch.randn(args.windows, args.seq_len, args.channels, generator=generator).cumsum(1) + 20
        batches = windows.split(args.batch_size)

        @torch.no_grad()
        def run_ours():
            return torch.cat([model(batch.to(device)).cpu() for batch in batches])

        def run_publisher():  # the same windows; per window its channels, one after another
            return np.concatenate([np.asarray(publisher(batch, args.horizon)).reshape(len(batch), args.channels, -1)
                                   for batch in batches])

        ours_s, theirs_s, ours_out, theirs_out = _paired(run_ours, run_publisher, args.repeats, device)
        theirs_out = torch.from_numpy(np.asarray(theirs_out)).float()
        theirs_out = theirs_out.reshape(args.windows, args.channels, args.horizon).transpose(1, 2)
        return {"model": name, "parameters": sum(p.numel() for p in model.parameters()),
                "ours": args.windows / ours_s, "publisher": args.windows / theirs_s,
                "max_diff": (ours_out - theirs_out).abs().max().item()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--windows", type=int, default=64, help="test windows forecast")
    parser.add_argument("--channels", type=int, default=7, help="channels per window (ETTh1: 7)")
    parser.add_argument("--seq_len", type=int, default=512)
    parser.add_argument("--horizon", type=int, default=96)
    parser.add_argument("--batch_size", type=int, default=16, help="windows per batch (x channels series)")
    parser.add_argument("--repeats", type=int, default=5, help="timed turns of each (the median is printed)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    args = parser.parse_args(argv)
    chosen = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(chosen) - set(MODELS))
    if unknown or not chosen:
        raise ConfigError(f"--models {args.models}: choose among {', '.join(MODELS)}")
    for flag in ("windows", "channels", "seq_len", "horizon", "batch_size", "repeats"):
        if getattr(args, flag) < 1:
            raise ConfigError(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device here")
    device = torch.device("cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu")
    print(f"device {device}, threads {torch.get_num_threads()}, {args.windows} windows x {args.channels} channels, "
          f"seq_len {args.seq_len}, horizon {args.horizon}, batch {args.batch_size} windows")
    print(f"{'model':14s} {'parameters':>11s} {'ours w/s':>10s} {'publisher w/s':>14s} {'ratio':>6s} {'max diff':>9s}")
    for name in chosen:
        try:
            row = bench(name, args, device)
        except ImportError as e:
            raise ConfigError(f"{name} needs {e.name}: {REQUIREMENTS}") from None
        print(f"{row['model']:14s} {row['parameters']:11,d} {row['ours']:10.1f} {row['publisher']:14.1f} "
              f"{row['ours'] / row['publisher']:6.2f} {row['max_diff']:9.2e}")


if __name__ == "__main__":
    cli.run(main)
