"""Offline equivalence of models/pathformer.py with the official Pathformer (decisionintelligence/pathformer,
models/PathFormer.py).

    python scripts/equivalence/pathformer.py --official DIR [--series 4] [--tolerance 1e-5]

DIR is a checkout of github.com/decisionintelligence/pathformer (TSLib has no Pathformer): its models/PathFormer.py
is loaded with the checkout's own layers/ and utils/ in place of this repository's packages; it needs torch, numpy
and einops (it only names a CUDA device, which it never uses).

For each case below (seq_len, horizon, channels, patch sizes per layer, k, residual) an official model (RevIN, no
BatchNorm as in every official script) is built with its weights moved off their initial values, copied key by key
into ours (the official modules its forward never calls are passed over; the per-patch query maps are stacked), and
both forecast the same random walks (a level and a scale per channel):
- in eval mode (no gating noise);
- in training mode at dropout 0 from the same seed (the same gating noise from torch's generator): the forecasts,
  the summed balance loss (the official loss_coef 0.01 included), and every parameter's gradient of
  sum(forecast) + that loss.
Both run in float32 (the official mixture of experts is combined in float32 whatever its input). Printed: the largest
absolute differences, and the relative ones (to the forecast's largest |value|, the loss's value, each parameter's
largest official gradient, at least 1e-3 of the model's largest). Exit status 1 when a relative one exceeds
--tolerance, 2 on bad input (one line naming it).
"""
import os
import re
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

# seq_len, horizon, channels, patch sizes (layers x experts), k, residual: the ETTh1 scripts' shapes at 96 and 720
# (fewer channels), every expert active, one channel, an odd seq_len (no Nyquist frequency to leave out)
CASES = [(96, 96, 3, ((16, 12, 8, 32), (12, 8, 6, 4), (8, 6, 4, 2)), 3, True),
         (96, 48, 2, ((16, 12, 8, 32), (12, 8, 6, 4), (8, 6, 4, 2)), 2, False),
         (48, 24, 3, ((8, 4, 6), (12, 2, 3)), 3, True),
         (32, 16, 1, ((8, 4), (16, 2)), 1, False),
         (45, 20, 2, ((9, 5, 15),), 2, True)]
D_MODEL, D_FF = 4, 16
# a shift shared by every key of a query leaves its softmax unchanged: these biases' gradients are 0 but for rounding
SHIFTS = r"layers\.\d+\.experts\.\d+\.(inter\.key\.bias|intra\.key_value\.B\.0)"
RULES = [  # official name -> ours; None: built, never called
    (r"AMS_lists\.(\d+)\.(end_MLP|experts\.\d+\.norm_attn|experts\.\d+\.norm_ffn)\..*", None),
    (r"start_fc\.(\w+)", r"embed.\1"),
    (r"projections\.0\.(\w+)", r"head.\1"),
    (r"AMS_lists\.(\d+)\.start_linear\.(\w+)", r"layers.\1.channels.\2"),
    (r"AMS_lists\.(\d+)\.trend_model\.layer\.(\w+)", r"layers.\1.trend_mix.\2"),
    (r"AMS_lists\.(\d+)\.w_(gate|noise)\.(\w+)", r"layers.\1.\2.\3"),
    (r"AMS_lists\.(\d+)\.(mean|std)", None),  # the official Normal's constants
    (r"AMS_lists\.(\d+)\.experts\.(\d+)\.intra_embeddings", r"layers.\1.experts.\2.intra.seeds"),
    (r"AMS_lists\.(\d+)\.experts\.(\d+)\.query_(weight|bias)", r"layers.\1.experts.\2.intra.query_\3"),
    (r"AMS_lists\.(\d+)\.experts\.(\d+)\.weights_generator_distinct\.(.*)", r"layers.\1.experts.\2.intra.key_value.\3"),
    (r"AMS_lists\.(\d+)\.experts\.(\d+)\.weights_generator_shared\.P\.([01])",
     lambda m: f"layers.{m[1]}.experts.{m[2]}.intra.shared.{2 * int(m[3])}.weight"),
    (r"AMS_lists\.(\d+)\.experts\.(\d+)\.weights_generator_shared\.B\.([01])",
     lambda m: f"layers.{m[1]}.experts.{m[2]}.intra.shared.{2 * int(m[3])}.bias"),
    (r"AMS_lists\.(\d+)\.experts\.(\d+)\.intra_Linear\.(\w+)", r"layers.\1.experts.\2.intra.widen.\3"),
    (r"AMS_lists\.(\d+)\.experts\.(\d+)\.emb_linear\.(\w+)", r"layers.\1.experts.\2.inter.embed.\3"),
    (r"AMS_lists\.(\d+)\.experts\.(\d+)\.W_pos", r"layers.\1.experts.\2.inter.position"),
    (r"AMS_lists\.(\d+)\.experts\.(\d+)\.inter_patch_attention\.W_([QKV])\.(\w+)",
     lambda m: f"layers.{m[1]}.experts.{m[2]}.inter.{dict(Q='query', K='key', V='value')[m[3]]}.{m[4]}"),
    (r"AMS_lists\.(\d+)\.experts\.(\d+)\.inter_patch_attention\.to_out\.0\.(\w+)",
     r"layers.\1.experts.\2.inter.out.\3"),
    (r"AMS_lists\.(\d+)\.experts\.(\d+)\.inter_patch_attention\.sdp_attn\.scale", None),  # 1 / sqrt(p), fixed
    (r"AMS_lists\.(\d+)\.experts\.(\d+)\.ff\.(\d)\.(\w+)", r"layers.\1.experts.\2.ffn.\3.\4"),
]


