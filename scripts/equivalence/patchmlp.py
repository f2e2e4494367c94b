"""Offline equivalence of models/patchmlp.py with the official PatchMLP (github.com/TangPeiwang/PatchMLP,
model/PatchMLP.py).

    python scripts/equivalence/patchmlp.py --official DIR [--series 4] [--tolerance 1e-5]

DIR is a checkout of TangPeiwang/PatchMLP (TSLib has no PatchMLP). Its model/PatchMLP.py is imported with the
checkout's own layers package in place of this repository's; it needs torch and numpy.

The official model fixes its patch lengths (48, 24, 12, 6) and moving average (13): ours is built with those. For
each case below (seq_len, horizon, channels, d_model, e_layers, use_norm) an official model is built with its weights
moved off their initial values (so that every LayerNorm and bias matters), copied key by key into ours, and both
forecast the same random walks (a level and a scale per channel) in eval mode, in float64 and in float32. Each
official mixer layer's second LayerNorm, built but never called, has no counterpart. Printed: the largest absolute
difference of the forecasts in each precision. In float32 they differ by rounding alone (ours, for one, sums the
moving average in float64 and rounds once; the official code pools in float32): about 4e-7 of the forecast's scale,
which the perturbed weights make large.
Exit status 1 when the float64 difference exceeds --tolerance, 2 on bad input (one line naming it).
"""
import os
import sys
from types import SimpleNamespace

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.equivalence.common import checkout_arguments, checkout_module, copy_state, perturb, random_walks, verdict  # noqa

# seq_len, horizon, channels, d_model, e_layers, use_norm
CASES = [(96, 96, 7, 128, 1, True), (96, 720, 7, 256, 2, True), (48, 24, 1, 64, 1, True), (100, 37, 5, 128, 2, False),
         (336, 192, 3, 512, 1, True)]

RULES = [
    (r"emb\.EmbLayer_(\d)\.ff\.0\.(\w+)", lambda m: f"scales.{int(m[1]) - 1}.patch.{m[2]}"),
    (r"emb\.EmbLayer_(\d)\.ff_1\.0\.(\w+)", lambda m: f"scales.{int(m[1]) - 1}.merge.{m[2]}"),
    (r"(seasonal|trend)_layers\.(\d+)\.ff1\.0\.(\w+)", r"\1.\2.features.0.\3"),
    (r"(seasonal|trend)_layers\.(\d+)\.ff2\.0\.(\w+)", r"\1.\2.channels.0.\3"),
    (r"(seasonal|trend)_layers\.(\d+)\.norm1\.(\w+)", r"\1.\2.norm.\3"),
    (r"(seasonal|trend)_layers\.(\d+)\.norm2\.(\w+)", None),  # built, never called
    (r"projector\.(\w+)", r"projection.\1"),
]


def main() -> int:
    args = checkout_arguments(__doc__.split("\n\n")[0], "TangPeiwang/PatchMLP", "model/PatchMLP.py")
    patchmlp = checkout_module(args.official, "model/PatchMLP.py")
    import models

    worst = 0.0
    for seq_len, horizon, channels, width, e_layers, use_norm in CASES:
        hparams = {"d_model": width, "e_layers": e_layers, "patch_sizes": "48,24,12,6", "moving_avg": 13,
                   "dropout": 0.1, "use_norm": use_norm}
        torch.manual_seed(0)
        official = patchmlp.Model(SimpleNamespace(
            seq_len=seq_len, pred_len=horizon, enc_in=channels, d_model=width, e_layers=e_layers, use_norm=use_norm,
            output_attention=False)).eval()
        perturb(official)
        ours = models.build("patchmlp", {"seq_len": seq_len, "input_token_len": horizon, "output_token_len": horizon,
                                         "enc_in": channels, "n_marks": 0, "covariate": False,
                                         "nonautoregressive": True}, hparams).eval()
        copy_state(official.state_dict(), ours, RULES)
        x = random_walks(args.series, seq_len, channels)
        diffs = []
        for dtype in (torch.float32, torch.float64):
            with torch.no_grad():
                expected = official.to(dtype)(x.to(dtype), None, None, None)
                diffs.append((ours.to(dtype)(x.to(dtype)) - expected).abs().max().item())
        worst = max(worst, diffs[1])
        print(f"seq_len {seq_len:3d} horizon {horizon:3d} channels {channels} d_model {width:3d} e_layers {e_layers} "
              f"use_norm {use_norm!s:5}: max abs diff float64 {diffs[1]:.3e}, float32 {diffs[0]:.3e} (forecast's "
              f"largest |value| {expected.abs().max().item():.3g})")
    return verdict(worst, args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
