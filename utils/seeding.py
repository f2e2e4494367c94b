"""Random streams: parameters initialised alike on every rank, training randomness drawn per rank.

One process gives every row of its batch its own dropout mask; DDP must too. Seeded alike, every rank
would draw the same masks, so row i of each rank's batch would share its noise. After the model is built
(identically everywhere), each rank therefore switches to its own stream, derived from (seed, rank).
"""
import random

import numpy as np
import torch


SAMPLE_PATHS = 1  # spawn key of the sampling streams, apart from the ranks' training streams (rank_seed)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rank_seed(seed: int, rank: int, *more: int) -> int:
    """A seed for rank `rank`'s own stream: SeedSequence spreads nearby (seed, rank) pairs apart."""
    return int(np.random.SeedSequence([seed, rank, *more]).generate_state(1)[0])


def rng_state(device: torch.device) -> dict:
    """Every random generator this process draws from, in types weights_only loading accepts."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "numpy": [kind, keys.tolist(), pos, has_gauss, gauss],
            "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            "python": random.getstate()}


def set_rng_state(state: dict, device: torch.device) -> None:
    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"] is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
    random.setstate(state["python"])


def window_uniforms(seed: int, windows: list, shape: tuple) -> torch.Tensor:
    """(len(windows), *shape) float64 uniforms in (0, 1), each window's from its own stream keyed by (seed, window
    number): the same whichever rank, batch or world size draws that window (sample paths, --num_samples)."""
    out = torch.empty(len(windows), *shape, dtype=torch.float64)
    for i, window in enumerate(windows):
        stream = np.random.SeedSequence([seed, window], spawn_key=(SAMPLE_PATHS,)).generate_state(1)[0]
        out[i] = torch.rand(shape, generator=torch.Generator().manual_seed(int(stream)), dtype=torch.float64)
    return out + 2.0 ** -54  # rand draws multiples of 2^-53 from [0, 1): none is 0, where an inverse CDF is -inf
