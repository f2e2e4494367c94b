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
import argparse
import importlib.util
import os
import re
import sys
from types import SimpleNamespace

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.equivalence.common import fail  # noqa: E402

# the official repository's top-level packages that clash with (or are absent from) this repository's
OFFICIAL_PACKAGES = ("models", "layers", "utils", "data_provider", "exp")
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


def arguments(description: str):
    found = argparse.ArgumentParser(description=description)
    found.add_argument("--official", required=True, help="a checkout of Secilia-Cxy/SOFTS")
    found.add_argument("--series", type=int, default=4, help="windows per batch")
    found.add_argument("--tolerance", type=float, default=1e-5, help="largest absolute difference accepted")
    found.error = fail
    args = found.parse_args()
    if args.series < 1 or args.tolerance < 0:
        fail("--series must be at least 1 and --tolerance at least 0")
    if not os.path.isfile(os.path.join(args.official, "models", "SOFTS.py")):
        fail(f"--official {args.official}: expected a checkout of Secilia-Cxy/SOFTS (models/SOFTS.py not found)")
    return args


def official_module(folder: str, name: str):
    """The checkout's models/<name>.py, imported with its top-level packages first on sys.path; this repository's
    packages of the same names are put back afterwards (the module keeps its references to the checkout's)."""
    ours = {key: module for key, module in sys.modules.items() if key.split(".")[0] in OFFICIAL_PACKAGES}
    for key in ours:
        del sys.modules[key]
    sys.path.insert(0, os.path.abspath(folder))
    try:
        spec = importlib.util.spec_from_file_location(f"official_{name}", os.path.join(folder, "models", f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - one line naming why, whatever the official code raised on import
        fail(f"--official {folder}: models/{name}.py does not import here: {type(e).__name__}: {e}")
    finally:
        sys.path.remove(os.path.abspath(folder))
        for key in [key for key in sys.modules if key.split(".")[0] in OFFICIAL_PACKAGES]:
            del sys.modules[key]
        sys.modules.update(ours)
    return module


def copy_weights(official: torch.nn.Module, ours: torch.nn.Module, rules: list) -> None:
    """Every official tensor into ours under the name the first matching (pattern, replacement) gives; a width-1
    convolution's weight loses its last dimension. Refuses a tensor left over on either side."""
    theirs, mine = official.state_dict(), ours.state_dict()
    for name, tensor in theirs.items():
        rule = next(((p, r) for p, r in rules if re.fullmatch(p, name)), None)
        target = None if rule is None else re.sub(*rule, name)
        if target not in mine:
            fail(f"the official {name} has no counterpart here (mapped to {target})")
        if mine[target].dim() == tensor.dim() - 1:
            tensor = tensor.squeeze(-1)
        if mine[target].shape != tensor.shape:
            fail(f"the official {name} {tuple(tensor.shape)} does not fit {target} {tuple(mine[target].shape)}")
        mine[target] = tensor
    if len(theirs) != len(mine):
        fail(f"ours has {len(mine)} tensors, the official model {len(theirs)}")
    ours.load_state_dict(mine, strict=True)


def main() -> int:
    args = arguments(__doc__.split("\n\n")[0])
    softs = official_module(args.official, "SOFTS")
    import models

    worst = 0.0
    for seq_len, horizon, channels, marks, use_norm, e_layers, d_core in CASES:
        hparams = {"d_model": 32, "d_core": d_core, "e_layers": e_layers, "d_ff": 48, "dropout": 0.0,
                   "activation": "gelu", "use_norm": use_norm}
        torch.manual_seed(0)
        official = softs.Model(SimpleNamespace(seq_len=seq_len, pred_len=horizon, **hparams))
        with torch.no_grad():
            for parameter in official.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.1)
        ours = models.build("softs", {"seq_len": seq_len, "input_token_len": horizon, "output_token_len": horizon,
                                      "enc_in": channels, "n_marks": N_MARKS if marks else 0, "covariate": False,
                                      "nonautoregressive": True}, hparams)
        copy_weights(official, ours, RULES)
        level, scale = torch.randn(args.series, 1, channels) * 3, torch.rand(args.series, 1, channels) * 2 + 0.5
        x = torch.randn(args.series, seq_len, channels).cumsum(1) * scale * 0.3 + level
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
    equal = worst <= args.tolerance
    print(f"{'equal' if equal else 'DIFFERENT'} within {args.tolerance:g}: largest {worst:.3e}")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
