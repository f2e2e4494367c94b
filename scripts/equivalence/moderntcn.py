"""Offline equivalence of models/moderntcn.py with the official ModernTCN (github.com/luodhhh/ModernTCN,
ModernTCN-Long-term-forecasting/models/ModernTCN.py).

    python scripts/equivalence/moderntcn.py --official DIR [--series 4] [--tolerance 1e-5]

DIR is a checkout of luodhhh/ModernTCN (TSLib has no ModernTCN); its ModernTCN-Long-term-forecasting/ is loaded with
that folder's own top-level packages (layers, models: folders without __init__.py) in place of this repository's;
it needs torch only.

For each case below an official model is built with its weights moved off their initial values (so that every
BatchNorm affine and bias matters), copied key by key into ours (the official modules its forward never calls are
passed over), and both forecast the same random walks (a level and a scale per channel): first in training mode at
dropout 0 (BatchNorm on the batch's statistics), which moves both models' running statistics alike, then in eval
mode (BatchNorm on those running statistics). Printed: the largest absolute difference of the forecasts, and that
relative to the forecast's largest |value| (float32: on the CPU our long kernels run as matrix products, which round
differently from the official convolution). Exit status 1 when a relative difference exceeds --tolerance, 2 on bad
input (one line naming it).
"""
import os
import sys
from types import SimpleNamespace

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.equivalence.common import (  # noqa: E402
    checkout_arguments,
    checkout_module,
    copy_state,
    perturb,
    random_walks,
    stand_in,
    verdict,
)

FOLDER = "ModernTCN-Long-term-forecasting"
# seq_len, horizon, channels, patch_size, patch_stride, stages, num_blocks, ffn_ratio, large, small, downsample_ratio,
# decomposition, use_norm (the ETTh1 script's shape first)
CASES = [(336, 96, 7, 8, 4, 1, 1, 1, 51, 5, 2, False, True), (96, 48, 3, 8, 4, 1, 3, 8, 51, 5, 2, False, True),
         (61, 37, 4, 6, 4, 3, 2, 2, 13, 3, 2, False, True), (50, 24, 2, 4, 3, 2, 1, 2, 9, 5, 3, True, True),
         (48, 24, 5, 8, 4, 1, 1, 1, 7, 3, 2, False, False)]
D_MODEL = 16


def rules(stages: int, decomposition: bool) -> list:
    branches = [("model_res", "0"), ("model_trend", "1")] if decomposition else [("model", "0")]
    found = []
    for theirs, ours in branches:
        found += [
            (rf"{theirs}\.(te_patch|lat_layer|smooth_layer|up_sample_conv)\..*", None),  # built, never called
            (rf"{theirs}\.downsample_layers\.([{stages}-9])\..*", None),  # beyond the stages used
            (rf"{theirs}\.downsample_layers\.(\d)\.(.*)", rf"branches.{ours}.downsample.\1.\2"),
            (rf"{theirs}\.stages\.(\d+)\.blocks\.(\d+)\.dw\.lkb_origin\.(conv|bn)\.(.*)",
             lambda m, o=ours: f"branches.{o}.stages.{m[1]}.{m[2]}.large.{'0' if m[3] == 'conv' else '1'}.{m[4]}"),
            (rf"{theirs}\.stages\.(\d+)\.blocks\.(\d+)\.dw\.small_conv\.(conv|bn)\.(.*)",
             lambda m, o=ours: f"branches.{o}.stages.{m[1]}.{m[2]}.small.{'0' if m[3] == 'conv' else '1'}.{m[4]}"),
            (rf"{theirs}\.stages\.(\d+)\.blocks\.(\d+)\.norm\.(.*)", rf"branches.{ours}.stages.\1.\2.norm.\3"),
            (rf"{theirs}\.stages\.(\d+)\.blocks\.(\d+)\.(ffn[12])pw1\.(.*)", rf"branches.{ours}.stages.\1.\2.\3.0.\4"),
            (rf"{theirs}\.stages\.(\d+)\.blocks\.(\d+)\.(ffn[12])pw2\.(.*)", rf"branches.{ours}.stages.\1.\2.\3.3.\4"),
            (rf"{theirs}\.head\.linear\.(.*)", rf"branches.{ours}.head.1.\1"),
        ]
    return found


def main() -> int:
    args = checkout_arguments(__doc__.split("\n\n")[0], "luodhhh/ModernTCN", f"{FOLDER}/models/ModernTCN.py",
                              tolerance="largest difference accepted, relative to the forecast's largest |value|")
    folder = os.path.join(args.official, FOLDER)
    # its models/ and layers/ have no __init__.py: as namespace packages they would lose to this repository's
    packages = {name: stand_in(name, __path__=[os.path.join(folder, name)]) for name in ("models", "layers")}
    official_module = checkout_module(folder, "models/ModernTCN.py", packages)
    import models

    worst = 0.0
    for (seq_len, horizon, channels, patch, stride, stages, blocks, ffn_ratio, large, small, ratio, decomposition,
         use_norm) in CASES:
        torch.manual_seed(0)
        official = official_module.Model(SimpleNamespace(
            stem_ratio=6, downsample_ratio=ratio, ffn_ratio=ffn_ratio, num_blocks=[blocks] * stages,
            large_size=[large] * stages, small_size=[small] * stages, dims=[D_MODEL] * 4, dw_dims=[D_MODEL] * 4,
            enc_in=channels, small_kernel_merged=False, dropout=0.0, head_dropout=0.0, use_multi_scale=False,
            revin=use_norm, affine=False, subtract_last=False, freq="h", seq_len=seq_len, individual=False,
            pred_len=horizon, kernel_size=25, patch_size=patch, patch_stride=stride, decomposition=decomposition))
        perturb(official)
        hparams = {"patch_size": patch, "patch_stride": stride, "d_model": D_MODEL, "ffn_ratio": ffn_ratio,
                   "stages": stages, "num_blocks": blocks, "downsample_ratio": ratio, "large_size": large,
                   "small_size": small, "dropout": 0.0, "head_dropout": 0.0, "use_norm": use_norm,
                   "decomposition": decomposition, "moving_avg": 25}
        ours = models.build("moderntcn", {"seq_len": seq_len, "input_token_len": horizon,
                                          "output_token_len": horizon, "enc_in": channels, "n_marks": 0,
                                          "covariate": False, "nonautoregressive": True}, hparams)
        copy_state(official.state_dict(), ours, rules(stages, decomposition))
        x = random_walks(args.series, seq_len, channels)
        for mode in ("train", "eval"):  # training first: BatchNorm's running statistics move, eval then reads them
            official.train(mode == "train")
            ours.train(mode == "train")
            with torch.no_grad():
                expected = official(x)
                got = ours(x)
            diff, scale = (got - expected).abs().max().item(), expected.abs().max().item()
            worst = max(worst, diff / scale)
            print(f"seq_len {seq_len:3d} horizon {horizon:3d} channels {channels} patch {patch}/{stride} stages "
                  f"{stages} blocks {blocks} ffn_ratio {ffn_ratio} kernels {large}/{small} decomposition "
                  f"{decomposition!s:5} use_norm {use_norm!s:5} {mode:5}: max abs diff {diff:.3e} "
                  f"(forecast's largest |value| {scale:.3g}, relative {diff / scale:.1e})")
    return verdict(worst, args.tolerance, relative=True)


if __name__ == "__main__":
    sys.exit(main())
