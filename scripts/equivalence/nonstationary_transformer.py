"""Offline equivalence of models/nonstationary_transformer.py with the official Non-stationary Transformer.

    python scripts/equivalence/nonstationary_transformer.py --official DIR [--series 4] [--tolerance 1e-5]

DIR is a checkout of github.com/thuml/Nonstationary_Transformers (checked at c4ec406). Its ns_models/ns_Transformer.py
is imported with the checkout's own top-level packages (ns_layers, layers, utils) in place of this repository's; it
needs torch and numpy only.

The cases are the ILI configuration of the official scripts/ILI_script/ns_Transformer.sh with its run.py defaults:
7 channels, seq_len 36, label_len 18, horizons 24/36/48/60 with projector widths 32,32 / 32,32 / 16,16 / 8,8,
d_model 512, 8 heads, 2 encoder and 1 decoder layers, d_ff 2048, dropout 0.05, gelu, factor 3, embed timeF with
freq h (4 calendar features), no attention output. For each, an official model is built with its weights moved off
their initial values (so that every LayerNorm and bias matters), copied key by key into ours, and both forecast the
same random walks (a level and a scale per channel: non-stationary windows) with calendar features of window and
horizon, in eval mode, in float64 and in float32 (randn draws, hence the perturbed weights, differ between the
two). The verdict reads float64, where both compute the same function up to ~1e-12; in float32, d_model 512 with
perturbed weights leaves differences of ~1e-4 (relative ~1e-5) from the different order of operations (SDPA with
tau on the queries and delta as a mask vs. einsum scores), printed as information. The official decoder input is
what its exp_main.py passes (the label_len points of the target, then zeros); its model only reads its shape.
Printed: the largest absolute difference of the forecasts. Exit status 1 when it exceeds --tolerance, 2 on bad input
(one line naming it).
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
    verdict,
)

# TSLib's port keeps the official module names: its key rules serve both
from scripts.equivalence.tslib_nonstationary_transformer import RULES  # noqa: E402

N_MARKS = 4  # timeF features of the official run.py's default freq h (the ILI script sets none)
CHANNELS, SEQ_LEN, LABEL_LEN = 7, 36, 18
# horizon, p_hidden_dims: scripts/ILI_script/ns_Transformer.sh
CASES = [(24, [32, 32]), (36, [32, 32]), (48, [16, 16]), (60, [8, 8])]
HPARAMS = {"d_model": 512, "n_heads": 8, "e_layers": 2, "d_layers": 1, "d_ff": 2048, "dropout": 0.05,
           "activation": "gelu"}



def main() -> int:
    args = checkout_arguments(__doc__.split("\n\n")[0], "thuml/Nonstationary_Transformers",
                              "ns_models/ns_Transformer.py")
    official_module = checkout_module(args.official, "ns_models/ns_Transformer.py")
    import models

    worst = 0.0
    for horizon, widths in CASES:
        for dtype in (torch.float64, torch.float32):
            diff = compare(official_module, models, horizon, widths, args.series, dtype)
            if dtype == torch.float64:
                worst = max(worst, diff)
    return verdict(worst, args.tolerance, qualifier=" (float64)")


def compare(official_module, models, horizon: int, widths: list, series: int, dtype) -> float:
    """The largest absolute difference of the two models' forecasts of the same windows, computed in dtype."""
    torch.manual_seed(0)
    official = official_module.Model(SimpleNamespace(
        seq_len=SEQ_LEN, label_len=LABEL_LEN, pred_len=horizon, enc_in=CHANNELS, dec_in=CHANNELS,
        c_out=CHANNELS, embed="timeF", freq="h", factor=3, output_attention=False,
        p_hidden_dims=widths, p_hidden_layers=len(widths), **HPARAMS)).to(dtype).eval()
    perturb(official)
    ours = models.build("nonstationary_transformer", {
        "seq_len": SEQ_LEN, "input_token_len": horizon, "output_token_len": horizon, "enc_in": CHANNELS,
        "n_marks": N_MARKS, "covariate": False, "nonautoregressive": True},
        {**HPARAMS, "label_len": LABEL_LEN, "p_hidden_dims": ",".join(map(str, widths)),
         "p_hidden_layers": len(widths)}).to(dtype).eval()
    copy_state(official.state_dict(), ours, RULES)
    torch.manual_seed(2)
    x = random_walks(series, SEQ_LEN + horizon, CHANNELS).to(dtype)
    window, target = x[:, :SEQ_LEN], x[:, SEQ_LEN - LABEL_LEN:]
    marks = (torch.rand(series, SEQ_LEN + horizon, N_MARKS) - 0.5).to(dtype)
    with torch.no_grad():
        # exp_main.py's decoder input: the label_len points, then zeros
        x_dec = torch.cat([target[:, :LABEL_LEN], torch.zeros(series, horizon, CHANNELS, dtype=dtype)], dim=1)
        expected = official(window, marks[:, :SEQ_LEN], x_dec, marks[:, SEQ_LEN - LABEL_LEN:])
        got = ours(window, marks)
    if got.shape != expected.shape:
        print(f"horizon {horizon}: shapes differ, ours {tuple(got.shape)}, official {tuple(expected.shape)}")
        return float("inf")
    diff = (got - expected).abs().max().item()
    print(f"ILI seq_len {SEQ_LEN} label_len {LABEL_LEN} horizon {horizon:2d} channels {CHANNELS} projector "
          f"{widths} {str(dtype)[6:]}: max abs diff {diff:.3e} (forecast's largest |value| "
          f"{expected.abs().max().item():.3g})")
    return diff


if __name__ == "__main__":
    sys.exit(main())
