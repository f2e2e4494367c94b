"""FiLM's experts in closed form (models/film.py) against the computation they replace: the Legendre memory run over
every step, the Fourier layer on the sequence of states, the inverse FFT, the state at one step read out through the
Legendre polynomials (TSLib's and the official code's order of work), in float64."""
import numpy as np
import pytest
import torch
from scipy import signal, special

from models.film import LegendreExpert, legendre_memory


def test_the_memory_is_scipys_bilinear_discretisation_of_the_lmu_matrices():
    order, dt = 12, 1 / 40
    q = np.arange(order, dtype=np.float64)
    j, i = np.meshgrid(q, q)
    a = np.where(i < j, -1, (-1.0) ** (i - j + 1)) * (2 * q + 1)[:, None]
    b = ((-1.0) ** q * (2 * q + 1))[:, None]
    expected = signal.cont2discrete((a, b, np.ones((1, order)), np.zeros((1,))), dt=dt, method="bilinear")
    found = legendre_memory(order, dt)
    assert np.array_equal(found[0], expected[0]) and np.array_equal(found[1], expected[1][:, 0])


def step_by_step(expert: LegendreExpert, series: np.ndarray, seq_len: int, horizon: int, multiple: int,
                 order: int) -> np.ndarray:
    length = min(seq_len, multiple * horizon)
    a, b = legendre_memory(order, 1 / horizon / multiple)
    x = series[:, -length:]
    c, states = np.zeros((len(x), order)), []
    for s in range(length):
        c = c @ a.T + x[:, s:s + 1] * b
        states.append(c)
    states = np.stack(states, -1)  # (n, N, L)
    weight = expert.weight.detach().double().numpy()
    w = np.einsum("mio->iom", weight[0] + 1j * weight[1])  # (N_in, N_out, M)
    spectrum = np.zeros((len(x), order, length // 2 + 1), complex)
    spectrum[..., :w.shape[-1]] = np.einsum("nim,iom->nom", np.fft.rfft(states)[..., :w.shape[-1]], w)
    filtered = np.fft.irfft(spectrum, n=length)[..., horizon - 1 if seq_len >= horizon else -1]
    grid = np.arange(0.0, 1.0, 1 / horizon / multiple)
    readout = special.eval_legendre(np.arange(order)[:, None], 1 - 2 * grid).T[-horizon:]
    return filtered @ readout.T


@pytest.mark.parametrize("seq_len,horizon,multiple,modes", [(40, 8, 1, 3), (40, 8, 4, 1032), (20, 8, 4, 3),
                                                              (9, 12, 2, 3), (30, 7, 2, 2)])
def test_an_expert_is_the_memory_run_step_by_step_then_filtered_and_read_out(seq_len, horizon, multiple, modes):
    """Windows longer and shorter than the expert's multiple of the horizon, and shorter than the horizon (the last
    state read); modes beyond min(seq_len, horizon) // 2 (every mode)."""
    order = 16
    torch.manual_seed(0)
    expert = LegendreExpert(seq_len, horizon, multiple, order, modes).double()
    with torch.no_grad():  # wide enough that every mode and its imaginary part matter
        expert.weight.copy_(torch.randn_like(expert.weight) * 0.1)
    series = torch.randn(5, seq_len, dtype=torch.float64).cumsum(1)
    with torch.no_grad():
        found = expert(series).numpy()
    expected = step_by_step(expert, series.numpy(), seq_len, horizon, multiple, order)
    np.testing.assert_allclose(found, expected, rtol=1e-5, atol=1e-6 * np.abs(expected).max())
