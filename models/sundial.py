import hashlib
import math
import struct
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models import timer_hf
from models.base import Capabilities, Published, d_ff, d_model, dropout, e_layers, hparam, n_heads
from models.layers.dropout import Dropout
from models.layers.outputs import sample_quantiles
from models.layers.published import horizon_hparam, levels, load_safetensors, mapped_state, quantile_levels_hparam
from models.layers.transformer import init_linear, rotary_tables

WHAT = "a Sundial checkpoint (model_type sundial, as thuml/sundial-base-128m)"
INIT_STD = timer_hf.INIT_STD  # the publisher's initializer_range: every Linear ~ N(0, 0.02), biases 0 (its head too)
# what the publisher's SundialConfig assumes where a config.json leaves a field out (sundial-base-128m's sizes)
CONFIG_DEFAULTS = {"input_token_len": 16, "hidden_size": 768, "intermediate_size": 3072, "output_token_lens": [720],
                   "num_hidden_layers": 12, "num_attention_heads": 12, "hidden_act": "silu", "use_cache": True,
                   "dropout_rate": 0.1, "flow_loss_depth": 3, "num_sampling_steps": 50, "diffusion_batch_mul": 4}
TIME_FREQUENCIES = 256  # width of the sinusoidal embedding of the flow time (the publisher's frequency_embedding_size)
TIME_PERIOD = 10000.0  # its longest period
TIME_SCALE = 1000.0  # the flow time t in [0, 1) enters the network as 1000 t
SCALE_EPS = 1e-5  # generate's revin: the window's standard deviation + 1e-5
HEAD_NORM_EPS = 1e-6


class DecoderLayer(timer_hf.DecoderLayer):
    """Timer's decoder layer (the same modules: causal rotary attention with biased q, k, v and a bias-free output,
    a bias-free SwiGLU block, two LayerNorms) with its norms before each block: x + attention(norm1(x)), then
    x + SwiGLU(norm2(x)) (Timer normalises after the residual sums)."""

    def forward(self, h: torch.Tensor, rotary) -> torch.Tensor:
        h = h + self.attention(self.norm1(h), rotary=rotary, is_causal=True)
        return h + self.ffn(self.norm2(h))


class PatchEmbedding(nn.Module):
    """Patches of patch_len points beside their mask (1 observed, 0 the zeros that pad the first patch on the left to
    whole length) -> out(silu(hidden(p))) (with dropout) + residual(p): the publisher's residual-MLP embedding."""

    def __init__(self, patch_len: int, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.patch_len = patch_len
        self.hidden = nn.Linear(2 * patch_len, d_ff)
        self.out = nn.Linear(d_ff, d_model)
        self.residual = nn.Linear(2 * patch_len, d_model)
        self.dropout = Dropout(dropout)

    def forward(self, series: torch.Tensor) -> torch.Tensor:
        pad = -series.shape[-1] % self.patch_len
        points = F.pad(series, (pad, 0)).unfold(-1, self.patch_len, self.patch_len)
        mask = F.pad(torch.ones_like(series), (pad, 0)).unfold(-1, self.patch_len, self.patch_len)
        p = torch.cat([points, mask], dim=-1)
        return self.dropout(self.out(F.silu(self.hidden(p)))) + self.residual(p)


class AdaLNBlock(nn.Module):
    """x + gate * mlp(LayerNorm(x) * (1 + scale) + shift), (shift, scale, gate) = modulation(silu(y)): a residual
    block of the flow network, modulated by y (the flow time's embedding + the condition's)."""

    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width, eps=HEAD_NORM_EPS)
        self.mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.modulation = nn.Linear(width, 3 * width)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        shift, scale, gate = self.modulation(F.silu(y)).chunk(3, dim=-1)
        return x + gate * self.mlp(self.norm(x) * (1 + scale) + shift)


