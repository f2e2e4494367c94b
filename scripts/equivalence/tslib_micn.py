"""Offline equivalence of models/micn.py with TSLib's MICN (--variant tslib) and, given --micn, with the official
MICN (--variant official, --trend regre and mean).

    python scripts/equivalence/tslib_micn.py --official DIR [--micn DIR] [--series 4] [--tolerance 1e-5]

--official is a checkout of github.com/thuml/Time-Series-Library: its models/MICN.py is imported by path, with its
top-level package layers (Embed, Autoformer_EncDec) found in the checkout; it needs torch. --micn is a checkout of
github.com/wanghq21/MICN: its models/model.py is imported as its own package `models` (this repository's is put back
afterwards). The official embeddings have biases that TSLib's (and ours) lack: they are set to zero there.

For each case below (seq_len, horizon, channels, conv_kernel, d_layers) the reference model is built, its weights
moved off their initial values (so that every LayerNorm and bias matters), copied into ours key by key, and both
forecast the same random walks (a level and a scale per channel) with calendar features of window and horizon
(TSLib's decoder marks with label_len = seq_len, as its MICN scripts), in eval mode. Printed: the largest absolute
difference, and that relative to the forecast's largest |value|. Exit status 1 when the relative difference exceeds
--tolerance, 2 on bad input (one line naming it).
"""
import os
import sys
from types import SimpleNamespace

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import models  # noqa: E402 - ours, before a checkout's packages of the same names are reachable
from scripts.equivalence.common import (  # noqa: E402
    checkout_arguments,
    checkout_module,
    copy_state,
    fail,
    perturb,
    random_walks,
    verdict,
)

N_MARKS = 4  # timeF features of freq h
CASES = [(96, 96, 7, [12, 16], 1), (36, 24, 3, [18, 12], 2), (40, 13, 2, [5, 8, 3], 1), (32, 8, 1, [12, 16], 1)]
D_MODEL = 32

RULES = [  # TSLib's / the official names -> ours
    (r"dec_embedding\.position_embedding\.pe", None),  # the sinusoidal table, computed in ours
    (r"dec_embedding\.value_embedding\.tokenConv\.weight", "embedding.value.conv.weight"),
    (r"dec_embedding\.temporal_embedding\.embed\.weight", "embedding.calendar.weight"),
    (r"conv_trans\.mic\.(\d+)\.isometric_conv\.(\d+)\.(\w+)", r"layers.\1.isometric.\2.\3"),
    (r"conv_trans\.mic\.(\d+)\.conv\.(\d+)\.(\w+)", r"layers.\1.down.\2.\3"),
    (r"conv_trans\.mic\.(\d+)\.conv_trans\.(\d+)\.(\w+)", r"layers.\1.up.\2.\3"),
    (r"conv_trans\.mic\.(\d+)\.merge\.(\w+)", r"layers.\1.merge.\2"),
    (r"conv_trans\.mic\.(\d+)\.norm\.(\w+)", r"layers.\1.norm.\2"),
    (r"conv_trans\.mic\.(\d+)\.norm1\.(\w+)", r"layers.\1.ffn_input_norm.\2"),  # TSLib
    (r"conv_trans\.mic\.(\d+)\.conv1\.(\w+)", r"layers.\1.ffn.0.\2"),
    (r"conv_trans\.mic\.(\d+)\.conv2\.(\w+)", r"layers.\1.ffn.1.\2"),
    (r"conv_trans\.mic\.(\d+)\.norm2\.(\w+)", r"layers.\1.ffn_norm.\2"),
    (r"conv_trans\.mic\.(\d+)\.fnn\.layer1\.(\w+)", r"layers.\1.ffn.0.\2"),  # official
    (r"conv_trans\.mic\.(\d+)\.fnn\.layer2\.(\w+)", r"layers.\1.ffn.3.\2"),
    (r"conv_trans\.mic\.(\d+)\.fnn_norm\.(\w+)", r"layers.\1.ffn_norm.\2"),
    (r"conv_trans\.projection\.(\w+)", r"projection.\1"),
    (r"regression\.(\w+)", r"regression.\1"),
]


