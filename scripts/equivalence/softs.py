"""Offline equivalence of models/softs.py with the official SOFTS (github.com/Secilia-Cxy/SOFTS, models/SOFTS.py).

    python scripts/equivalence/softs.py --official DIR [--series 4] [--tolerance 1e-5]

DIR is a checkout of Secilia-Cxy/SOFTS (TSLib has no SOFTS). Its models/SOFTS.py is imported with the checkout's own
top-level packages (layers, ...) in place of this repository's; it needs torch only.

For each case below (seq_len, horizon, channels, calendar features or none, use_norm, layers, d_core) an official
model is built with its weights moved off their initial values (so that every LayerNorm and bias matters), copied key
by key into ours, and both forecast the same random walks (a level and a scale per channel). Compared: eval mode (the
softmax-weighted core), and training mode at dropout 0 from the same torch seed (the stochastic core: the same
torch.multinomial draws). Printed: the largest absolute difference of the forecasts. Exit status 1 when it exceeds
--tolerance, 2 on bad input (one line naming it).
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

# the official repository's top-level packages that clash with (or are absent from) this repository's
N_MARKS = 4  # timeF features of freq h
# seq_len, horizon, channels, calendar features, use_norm, e_layers, d_core
CASES = [(96, 96, 7, True, True, 2, 16), (96, 720, 7, False, True, 1, 32), (48, 24, 1, True, False, 3, 8),
         (61, 37, 5, True, True, 2, 24)]

RULES = [
    (r"enc_embedding\.value_embedding\.(\w+)", r"embedding.0.\1"),
    (r"encoder\.attn_layers\.(\d+)\.attention\.gen1\.(\w+)", r"layers.\1.star.propose.0.\2"),
    (r"encoder\.attn_layers\.(\d+)\.attention\.gen2\.(\w+)", r"layers.\1.star.propose.2.\2"),
    (r"encoder\.attn_layers\.(\d+)\.attention\.gen3\.(\w+)", r"layers.\1.star.fuse.0.\2"),
    (r"encoder\.attn_layers\.(\d+)\.attention\.gen4\.(\w+)", r"layers.\1.star.fuse.2.\2"),
    (r"encoder\.attn_layers\.(\d+)\.conv1\.(\w+)", r"layers.\1.ffn.0.\2"),
    (r"encoder\.attn_layers\.(\d+)\.conv2\.(\w+)", r"layers.\1.ffn.3.\2"),
    (r"encoder\.attn_layers\.(\d+)\.(norm[12])\.(\w+)", r"layers.\1.\2.\3"),
    (r"projection\.(\w+)", r"projection.\1"),
]


def main() -> int:
    args = checkout_arguments(__doc__.split("\n\n")[0], "Secilia-Cxy/SOFTS", "models/SOFTS.py")
    softs = checkout_module(args.official, "models/SOFTS.py")
    import models

    worst = 0.0
    for seq_len, horizon, channels, marks, use_norm, e_layers, d_core in CASES:
        hparams = {"d_model": 32, "d_core": d_core, "e_layers": e_layers, "d_ff": 48, "dropout": 0.0,
                   "activation": "gelu", "use_norm": use_norm}
        torch.manual_seed(0)
        official = softs.Model(SimpleNamespace(seq_len=seq_len, pred_len=horizon, **hparams))
        perturb(official)
        ours = models.build("softs", {"seq_len": seq_len, "input_token_len": horizon, "output_token_len": horizon,
                                      "enc_in": channels, "n_marks": N_MARKS if marks else 0, "covariate": False,
                                      "nonautoregressive": True}, hparams)
        copy_state(official.state_dict(), ours, RULES)
        x = random_walks(args.series, seq_len, channels)
        x_mark = torch.rand(args.series, seq_len, N_MARKS) - 0.5 if marks else None
        for mode in ("eval", "train"):
            official.train(mode == "train")
            ours.train(mode == "train")
            with torch.no_grad():
                torch.manual_seed(7)
                expected = official(x, x_mark, None, None)
                torch.manual_seed(7)
                got = ours(x, x_mark)
            diff = (got - expected).abs().max().item()
            worst = max(worst, diff)
            print(f"seq_len {seq_len:3d} horizon {horizon:3d} channels {channels} marks {marks!s:5} use_norm "
                  f"{use_norm!s:5} e_layers {e_layers} d_core {d_core:2d} {mode:5}: max abs diff {diff:.3e} "
                  f"(forecast's largest |value| {expected.abs().max().item():.3g})")
    return verdict(worst, args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
