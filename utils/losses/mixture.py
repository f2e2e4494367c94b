"""A mixture of three Gaussians per point (weights, means, standard deviations: 9 outputs): a predictive
distribution that can be skewed or have several modes (a regime that may or may not switch, a spike that may or
may not come), which one Gaussian or Student-t cannot express. Its quantiles have no closed form: they are found
by bisection on the mixture's CDF."""
import math

import torch

from utils.losses import Family, Loss, spread

COMPONENTS = 3
BISECTIONS = 60  # halvings of a bracket 20 standard deviations wide: far below float32 resolution


class GaussianMixture(Family):
    n_params = 3 * COMPONENTS

    def _params(self, out):
        """(log weights, means, scales), each (..., COMPONENTS): outputs [means | spreads | weight logits], the
        spreads and logits read relative to each component's mean."""
        loc = out[..., :COMPONENTS]
        scale = spread(out[..., COMPONENTS:2 * COMPONENTS], loc)
        log_weight = torch.log_softmax(out[..., 2 * COMPONENTS:] - loc, dim=-1)
        return log_weight, loc, scale

    def nll(self, out, true):
        log_weight, loc, scale = self._params(out)
        z = (true.unsqueeze(-1) - loc) / scale
        log_density = -0.5 * z.square() - scale.log() - 0.5 * math.log(2 * math.pi)
        return -torch.logsumexp(log_weight + log_density, dim=-1)

    def mean(self, out):
        log_weight, loc, _ = self._params(out)
        return (log_weight.exp() * loc).sum(-1)

    def quantile(self, out, levels):
        log_weight, loc, scale = (p.unsqueeze(-2) for p in self._params(out))  # (..., 1, COMPONENTS)
        levels = levels.to(out.dtype)                                            # (Q,) or (..., Q)
        shape = torch.broadcast_shapes(out.shape[:-1] + (1,), levels.shape)
        low = (loc - 10 * scale).amin(-1).expand(shape).clone()
        high = (loc + 10 * scale).amax(-1).expand(shape).clone()
        for _ in range(BISECTIONS):
            mid = (low + high) / 2
            cdf = (log_weight.exp() * torch.special.ndtr((mid.unsqueeze(-1) - loc) / scale)).sum(-1)
            below = cdf < levels
            low, high = torch.where(below, mid, low), torch.where(below, high, mid)
        return (low + high) / 2


LOSSES = [Loss("mixture", kind="distribution", family=GaussianMixture(),
               help="negative log-likelihood of a mixture of 3 Gaussians per point (skewed or multimodal)")]
