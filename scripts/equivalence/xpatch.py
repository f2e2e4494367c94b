"""Offline equivalence of models/xpatch.py with the official xPatch (github.com/stitsyuk/xPatch, models/xPatch.py).

    python scripts/equivalence/xpatch.py --official DIR [--series 4] [--tolerance 1e-5]

DIR is a checkout of stitsyuk/xPatch (TSLib has no xPatch). Its models/xPatch.py is imported with the checkout's own
top-level packages (layers, ...) in place of this repository's; it needs torch and numpy. Its EMA and DEMA move
tensors to 'cuda'; here every .to('cuda') they make goes to the CPU instead, and DEMA gets alpha and beta as tensors
(it calls .to on them).

For each case below (seq_len, horizon, channels, patch_len, stride, ma_type, alpha, beta, revin) an official model is
built with its weights moved off their initial values (so that every norm and bias matters), copied key by key into
ours, and both forecast the same random walks (a level and a scale per channel). Compared: training mode (BatchNorm
over the batch's statistics, which it then records), then eval mode (those running statistics). Printed: the largest
absolute difference of the forecasts. Exit status 1 when it exceeds --tolerance, 2 on bad input (one line naming it).
"""
import contextlib
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
# seq_len, horizon, channels, patch_len, stride, ma_type, alpha, beta, revin
CASES = [(96, 96, 7, 16, 8, "ema", 0.3, 0.3, True), (720, 192, 3, 16, 8, "ema", 0.1, 0.3, True),
         (36, 24, 7, 6, 3, "reg", 0.3, 0.3, True), (61, 37, 2, 8, 5, "dema", 0.4, 0.2, True),
         (104, 60, 4, 8, 4, "ema", 0.9, 0.3, False)]

RULES = [
    (r"revin_layer\.affine_(weight|bias)", r"revin.\1"),
    (r"net\.fc1\.(\w+)", r"embed.\1"),
    (r"net\.bn1\.(\w+)", r"embed_norm.\1"),
    (r"net\.conv1\.(\w+)", r"depthwise.\1"),
    (r"net\.bn2\.(\w+)", r"depthwise_norm.\1"),
    (r"net\.fc2\.(\w+)", r"residual.\1"),
    (r"net\.conv2\.(\w+)", r"pointwise.\1"),
    (r"net\.bn3\.(\w+)", r"pointwise_norm.\1"),
    (r"net\.fc3\.(\w+)", r"seasonal_head.1.\1"),
    (r"net\.fc4\.(\w+)", r"seasonal_head.3.\1"),
    (r"net\.fc5\.(\w+)", r"trend.0.\1"),
    (r"net\.ln1\.(\w+)", r"trend.2.\1"),
    (r"net\.fc6\.(\w+)", r"trend.3.\1"),
    (r"net\.ln2\.(\w+)", r"trend.5.\1"),
    (r"net\.fc7\.(\w+)", r"trend.6.\1"),
    (r"net\.fc8\.(\w+)", r"mix.\1"),
]


@contextlib.contextmanager
def cuda_on_cpu():
    """Tensor.to('cuda') (the official EMA's and DEMA's) keeps the tensor on the CPU."""
    original = torch.Tensor.to

    def to(self, *args, **kwargs):
        args = tuple("cpu" if isinstance(a, str) and a == "cuda" else a for a in args)
        if kwargs.get("device") == "cuda":
            kwargs["device"] = "cpu"
        return original(self, *args, **kwargs)

    torch.Tensor.to = to
    try:
        yield
    finally:
        torch.Tensor.to = original


def main() -> int:
    args = checkout_arguments(__doc__.split("\n\n")[0], "stitsyuk/xPatch", "models/xPatch.py")
    xpatch = checkout_module(args.official, "models/xPatch.py")
    import models

    worst = 0.0
    for seq_len, horizon, channels, patch_len, stride, ma_type, alpha, beta, revin in CASES:
        hparams = {"patch_len": patch_len, "stride": stride, "ma_type": ma_type, "alpha": alpha, "beta": beta,
                   "revin": revin}
        torch.manual_seed(0)
        # the official DEMA calls .to on alpha and beta: tensors there, floats (the flags') everywhere else
        smoothing = {k: torch.tensor(v) if ma_type == "dema" else v for k, v in (("alpha", alpha), ("beta", beta))}
        with cuda_on_cpu():
            official = xpatch.Model(SimpleNamespace(seq_len=seq_len, pred_len=horizon, enc_in=channels,
                                                    padding_patch="end", **{**hparams, **smoothing}))
        perturb(official)
        ours = models.build("xpatch", {"seq_len": seq_len, "input_token_len": horizon, "output_token_len": horizon,
                                       "enc_in": channels, "n_marks": 0, "covariate": False,
                                       "nonautoregressive": True}, hparams)
        # without revin the official RevIN's affine, built and left unused, has no counterpart here
        copy_state({name: tensor for name, tensor in official.state_dict().items()
                    if revin or not name.startswith("revin_layer.")}, ours, RULES)
        x = random_walks(args.series, seq_len, channels)
        for mode in ("train", "eval"):  # training first: BatchNorm's running statistics move, eval then reads them
            official.train(mode == "train")
            ours.train(mode == "train")
            with torch.no_grad(), cuda_on_cpu():
                expected = official(x)
            with torch.no_grad():
                got = ours(x)
            diff = (got - expected).abs().max().item()
            worst = max(worst, diff)
            print(f"seq_len {seq_len:3d} horizon {horizon:3d} channels {channels} patch {patch_len:2d}/{stride} "
                  f"{ma_type:4} alpha {alpha} beta {beta} revin {revin!s:5} {mode:5}: max abs diff {diff:.3e} "
                  f"(forecast's largest |value| {expected.abs().max().item():.3g})")
    return verdict(worst, args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