def official_state(official) -> dict:
    """The official state dict with each expert's per-patch query maps (embeddings_generator.i.0) stacked into the
    one tensor of ours (query_weight, query_bias)."""
    state, stacked = {}, {}
    for name, tensor in official.state_dict().items():
        match = re.fullmatch(r"(.*)\.embeddings_generator\.(\d+)\.0\.(weight|bias)", name)
        if match:
            stacked.setdefault(f"{match[1]}.query_{match[3]}", {})[int(match[2])] = tensor
        else:
            state[name] = tensor
    for name, parts in stacked.items():
        state[name] = torch.stack([parts[i] for i in range(len(parts))])
    return state


def convert(name: str, tensor: torch.Tensor) -> torch.Tensor:
    if name.endswith("intra_embeddings"):  # (n, 1, 1, C, 16) -> (n, C, 16)
        return tensor.flatten(1, 3)
    if "weights_generator_shared.P" in name:  # x P -> nn.Linear's x W^T
        return tensor.T
    if "weights_generator_shared.B" in name:  # (1, D) -> (D,)
        return tensor[0]
    return tensor


def rename(name: str) -> str:
    """Our name of an official parameter (the stacked query maps: their stacked name's)."""
    match = re.fullmatch(r"(.*)\.embeddings_generator\.\d+\.0\.(weight|bias)", name)
    name = f"{match[1]}.query_{match[2]}" if match else name
    for pattern, replacement in RULES:
        if re.fullmatch(pattern, name):
            return None if replacement is None else re.sub(pattern, replacement, name)
    fail(f"the official {name} has no counterpart here")


def gradients(official) -> dict:
    """The official gradients under our names (stacked and converted as their parameters)."""
    found, stacked = {}, {}
    for name, parameter in official.named_parameters():
        if parameter.grad is None:
            continue
        match = re.fullmatch(r"(.*)\.embeddings_generator\.(\d+)\.0\.(weight|bias)", name)
        if match:
            stacked.setdefault(rename(name), {})[int(match[2])] = parameter.grad
        elif rename(name) is not None:
            found[rename(name)] = convert(name, parameter.grad)
    for name, parts in stacked.items():
        found[name] = torch.stack([parts[i] for i in range(len(parts))])
    return found


