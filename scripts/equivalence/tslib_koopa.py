"""Offline equivalence of models/koopa.py with TSLib's Koopa (and, optionally, the official thuml/Koopa code).

    python scripts/equivalence/tslib_koopa.py --official DIR [--official_koopa KOOPA_DIR] [--series 4]
        [--tolerance 1e-5]

DIR is a checkout of github.com/thuml/Time-Series-Library; KOOPA_DIR one of github.com/thuml/Koopa. TSLib's
models/Koopa.py is imported with TSLib's top-level packages in place of this repository's, its data_provider stood in
for by one that serves the training windows below; both need torch alone.

The mask: TSLib's constructor computes it from its training loader (Model._get_mask_spectrum); here that loader is a
batched synthetic series (cycles of 24 and 168 steps, a trend and noise), and the mask TSLib finds is checked against
models.koopa.dominant_frequencies of the same windows, which ours reads from them (fit_training_windows).
The forecasts: for each case (seq_len, horizon, channels, sizes, blocks, multistep) a TSLib model is built with its
weights moved off their initial values, copied key by key into ours, and both forecast the same random walks (a level
and a scale per channel) in eval mode. TSLib's segment length is the horizon; the official code's --seg_len below the
horizon (several segments of rollout, KPLayerApprox's both branches) is compared with --official_koopa. Printed: the
largest absolute difference of the forecasts. Exit status 1 when it exceeds --tolerance, 2 on bad input.
"""
import importlib.util
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
    stand_in,
    verdict,
)

# seq_len, horizon, channels, dynamic_dim, hidden_dim, hidden_layers, num_blocks, multistep
TSLIB_CASES = [(96, 48, 7, 32, 24, 2, 3, False), (96, 48, 7, 32, 24, 3, 2, True), (64, 48, 3, 16, 16, 2, 2, False),
               (48, 24, 1, 16, 32, 4, 4, False)]
# ... and seg_len, for the official code
KOOPA_CASES = [(96, 96, 4, 16, 16, 2, 2, False, 24), (96, 96, 4, 16, 16, 2, 2, True, 24),
               (48, 96, 3, 16, 16, 3, 2, True, 16), (60, 50, 2, 16, 16, 2, 3, False, 16),
               (60, 50, 2, 16, 16, 2, 3, True, 16)]
TRAIN_BATCH = 32

RULES = [
    (r"time_(inv|var)_kps\.\d+\.(encoder|decoder)\..*", None),  # the shared encoders and decoders, again
    (r"time_inv_(encoder|decoder)\.layers\.(\d+)\.(\w+)", r"invariant_\1.\2.\3"),
    (r"time_var_(encoder|decoder)\.layers\.(\d+)\.(\w+)", r"variant_\1.\2.\3"),
    (r"time_inv_kps\.(\d+)\.K\.weight", r"operators.\1.weight"),
]


def training_windows(seq_len: int, channels: int) -> torch.Tensor:
    """Every window of a synthetic series of 2000 steps: daily and weekly cycles, a trend, noise."""
    generator = torch.Generator().manual_seed(2)
    t = torch.arange(2000.0)[:, None]
    phase = torch.rand(1, channels, generator=generator) * 6.28
    series = (torch.sin(2 * torch.pi * t / 24 + phase) + 0.5 * torch.sin(2 * torch.pi * t / 168 + phase)
              + t / 1000 + 0.3 * torch.randn(2000, channels, generator=generator))
    return series.unfold(0, seq_len, 1).transpose(1, 2)  # (N, seq_len, C)


def koopa_case(module, ours_hparams: dict, task: dict, official_config: dict, windows: torch.Tensor, worst: float,
               series: int, label: str) -> float:
    """One model pair's largest difference, printed; the running worst. Ours reads its frequencies from the training
    windows, as run.py gives them."""
    import models

    torch.manual_seed(0)
    official = module(**official_config).eval()
    perturb(official)
    ours = models.build("koopa", task, ours_hparams).eval()
    ours.fit_training_windows([windows])
    copy_state(official.state_dict(), ours, RULES, computed=("variant_frequencies",))
    x = random_walks(series, task["seq_len"], task["enc_in"])
    with torch.no_grad():
        expected = official(x, None, None, None)
        got = ours(x)
    diff = (got - expected).abs().max().item()
    print(f"{label}: max abs diff {diff:.3e} (forecast's largest |value| {expected.abs().max().item():.3g})")
    return max(worst, diff)


