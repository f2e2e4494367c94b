"""Non-stationary Transformer's own pieces against the paper's formulas (the contract test covers the model)."""
import pytest
import torch

import models
from models.nonstationary_transformer import DestationaryAttention

TASK = {"seq_len": 24, "input_token_len": 8, "output_token_len": 8, "enc_in": 3, "n_marks": 0, "covariate": False,
        "nonautoregressive": True}


def build(**hparams):
    fields = models.hyperparameter_fields(models.model_class("nonstationary_transformer"))
    defaults = {f.name: f.default for f in fields}
    return models.build("nonstationary_transformer", TASK, {**defaults, **hparams})


@pytest.mark.parametrize("causal, shifted", [(False, True), (True, False)])
def test_destationary_attention_is_the_papers_rescaled_softmax(causal, shifted):
    """softmax((tau Q K^T + 1 delta^T) / sqrt(d_k)) V per head (the paper's Eq. 6), causal in the decoder."""
    torch.manual_seed(0)
    B, L, D, H = 2, 6, 8, 2
    attention = DestationaryAttention(D, H, dropout=0.0, causal=causal).eval()
    x = torch.randn(B, L, D)
    tau, delta = torch.rand(B, 1) * 3 + 0.2, torch.randn(B, L) if shifted else None
    heads = [p(x).unflatten(-1, (H, -1)).transpose(1, 2) for p in (attention.query, attention.key, attention.value)]
    q, k, v = heads
    scores = tau[:, :, None, None] * q @ k.transpose(-2, -1) + (0 if delta is None else delta[:, None, None, :])
    if causal:
        scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    expected = attention.out((torch.softmax(scores / (D // H) ** 0.5, -1) @ v).transpose(1, 2).reshape(B, L, D))
    torch.testing.assert_close(attention(x, x, x, tau, delta), expected)


def test_the_forecast_keeps_the_windows_level_and_scale():
    """Series Stationarization: the network sees standardised windows, so shifting and scaling a window (tau and
    delta, read from the raw window, aside) moves its forecast the same way once the projectors are silenced."""
    torch.manual_seed(0)
    model = build(d_model=16, n_heads=2, e_layers=1, d_ff=16, label_len=8, p_hidden_dims="8", p_hidden_layers=1).eval()
    for projector in (model.tau_learner, model.delta_learner):
        torch.nn.init.zeros_(projector.mlp[-1].weight)  # tau = 1, delta = 0 for any window
    x = torch.randn(2, 24, 3)
    with torch.no_grad():
        torch.testing.assert_close(model(x * 5 + 3), model(x) * 5 + 3, rtol=1e-4, atol=1e-4)


def test_projector_widths_must_match_its_layers():
    with pytest.raises(ValueError, match="one width for each"):
        build(label_len=8, p_hidden_dims="8,8", p_hidden_layers=1)
