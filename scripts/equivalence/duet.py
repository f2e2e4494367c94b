"""Offline equivalence of models/duet.py with the official DUET (decisionintelligence/DUET, the same code as TFB's).

    python scripts/equivalence/duet.py --official DIR [--series 4] [--tolerance 1e-5]

DIR is a checkout of github.com/decisionintelligence/DUET or github.com/decisionintelligence/TFB: its
ts_benchmark/baselines/duet/models/duet_model.py (DUETModel) is imported without the package's __init__, which
would import TFB's training base (pandas, scikit-learn); it needs torch and einops.

For each case below (seq_len, horizon, channels, experts, k, layers, heads) an official DUETModel (CI=1, noisy gating,
dropout 0) is built with its weights moved off their initial values (so that every bias, norm and RevIN's affine
matters), copied key by key into ours, and both forecast the same random walks (a level and a scale per channel):
- in eval mode, where the official channel mask draws Gumbel noise and ours takes each pair's more likely outcome:
  the official gumbel_softmax is given no noise for this comparison (its hard sample is then that outcome);
- in training mode from the same seed (the same gating noise and Gumbel draws from torch's generator): the
  forecasts, the load-balancing loss, and every parameter's gradient of sum(forecast) + that loss.
Both run in float32: the official code sums the experts in float32 whatever its input. Printed: the largest absolute
differences of the forecasts, and the relative ones (to the forecast's largest |value|, the loss's value, each
parameter's largest official gradient, at least 1e-6 of the model's largest); exit status 1 when a
relative one exceeds --tolerance, 2 on bad input (one line naming it).
"""
import argparse
import importlib
import os
import re
import sys
import types
from types import SimpleNamespace

import torch
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.equivalence.common import fail, perturb, random_walks, verdict  # noqa: E402

PACKAGE = "ts_benchmark.baselines.duet"
# seq_len, horizon, channels, num_experts, k, e_layers, n_heads: top-k below the experts (differentiable load),
# one channel (no mask, no fusion), every expert active (counted load), a single expert
CASES = [(96, 96, 7, 4, 2, 2, 4), (48, 24, 1, 3, 1, 1, 2), (64, 40, 5, 3, 3, 1, 1), (36, 12, 3, 1, 1, 2, 2)]
RULES = [  # official name -> ours; None: a constant ours does not keep (the official Normal's mean and std)
    (r"cluster\.(mean|std)", None),
    (r"cluster\.W_h", r"mix"),
    (r"cluster\.(gate|noise)\.distribution_fit\.(\d)\.weight", r"\1.net.\2.weight"),
    (r"cluster\.experts\.(\d+)\.Linear_Seasonal\.(\w+)", r"experts.\1.seasonal.\2"),
    (r"cluster\.experts\.(\d+)\.Linear_Trend\.(\w+)", r"experts.\1.trend.\2"),
    (r"cluster\.revin\.affine_weight", r"revin.weight"),
    (r"cluster\.revin\.affine_bias", r"revin.bias"),
    (r"mask_generator\.A", r"mask.metric"),
    (r"Channel_transformer\.attn_layers\.(\d+)\.attention\.(query|key|value)_projection\.(\w+)",
     r"layers.\1.attention.qkv.\3"),
    (r"Channel_transformer\.attn_layers\.(\d+)\.attention\.out_projection\.(\w+)", r"layers.\1.attention.out.\2"),
    (r"Channel_transformer\.attn_layers\.(\d+)\.conv1\.(\w+)", r"layers.\1.ffn.0.\2"),
    (r"Channel_transformer\.attn_layers\.(\d+)\.conv2\.(\w+)", r"layers.\1.ffn.3.\2"),
    (r"Channel_transformer\.attn_layers\.(\d+)\.(norm[12])\.(\w+)", r"layers.\1.\2.\3"),
    (r"Channel_transformer\.norm\.(\w+)", r"norm.\1"),
    (r"linear_head\.0\.(\w+)", r"head.0.\1"),
]
QKV = {"query": 0, "key": 1, "value": 2, "W_Q": 0, "W_K": 1, "W_V": 2}  # the slices of our stacked projection


