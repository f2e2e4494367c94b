"""Offline equivalence of models/ttm.py, reading a published checkpoint, with granite-tsfm's TinyTimeMixer.

    python scripts/equivalence/ttm.py --official DIR [--horizons 5,24,56] [--seq_lens 64,71,43] [--series 4]
        [--tolerance 5e-5] [--float64]

DIR is granite-tsfm's source, the folder that holds tsfm_public/: a checkout of github.com/ibm-granite/granite-tsfm,
or its wheel unpacked (pip download granite-tsfm --no-deps). Its tsfm_public package imports pandas, datasets,
scikit-learn and transformers, and granite-tsfm pins an older torch than this project: run this in an environment
of its own (docs/foundation.md names the commands), never beside requirements-foundation.txt.

For each configuration below a random official TinyTimeMixerForPrediction, its weights drawn wide enough that every
tensor moves the forecast, is saved with save_pretrained into a temporary folder and read back through our
published() and load_published(). For each context length and horizon H our forecast of output_token_len H is
compared with the official one: within the head, TinyTimeMixerForPrediction.from_pretrained(folder,
prediction_filter_length=H) (get_model's way to a shorter horizon); beyond it, RecursivePredictor over the model
(a context shorter than context_length: its loop over the forward without an observed mask, see docs/foundation.md).
Contexts of context_length, longer (cut to it) and shorter (zero-padded in front). Printed: the largest absolute
difference, and that relative to the forecast's largest |value|. Both sides in float32, or with --float64 in float64
(where float32's rounding, which a rollout carries from step to step, leaves no difference above 1e-13). Exit status 1
when a relative difference exceeds --tolerance, 2 on bad input (one line naming it).
"""
import importlib
import os
import sys
import tempfile

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.equivalence.common import Comparison, check, fail, parser  # noqa: E402

CHANNELS = 3
HOURLY = 7  # granite-tsfm's frequency token of "h" (DEFAULT_FREQUENCY_MAPPING)
BASE = {"context_length": 64, "patch_length": 8, "patch_stride": 8, "prediction_length": 24, "d_model": 32,
        "num_layers": 2, "adaptive_patching_levels": 3, "decoder_num_layers": 2, "decoder_d_model": 16,
        "dropout": 0.4, "head_dropout": 0.4, "scaling": "std"}
# the published layouts: the r2 branches' (512-96-r2 ... 1536-720-r2), the r2.1 "ft" branches' resolution prefix, and
# what fine-tuning may save: no adaptive patching, a decoder as wide as the backbone that mixes channels; no decoder,
# no scaling and a level too narrow to split (16 features in 4: granite-tsfm leaves it unsplit)
CASES = {"r2": BASE,
         "r2.1 prefix": {**BASE, "resolution_prefix_tuning": True, "frequency_token_vocab_size": 10},
         "mix_channel decoder": {**BASE, "adaptive_patching_levels": 0, "d_model": 16, "expansion_factor": 3,
                                 "decoder_mode": "mix_channel", "num_input_channels": CHANNELS},
         "no decoder, narrow level": {**BASE, "use_decoder": False, "d_model": 16, "scaling": None}}


def official_package(source: str):
    """tsfm_public's TinyTimeMixer modules from the source folder, imported with it first on sys.path."""
    modeling = os.path.join(source, "tsfm_public", "models", "tinytimemixer", "modeling_tinytimemixer.py")
    if not os.path.isfile(modeling):
        fail(f"--official {source}: expected granite-tsfm's source with {os.path.relpath(modeling, source)}")
    sys.path.insert(0, os.path.abspath(source))
    try:
        tsfm = importlib.import_module("tsfm_public")
        ttm = importlib.import_module("tsfm_public.models.tinytimemixer")
        recursive = importlib.import_module("tsfm_public.toolkit.recursive_predictor")
    except Exception as e:  # noqa: BLE001 - one line naming why, whatever the official code raised on import
        fail(f"--official {source}: tsfm_public does not import here: {type(e).__name__}: {e} (it needs "
             "transformers, pandas, datasets, scikit-learn, deprecated and einops)")
    if not os.path.abspath(tsfm.__file__).startswith(os.path.abspath(source)):
        fail(f"--official {source}: tsfm_public was imported from {tsfm.__file__}, not from there")
    return tsfm, ttm, recursive