class FlowHead(nn.Module):
    """TimeFlow's network (the publisher's SimpleMLPAdaLN): from a noised patch x of `length` points, the flow time t
    and the backbone's hidden state z, the clean patch it predicts. y = time(sinusoids(1000 t)) + condition(z)
    modulates every block and the final LayerNorm (no affine); input and output are linear maps of the patch."""

    def __init__(self, length: int, d_model: int, width: int, depth: int):
        super().__init__()
        self.time = nn.Sequential(nn.Linear(TIME_FREQUENCIES, width), nn.SiLU(), nn.Linear(width, width))
        self.condition = nn.Linear(d_model, width)
        self.input = nn.Linear(length, width)
        self.blocks = nn.ModuleList(AdaLNBlock(width) for _ in range(depth))
        self.final_norm = nn.LayerNorm(width, elementwise_affine=False, eps=HEAD_NORM_EPS)
        self.final_modulation = nn.Linear(width, 2 * width)
        self.output = nn.Linear(width, length)
        half = TIME_FREQUENCIES // 2  # on the CPU, as the publisher computes them, then moved with the model
        self.register_buffer("frequencies", torch.exp(-math.log(TIME_PERIOD) * torch.arange(half, dtype=torch.float32)
                                                      / half), persistent=False)

    def embed_time(self, t: torch.Tensor) -> torch.Tensor:
        """The time's part of y for flow times t (rows,) in [0, 1)."""
        angles = (t * TIME_SCALE)[:, None] * self.frequencies[None]
        return self.time(torch.cat([angles.cos(), angles.sin()], dim=-1))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The predicted clean patch (..., length) for noised patches x (..., length) under y (broadcast to x's rows:
        the same y for every sample of a series)."""
        h = self.input(x)
        for block in self.blocks:
            h = block(h, y)
        shift, scale = self.final_modulation(F.silu(y)).chunk(2, dim=-1)
        return self.output(self.final_norm(h) * (1 + scale) + shift)


class Model(nn.Module):
    """Sundial as thuml publishes it on Hugging Face (thuml/sundial-base-128m: config.json of model_type "sundial" and
    model.safetensors, the publisher's SundialForPrediction): a decoder-only Transformer over patches of one series
    whose last hidden state conditions a flow-matching head (TimeFlow) that turns Gaussian noise into sample forecasts;
    generate(seqs, max_new_tokens=H, num_samples=N) gives N of them.

    Liu, Qin, Huang, Wang, Long. "Sundial: A Family of Highly Capable Time Series Foundation Models." ICML 2025.
    https://arxiv.org/abs/2502.00816 - the checkpoint: https://huggingface.co/thuml/sundial-base-128m (its
    configuration_sundial.py, modeling_sundial.py, flow_loss.py, ts_generation_mixin.py).

    Network. Every channel is its own series (the published model is univariate). The window is scaled by its mean
    and standard deviation (+1e-5; generate's revin), cut into patches of patch_len points, the first padded on the
    left with zeros to whole length, each patch beside its mask of observed points embedded by a residual MLP
    (hidden width d_ff, SiLU), then e_layers pre-LayerNorm decoder layers (Timer's layer of models/timer_hf.py with
    its norms moved before each block: causal attention with rotary position embedding over the whole head on the
    patch index, base 10000, and a bias-free SwiGLU block) and a final LayerNorm. The flow head predicts from a noised
    patch of `horizon` points, the flow time and the last patch's hidden state the clean patch: flow_layers residual
    blocks of width d_model modulated adaptively (adaLN) by the time's sinusoidal embedding plus the state's.

    Forecast: generate's, step for step. Each step draws `samples` noise patches x0 and integrates the flow by
    flow_steps Euler steps: x += (head(x, i / flow_steps) - x0) / flow_steps. A horizon beyond `horizon` points rolls
    out: the samples' median (torch.median: the lower middle one for an even count) is appended to the scaled
    sequence and the decoder runs over the whole of it again (what generate's key-value cache computes in parts,
    attention being causal); the samples of every step are concatenated, cut to output_token_len and scaled back.
    With n_outputs 1 the forecast is the samples' mean (the point forecast of the publisher's usage, TSLib's wrapper:
    mean of 20); with n_outputs k the k quantile_levels of the samples (empirical, linear between order statistics
    as torch.quantile), for --loss quantile.

    Noise. Under DDP a test must score what one process scores, and a run must repeat itself, so the samples may
    depend neither on the batch a window lands in nor on the global random state. Each series therefore draws its
    noise from a torch.Generator of its own on the CPU, seeded by a hash (BLAKE2b) of noise_seed and the float32
    bytes of the series as forward receives it, step after step (a longer horizon continues the stream: its first
    points are the shorter forecast's); the noise then moves to the device. The same window gives the same samples
    in any batch position, on any rank, in eval and training mode alike (up to the rounding of matrix products of
    another batch size): a test under DDP scores what one process scores. `noise(series, steps)` returns it; nothing
    else is random in a forecast. As the noise follows the input's bytes, a scaled or shifted window draws other
    noise: the forecast follows the input's scale and shift in distribution (generate's scaling), not sample for
    sample, and the framework's per-dataset standardisation is part of what seeds it.

    Training. forward in training mode returns (forecast, {"flow": flow_loss_weight x the flow-matching loss}), the
    forecast computed as in eval mode (the same per-series noise; dropout aside) and differentiable through every
    Euler step, so that the framework's loss (MSE on the mean, or the quantile loss on the samples' quantiles)
    trains what it scores. The flow term is the publisher's training objective (SundialForPrediction.forward with
    labels, FlowLoss.forward) on the window itself: every patch but the last gets the next `horizon` points of the
    scaled window as target (points beyond the window masked, as its mask_y masks them), replicated flow_replicas
    times (its diffusion_batch_mul), each with noise x0 and a time t ~ U[0, 1) drawn from the global random state
    (the framework seeds it per rank, like dropout); the loss is sum_j (1/j) (head(t y + (1 - t) x0) - y)_j^2 over a
    patch's points j, averaged over the rows. The term keeps the head a calibrated generative model, which a point
    loss on the forecast alone would not constrain (MSE on the samples' mean ignores their spread); it reuses the
    forecast's first pass over the window (one decoder pass), so the window is scaled as generate scales it. Under
    DDP its draws are each rank's own, so training equals one process's in distribution (as dropout does); weight 0
    trains on the framework's loss alone, deterministic and like one process exactly. The cost of a training
    forecast is that of flow_steps head passes over samples rows per series with their activations kept: lower
    samples or flow_steps to fine-tune cheaply.

    Deviations: the training term scales the window by its standard deviation + 1e-5 (generate's), where the
    publisher's forward scales by the standard deviation, or 1 where it is at most 0.01; its targets are points of the
    window only (the framework gives forward nothing else). A test horizon beyond output_token_len (--test_pred_len)
    is rolled out by the framework with the point forecast fed back: for the publisher's forecast of H points give
    --output_token_len H. A config.json with use_cache false (whose generate keeps only the last step's samples), a
    hidden_act other than silu or a last output_token_lens that is no multiple of input_token_len is refused. Of
    output_token_lens only the last is read: the head generates that many points, and the earlier ones only choose
    where generate cuts its last step, which the final cut to H does alike. rope_theta and max_position_embeddings
    are read by neither (the rotary base is always 10000; the context is unbounded).

    Defaults are sundial-base-128m's configuration (128M parameters).
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=False, multi_output=True, aux_loss=True)
    head_modules = ("head",)

    @dataclass
    class Config:
        d_model: int = d_model(768)
        n_heads: int = n_heads(12)
        e_layers: int = e_layers(12)
        d_ff: int = d_ff(3072)
        dropout: float = dropout(0.1)
        patch_len: int = hparam(16, "points per input patch (and the stride between patches)", tiny=8, low=1)
        horizon: int = horizon_hparam(720, tiny=8)
        flow_layers: int = hparam(3, "residual blocks of the flow-matching head (the publisher's flow_loss_depth)",
                                  tiny=1, low=0)
        flow_steps: int = hparam(50, "Euler steps of the flow from noise to a sample (the publisher's "
                                     "num_sampling_steps)", tiny=4, low=1)
        samples: int = hparam(20, "sample forecasts drawn per series: their mean is the point forecast, their "
                                  "empirical quantiles the quantile_levels", tiny=8, low=1)
        quantile_levels: str = quantile_levels_hparam()
        noise_seed: int = hparam(0, "mixed with each series' values into the seed of its own noise generator: the "
                                    "same window gives the same samples in any batch, on any rank", low=0)
        flow_loss_weight: float = hparam(1.0, "weight of the flow-matching loss on the window's patches in training "
                                              "(0: the framework's loss on the forecast alone)", low=0.0)
        flow_replicas: int = hparam(4, "noise draws per patch in the flow-matching loss (the publisher's "
                                       "diffusion_batch_mul)", tiny=2, low=1)

    def __init__(self, configs):
        super().__init__()
        quantiles = levels(configs.quantile_levels)
        if configs.n_outputs not in (1, len(quantiles)):
            raise ValueError(f"forecasts the mean of its samples or their {len(quantiles)} quantiles "
                             f"({configs.quantile_levels}): a point loss or --loss quantile with those --quantiles "
                             f"(not {configs.n_outputs} values per point)")
        if configs.d_model % configs.n_heads or (configs.d_model // configs.n_heads) % 2:
            raise ValueError(f"Sundial needs d_model {configs.d_model} divisible by n_heads {configs.n_heads} and an "
                             "even head size (rotary embedding)")
        if configs.horizon % configs.patch_len:
            raise ValueError(f"horizon {configs.horizon} must be a multiple of patch_len {configs.patch_len}: a "
                             "longer forecast appends the head's points as whole patches")
        self.patch_len, self.horizon, self.out_len = configs.patch_len, configs.horizon, configs.output_token_len
        self.n_outputs, self.n_samples, self.flow_steps = configs.n_outputs, configs.samples, configs.flow_steps
        self.noise_seed, self.flow_loss_weight = configs.noise_seed, configs.flow_loss_weight
        self.flow_replicas = configs.flow_replicas
        self.head_dim = configs.d_model // configs.n_heads
        self.architecture = {"d_model": configs.d_model, "n_heads": configs.n_heads, "e_layers": configs.e_layers,
                             "d_ff": configs.d_ff, "patch_len": self.patch_len, "horizon": self.horizon,
                             "flow_layers": configs.flow_layers}
        self.register_buffer("levels", torch.tensor(quantiles), persistent=False)
        self.embedding = PatchEmbedding(self.patch_len, configs.d_model, configs.d_ff, configs.dropout)
        self.layers = nn.ModuleList(DecoderLayer(configs.d_model, configs.n_heads, configs.d_ff, configs.dropout)
                                    for _ in range(configs.e_layers))
        self.norm = nn.LayerNorm(configs.d_model)
        self.head = FlowHead(self.horizon, configs.d_model, configs.d_model, configs.flow_layers)
        init_linear(self, INIT_STD)

    @staticmethod
    def published(path: str) -> Published:
        config = timer_hf.thuml_config(path, "sundial", WHAT, CONFIG_DEFAULTS,
                                       "returns only the last step's samples of a longer forecast")
        lengths = config["output_token_lens"]
        if not isinstance(lengths, list) or not lengths or not all(isinstance(n, int) and n > 0 for n in lengths):
            raise ValueError(f"expected output_token_lens, a list of positive lengths; found {lengths!r}")
        if lengths[-1] % config["input_token_len"]:
            raise ValueError(f"expected a last output_token_lens (the flow head's length) that is a multiple of "
                             f"input_token_len {config['input_token_len']} (a longer forecast appends whole patches); "
                             f"found {lengths}")
        hparams = {"d_model": config["hidden_size"], "n_heads": config["num_attention_heads"],
                   "e_layers": config["num_hidden_layers"], "d_ff": config["intermediate_size"],
                   "patch_len": config["input_token_len"], "horizon": lengths[-1],
                   "flow_layers": config["flow_loss_depth"]}
        defaults = {"dropout": config["dropout_rate"], "flow_steps": config["num_sampling_steps"],
                    "flow_replicas": config["diffusion_batch_mul"]}
        return Published(hparams, defaults=defaults)

    def load_published(self, path: str) -> None:
        load_safetensors(self, path, WHAT)

    def from_published(self, weights: dict) -> dict:
        """This model's state dict from the publisher's (SundialForPrediction's keys); ValueError naming the keys
        missing, unexpected or of another shape."""
        return mapped_state(weights, published_names(len(self.layers), len(self.head.blocks)), self.state_dict(),
                            f"a Sundial of e_layers {len(self.layers)} and flow_layers {len(self.head.blocks)}")

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None):
        B, L, C = x.shape
        samples, hidden, context = self._generate(x.transpose(1, 2).reshape(B * C, L))
        if self.n_outputs == 1:
            out = samples.mean(1)  # (B * C, output_token_len)
        else:
            out = sample_quantiles(samples, self.levels)  # (B * C, output_token_len, k)
        out = out.unflatten(0, (B, C)).transpose(1, 2)
        if not self.training:
            return out
        if self.flow_loss_weight == 0:
            return out, {"flow": torch.zeros((), device=x.device)}
        return out, {"flow": self.flow_loss_weight * self.flow_loss(hidden, context)}

    def samples(self, series: torch.Tensor) -> torch.Tensor:
        """generate(series, max_new_tokens=output_token_len, num_samples=samples) on a batch of series (series,
        time): the samples (series, samples, output_token_len)."""
        return self._generate(series)[0]

    def _generate(self, series: torch.Tensor) -> tuple:
        """The samples (series, samples, output_token_len), the first pass's hidden states (series, patches, d_model)
        and the scaled window."""
        mean = series.mean(-1, keepdim=True)
        std = series.std(-1, keepdim=True, unbiased=False) + SCALE_EPS
        context = (series - mean) / std
        steps = -(-self.out_len // self.horizon)
        noise = self.noise(series, steps)
        sequence, drawn, first = context, [], None
        for step in range(steps):
            hidden = self.decode(sequence)
            first = hidden if first is None else first
            drawn.append(self.flow(hidden[:, -1], noise[:, step]))
            if step + 1 < steps:
                sequence = torch.cat([sequence, drawn[-1].median(dim=1).values], dim=-1)
        samples = torch.cat(drawn, dim=-1)[..., :self.out_len] * std[:, None] + mean[:, None]
        return samples, first, context

    def decode(self, sequence: torch.Tensor) -> torch.Tensor:
        """The final hidden states (series, patches, d_model) of a scaled sequence (series, time)."""
        h = self.embedding(sequence)
        rotary = rotary_tables(torch.arange(h.shape[1], device=h.device), self.head_dim)
        for layer in self.layers:
            h = layer(h, rotary)
        return self.norm(h)

    def flow(self, z: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Samples (series, samples, horizon) from noise x0 of that shape under hidden states z (series, d_model):
        flow_steps Euler steps x += (head(x, t) - x0) dt, t = i / flow_steps, dt = 1 / flow_steps (FlowLoss.sample).
        The time's and the condition's embeddings are computed once per step and series, for all its samples."""
        condition = self.head.condition(z)[:, None]  # (series, 1, width)
        x, dt = noise, 1.0 / self.flow_steps
        for i in range(self.flow_steps):
            t = torch.full((1,), float(i), device=z.device) / self.flow_steps  # float32, as the publisher's
            x = x + (self.head(x, self.head.embed_time(t) + condition) - noise) * dt
        return x

    def noise(self, series: torch.Tensor, steps: int) -> torch.Tensor:
        """Standard normal noise (series, steps, samples, horizon) on series' device: row i from a CPU generator
        seeded by BLAKE2b(noise_seed, series[i] as float32 bytes), one draw of (samples, horizon) per step."""
        values = series.detach().to("cpu", torch.float32).contiguous().numpy()
        out = torch.empty(len(values), steps, self.n_samples, self.horizon)
        for i, row in enumerate(values):
            digest = hashlib.blake2b(struct.pack("<q", self.noise_seed) + row.tobytes(), digest_size=8).digest()
            generator = torch.Generator().manual_seed(int.from_bytes(digest, "little"))
            for step in range(steps):
                out[i, step] = torch.randn(self.n_samples, self.horizon, generator=generator)
        return out.to(device=series.device, dtype=series.dtype)

    def flow_loss(self, hidden: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """The publisher's flow-matching loss on the window: each patch's hidden state (series, patches, d_model)
        against the next `horizon` points of the scaled window (series, time) after it, masked beyond the window,
        flow_replicas times; patches with no point after them (the last) have none."""
        n_patches, length = hidden.shape[1], context.shape[1]
        ends = self.patch_len * torch.arange(1, n_patches + 1, device=context.device) - (-length % self.patch_len)
        index = ends[:, None] + torch.arange(self.horizon, device=context.device)  # (patches, horizon)
        rows = index[:, 0] < length
        if not rows.any():
            return hidden.sum() * 0
        index, inside = index[rows].clamp(max=length - 1), (index[rows] < length).to(context.dtype)
        target = (context[:, index] * inside).reshape(-1, self.horizon).repeat(self.flow_replicas, 1)
        mask = inside.repeat(len(context), 1).repeat(self.flow_replicas, 1)
        z = hidden[:, rows].reshape(-1, hidden.shape[-1]).repeat(self.flow_replicas, 1)
        noise = torch.randn_like(target)  # the publisher's order of draws: the noise, then the times
        t = torch.rand(len(target), device=target.device, dtype=target.dtype)
        noised = t[:, None] * target + (1 - t[:, None]) * noise
        predicted = self.head(noised, self.head.embed_time(t) + self.head.condition(z))
        weights = 1.0 / torch.arange(1, self.horizon + 1, device=target.device, dtype=target.dtype)
        return (mask * weights * (predicted - target) ** 2).sum(-1).mean()


def published_names(n_layers: int, n_blocks: int) -> dict:
    """This model's state-dict key -> the publisher's keys it holds (several: concatenated, q, k, v fused). The
    decoder layers are named as Timer's (timer_hf.published_names)."""
    names = {ours: theirs for ours, theirs in timer_hf.published_names(n_layers, 0).items()
             if not ours.startswith("embedding.")}
    parts = {"embedding.hidden": "model.embed_layer.hidden_layer", "embedding.out": "model.embed_layer.output_layer",
             "embedding.residual": "model.embed_layer.residual_layer",
             "head.time.0": "flow_loss.net.time_embed.mlp.0", "head.time.2": "flow_loss.net.time_embed.mlp.2",
             "head.condition": "flow_loss.net.cond_embed", "head.input": "flow_loss.net.input_proj",
             "head.final_modulation": "flow_loss.net.final_layer.adaLN_modulation.1",
             "head.output": "flow_loss.net.final_layer.linear"}
    for j in range(n_blocks):
        ours, theirs = f"head.blocks.{j}.", f"flow_loss.net.res_blocks.{j}."
        parts.update({ours + "norm": theirs + "in_ln", ours + "mlp.0": theirs + "mlp.0",
                      ours + "mlp.2": theirs + "mlp.2", ours + "modulation": theirs + "adaLN_modulation.1"})
    for ours, theirs in parts.items():
        for kind in ("weight", "bias"):
            names[f"{ours}.{kind}"] = (f"{theirs}.{kind}",)
    return names