def official_modules(folder: str):
    """(duet_model, masked_attention) of the checkout, its package stood in so that its __init__ is not run."""
    root = os.path.join(folder, *PACKAGE.split("."))
    if not os.path.isfile(os.path.join(root, "models", "duet_model.py")):
        fail(f"--official {folder}: expected a DUET or TFB checkout ({PACKAGE.replace('.', '/')}/models/"
             "duet_model.py not found)")
    sys.path.insert(0, os.path.abspath(folder))
    package = types.ModuleType(PACKAGE)
    package.__path__ = [root]
    sys.modules[PACKAGE] = package
    try:
        return (importlib.import_module(f"{PACKAGE}.models.duet_model"),
                importlib.import_module(f"{PACKAGE}.utils.masked_attention"))
    except Exception as e:  # noqa: BLE001 - one line naming why, whatever the official code raised on import
        fail(f"--official {folder}: duet_model.py does not import here: {type(e).__name__}: {e} (it needs torch and "
             "einops)")


def mapper(rules: list):
    """name -> (our tensor's name, slice index along dim 0 or None) of an official tensor by the first matching
    (pattern, replacement) of rules: a query, key or value projection is its third of our stacked one; None where
    the replacement is None (a tensor ours does not keep)."""
    def mapped(name: str):
        for pattern, replacement in rules:
            if re.fullmatch(pattern, name):
                if replacement is None:
                    return None
                match = re.search(r"\.(query|key|value|W_Q|W_K|W_V)(?:_projection)?\.", name)
                return re.sub(pattern, replacement, name), QKV[match.group(1)] if match else None
        fail(f"the official {name} has no counterpart here")
    return mapped


def part(tensor: torch.Tensor, index) -> torch.Tensor:
    return tensor if index is None else tensor.chunk(3)[index]


def copy_weights(official, ours, rules: list) -> list:
    """Every official tensor into ours (convolutions of width 1 into linear layers) by rules (mapper); returns the
    (official name, ours, slice) triples. Refuses a tensor left over on either side."""
    mapped = mapper(rules)
    mine, pairs, filled = ours.state_dict(), [], set()
    for name, tensor in official.state_dict().items():
        target = mapped(name)
        if target is None:
            continue
        key, index = target
        if key not in mine:
            fail(f"the official {name} maps to {key}, which ours lacks")
        tensor = tensor.squeeze(-1) if mine[key].dim() == tensor.dim() - 1 else tensor
        if part(mine[key], index).shape != tensor.shape:
            fail(f"the official {name} {tuple(tensor.shape)} does not fit {key} {tuple(mine[key].shape)}")
        part(mine[key], index).copy_(tensor)
        pairs.append((name, key, index))
        filled.add(key)
    left = sorted(set(mine) - filled)
    if left:
        fail(f"ours has tensors the official model lacks: {left}")
    ours.load_state_dict(mine, strict=True)
    return pairs


def gradient_difference(official, ours, pairs) -> float:
    """The largest difference of a parameter's gradient from the official one's, relative to the larger of the
    latter's largest |entry| (the stacked projection as a whole) and 1e-6 of the model's largest: a bias right before
    a norm has a gradient of 0 in exact arithmetic, rounding noise in its place. An unused parameter must have no
    gradient on either side."""
    theirs, mine, expected = dict(official.named_parameters()), dict(ours.named_parameters()), {}
    for name, key, index in pairs:
        if name not in theirs:  # a buffer
            continue
        if (theirs[name].grad is None) != (mine[key].grad is None):
            fail(f"{key} and the official {name}: a gradient on one side only")
        if theirs[name].grad is not None:
            grad = expected.setdefault(key, torch.zeros_like(mine[key]))
            part(grad, index).copy_(theirs[name].grad.reshape(part(grad, index).shape))
    floor = 1e-6 * max(grad.abs().max().item() for grad in expected.values())
    return max((mine[key].grad - grad).abs().max().item() / max(grad.abs().max().item(), floor)
               for key, grad in expected.items())


def difference(got: torch.Tensor, expected: torch.Tensor) -> tuple:
    """The largest absolute difference, and that relative to the expected forecast's largest |value|."""
    diff = (got - expected).abs().max().item()
    return diff, diff / expected.abs().max().item()


