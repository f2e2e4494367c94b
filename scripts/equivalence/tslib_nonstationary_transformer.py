"""Offline equivalence of models/nonstationary_transformer.py with TSLib's Nonstationary_Transformer.

    python scripts/equivalence/tslib_nonstationary_transformer.py --official DIR [--series 4] [--tolerance 1e-5]

DIR is a checkout of github.com/thuml/Time-Series-Library. Its models/Nonstationary_Transformer.py is imported with
TSLib's own top-level packages (layers, utils) in place of this repository's; it needs torch, numpy and einops (the
reformer_pytorch that its attention module imports for another model is stood in for where it is missing).

For each case below (seq_len, label_len, horizon, channels, projector widths) a TSLib model is built with its weights
moved off their initial values (so that every LayerNorm and bias matters), copied key by key into ours, and both
forecast the same random walks (a level and a scale per channel: non-stationary windows) with calendar features of
window and horizon, in eval mode. Printed: the largest absolute difference of the forecasts. Exit status 1 when it
exceeds --tolerance, 2 on bad input (one line naming it).
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

N_MARKS = 4  # TSLib's timeF features of freq h
# seq_len, label_len, horizon, channels, p_hidden_dims, d_layers
CASES = [(96, 48, 96, 7, [16, 16], 1), (36, 18, 24, 3, [8, 8], 2), (64, 16, 40, 1, [12], 1),
         (48, 48, 100, 5, [8, 8, 8], 1)]


RULES = [
    (r"(enc|dec)_embedding\.position_embedding\.pe", None),  # the sinusoidal table, computed in ours
    (r"(enc|dec)_embedding\.value_embedding\.tokenConv\.weight", r"\1oder_embedding.value.conv.weight"),
    (r"(enc|dec)_embedding\.temporal_embedding\.embed\.weight", r"\1oder_embedding.calendar.weight"),
    (r"encoder\.attn_layers\.(\d+)\.attention\.(query|key|value|out)_projection\.(\w+)",
     r"encoder.\1.attention.\2.\3"),
    (r"(en|de)coder\.(?:attn_)?layers\.(\d+)\.conv1\.(\w+)", r"\1coder.\2.ffn.0.\3"),
    (r"(en|de)coder\.(?:attn_)?layers\.(\d+)\.conv2\.(\w+)", r"\1coder.\2.ffn.3.\3"),
    (r"encoder\.attn_layers\.(\d+)\.(norm[12])\.(\w+)", r"encoder.\1.\2.\3"),
    (r"encoder\.norm\.(\w+)", r"encoder_norm.\1"),
    (r"decoder\.layers\.(\d+)\.self_attention\.(query|key|value|out)_projection\.(\w+)",
     r"decoder.\1.attention.\2.\3"),
    (r"decoder\.layers\.(\d+)\.cross_attention\.(query|key|value|out)_projection\.(\w+)",
     r"decoder.\1.cross_attention.\2.\3"),
    (r"decoder\.layers\.(\d+)\.norm1\.(\w+)", r"decoder.\1.norm1.\2"),
    (r"decoder\.layers\.(\d+)\.norm2\.(\w+)", r"decoder.\1.norm_cross.\2"),
    (r"decoder\.layers\.(\d+)\.norm3\.(\w+)", r"decoder.\1.norm2.\2"),
    (r"decoder\.norm\.(\w+)", r"decoder_norm.\1"),
    (r"decoder\.projection\.(\w+)", r"projection.\1"),
    (r"(tau|delta)_learner\.series_conv\.weight", r"\1_learner.series_conv.weight"),
    (r"(tau|delta)_learner\.backbone\.(\d+)\.(\w+)", r"\1_learner.mlp.\2.\3"),
]


def main() -> int:
    args = checkout_arguments(__doc__.split("\n\n")[0], "thuml/Time-Series-Library",
                              "models/Nonstationary_Transformer.py")
    tslib = checkout_module(args.official, "models/Nonstationary_Transformer.py",
                            {"reformer_pytorch": stand_in("reformer_pytorch", LSHSelfAttention=None)})
    import models

    worst = 0.0
    for seq_len, label_len, horizon, channels, widths, d_layers in CASES:
        hparams = {"d_model": 32, "n_heads": 4, "e_layers": 2, "d_layers": d_layers, "d_ff": 48, "dropout": 0.1,
                   "activation": "gelu", "label_len": label_len, "p_hidden_dims": ",".join(map(str, widths)),
                   "p_hidden_layers": len(widths)}
        torch.manual_seed(0)
        official = tslib.Model(SimpleNamespace(
            task_name="long_term_forecast", seq_len=seq_len, pred_len=horizon, enc_in=channels,
            dec_in=channels, c_out=channels, embed="timeF", freq="h", factor=3,
            **{**hparams, "p_hidden_dims": widths})).eval()
        perturb(official)
        ours = models.build("nonstationary_transformer", {
            "seq_len": seq_len, "input_token_len": horizon, "output_token_len": horizon, "enc_in": channels,
            "n_marks": N_MARKS, "covariate": False, "nonautoregressive": True}, hparams).eval()
        copy_state(official.state_dict(), ours, RULES)
        x = random_walks(args.series, seq_len, channels)
        marks = torch.rand(args.series, seq_len + horizon, N_MARKS) - 0.5
        with torch.no_grad():
            # TSLib's decoder input: label_len points and zeros (its forecast replaces them with the window's own)
            x_dec = torch.zeros(args.series, label_len + horizon, channels)
            expected = official(x, marks[:, :seq_len], x_dec, marks[:, seq_len - label_len:])
            got = ours(x, marks)
        diff = (got - expected).abs().max().item()
        worst = max(worst, diff)
        print(f"seq_len {seq_len:3d} label_len {label_len:3d} horizon {horizon:3d} channels {channels} projector "
              f"{widths} d_layers {d_layers}: max abs diff {diff:.3e} (forecast's largest |value| "
              f"{expected.abs().max().item():.3g})")
    return verdict(worst, args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
