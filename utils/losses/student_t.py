"""Student-t negative log-likelihood: location, scale and degrees of freedom (above 2, so the variance is finite)
per point; heavier tails than the Gaussian for series with jumps."""
import math

import torch
from scipy import special

from utils.losses import Family, Loss, spread


class StudentT(Family):
    n_params = 3

    def _params(self, out):
        loc = out[..., 0]
        return loc, spread(out[..., 1], loc), 2 + spread(out[..., 2], loc)

    def nll(self, out, true):
        loc, scale, df = self._params(out)
        z = (true - loc) / scale
        return (torch.lgamma(df / 2) - torch.lgamma((df + 1) / 2) + 0.5 * torch.log(df * math.pi) + scale.log()
                + (df + 1) / 2 * torch.log1p(z.square() / df))

    def mean(self, out):
        return out[..., 0]

    def quantile(self, out, levels):
        loc, scale, df = self._params(out)
        # torch has no Student-t quantile function: scipy's, in float64 on the CPU (evaluation only)
        t = special.stdtrit(df.detach().double().cpu().numpy()[..., None], levels.double().cpu().numpy())
        return loc.unsqueeze(-1) + scale.unsqueeze(-1) * torch.as_tensor(t, dtype=out.dtype, device=out.device)


LOSSES = [Loss("student_t", kind="distribution", family=StudentT(),
               help="Student-t negative log-likelihood: location, scale and degrees of freedom (> 2) per point")]
