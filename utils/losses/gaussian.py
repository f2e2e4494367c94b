"""Gaussian negative log-likelihood: two outputs per point, the mean and (relative to it) the standard deviation."""
import math

import torch

from utils.losses import Family, Loss, spread


class Gaussian(Family):
    n_params = 2

    def _params(self, out):
        loc = out[..., 0]
        return loc, spread(out[..., 1], loc)

    def nll(self, out, true):
        loc, scale = self._params(out)
        return 0.5 * math.log(2 * math.pi) + scale.log() + 0.5 * ((true - loc) / scale).square()

    def mean(self, out):
        return out[..., 0]

    def quantile(self, out, levels):
        loc, scale = self._params(out)
        z = math.sqrt(2) * torch.erfinv(2 * levels.to(out.dtype) - 1)
        return loc.unsqueeze(-1) + scale.unsqueeze(-1) * z


LOSSES = [Loss("gaussian", kind="distribution", family=Gaussian(),
               help="Gaussian negative log-likelihood: a mean and a standard deviation per point")]