def widened(model):
    """The model with wide random weights (LayerNorm weights around 1; the head's of its inputs' scale, so that a
    forecast fed back stays of the window's scale)."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            scale = 0.1 if name.endswith("bias") else 0.3
            if name == "head.base_forecast_block.weight":
                scale = parameter.shape[1] ** -0.5
            parameter.copy_(torch.randn_like(parameter) * scale
                            + (1.0 if ".norm." in name and name.endswith("weight") else 0.0))
    return model


def expected(ttm, recursive, folder: str, config: dict, x, horizon: int):
    """The official forecast of `horizon` points after x (series, time, channels), in x's dtype."""
    token = torch.full((x.shape[0],), HOURLY)
    predicted = config["prediction_length"]
    with torch.no_grad():
        if horizon <= predicted:
            official = ttm.TinyTimeMixerForPrediction.from_pretrained(
                folder, prediction_filter_length=horizon if horizon < predicted else None).to(x.dtype).eval()
            return official(past_values=x, freq_token=token).prediction_outputs
        official = ttm.TinyTimeMixerForPrediction.from_pretrained(folder).to(x.dtype).eval()
        if x.shape[1] >= config["context_length"]:
            rollout = recursive.RecursivePredictor(recursive.RecursivePredictorConfig(
                model=official, requested_prediction_length=horizon, model_prediction_length=predicted, loss="mse"))
            # its masks, all observed (without them it fails), as a forward without one reads a whole context
            out = rollout.eval()(past_values=x, freq_token=token, past_observed_mask=torch.ones_like(x),
                                 future_observed_mask=x.new_ones(x.shape[0], horizon, x.shape[2]))
            return out.prediction_outputs[:, :horizon]
        steps, past = [], x  # RecursivePredictor's loop over the forward without a mask
        while sum(step.shape[1] for step in steps) < horizon:
            steps.append(official(past_values=past, freq_token=token).prediction_outputs)
            past = torch.cat([past[:, predicted:], steps[-1]], dim=1)
        return torch.cat(steps, dim=1)[:, :horizon]


def main() -> int:
    options = parser(__doc__.split("\n\n")[0], "granite-tsfm's source (the folder that holds tsfm_public/)",
                     horizons=[5, 24, 56], seq_lens=[64, 71, 43], series=4, tolerance=5e-5)
    options.add_argument("--float64", action="store_true", help="both sides in float64 (default: float32)")
    args = options.parse_args()
    dtype = torch.float64 if args.float64 else torch.float32
    check(args)
    if min(args.seq_lens) < BASE["patch_length"]:
        fail(f"--seq_lens: each at least one patch ({BASE['patch_length']} points)")
    tsfm, ttm, recursive = official_package(args.official)

    import transformers

    import models  # the framework (imported after the official code: theirs first on sys.path)

    print(f"granite-tsfm {tsfm.__version__} from {os.path.dirname(tsfm.__file__)}, transformers "
          f"{transformers.__version__}, torch {torch.__version__}, {dtype}")
    comparison = Comparison()
    own = {f.name: f.default for f in models.hyperparameter_fields(models.model_class("ttm"))}
    for case, config in CASES.items():
        torch.manual_seed(0)
        official = widened(ttm.TinyTimeMixerForPrediction(ttm.TinyTimeMixerConfig(**config)))
        with tempfile.TemporaryDirectory() as folder:
            official.save_pretrained(folder)
            found = models.model_class("ttm").published(folder)
            print(f"{case}: published() hparams {found.hparams}, defaults {found.defaults}")
            for seq_len in args.seq_lens:
                x = (torch.randn(args.series, seq_len, CHANNELS).cumsum(1) * 2 + 5).to(dtype)  # random walks
                for horizon in args.horizons:
                    want = expected(ttm, recursive, folder, config, x, horizon)
                    task = {"seq_len": seq_len, "output_token_len": horizon, "enc_in": CHANNELS, "covariate": False,
                            "nonautoregressive": True}
                    ours = models.build("ttm", task, {**own, **found.defaults, **found.hparams,
                                                      "frequency_token": HOURLY})
                    ours.load_published(folder)
                    with torch.no_grad():
                        got = ours.to(dtype).eval()(x)
                    comparison.add(seq_len, horizon, got, want, f" {case:>22}")
    return comparison.verdict(args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
