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
import argparse
import importlib.util
import os
import re
import sys
import types
from types import SimpleNamespace

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.equivalence.common import fail  # noqa: E402

# TSLib's top-level packages that clash with (or are absent from) this repository's
TSLIB_PACKAGES = ("models", "layers", "utils", "data_provider", "exp")
N_MARKS = 4  # TSLib's timeF features of freq h
# seq_len, label_len, horizon, channels, p_hidden_dims, d_layers
CASES = [(96, 48, 96, 7, [16, 16], 1), (36, 18, 24, 3, [8, 8], 2), (64, 16, 40, 1, [12], 1),
         (48, 48, 100, 5, [8, 8, 8], 1)]


def arguments(description: str, model_file: str, extra=()):
    """The options (--official, --series, --tolerance, and the optional folders `extra` names: (flag, help)),
    checked; errors in one line."""
    found = argparse.ArgumentParser(description=description)
    found.add_argument("--official", required=True, help="a checkout of thuml/Time-Series-Library")
    for flag, text in extra:
        found.add_argument(flag, help=text)
    found.add_argument("--series", type=int, default=4, help="windows per batch")
    found.add_argument("--tolerance", type=float, default=1e-5, help="largest absolute difference accepted")
    found.error = fail
    args = found.parse_args()
    if args.series < 1 or args.tolerance < 0:
        fail("--series must be at least 1 and --tolerance at least 0")
    if not os.path.isfile(os.path.join(args.official, "models", model_file)):
        fail(f"--official {args.official}: expected a Time-Series-Library checkout (models/{model_file} not found)")
    return args


def tslib_module(folder: str, name: str, stand_ins: dict):
    """TSLib's models/<name>.py, imported with TSLib's top-level packages first on sys.path; this repository's
    packages of the same names are put back afterwards (the module keeps its references to TSLib's). stand_ins:
    modules put in sys.modules for the import (the packages TSLib imports for other models)."""
    ours = {key: module for key, module in sys.modules.items() if key.split(".")[0] in TSLIB_PACKAGES}
    for key in ours:
        del sys.modules[key]
    missing = {key: module for key, module in stand_ins.items() if importlib.util.find_spec(key.split(".")[0]) is None
               or key.split(".")[0] in TSLIB_PACKAGES}
    sys.modules.update(missing)
    sys.path.insert(0, os.path.abspath(folder))
    try:
        spec = importlib.util.spec_from_file_location(f"tslib_{name}", os.path.join(folder, "models", f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - one line naming why, whatever TSLib's code raised on import
        fail(f"--official {folder}: models/{name}.py does not import here: {type(e).__name__}: {e}")
    finally:
        sys.path.remove(os.path.abspath(folder))
        for key in [key for key in sys.modules if key.split(".")[0] in TSLIB_PACKAGES]:
            del sys.modules[key]
        sys.modules.update(ours)
    return module


def stand_in(name: str, **attributes) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    return module


def copy_weights(official: torch.nn.Module, ours: torch.nn.Module, rules: list, computed: tuple = ()) -> None:
    """Every official tensor into ours under the name the first matching (pattern, replacement) of rules gives;
    a weight of a width-1 convolution into a linear layer loses its last dimension; a replacement None passes the
    tensor over (a constant ours computes). Refuses a tensor left over on either side, but ours named in `computed`
    (set here from the data, as the official code sets its own outside its state dict)."""
    theirs, mine = official.state_dict(), ours.state_dict()
    done = set()
    for name, tensor in theirs.items():
        rule = next(((pattern, replacement) for pattern, replacement in rules if re.fullmatch(pattern, name)), None)
        if rule is not None and rule[1] is None:
            continue  # a constant table ours computes in the forward
        target = None if rule is None else re.sub(*rule, name)
        if target not in mine:
            fail(f"TSLib's {name} has no counterpart here (mapped to {target})")
        if mine[target].dim() == tensor.dim() - 1:
            tensor = tensor.squeeze(-1)
        if mine[target].shape != tensor.shape:
            fail(f"TSLib's {name} {tuple(tensor.shape)} does not fit {target} {tuple(mine[target].shape)}")
        mine[target] = tensor
        done.add(target)
    left = sorted(set(mine) - done - set(computed))
    if left:
        fail(f"ours has tensors TSLib lacks: {left}")
    ours.load_state_dict(mine, strict=True)


def perturb(model: torch.nn.Module) -> None:
    """Weights moved off their initial values: LayerNorm's ones and zeros and the zero biases matter too."""
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)


def random_walks(batch: int, length: int, channels: int) -> torch.Tensor:
    """Non-stationary windows: random walks with a level and a scale per channel."""
    level, scale = torch.randn(batch, 1, channels) * 3, torch.rand(batch, 1, channels) * 2 + 0.5
    return torch.randn(batch, length, channels).cumsum(1) * scale * 0.3 + level


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
    args = arguments(__doc__.split("\n\n")[0], "Nonstationary_Transformer.py")
    tslib = tslib_module(args.official, "Nonstationary_Transformer",
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
        copy_weights(official, ours, RULES)
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
    equal = worst <= args.tolerance
    print(f"{'equal' if equal else 'DIFFERENT'} within {args.tolerance:g}: largest {worst:.3e}")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