def gradient_difference(official, ours) -> float:
    """The largest difference of a parameter's gradient from the official one's, relative to the larger of the
    latter's largest |entry| and 1e-3 of the model's largest (the routers' small gradients pass through the trend's
    moving averages, which ours sums in float64). The key biases (SHIFTS) have a gradient of 0 in exact arithmetic,
    float32 rounding noise in its place: it must stay below 1e-4 of the model's largest on both sides. Every
    parameter of ours must have a gradient."""
    expected, mine = gradients(official), dict(ours.named_parameters())
    missing = sorted(set(mine) - set(expected))
    if missing:
        fail(f"the official model has no gradient for {missing}")
    largest = max(grad.abs().max().item() for grad in expected.values())
    worst = 0.0
    for key, grad in expected.items():
        if re.fullmatch(SHIFTS, key):
            noise = max(grad.abs().max().item(), mine[key].grad.abs().max().item()) / largest
            worst = max(worst, 0.0 if noise < 1e-4 else float("inf"))
        else:
            scale = max(grad.abs().max().item(), 1e-3 * largest)
            worst = max(worst, (mine[key].grad - grad).abs().max().item() / scale)
    return worst


def difference(got: torch.Tensor, expected: torch.Tensor) -> tuple:
    diff = (got - expected).abs().max().item()
    return diff, diff / expected.abs().max().item()


def main() -> int:
    args = checkout_arguments(__doc__.split("\n\n")[0], "decisionintelligence/pathformer", "models/PathFormer.py",
                              tolerance="largest relative difference accepted (of the forecasts: to their largest "
                                        "|value|; of the loss, of each gradient)")
    # its models/, layers/ and utils/ have no __init__.py: as namespace packages they would lose to this repository's
    packages = {name: stand_in(name, __path__=[os.path.join(args.official, name)])
                for name in ("models", "layers", "utils")}
    official_module = checkout_module(args.official, "models/PathFormer.py", packages)
    import models

    worst = 0.0
    for seq_len, horizon, channels, layers, k, residual in CASES:
        experts = len(layers[0])
        torch.manual_seed(0)
        official = official_module.Model(SimpleNamespace(
            layer_nums=len(layers), num_nodes=channels, pred_len=horizon, seq_len=seq_len, k=k,
            num_experts_list=[experts] * len(layers), patch_size_list=[list(layer) for layer in layers],
            d_model=D_MODEL, d_ff=D_FF, residual_connection=int(residual), revin=1, gpu=0, batch_norm=0))
        perturb(official)
        hparams = {"d_model": D_MODEL, "d_ff": D_FF, "e_layers": len(layers), "num_experts": experts,
                   "active_experts": k, "patch_sizes": ",".join(str(p) for layer in layers for p in layer),
                   "residual_connection": residual, "dropout": 0.0, "ffn_dropout": 0.0, "balance_weight": 0.01,
                   "use_norm": True}
        ours = models.build("pathformer", {"seq_len": seq_len, "input_token_len": horizon,
                                           "output_token_len": horizon, "enc_in": channels, "n_marks": 0,
                                           "covariate": False, "nonautoregressive": True}, hparams)
        copy_state(official_state(official), ours, [(pattern, replacement) for pattern, replacement in RULES],
                   convert=convert)
        for module in official.modules():  # the official dropout rates are fixed: 0 for the training comparison
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        x = random_walks(args.series, seq_len, channels)

        official.eval(), ours.eval()
        with torch.no_grad():
            eval_abs, eval_rel = difference(ours(x), official(x)[0])

        official.train(), ours.train()
        torch.manual_seed(2)
        expected, expected_aux = official(x)
        torch.manual_seed(2)
        got, terms = ours(x)
        (expected.sum() + expected_aux.sum()).backward()
        (got.sum() + terms["balance"]).backward()
        train_abs, train_rel = difference(got, expected)
        aux = expected_aux.sum().item()
        aux_rel = abs(terms["balance"].item() - aux) / max(abs(aux), 1e-12)
        grad_rel = gradient_difference(official, ours)
        worst = max(worst, eval_rel, train_rel, aux_rel, grad_rel)
        print(f"seq_len {seq_len:3d} horizon {horizon:3d} channels {channels} patches {layers} k {k} residual "
              f"{residual!s:5}: eval forecast max abs diff {eval_abs:.3e} ({eval_rel:.1e} relative); training "
              f"forecast {train_abs:.3e} ({train_rel:.1e}), balance loss {aux_rel:.1e} relative (official "
              f"{aux:.4g}), gradients {grad_rel:.1e} relative")
    return verdict(worst, args.tolerance, relative=True)


if __name__ == "__main__":
    sys.exit(main())
