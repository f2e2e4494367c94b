"""Offline equivalence of models/sundial.py with the publisher's Sundial (thuml/sundial-base-128m's own code).

    python scripts/equivalence/sundial.py --official DIR [--horizons 5,16,24,40] [--seq_lens 64,61]

DIR holds the publisher's configuration_sundial.py, modeling_sundial.py, flow_loss.py and ts_generation_mixin.py: the
files of the checkpoint's Hugging Face folder, or their copy in the sktime wheel (sktime/libs/sundial/, whose imports
go through sktime.utils.dependencies: a stand-in is put in its place where sktime is not installed). They need an
older transformers than this project pins (4.40.1: their cache calls), so run this in a separate environment with
torch, that transformers and safetensors, never beside requirements-foundation.txt.

A tiny random SundialForPrediction (patches of 8, a flow head of 16 points, 2 layers, 50 Euler steps; its weights
drawn wide so that every tensor matters) is saved with save_pretrained into a temporary folder and read back through
sundial's published() and load_published(). For each context length and horizon the publisher's
generate(seqs, max_new_tokens=H, num_samples=20) is compared with ours, with the noise made equal: ours draws each
series' noise from its own generator (Model.noise), and while the publisher's generate runs, torch.randn (which its
FlowLoss.sample calls once per generated patch, for the noise of all samples of all series at once) returns that
same noise, step by step, in the publisher's layout (sample-major rows: sample s of series b is row s * B + b). A call
of another shape, or noise left over, is an error. Compared: every sample (ours Model.samples), the point forecast
(our forward with n_outputs 1 against the mean of the publisher's samples) and the quantiles (our forward with
n_outputs 9 against torch.quantile of them). Horizons within one head (5, 16) and beyond it (24, 40: the samples'
median fed back, two and three steps); a context length that is not a whole number of patches (61: the first patch
padded on the left). Exit status 1 when a difference exceeds --tolerance, 2 on bad input (one line naming it).
"""
import os
import sys
import tempfile

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.equivalence.common import Comparison, check, fail, hugging_face_modeling, parser  # noqa: E402

FILES = ("configuration_sundial.py", "modeling_sundial.py", "flow_loss.py", "ts_generation_mixin.py")
TINY = {"input_token_len": 8, "hidden_size": 32, "intermediate_size": 48, "output_token_lens": [16],
        "num_hidden_layers": 2, "num_attention_heads": 4, "flow_loss_depth": 2, "num_sampling_steps": 50,
        "dropout_rate": 0.0}
SAMPLES = 20  # the publisher's usage example: generate(seqs, max_new_tokens=H, num_samples=20)
LEVELS = "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9"




class InjectedNoise:
    """torch.randn, while in effect, returns the given noise (series, steps, samples, length), one step per call, in
    FlowLoss.sample's layout (samples * series, length); any other call fails in one line."""

    def __init__(self, noise: torch.Tensor):
        series, steps, samples, length = noise.shape
        self.expected = (samples * series, length)
        self.steps = [noise[:, k].transpose(0, 1).reshape(samples * series, length) for k in range(steps)]

    def __call__(self, *size, device=None, dtype=None, **kwargs):
        shape = tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else tuple(size)
        if shape != self.expected or kwargs or not self.steps:
            fail(f"the official generate called torch.randn{shape} (expected {self.expected}, {len(self.steps)} "
                 "steps left): not the one noise draw per generated patch this comparison injects")
        return self.steps.pop(0).to(device=device, dtype=dtype)

    def __enter__(self):
        self.original, torch.randn = torch.randn, self
        return self

    def __exit__(self, *exc):
        torch.randn = self.original
        if exc[0] is None and self.steps:
            fail(f"the official generate left {len(self.steps)} of the injected noise draws unused")


def official_samples(official, seqs: torch.Tensor, horizon: int, noise: torch.Tensor) -> torch.Tensor:
    """generate(seqs, max_new_tokens=horizon, num_samples) with torch.randn returning `noise`: (series, samples,
    horizon)."""
    import transformers
    with InjectedNoise(noise):
        try:
            out = official.generate(seqs.clone(), max_new_tokens=horizon, num_samples=noise.shape[2])
        except Exception as e:  # noqa: BLE001 - the official code on another transformers: one line
            fail(f"the official generate failed under transformers {transformers.__version__}: {type(e).__name__}: "
                 f"{e} (it runs under 4.40.1)")
    return out[..., -horizon:]


def main() -> int:
    args = parser(__doc__.split("\n\n")[0], "folder of the publisher's Sundial code", horizons=[5, 16, 24, 40],
                  seq_lens=[64, 61], series=6, tolerance=1e-5).parse_args()
    check(args)
    modeling = hugging_face_modeling(args.official, FILES, "modeling_sundial")

    import models  # the framework (imported after the official code: theirs first on sys.path)

    torch.manual_seed(0)
    official = modeling.SundialForPrediction(modeling.SundialConfig(**TINY)).eval()
    with torch.no_grad():
        for name, parameter in official.named_parameters():  # wide enough that every weight moves the forecast
            parameter.copy_(torch.randn_like(parameter) * (0.2 if name.endswith("weight") else 0.1)
                            + (1.0 if name.endswith("weight") and ("norm" in name or "in_ln" in name) else 0.0))
    comparison = Comparison()
    with tempfile.TemporaryDirectory() as folder:
        official.save_pretrained(folder)
        found = models.model_class("sundial").published(folder)
        # what run.py gives: every hyper-parameter at its flag's default, the checkpoint's where it has one
        hparams = {f.name: f.default for f in models.hyperparameter_fields(models.model_class("sundial"))}
        hparams.update({**found.defaults, **found.hparams, "samples": SAMPLES, "quantile_levels": LEVELS})
        print(f"published(): hparams {found.hparams}, defaults {found.defaults}")
        for seq_len in args.seq_lens:
            seqs = torch.randn(args.series, seq_len).cumsum(-1) * 2 + 5  # random walks with a level and a scale
            for horizon in args.horizons:
                ours = {}
                for n_outputs in (1, len(LEVELS.split(","))):
                    ours[n_outputs] = models.build(
                        "sundial", {"seq_len": seq_len, "output_token_len": horizon, "enc_in": 1, "covariate": False,
                                    "n_outputs": n_outputs, "nonautoregressive": True},
                        hparams)
                    ours[n_outputs].load_published(folder)
                    ours[n_outputs].eval()
                steps = -(-horizon // found.hparams["horizon"])
                expected = official_samples(official, seqs, horizon, ours[1].noise(seqs, steps))
                with torch.no_grad():
                    samples = ours[1].samples(seqs)
                    mean = ours[1](seqs[:, :, None])[:, :, 0]
                    quantiles = ours[9](seqs[:, :, None])[:, :, 0]
                comparison.add(seq_len, horizon, samples, expected, " samples  ")
                comparison.add(seq_len, horizon, mean, expected.mean(1), " mean     ")
                levels = torch.tensor([float(q) for q in LEVELS.split(",")])
                comparison.add(seq_len, horizon, quantiles, torch.quantile(expected, levels, dim=1).permute(1, 2, 0),
                               " quantiles")
    return comparison.verdict(args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
