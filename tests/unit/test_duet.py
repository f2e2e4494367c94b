"""DUET's own pieces against the official formulas (the whole model: scripts/equivalence/duet.py)."""
import torch

import models

TASK = {"seq_len": 48, "output_token_len": 12, "enc_in": 5, "covariate": False, "nonautoregressive": True}
HPARAMS = {"d_model": 16, "n_heads": 2, "e_layers": 1, "d_ff": 16, "dropout": 0.0, "fc_dropout": 0.0,
           "activation": "gelu", "num_experts": 4, "active_experts": 2, "router_hidden": 8, "moving_avg": 5}


def duet():
    torch.manual_seed(0)
    return models.build("duet", TASK, HPARAMS)


def windows():
    torch.manual_seed(1)
    return torch.randn(6, 48, 5).cumsum(1) + torch.randn(6, 1, 5) * 3


def cv_squared(x):
    return x.var() / (x.mean() ** 2 + 1e-10)


def test_the_balance_term_is_the_official_cv_squared_of_the_batch_sums_with_its_gradient():
    """One process: cv^2 of each expert's summed gate plus cv^2 of its summed load (the official loss), the same
    value and the same gradient as the term built from BatchMean's means."""
    model, series = duet().train(), windows().transpose(1, 2).reshape(-1, 48)
    torch.manual_seed(2)
    gates, load = model._route(series)
    term = model._balance(gates, load)
    official = cv_squared(gates.sum(0)) + cv_squared(load.sum(0))
    ours_grad = torch.autograd.grad(term, model.gate.net[0].weight, retain_graph=True)[0]
    official_grad = torch.autograd.grad(official, model.gate.net[0].weight)[0]
    assert load.requires_grad and 0 < term.item()
    torch.testing.assert_close(term, official, rtol=1e-6, atol=0)
    torch.testing.assert_close(ours_grad, official_grad, rtol=1e-4, atol=1e-6 * official_grad.abs().max().item())


def test_eval_draws_nothing_and_keeps_the_pairs_more_likely_related_than_not():
    model, x = duet().eval(), windows()
    torch.manual_seed(3)
    first = model(x)
    torch.manual_seed(4)
    assert torch.equal(model(x), first)
    spectra = torch.fft.rfft(x.transpose(1, 2), dim=-1).abs()
    difference = spectra[:, :, None] - spectra[:, None]  # the official A (s_i - s_j)
    distance = torch.einsum("dk,bijk->bijd", model.mask.metric, difference).square().sum(-1)
    closeness = 1 / (distance + 1e-10) * (1 - torch.eye(5))
    p = (closeness / closeness.max(-1, keepdim=True).values * (1 - torch.eye(5)) + torch.eye(5)) * 0.99
    mask = model.mask(x)[:, 0]
    assert torch.equal(mask, (p >= 0.5).float()) and 0 < mask.mean() < 1


def test_training_draws_a_zero_one_mask_whose_gradient_reaches_the_metric():
    model, x = duet().train(), windows()
    torch.manual_seed(5)
    mask = model.mask(x)
    assert set(mask.detach().round().unique().tolist()) <= {0.0, 1.0}
    assert (mask.detach() - mask.detach().round()).abs().max() < 1e-6 and mask.diagonal(dim1=-2, dim2=-1).eq(1).all()
    pred, _ = model(x)
    pred.sum().backward()
    assert model.mask.metric.grad is not None and model.mask.metric.grad.abs().max() > 0
