"""Offline equivalence of models/moirai.py with the publisher's Moirai 2.0 (uni2ts' Moirai2Module and Moirai2Forecast).

    python scripts/equivalence/moirai.py --official DIR [--horizons 5,8,13,20,30] [--seq_lens 64,61,7] [--config FILE]

DIR holds the publisher's package uni2ts (a checkout's src/, the checkout itself, or an unpacked wheel); it is imported
from there. uni2ts pins torch < 2.5 and a dozen packages its Moirai 2.0 path never imports, so run this in an
environment of its own: torch, uni2ts installed with --no-deps, and what its moirai2 import path needs (einops,
jaxtyping, huggingface_hub, safetensors, numpy, lightning, gluonts, scipy), never beside requirements-foundation.txt.

A random Moirai2Module (by default a tiny one: width 128 with 2 heads, 2 layers, patches of 4, 2 patches per forward;
with --config FILE the sizes of a published config.json, e.g. Salesforce/moirai-2.0-R-small's) with weights drawn at
the scale of each layer's fan-in, and norms and biases moved off their initial values, so that every tensor matters,
is saved with save_pretrained into a temporary folder (its config.json and model.safetensors, the published layout),
and read back both by the publisher's Moirai2Module.from_pretrained and by moirai's published() and load_published().
For each context length and horizon, Moirai2Forecast(context_length=C, prediction_length=H, target_dim=1).predict of
random walks is compared, every quantile, with our forecast of output_token_len H with n_outputs the number of
quantiles: at the whole window as context (C = seq_len) and at a context cut shorter than the window (our
context_length C). Horizons within one forward and beyond it (each quantile's path fed back, one to three more
forwards, the last one cut); context lengths that are not a whole number of patches (padded in front). Prints the
largest absolute difference, and that relative to the forecast's largest |value|; exit status 1 when one exceeds
--tolerance, 2 on bad input (one line naming it).
"""
import json
import os
import sys
import tempfile
import warnings

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.equivalence.common import Comparison, check, fail, parser  # noqa: E402

TINY = {"d_model": 128, "d_ff": 48, "num_layers": 2, "patch_size": 4, "max_seq_len": 512, "attn_dropout_p": 0.0,
        "dropout_p": 0.0, "num_predict_token": 2}
CUT = 37  # the shorter context compared beside each window's whole one (not a whole number of patches of 4 or 16)


def official_package(folder: str):
    """(Moirai2Module, Moirai2Forecast) imported from the uni2ts under folder; one line where there is none or it does
    not import here."""
    root = next((os.path.join(folder, *sub) for sub in ((), ("src",))
                 if os.path.isfile(os.path.join(folder, *sub, "uni2ts", "model", "moirai2", "forecast.py"))), None)
    if root is None:
        fail(f"--official {folder}: expected the publisher's package uni2ts (uni2ts/model/moirai2/forecast.py) in it "
             "or in its src/")
    sys.path.insert(0, root)
    warnings.filterwarnings("ignore")  # gluonts' and lightning's import-time warnings
    try:
        import uni2ts
        from uni2ts.model.moirai2 import Moirai2Forecast, Moirai2Module
    except Exception as e:  # noqa: BLE001 - one line naming why, whatever the publisher's code raised
        fail(f"--official {folder}: uni2ts.model.moirai2 does not import here: {type(e).__name__}: {e} (it needs "
             "einops, jaxtyping, huggingface_hub, safetensors, lightning, gluonts and scipy)")
    if not os.path.abspath(uni2ts.__file__).startswith(os.path.abspath(root)):
        fail(f"--official {folder}: uni2ts was imported from {uni2ts.__file__}, not from {root}")
    print(f"uni2ts {uni2ts.__version__} from {os.path.dirname(uni2ts.__file__)}, torch {torch.__version__}")
    return Moirai2Module, Moirai2Forecast


def spread(module: torch.nn.Module) -> None:
    """Weights drawn at the scale of their fan-in; norm weights around 1 and biases around 0, off their initial
    values: every tensor moves the forecast."""
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            if parameter.dim() == 2:
                parameter.copy_(torch.randn_like(parameter) * 1.2 / parameter.shape[1] ** 0.5)
            elif "norm" in name:
                parameter.copy_(1 + 0.2 * torch.randn_like(parameter))
            else:
                parameter.copy_(0.1 * torch.randn_like(parameter))


def main() -> int:
    found = parser(__doc__.split("\n\n")[0], "folder of the publisher's uni2ts package (a checkout, its src/, or an "
                   "unpacked wheel)", horizons=[5, 8, 13, 20, 30], seq_lens=[64, 61, 7], series=6, tolerance=1e-5)
    found.add_argument("--config", help="a Moirai 2.0 config.json whose sizes the random module has (default: a tiny "
                                        "one)")
    args = found.parse_args()
    check(args)
    sizes = TINY
    if args.config:
        try:
            with open(args.config) as f:
                sizes = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            fail(f"--config {args.config}: {e}")
    Moirai2Module, Moirai2Forecast = official_package(args.official)

    import models  # the framework (imported after the official code: theirs first on sys.path)

    torch.manual_seed(0)
    try:
        official = Moirai2Module(**sizes)
    except TypeError as e:
        fail(f"--config {args.config}: not Moirai2Module's arguments: {e}")
    spread(official)
    comparison = Comparison()
    with tempfile.TemporaryDirectory() as folder:
        official.save_pretrained(folder)
        loaded = Moirai2Module.from_pretrained(folder)
        published = models.model_class("moirai").published(folder)
        print(f"published(): hparams {published.hparams}, defaults {published.defaults}")
        n_quantiles = len(published.hparams["quantile_levels"].split(","))
        one_forward = published.hparams["predict_tokens"] * published.hparams["patch_len"]
        print(f"one forward forecasts {one_forward} points")
        for seq_len in args.seq_lens:
            seqs = torch.randn(args.series, seq_len).cumsum(-1) * 2 + 5  # random walks with a level and a scale
            for context in sorted({seq_len, min(seq_len, CUT)}, reverse=True):
                for horizon in args.horizons:
                    forecaster = Moirai2Forecast(module=loaded, prediction_length=horizon, context_length=context,
                                                 target_dim=1, feat_dynamic_real_dim=0, past_feat_dynamic_real_dim=0)
                    expected = torch.from_numpy(np.asarray(forecaster.predict(list(seqs.numpy())))).transpose(1, 2)
                    ours = models.build("moirai", {"seq_len": seq_len, "output_token_len": horizon, "enc_in": 1,
                                                   "covariate": False, "n_outputs": n_quantiles,
                                                   "nonautoregressive": True},
                                        {**published.defaults, **published.hparams, "context_length": context})
                    ours.load_published(folder)
                    with torch.no_grad():
                        got = ours.eval()(seqs[:, :, None])[:, :, 0]  # (series, horizon, quantiles)
                    note = f" context {context:4d}{' (cut)' if context < seq_len else '      '}"
                    comparison.add(seq_len, horizon, got, expected, note)
    return comparison.verdict(args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
