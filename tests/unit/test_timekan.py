import pytest
import torch

import models
from models.timekan import ChebyKAN, upsample


def test_chebyshev_kan_is_the_coefficients_times_the_recurrences_polynomials_of_the_squashed_input():
    torch.manual_seed(0)
    layer = ChebyKAN(5, 3, order=4)
    x = torch.randn(6, 5, dtype=torch.float64) * 3
    u = torch.tanh(torch.tanh(x))
    polynomials = [torch.ones_like(u), u]  # T_(n+1) = 2 u T_n - T_(n-1)
    while len(polynomials) < 5:
        polynomials.append(2 * u * polynomials[-1] - polynomials[-2])
    expected = torch.einsum("bin,ion->bo", torch.stack(polynomials, -1), layer.coefficients.double())
    torch.testing.assert_close(layer.double()(x), expected)


def test_upsampling_keeps_the_band_limited_shape_and_scales_as_the_official_code():
    t = torch.arange(8.0)
    x = torch.cos(2 * torch.pi * t / 8)[None, :, None]  # one cycle over 8 steps
    fine = upsample(x, 16)  # the interpolated cycle, times (8 / 16)^2 as the official frequency_interpolation
    torch.testing.assert_close(fine[0, :, 0], torch.cos(2 * torch.pi * torch.arange(16.0) / 16) / 4,
                               atol=1e-6, rtol=0)


def test_seq_len_must_divide_into_the_scales():
    task = {"seq_len": 36, "input_token_len": 8, "output_token_len": 8, "enc_in": 2, "n_marks": 0,
            "covariate": False, "nonautoregressive": True}
    defaults = {f.name: f.default for f in models.hyperparameter_fields(models.model_class("timekan"))}
    with pytest.raises(ValueError, match="divisible"):
        models.build("timekan", task, {**defaults, "down_sampling_layers": 3, "down_sampling_window": 2})