def main() -> int:
    args = checkout_arguments(__doc__.split("\n\n")[0], "thuml/Time-Series-Library", "models/Koopa.py", extra=[(
        "--official_koopa", "a checkout of thuml/Koopa: also compare its code at segment lengths below the horizon")])
    served = {}  # the training windows TSLib's stand-in data_provider serves, per call

    def data_provider(configs, flag):
        windows = served["windows"]
        return None, [(windows[i:i + TRAIN_BATCH],) for i in range(0, len(windows) - TRAIN_BATCH + 1, TRAIN_BATCH)]

    tslib = checkout_module(args.official, "models/Koopa.py", {
        "data_provider": stand_in("data_provider"),
        "data_provider.data_factory": stand_in("data_provider.data_factory", data_provider=data_provider)})
    from models.koopa import dominant_frequencies

    worst = 0.0
    for seq_len, horizon, channels, dynamic, hidden, layers, blocks, multistep in TSLIB_CASES:
        windows = training_windows(seq_len, channels)
        served["windows"] = windows[:len(windows) // TRAIN_BATCH * TRAIN_BATCH]  # whole batches: the same mean
        mask = dominant_frequencies([served["windows"]])
        task = {"seq_len": seq_len, "input_token_len": horizon, "output_token_len": horizon, "enc_in": channels,
                "n_marks": 0, "covariate": False, "nonautoregressive": True}
        hparams = {"alpha": 0.2, "dynamic_dim": dynamic, "hidden_dim": hidden,
                   "hidden_layers": layers, "num_blocks": blocks, "seg_len": 0, "multistep": multistep,
                   "dropout": 0.05}
        config = {"configs": SimpleNamespace(task_name="long_term_forecast", enc_in=channels, seq_len=seq_len,
                                             pred_len=horizon),
                  "dynamic_dim": dynamic, "hidden_dim": hidden, "hidden_layers": layers, "num_blocks": blocks,
                  "multistep": multistep}
        torch.manual_seed(0)
        found = tslib.Model(**config).mask_spectrum.tolist()
        if found != mask:
            print(f"seq_len {seq_len}: TSLib's mask_spectrum {found}, dominant_frequencies {mask}: DIFFERENT")
            worst = float("inf")
        else:
            print(f"seq_len {seq_len}: mask_spectrum {mask} (TSLib's, from its training loader) = "
                  "dominant_frequencies")
        worst = koopa_case(tslib.Model, hparams, task, config, served["windows"], worst, args.series,
                           f"TSLib seq_len {seq_len:3d} horizon {horizon:3d} channels {channels} dynamic {dynamic} "
                           f"hidden {hidden}x{layers} blocks {blocks} multistep {multistep}")
    if args.official_koopa:
        path = os.path.join(args.official_koopa, "models", "Koopa.py")
        if not os.path.isfile(path):
            fail(f"--official_koopa {args.official_koopa}: expected a thuml/Koopa checkout ({path} not found)")
        spec = importlib.util.spec_from_file_location("official_koopa", path)
        official = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(official)
        for seq_len, horizon, channels, dynamic, hidden, layers, blocks, multistep, seg_len in KOOPA_CASES:
            windows = training_windows(seq_len, channels)
            mask = dominant_frequencies([windows])
            task = {"seq_len": seq_len, "input_token_len": horizon, "output_token_len": horizon, "enc_in": channels,
                    "n_marks": 0, "covariate": False, "nonautoregressive": True}
            hparams = {"alpha": 0.2, "dynamic_dim": dynamic, "hidden_dim": hidden,
                       "hidden_layers": layers, "num_blocks": blocks, "seg_len": seg_len, "multistep": multistep,
                       "dropout": 0.05}
            config = {"configs": SimpleNamespace(
                mask_spectrum=torch.tensor(mask), enc_in=channels, seq_len=seq_len, pred_len=horizon,
                seg_len=seg_len, num_blocks=blocks, dynamic_dim=dynamic, hidden_dim=hidden, hidden_layers=layers,
                multistep=multistep)}
            worst = koopa_case(official.Model, hparams, task, config, windows, worst, args.series,
                               f"official seq_len {seq_len:3d} horizon {horizon:3d} seg_len {seg_len} channels "
                               f"{channels} blocks {blocks} multistep {multistep}")
    return verdict(worst, args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
