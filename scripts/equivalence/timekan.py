"""Offline equivalence of models/timekan.py with the official TimeKAN (github.com/huangst21/TimeKAN, models/TimeKAN.py).

    python scripts/equivalence/timekan.py --official DIR [--series 4] [--tolerance 1e-5]

DIR is a checkout of huangst21/TimeKAN (TSLib has no TimeKAN). Its models/TimeKAN.py is imported with the checkout's
own top-level packages (layers, ...) in place of this repository's; it needs torch only.

For each case below (seq_len, horizon, channels, d_model, e_layers, down-sampling layers and window, begin_order,
use_norm) an official model is built with its weights moved off their initial values (so that RevIN's affine and
every bias matter), copied key by key into ours, and both forecast the same random walks (a level and a scale per
channel) in eval mode. The official calendar and position embeddings, built but never called, have no
counterpart. Printed: the
largest absolute difference of the forecasts. Exit status 1 when it exceeds --tolerance, 2 on bad input (one line
naming it).
"""
import os
import sys
from types import SimpleNamespace

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.equivalence.common import checkout_arguments, checkout_module, copy_state, perturb, random_walks, verdict  # noqa

# seq_len, horizon, channels, d_model, e_layers, down_sampling_layers, down_sampling_window, begin_order, use_norm
CASES = [(96, 96, 7, 16, 2, 2, 2, 0, True), (96, 720, 7, 16, 2, 3, 2, 1, True), (96, 192, 3, 32, 3, 1, 2, 0, True),
         (54, 37, 2, 8, 1, 2, 3, 2, False), (48, 24, 1, 16, 2, 1, 4, 1, True)]


def rules(n_down: int) -> list:
    """The official names into ours; the official mixing blocks count from the coarsest band, ours from the finest."""
    return [
        (r"enc_embedding\.value_embedding\.tokenConv\.weight", "embedding.value.conv.weight"),
        (r"enc_embedding\.(temporal_embedding\..*|position_embedding\.pe)", None),  # built, never called
        (r"normalize_layers\.(\d+)\.affine_(weight|bias)", r"revins.\1.\2"),
        (r"add_blocks\.(\d+)\.front_block\.channel_mixer\.0\.fc1\.arange", None),  # ours: a non-persistent buffer
        (r"add_blocks\.(\d+)\.front_blocks\.(\d+)\.channel_mixer\.0\.fc1\.arange", None),
        (r"add_blocks\.(\d+)\.front_block\.channel_mixer\.0\.fc1\.cheby_coeffs",
         rf"blocks.\1.kans.{n_down}.kan.coefficients"),
        (r"add_blocks\.(\d+)\.front_block\.conv\.conv\.weight", rf"blocks.\1.kans.{n_down}.conv.weight"),
        (r"add_blocks\.(\d+)\.front_blocks\.(\d+)\.channel_mixer\.0\.fc1\.cheby_coeffs",
         lambda m: f"blocks.{m[1]}.kans.{n_down - 1 - int(m[2])}.kan.coefficients"),
        (r"add_blocks\.(\d+)\.front_blocks\.(\d+)\.conv\.conv\.weight",
         lambda m: f"blocks.{m[1]}.kans.{n_down - 1 - int(m[2])}.conv.weight"),
        (r"predict_layer\.(\w+)", r"predictor.\1"),
        (r"projection_layer\.(\w+)", r"projection.\1"),
    ]


def main() -> int:
    args = checkout_arguments(__doc__.split("\n\n")[0], "huangst21/TimeKAN", "models/TimeKAN.py")
    timekan = checkout_module(args.official, "models/TimeKAN.py")
    import models

    worst = 0.0
    for seq_len, horizon, channels, width, e_layers, n_down, window, begin_order, use_norm in CASES:
        hparams = {"d_model": width, "e_layers": e_layers, "down_sampling_layers": n_down,
                   "down_sampling_window": window, "begin_order": begin_order, "dropout": 0.1, "use_norm": use_norm}
        torch.manual_seed(0)
        official = timekan.Model(SimpleNamespace(
            task_name="long_term_forecast", seq_len=seq_len, label_len=0, pred_len=horizon, enc_in=channels,
            c_out=channels, channel_independence=1, moving_avg=25, use_future_temporal_feature=0, embed="timeF",
            freq="h", **{**hparams, "use_norm": int(use_norm)})).eval()
        perturb(official)
        ours = models.build("timekan", {"seq_len": seq_len, "input_token_len": horizon, "output_token_len": horizon,
                                        "enc_in": channels, "n_marks": 0, "covariate": False,
                                        "nonautoregressive": True}, hparams).eval()
        table = rules(n_down)
        if not use_norm:  # the official RevIN modules exist unused; ours are not built
            table = [(r"normalize_layers\..*", None)] + table
        copy_state(official.state_dict(), ours, table)
        x = random_walks(args.series, seq_len, channels)
        with torch.no_grad():
            expected = official(x, None, None, None)
            got = ours(x)
        diff = (got - expected).abs().max().item()
        worst = max(worst, diff)
        print(f"seq_len {seq_len:3d} horizon {horizon:3d} channels {channels} d_model {width:2d} e_layers {e_layers} "
              f"scales {n_down + 1} window {window} begin_order {begin_order} use_norm {use_norm!s:5}: max abs diff "
              f"{diff:.3e} (forecast's largest |value| {expected.abs().max().item():.3g})")
    return verdict(worst, args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