def options(description: str, official: str, float64: bool):
    """--official, --series, --tolerance and, where the official code runs in float64, --dtype (default float64),
    checked; errors in one line."""
    found = argparse.ArgumentParser(description=description)
    found.add_argument("--official", required=True, help=official)
    found.add_argument("--series", type=int, default=4, help="windows per batch")
    if float64:
        found.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                           help="both models' and the inputs' precision: float64 shows a difference beyond rounding")
    found.add_argument("--tolerance", type=float, default=1e-5,
                       help="largest relative difference accepted (of the forecasts: to their largest |value|)")
    found.error = fail
    args = found.parse_args()
    if args.series < 1 or args.tolerance < 0:
        fail("--series must be at least 1 and --tolerance at least 0")
    if not os.path.isdir(args.official):
        fail(f"--official {args.official}: no such folder")
    args.dtype = getattr(torch, args.dtype if float64 else "float32")
    return args


def noiseless_gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
    """gumbel_softmax's hard sample without noise: the one-hot of the larger logit (the more likely outcome)."""
    return F.one_hot(logits.argmax(dim), logits.shape[dim]).to(logits.dtype)


def main() -> int:
    args = options(__doc__.split("\n\n")[0], "a checkout of decisionintelligence/DUET or TFB", float64=False)
    duet_model, masked_attention = official_modules(args.official)
    import models

    worst = 0.0
    for seq_len, horizon, channels, experts, k, layers, heads in CASES:
        hparams = {"d_model": 32, "n_heads": heads, "e_layers": layers, "d_ff": 48, "dropout": 0.0,
                   "fc_dropout": 0.0, "activation": "gelu", "num_experts": experts, "active_experts": k,
                   "router_hidden": 24, "moving_avg": 25}
        torch.manual_seed(0)
        official = duet_model.DUETModel(SimpleNamespace(
            seq_len=seq_len, pred_len=horizon, enc_in=channels, CI=True, noisy_gating=True, k=k,
            num_experts=experts, hidden_size=hparams["router_hidden"], factor=3, output_attention=False,
            **{key: hparams[key] for key in ("d_model", "n_heads", "e_layers", "d_ff", "dropout", "fc_dropout",
                                              "activation", "moving_avg")}))
        perturb(official)
        ours = models.build("duet", {"seq_len": seq_len, "output_token_len": horizon, "enc_in": channels,
                                     "covariate": False, "nonautoregressive": True}, hparams)
        pairs = copy_weights(official, ours, RULES)
        x = random_walks(args.series, seq_len, channels)

        official.eval(), ours.eval()
        drawn = masked_attention.gumbel_softmax
        masked_attention.gumbel_softmax = noiseless_gumbel_softmax
        with torch.no_grad():
            eval_abs, eval_rel = difference(ours(x), official(x)[0])
        masked_attention.gumbel_softmax = drawn

        official.train(), ours.train()
        torch.manual_seed(2)
        expected, expected_aux = official(x)
        torch.manual_seed(2)
        got, terms = ours(x)
        (expected.sum() + expected_aux.sum()).backward()
        (got.sum() + terms["load_balance"]).backward()
        train_abs, train_rel = difference(got, expected)
        aux_rel = abs(terms["load_balance"].item() - expected_aux.sum().item()) / max(expected_aux.abs().item(), 1e-12)
        grad_rel = gradient_difference(official, ours, pairs)
        worst = max(worst, eval_rel, train_rel, aux_rel, grad_rel)
        print(f"seq_len {seq_len:3d} horizon {horizon:3d} channels {channels} experts {experts} k {k}: eval forecast "
              f"max abs diff {eval_abs:.3e} ({eval_rel:.1e} relative); training forecast {train_abs:.3e} "
              f"({train_rel:.1e}), load-balancing loss {aux_rel:.1e} relative (official "
              f"{expected_aux.sum().item():.4g}), gradients {grad_rel:.1e} relative")
    return verdict(worst, args.tolerance, relative=True)


if __name__ == "__main__":
    sys.exit(main())
