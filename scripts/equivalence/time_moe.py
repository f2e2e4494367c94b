"""Offline equivalence of models/time_moe.py, reading a published checkpoint, with the official Time-MoE code.

    PYTHONPATH=. python scripts/equivalence/time_moe.py --official DIR [--config FILE] [--horizons 1,7,64,96]
        [--seq_lens 96,37] [--series 4] [--tolerance 1e-4]

DIR is a checkout of github.com/Time-MoE/Time-MoE (its time_moe/models/: configuration_time_moe.py,
modeling_time_moe.py, ts_generation_mixin.py). That code needs transformers 4.40.1 (its generate overrides
_greedy_search), which this project's pins exclude: run this in an environment of its own with torch,
transformers==4.40.1 and safetensors, never beside requirements-foundation.txt.

A random official TimeMoeForPrediction (a tiny configuration, or the one in FILE: a config.json such as the
published TimeMoE-50M's) with weights drawn wide enough that every tensor moves the forecast, is saved with
save_pretrained into a temporary folder and read back through our published() and load_published(). For each
context length and horizon H the official generate(seqs, max_new_tokens=H)[:, -H:] is compared with our direct
forecast (the last H points of the output of a model of output_token_len H): the largest absolute difference, and
that relative to the forecast's largest |value|. Horizons within one head, and across heads (several generation
steps, the heads chosen and cut as generate does). Exit status 1 when a relative difference exceeds --tolerance,
2 on bad input (one line naming it).
"""
import importlib
import json
import os
import sys
import tempfile

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.equivalence.common import Comparison, check, fail, parser  # noqa: E402

FILES = ("configuration_time_moe.py", "modeling_time_moe.py", "ts_generation_mixin.py")
TINY = {"input_size": 1, "hidden_size": 32, "intermediate_size": 48, "horizon_lengths": [1, 8, 32, 64],
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_experts": 4, "num_experts_per_tok": 2,
        "max_position_embeddings": 4096, "rope_theta": 10000, "rms_norm_eps": 1e-6, "attention_dropout": 0.0}



def official_modeling(checkout: str):
    """time_moe.models.modeling_time_moe of the checkout, imported with the checkout first on sys.path."""
    models_dir = os.path.join(checkout, "time_moe", "models")
    absent = [name for name in FILES if not os.path.isfile(os.path.join(models_dir, name))]
    if absent:
        fail(f"--official {checkout}: expected a checkout of Time-MoE with time_moe/models/{', '.join(FILES)}; "
             f"missing {', '.join(absent)}")
    sys.path.insert(0, os.path.abspath(checkout))
    try:
        return importlib.import_module("time_moe.models.modeling_time_moe")
    except Exception as e:  # noqa: BLE001 - one line naming why, whatever the official code raised on import
        fail(f"--official {checkout}: its modeling_time_moe.py does not import here: {type(e).__name__}: {e} "
             "(it needs torch, transformers 4.40.1 and safetensors)")


def configuration(modeling, file: str | None):
    """The official TimeMoeConfig: TINY, or FILE's (a config.json); one line where FILE is not one."""
    if file is None:
        return modeling.TimeMoeConfig(**TINY)
    try:
        with open(file) as f:
            found = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        fail(f"--config {file}: not a readable JSON file: {e}")
    if not isinstance(found, dict) or found.get("model_type", "time_moe") != "time_moe":
        fail(f"--config {file}: expected a Time-MoE config.json (model_type time_moe), found "
             f"{found.get('model_type') if isinstance(found, dict) else type(found).__name__}")
    known = {k: v for k, v in found.items() if k not in ("auto_map", "architectures", "model_type", "_name_or_path",
                                                        "torch_dtype", "transformers_version")}
    try:
        return modeling.TimeMoeConfig(**known)
    except Exception as e:  # noqa: BLE001 - the official configuration's own checks
        fail(f"--config {file}: the official TimeMoeConfig refuses it: {type(e).__name__}: {e}")


def randomise(model) -> None:
    """Weights of about unit gain per layer (std 1/sqrt(fan-in)), biases and norm scales off their zero and one, so
    that activations stay of order one through the layers and every tensor moves the forecast."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.copy_(1 + 0.2 * torch.randn_like(parameter))
            elif parameter.dim() == 1:
                parameter.copy_(0.1 * torch.randn_like(parameter))
            else:
                parameter.copy_(torch.randn_like(parameter) / parameter.shape[1] ** 0.5)


def main() -> int:
    options = parser(__doc__.split("\n\n")[0], "a checkout of the official Time-MoE repository",
                     horizons=[1, 7, 64, 96], seq_lens=[96, 37], series=4, tolerance=1e-4)
    options.add_argument("--config", help="a Time-MoE config.json whose architecture to build (default: a tiny one)")
    options.add_argument("--seed", type=int, default=0)
    args = options.parse_args()
    check(args)
    if args.config is not None and not os.path.isfile(args.config):
        fail(f"--config {args.config}: no such file")
    modeling = official_modeling(args.official)
    import transformers

    import models  # the framework (imported after the official code: theirs first on sys.path)

    torch.manual_seed(args.seed)
    official = modeling.TimeMoeForPrediction(configuration(modeling, args.config)).eval()
    randomise(official)
    print(f"official TimeMoeForPrediction, transformers {transformers.__version__}, torch {torch.__version__}: "
          f"{sum(p.numel() for p in official.parameters()) / 1e6:.2f}M parameters, "
          f"heads {official.config.horizon_lengths}")
    comparison = Comparison()
    with tempfile.TemporaryDirectory() as folder:
        official.save_pretrained(folder)
        found = models.model_class("time_moe").published(folder)
        print(f"published(): hparams {found.hparams}, task {found.task}, defaults {found.defaults}, "
              f"max_seq_len {found.max_seq_len}; saved {', '.join(sorted(os.listdir(folder)))}")
        for seq_len in args.seq_lens:
            seqs = torch.randn(args.series, seq_len).cumsum(-1) * 0.3  # random walks, standardised-ish
            for horizon in args.horizons:
                with torch.no_grad():
                    expected = comparison.generate(official, seqs, horizon)
                ours = models.build("time_moe", {"seq_len": seq_len, "output_token_len": horizon, "enc_in": 1,
                                                 "covariate": False, "nonautoregressive": True, **found.task},
                                    {**found.defaults, **found.hparams})
                ours.load_published(folder)
                with torch.no_grad():
                    got = ours.eval()(seqs[:, :, None])[:, :, 0]
                steps = len(ours.steps)
                comparison.add(seq_len, horizon, got, expected, f" ({steps} step{'s' * (steps > 1)})")
    return comparison.verdict(args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
