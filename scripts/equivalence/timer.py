"""Offline equivalence of models/timer_hf.py with the publisher's Timer (thuml/timer-base-84m's own code).

    python scripts/equivalence/timer.py --official DIR [--horizons 5,8,20,30,56] [--seq_lens 64,61]

DIR holds the publisher's configuration_timer.py, modeling_timer.py and ts_generation_mixin.py: the files of the
checkpoint's Hugging Face folder, or their copy in the sktime wheel (sktime/libs/timer/, whose imports go through
sktime.utils.dependencies: a stand-in is put in its place where sktime is not installed). They need an older
transformers than this project pins (4.40.1: their cache calls), so run this in a separate environment with torch,
that transformers and safetensors, never beside requirements-foundation.txt.

A tiny random TimerForPrediction (patches of 8, two heads of 8 and 24 points, its weights drawn wide so that every
tensor matters) is saved with save_pretrained into a temporary folder, read back through timer_hf's published() and
load_published(), and for each context length and horizon the publisher's generate(seqs, max_new_tokens=H) is
compared with our forecast of output_token_len H: the largest absolute difference, and that relative to the
forecast's largest |value|. Horizons within one head and beyond it (several steps, heads chosen and cut as generate
does); a context length that is not a whole number of patches (generate drops the points before the last whole
patches). Exit status 1 when a difference exceeds --tolerance, 2 on bad input (one line naming it).
"""
import os
import sys
import tempfile

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.equivalence.common import Comparison, check, fail, hugging_face_modeling, parser  # noqa: E402

FILES = ("configuration_timer.py", "modeling_timer.py", "ts_generation_mixin.py")
TINY = {"input_token_len": 8, "hidden_size": 32, "intermediate_size": 48, "output_token_lens": [8, 24],
        "num_hidden_layers": 2, "num_attention_heads": 4, "attention_dropout": 0.0}






def main() -> int:
    args = parser(__doc__.split("\n\n")[0], "folder of the publisher's Timer code", horizons=[5, 8, 20, 30, 56],
                  seq_lens=[64, 61], series=6, tolerance=1e-5).parse_args()
    check(args)
    if min(args.seq_lens) < TINY["input_token_len"]:
        fail(f"--seq_lens: each at least one patch ({TINY['input_token_len']} points)")
    modeling = hugging_face_modeling(args.official, FILES, "modeling_timer")

    import models  # the framework (imported after the official code: theirs first on sys.path)

    torch.manual_seed(0)
    official = modeling.TimerForPrediction(modeling.TimerConfig(**TINY)).eval()
    with torch.no_grad():
        for name, parameter in official.named_parameters():  # wide enough that every weight moves the forecast
            parameter.copy_(torch.randn_like(parameter) * (0.2 if name.endswith("weight") else 0.1)
                            + (1.0 if "norm" in name and name.endswith("weight") else 0.0))
    comparison = Comparison()
    with tempfile.TemporaryDirectory() as folder:
        official.save_pretrained(folder)
        found = models.model_class("timer_hf").published(folder)
        print(f"published(): hparams {found.hparams}, defaults {found.defaults}")
        for seq_len in args.seq_lens:
            seqs = torch.randn(args.series, seq_len).cumsum(-1) * 2 + 5  # random walks with a level and a scale
            for horizon in args.horizons:
                expected = comparison.generate(official, seqs, horizon)
                ours = models.build("timer_hf", {"seq_len": seq_len, "input_token_len": TINY["input_token_len"],
                                                 "output_token_len": horizon, "enc_in": 1, "covariate": False},
                                    {**found.defaults, **found.hparams})
                ours.load_published(folder)
                with torch.no_grad():
                    got = ours.eval()(seqs[:, :, None])[:, :, 0]
                comparison.add(seq_len, horizon, got, expected)
    return comparison.verdict(args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