def merged_scales(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """The merge Conv2d's (D, D, scales, 1) weight as the linear map of the concatenated scales."""
    return tensor[..., 0].permute(0, 2, 1).flatten(1) if name.endswith("merge.weight") else tensor


def compare(label: str, reference, state: dict, hparams: dict, seq_len: int, horizon: int, channels: int,
            series: int) -> float:
    ours = models.build("micn", {"seq_len": seq_len, "input_token_len": horizon, "output_token_len": horizon,
                                 "enc_in": channels, "n_marks": N_MARKS, "covariate": False,
                                 "nonautoregressive": True}, hparams).eval()
    copy_state(state, ours, RULES, convert=merged_scales)
    x = random_walks(series, seq_len, channels)
    marks = torch.rand(series, seq_len + horizon, N_MARKS) - 0.5
    with torch.no_grad():
        x_dec = torch.zeros(series, seq_len + horizon, channels)  # read for its shape only
        expected = reference(x, marks[:, :seq_len], x_dec, marks)
        got = ours(x, marks)
    diff, size = (got - expected).abs().max().item(), expected.abs().max().item()
    print(f"{label} seq_len {seq_len:3d} horizon {horizon:3d} channels {channels} conv_kernel "
          f"{hparams['conv_kernel']} d_layers {hparams['d_layers']}: max abs diff {diff:.3e}, relative "
          f"{diff / size:.3e} (forecast's largest |value| {size:.3g})")
    return diff / size


def main() -> int:
    args = checkout_arguments(__doc__.split("\n\n")[0], "thuml/Time-Series-Library", "models/MICN.py",
                              extra=[("--micn", "a checkout of wanghq21/MICN (the official code)")],
                              tolerance="largest difference accepted, relative to the forecast's largest |value|")
    if args.micn and not os.path.isfile(os.path.join(args.micn, "models", "local_global.py")):
        fail(f"--micn {args.micn}: expected a wanghq21/MICN checkout (models/local_global.py not found)")
    tslib = checkout_module(args.official, os.path.join("models", "MICN.py"))
    official = checkout_module(args.micn, os.path.join("models", "model.py")) if args.micn else None
    worst = 0.0
    for seq_len, horizon, channels, kernels, d_layers in CASES:
        hparams = {"d_model": D_MODEL, "d_layers": d_layers, "dropout": 0.1, "conv_kernel": ",".join(map(str, kernels))}
        torch.manual_seed(0)
        reference = tslib.Model(SimpleNamespace(
            task_name="long_term_forecast", seq_len=seq_len, pred_len=horizon, enc_in=channels, c_out=channels,
            d_model=D_MODEL, n_heads=8, d_layers=d_layers, dropout=0.1, embed="timeF", freq="h"),
            conv_kernel=kernels).eval()
        perturb(reference)
        worst = max(worst, compare("TSLib         ", reference, reference.state_dict(),
                                   {**hparams, "variant": "tslib", "trend": "regre"}, seq_len, horizon, channels,
                                   args.series))
        if official is None:
            continue
        for trend in ("regre", "mean"):
            torch.manual_seed(0)
            length = seq_len + horizon
            reference = official.MICN(channels, channels, seq_len, seq_len, horizon, d_model=D_MODEL,
                                      d_layers=d_layers, dropout=0.1, embed="timeF", freq="h",
                                      device=torch.device("cpu"), mode=trend,
                                      decomp_kernel=[k + 1 - k % 2 for k in kernels], conv_kernel=kernels,
                                      isometric_kernel=[(length + k - k % 2) // k for k in kernels]).eval()
            perturb(reference)
            with torch.no_grad():  # the official embeddings' biases, which TSLib's and ours lack
                reference.dec_embedding.value_embedding.tokenConv.bias.zero_()
                reference.dec_embedding.temporal_embedding.embed.bias.zero_()
            # the zeroed biases, and the regression the mean mode builds but never uses, are not carried over
            state = {k: v for k, v in reference.state_dict().items() if not (
                k.endswith(("tokenConv.bias", "temporal_embedding.embed.bias"))
                or (trend == "mean" and k.startswith("regression.")))}
            worst = max(worst, compare(f"official {trend:5s}", reference, state,
                                       {**hparams, "variant": "official", "trend": trend}, seq_len, horizon, channels,
                                       args.series))
    return verdict(worst, args.tolerance, relative=True)


if __name__ == "__main__":
    sys.exit(main())
