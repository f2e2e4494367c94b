"""Offline equivalence of models/pdf.py with the official PDF (Hank0626/PDF; TFB's copy differs in formatting only).

    python scripts/equivalence/pdf.py --official DIR [--series 4] [--dtype float64] [--tolerance 1e-5]

DIR is a checkout of github.com/Hank0626/PDF: its models/PDF.py is imported with the checkout's top-level package
layers (PDF_backbone, PDF_layers, RevIN), behind this repository's packages on sys.path; it needs torch, numpy and
einops.

For each case below (seq_len, horizon, channels, periods, patch lengths, strides, kernels, aggregation, layers, heads,
d_model) an official Model (RevIN without affine, dropout 0, as parsed by its run_longExp.py) is built with its
weights moved off their initial values, copied key by key into ours, and both forecast the same random walks (a
level and a scale per channel): first in training mode (BatchNorm on the batch's statistics; the forecasts and
every parameter's gradient of their sum), which also moves both models' BatchNorm running statistics alike, then in
eval mode. The cases cover one period and several, windows that are not whole periods and periods longer than the
window, columns padded to whole patches, the official default stride (half the patch), even kernels, a flattened
encoder output of exactly seq_len features (no map), and both aggregations. Both run in float64 by default, so that
a difference beyond rounding stands out (--dtype float32: the rounding of a real run, where the gradients of biases
right before a BatchNorm, 0 in exact arithmetic, are rounding noise). The official attention scale is a float32
parameter, which shows in float64 as differences of about 1e-9 where d_model / n_heads is not a power of 4.
Printed: the largest absolute differences of the forecasts, and the relative ones (to the forecast's largest
|value|, each parameter's largest official gradient, at least 1e-6 of the model's largest); exit status 1 when a
relative one exceeds --tolerance, 2 on bad input (one line naming it).
"""
import os
import sys
from types import SimpleNamespace

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.equivalence.common import checkout_module, fail, perturb, random_walks, verdict  # noqa: E402
from scripts.equivalence.duet import copy_weights, difference, gradient_difference, options  # noqa: E402

# seq_len, horizon, channels, periods, patch_lens, strides (None: the official default), kernels, add, e_layers,
# n_heads, d_model
CASES = [(336, 96, 7, [24], [1], [1], [3, 7, 9], False, 3, 2, 16),
         (96, 48, 3, [24, 10, 120], [4, 3, 16], [2, 3, 16], [3, 5], True, 2, 4, 16),
         (64, 24, 2, [16], [2], [2], [2, 5], False, 1, 2, 8),
         (104, 24, 1, [24, 52], [8, 4], None, [3, 7, 11], False, 2, 4, 32)]
BRANCH = r"model\.backbone\.(\d+)\.0\."
LAYER = BRANCH + r"encoder\.layers\.(\d+)\."
RULES = [  # official name -> ours; None: a tensor ours does not keep
    (LAYER + r"self_attn\.(P_Q|P_K)\.\w+", None),  # positional projections the official attention never uses
    (LAYER + r"self_attn\.(pos|sdp_attn\.scale)", None),  # the position table again, and a constant
    (LAYER + r"self_attn\.(W_Q|W_K|W_V)\.(\w+)", r"branches.\1.layers.\2.qkv.\4"),
    (LAYER + r"self_attn\.to_out\.0\.(\w+)", r"branches.\1.layers.\2.out.\3"),
    (LAYER + r"norm_attn\.1\.(\w+)", r"branches.\1.layers.\2.norm1.norm.\3"),
    (LAYER + r"norm_ffn\.1\.(\w+)", r"branches.\1.layers.\2.norm2.norm.\3"),
    (LAYER + r"ff\.(\d)\.(\w+)", r"branches.\1.layers.\2.ffn.\3.\4"),
    (BRANCH + r"W_P\.(\w+)", r"branches.\1.projection.\2"),
    (BRANCH + r"W_pos", r"branches.\1.position"),
    (r"model\.backbone\.(\d+)\.2\.(\w+)", r"branches.\1.flatten_map.\2"),
    (r"model\.embedding\.(\d+)\.0\.(\w+)", r"branches.\1.embedding.\2"),
    (r"model\.conv\.(\d+)\.(\d+)\.0\.(\w+)", r"branches.\1.local.\2.0.\3"),
    (r"model\.head\.linear\.(\w+)", r"head.\1"),
]


def main() -> int:
    args = options(__doc__.split("\n\n")[0], "a checkout of Hank0626/PDF", float64=True)
    if not os.path.isfile(os.path.join(args.official, "layers", "PDF_backbone.py")):
        fail(f"--official {args.official}: expected a checkout of Hank0626/PDF (layers/PDF_backbone.py not found)")
    pdf = checkout_module(args.official, "models/PDF.py")
    import models

    worst = 0.0
    for seq_len, horizon, channels, periods, patch_lens, strides, kernels, add, layers, heads, width in CASES:
        torch.manual_seed(0)
        official = pdf.Model(SimpleNamespace(
            enc_in=channels, seq_len=seq_len, pred_len=horizon, e_layers=layers, n_heads=heads, d_model=width,
            d_ff=2 * width, dropout=0.0, fc_dropout=0.0, head_dropout=0.0, individual=0, add=add, wo_conv=False,
            serial_conv=False, kernel_list=kernels, patch_len=patch_lens, period=periods, stride=strides,
            padding_patch="end", revin=1, affine=0, subtract_last=0))
        perturb(official)
        hparams = {"periods": ",".join(map(str, periods)), "patch_lens": ",".join(map(str, patch_lens)),
                   "strides": "" if strides is None else ",".join(map(str, strides)),
                   "kernel_list": ",".join(map(str, kernels)), "d_model": width, "n_heads": heads, "e_layers": layers,
                   "d_ff": 2 * width, "dropout": 0.0, "conv_dropout": 0.0, "aggregation": "mean" if add else "concat"}
        ours = models.build("pdf", {"seq_len": seq_len, "output_token_len": horizon, "enc_in": channels,
                                    "covariate": False, "nonautoregressive": True}, hparams)
        pairs = copy_weights(official, ours, RULES)
        official, ours = official.to(args.dtype), ours.to(args.dtype)
        x = random_walks(args.series, seq_len, channels).to(args.dtype)

        official.train(), ours.train()
        expected, got = official(x), ours(x)
        expected.sum().backward()
        got.sum().backward()
        train_abs, train_rel = difference(got, expected)
        grad_rel = gradient_difference(official, ours, pairs)

        official.eval(), ours.eval()
        with torch.no_grad():
            eval_abs, eval_rel = difference(ours(x), official(x))
        worst = max(worst, train_rel, grad_rel, eval_rel)
        print(f"seq_len {seq_len:3d} horizon {horizon:3d} channels {channels} periods {periods} patches {patch_lens} "
              f"strides {strides} kernels {kernels} {'mean' if add else 'concat'}: training forecast max abs diff "
              f"{train_abs:.3e} ({train_rel:.1e} relative), gradients {grad_rel:.1e} relative; eval forecast "
              f"{eval_abs:.3e} ({eval_rel:.1e} relative)")
    return verdict(worst, args.tolerance, relative=True, qualifier=f" in {args.dtype}")


if __name__ == "__main__":
    sys.exit(main())
