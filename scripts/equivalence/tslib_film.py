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
import os
import sys
from types import SimpleNamespace

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.equivalence.common import checkout_arguments, checkout_module, fail, random_walks, verdict  # noqa: E402

CASES = [(96, 16, 7), (24, 16, 3), (20, 24, 2), (50, 11, 1)]  # seq_len, horizon, channels


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
    args = checkout_arguments(__doc__.split("\n\n")[0], "thuml/Time-Series-Library", "models/FiLM.py",
                              tolerance="largest difference accepted, relative to the forecast's largest |value|")
    tslib = checkout_module(args.official, "models/FiLM.py")
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
        x = random_walks(args.series, seq_len, channels)
        with torch.no_grad():
            expected = official(x, None, None, None)
            got = ours(x)
        diff, size = (got - expected).abs().max().item(), expected.abs().max().item()
        worst = max(worst, diff / size)
        print(f"seq_len {seq_len:3d} horizon {horizon:3d} channels {channels}: max abs diff {diff:.3e}, relative "
              f"{diff / size:.3e} (forecast's largest |value| {size:.3g})")
    return verdict(worst, args.tolerance, relative=True)


if __name__ == "__main__":
    sys.exit(main())
