"""Offline equivalence of models/amplifier.py with the official Amplifier (TSLib has none).

    python scripts/equivalence/amplifier.py --official DIR [--series 4] [--tolerance 1e-5]

DIR is a checkout of github.com/aikunyi/Amplifier. Its models/Amplifier.py is imported with its own top-level
packages (layers) in place of this repository's; it needs torch alone.

For each case below (seq_len, horizon, channels, hidden_size, SCI) an official model is built with its weights moved
off their initial values (the amplification mask, RevIN's affine and the complex layer's imaginary parts included),
copied key by key into ours, and both forecast the same random walks in eval mode. The official code needs even
lengths (its inverse FFTs return one). Printed: the largest absolute difference of the forecasts. Exit status 1 when
it exceeds --tolerance, 2 on bad input (one line naming it).
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
    fail,
    perturb,
    random_walks,
    verdict,
)

# seq_len, horizon, channels, hidden_size, SCI
CASES = [(96, 96, 7, 64, 0), (96, 192, 7, 32, 1), (36, 24, 3, 16, 1), (64, 720, 1, 24, 0), (48, 40, 5, 8, 1)]

RULES = [
    (r"revin_layer\.affine_(weight|bias)", r"revin.\1"),
    (r"mask_matrix", "amplify"),
    (r"freq_linear\.(weight|bias)", r"restore.\1"),
    (r"linear_(seasonal|trend)\.(\d)\.(\w+)", r"\1.\2.\3"),
    (r"extract_common_pattern\.(\d)\.(\w+)", r"common.\1.\2"),
    (r"model_common_pattern\.(\d)\.(\w+)", r"common_over_time.\1.\2"),
    (r"model_spacific_pattern\.(\d)\.(\w+)", r"specific_over_time.\1.\2"),
]


def real_pairs(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """A complex tensor as ours stores it: real pairs in a last dimension."""
    return torch.view_as_real(tensor) if tensor.is_complex() else tensor


def main() -> int:
    args = checkout_arguments(__doc__.split("\n\n")[0], "aikunyi/Amplifier", "models/Amplifier.py")
    official_module = checkout_module(args.official, "models/Amplifier.py")
    import models

    worst = 0.0
    for seq_len, horizon, channels, hidden, sci in CASES:
        torch.manual_seed(0)
        official = official_module.Model(SimpleNamespace(
            seq_len=seq_len, pred_len=horizon, enc_in=channels, hidden_size=hidden, SCI=sci)).eval()
        perturb(official)
        ours = models.build("amplifier", {
            "seq_len": seq_len, "input_token_len": horizon, "output_token_len": horizon, "enc_in": channels,
            "n_marks": 0, "covariate": False, "nonautoregressive": True},
            {"hidden_size": hidden, "sci": bool(sci), "moving_avg": 25}).eval()
        # without SCI the official SCI layers are built but unused; ours has none
        unused = [] if sci else [(r"(extract_common|model_common|model_spacific)_pattern\..*", None)]
        copy_state(official.state_dict(), ours, unused + RULES, convert=real_pairs)
        x = random_walks(args.series, seq_len, channels)
        with torch.no_grad():
            expected = official(x, None, None, None)
            got = ours(x)
        if got.shape != expected.shape:
            fail(f"shapes differ: official {tuple(expected.shape)}, ours {tuple(got.shape)}")
        diff = (got - expected).abs().max().item()
        worst = max(worst, diff)
        print(f"seq_len {seq_len:3d} horizon {horizon:3d} channels {channels} hidden_size {hidden:3d} SCI {sci}: "
              f"max abs diff {diff:.3e} (forecast's largest |value| {expected.abs().max().item():.3g})")
    return verdict(worst, args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
