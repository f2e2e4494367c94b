"""Offline equivalence of models/film.py with TSLib's FiLM.

    python scripts/equivalence/tslib_film.py --official DIR [--series 4] [--tolerance 1e-5]

DIR is a checkout of github.com/thuml/Time-Series-Library; its models/FiLM.py is imported by path (it needs torch,
numpy and scipy). TSLib fixes the Legendre order at 256 and the modes at 32: each case below builds TSLib's model at
that size (and ours with --legendre_order 256 --modes 32), moves its weights off their initial values, copies them
into ours key by key (TSLib's A, B and evaluation matrices are constants ours computes), and both forecast the same
random walks (a level and a scale per channel) in eval mode. The cases cover a window longer than four horizons,
one shorter than two (experts that read the same points), one shorter than the horizon (the last state read), and
an odd horizon. Printed: the largest absolute difference, and that relative to the forecast's largest |value|.
Exit status 1 when the relative difference exceeds --tolerance, 2 on bad input (one line naming it).
"""
import argparse
import importlib.util
import os
import sys
from types import SimpleNamespace

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.equivalence.common import fail  # noqa: E402

CASES = [(96, 16, 7), (24, 16, 3), (20, 24, 2), (50, 11, 1)]  # seq_len, horizon, channels


def arguments():
    found = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    found.add_argument("--official", required=True, help="a checkout of thuml/Time-Series-Library")
    found.add_argument("--series", type=int, default=4, help="windows per batch")
    found.add_argument("--tolerance", type=float, default=1e-5,
                       help="largest difference accepted, relative to the forecast's largest |value|")
    found.error = fail
    args = found.parse_args()
    if args.series < 1 or args.tolerance < 0:
        fail("--series must be at least 1 and --tolerance at least 0")
    if not os.path.isfile(os.path.join(args.official, "models", "FiLM.py")):
        fail(f"--official {args.official}: expected a Time-Series-Library checkout (models/FiLM.py not found)")
    return args


def tslib_film(folder: str):
    spec = importlib.util.spec_from_file_location("tslib_FiLM", os.path.join(folder, "models", "FiLM.py"))
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - one line naming why, whatever TSLib's code raised on import
        fail(f"--official {folder}: models/FiLM.py does not import here: {type(e).__name__}: {e}")
    return module


def copy_weights(official, ours) -> None:
    """TSLib's parameters into ours; its HiPPO buffers (A, B, eval_matrix) are constants ours computes."""
    theirs = {k: v for k, v in official.state_dict().items() if not k.startswith("legts.")}
    mapped = {"revin.weight": theirs.pop("affine_weight").reshape(-1),
              "revin.bias": theirs.pop("affine_bias").reshape(-1),
              "mix.weight": theirs.pop("mlp.weight"), "mix.bias": theirs.pop("mlp.bias")}
    for i in range(len(official.spec_conv_1)):
        # (N_in, N_out, modes) real and imaginary parts -> ours (2, modes, N_in, N_out)
        parts = [theirs.pop(f"spec_conv_1.{i}.weights_{part}").permute(2, 0, 1) for part in ("real", "imag")]
        mapped[f"experts.{i}.weight"] = torch.stack(parts)
    if theirs:
        fail(f"TSLib tensors without a counterpart here: {sorted(theirs)}")
    ours.load_state_dict(mapped, strict=True)


def main() -> int:
    args = arguments()
    tslib = tslib_film(args.official)
    import models

    worst = 0.0
    for seq_len, horizon, channels in CASES:
        torch.manual_seed(0)
        official = tslib.Model(SimpleNamespace(task_name="long_term_forecast", seq_len=seq_len, label_len=0,
                                               pred_len=horizon, e_layers=1, enc_in=channels)).eval()
        with torch.no_grad():  # off their initial values (the affine's ones and zeros, the mixing weights)
            for parameter in official.parameters():
                parameter.mul_(1 + 0.3 * torch.randn_like(parameter)).add_(0.1 * torch.randn_like(parameter))
        ours = models.build("film", {"seq_len": seq_len, "input_token_len": horizon, "output_token_len": horizon,
                                     "enc_in": channels, "covariate": False, "nonautoregressive": True},
                            {"modes": 32, "legendre_order": 256, "revin": True}).eval()
        copy_weights(official, ours)
        level, scale = torch.randn(args.series, 1, channels) * 3, torch.rand(args.series, 1, channels) * 2 + 0.5
        x = torch.randn(args.series, seq_len, channels).cumsum(1) * scale * 0.3 + level
        with torch.no_grad():
            expected = official(x, None, None, None)
            got = ours(x)
        diff, size = (got - expected).abs().max().item(), expected.abs().max().item()
        worst = max(worst, diff / size)
        print(f"seq_len {seq_len:3d} horizon {horizon:3d} channels {channels}: max abs diff {diff:.3e}, relative "
              f"{diff / size:.3e} (forecast's largest |value| {size:.3g})")
    equal = worst <= args.tolerance
    print(f"{'equal' if equal else 'DIFFERENT'} within relative {args.tolerance:g}: largest {worst:.3e}")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
