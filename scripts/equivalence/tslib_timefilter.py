"""Offline equivalence of models/timefilter.py with TSLib's TimeFilter (and the official code's training loss).

    python scripts/equivalence/tslib_timefilter.py --official DIR [--paper DIR2] [--series 4] [--tolerance 1e-5]

DIR is a checkout of github.com/thuml/Time-Series-Library; its models/TimeFilter.py (needs torch alone) is imported
with TSLib's own top-level packages (layers) in place of this repository's. DIR2, optional, is a checkout of the
official github.com/TROUBADOUR000/TimeFilter, whose model also returns the router's balance loss (TSLib's drops it).

For each case below (seq_len, patch_len, horizon, channels, alpha, top_p, pos, layers) a TSLib model is built with
its weights moved off their initial values, copied key by key into ours, and both forecast the same random walks in
eval mode. With --paper the official model, given the same weights, is run in training mode (no dropout) from the
same random state as ours, so that the router draws the same noise: its forecast and 0.05 x its balance loss (the
official exp's weight) are compared with ours. Printed: the largest absolute differences. Exit status 1 when one
exceeds --tolerance, 2 on bad input (one line naming it).
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

# seq_len, patch_len, horizon, channels, alpha, top_p, pos, e_layers
CASES = [(96, 2, 96, 7, 0.1, 0.5, 0, 2), (96, 16, 192, 7, 0.1, 0.5, 1, 2), (96, 8, 720, 7, 0.4, 0.0, 1, 2),
         (48, 12, 24, 5, 0.8, 0.9, 1, 1), (64, 32, 40, 1, 0.2, 0.5, 0, 3), (32, 8, 16, 3, 0.0, 0.3, 1, 2)]

RULES = [
    (r"patch_embed\.pe\.pe", None),  # the sinusoidal table, computed in ours
    (r"patch_embed\.patch_proj\.(\w+)", r"embed.\1"),
    (r"backbone\.blocks\.(\d+)\.gnn\.graph_learner\.proj_1\.(\w+)", r"blocks.\1.query.\2"),
    (r"backbone\.blocks\.(\d+)\.gnn\.graph_learner\.proj_2\.(\w+)", r"blocks.\1.key.\2"),
    (r"backbone\.blocks\.(\d+)\.gnn\.graph_learner\.mask_moe\.(gate|noise)\.(\w+)", r"blocks.\1.router.\2.\3"),
    (r"backbone\.blocks\.(\d+)\.gnn\.graph_conv\.proj\.(\w+)", r"blocks.\1.message.\2"),
    (r"backbone\.blocks\.(\d+)\.(norm1|norm2|ffn\.\d)\.(\w+)", r"blocks.\1.\2.\3"),
    (r"head\.(\w+)", r"head.\1"),
]
UNUSED_ROUTER = (r"backbone\.blocks\.\d+\.gnn\.graph_learner\.mask_moe\..*", None)  # built but unused at top_p 0


def main() -> int:
    args = checkout_arguments(__doc__.split("\n\n")[0], "thuml/Time-Series-Library", "models/TimeFilter.py",
                              extra=(("--paper", "a checkout of TROUBADOUR000/TimeFilter (the official code)"),))
    tslib = checkout_module(args.official, "models/TimeFilter.py")
    paper = None
    if args.paper:
        if not os.path.isfile(os.path.join(args.paper, "layers", "TimeFilter_layers.py")):
            fail(f"--paper {args.paper}: expected a checkout of TROUBADOUR000/TimeFilter")
        paper = checkout_module(args.paper, "models/TimeFilter.py")
    import models

    worst = worst_train = 0.0
    for seq_len, patch_len, horizon, channels, alpha, top_p, pos, e_layers in CASES:
        settings = SimpleNamespace(task_name="long_term_forecast", seq_len=seq_len, pred_len=horizon,
                                   enc_in=channels, c_out=channels, d_model=32, d_ff=48, n_heads=4,
                                   e_layers=e_layers, dropout=0.1, patch_len=patch_len, alpha=alpha, top_p=top_p,
                                   pos=pos)
        torch.manual_seed(0)
        official = tslib.Model(settings).eval()
        perturb(official)
        hparams = {"d_model": 32, "n_heads": 4, "e_layers": e_layers, "d_ff": 48, "dropout": 0.1,
                   "patch_len": patch_len, "pos": bool(pos), "alpha": alpha, "top_p": top_p, "aux_loss_coef": 0.05}
        ours = models.build("timefilter", {
            "seq_len": seq_len, "input_token_len": horizon, "output_token_len": horizon, "enc_in": channels,
            "n_marks": 0, "covariate": False, "nonautoregressive": True}, hparams).eval()
        copy_state(official.state_dict(), ours, ([UNUSED_ROUTER] if top_p == 0 else []) + RULES)
        x = random_walks(args.series, seq_len, channels)
        with torch.no_grad():
            expected = official(x, None, None, None)
            got = ours(x)
        diff = (got - expected).abs().max().item()
        worst = max(worst, diff)
        line = (f"seq_len {seq_len:3d} patch_len {patch_len:2d} horizon {horizon:3d} channels {channels} alpha "
                f"{alpha} top_p {top_p} pos {pos} e_layers {e_layers}: eval max abs diff {diff:.3e} (forecast's "
                f"largest |value| {expected.abs().max().item():.3g})")
        if paper is not None:
            original = paper.Model(SimpleNamespace(**{**vars(settings), "dropout": 0.0}))
            original.load_state_dict(official.state_dict())
            ours_train = models.build("timefilter", {
                "seq_len": seq_len, "input_token_len": horizon, "output_token_len": horizon, "enc_in": channels,
                "n_marks": 0, "covariate": False, "nonautoregressive": True}, {**hparams, "dropout": 0.0})
            ours_train.load_state_dict(ours.state_dict())
            original.train(), ours_train.train()
            masks = official._get_mask(x.device)  # the official exp's masks (TSLib's copy of its _get_mask)
            with torch.no_grad():
                torch.manual_seed(2)
                expected, loss = original(x, masks, is_training=True)
                torch.manual_seed(2)
                got, terms = ours_train(x)
            loss_diff = abs(terms["router_balance"].item() - 0.05 * float(loss))
            train_diff = max((got - expected).abs().max().item(), loss_diff)
            worst_train = max(worst_train, train_diff)
            line += (f"; training (official code) forecast max abs diff {(got - expected).abs().max().item():.3e}, "
                     f"weighted loss {0.05 * float(loss):.6g} vs {terms['router_balance'].item():.6g}")
        print(line)
    return verdict(max(worst, worst_train), args.tolerance,
                   largest=f"eval {worst:.3e}" + (f", training {worst_train:.3e}" if paper is not None else ""))


if __name__ == "__main__":
    sys.exit(main())
