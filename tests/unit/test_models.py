"""The contract every model in the registry passes; a model dropped into models/ is tested here unedited."""
import io

import pytest
import torch

import models

# the task's lengths; every hyper-parameter takes the small value its model declares (hparam's `tiny`)
TASK = {"seq_len": 32, "input_token_len": 8, "output_token_len": 8, "n_marks": 4}
N_MARKS = TASK["n_marks"]


def modes(name):
    """(nonautoregressive, covariate) pairs the model declares."""
    caps = models.capabilities(name)
    found = [(True, False)] if caps.direct else []
    if caps.autoregressive:
        found.append((False, False))
    if caps.covariate:
        found.append((not caps.autoregressive, True))
    return found


def build(name, channels, nonautoregressive, covariate=False, **task):
    torch.manual_seed(0)
    return models.build(name, {**TASK, "enc_in": channels, "covariate": covariate,
                               "nonautoregressive": nonautoregressive, **task}, models.tiny_hyperparameters(name))


def inputs(name, batch, channels):
    """x, the calendar features (of the horizon too for future_marks) and the keyword inputs it declares."""
    caps = models.capabilities(name)
    x = torch.randn(batch, TASK["seq_len"], channels)
    span = TASK["seq_len"] + (TASK["output_token_len"] if caps.future_marks else 0)
    marks = torch.rand(batch, span, N_MARKS) - 0.5 if caps.time_marks else None
    kwargs = {"position": torch.randint(0, 10_000, (batch,))} if caps.positions else {}
    return x, marks, kwargs


def predict(model, name, x, marks, kwargs):
    """The prediction and the model's own loss terms: a model with aux_loss returns both in training only."""
    out = model(x, marks, **kwargs)
    if models.capabilities(name).aux_loss and model.training:
        pred, terms = out
        assert terms and all(t.dim() == 0 and torch.isfinite(t) for t in terms.values()), terms
        return pred, terms
    assert isinstance(out, torch.Tensor)
    return out, {}
CASES = [(name, nar, cov) for name in models.NAMES for nar, cov in modes(name)]


def test_registry_holds_the_models():
    assert set(models.NAMES) >= {"dlinear", "timer_xl", "patchtst", "itransformer", "timesnet", "timemixer",
                                 "timer", "ttm", "nlinear", "rlinear", "sparsetsf", "segrnn", "tsmixer", "tide"}
    assert models.resolve("Timer-XL") == "timer_xl" and models.resolve("DLinear") == "dlinear"


@pytest.mark.parametrize("name,nonautoregressive,covariate", CASES)
@pytest.mark.parametrize("channels", [1, 3])
def test_forward_shape(name, nonautoregressive, covariate, channels):
    model = build(name, channels, nonautoregressive, covariate)
    caps = models.capabilities(name)
    for train in (True, False):
        out, _ = predict(model.train(train), name, *inputs(name, 4, channels))
        per_token = caps.token_input and not nonautoregressive  # autoregressive: an output token per input token
        L, I, O = TASK["seq_len"], TASK["input_token_len"], TASK["output_token_len"]
        width = 1 if caps.exogenous and covariate else channels  # an exogenous model forecasts the target alone
        assert out.shape == (4, L // I * O if per_token else O, width) and torch.isfinite(out).all()


@pytest.mark.parametrize("name", [n for n in models.NAMES if models.capabilities(n).token_input
                                  and models.capabilities(n).direct])
def test_a_token_models_direct_forecast_is_its_last_tokens_output(name):
    """Run directly, a token model computes the forecast after its last token alone: what it returns for that token
    when run autoregressively (the same parameters, drawn alike)."""
    x, marks, kwargs = inputs(name, 2, 3)
    ar, direct = build(name, 3, False).eval(), build(name, 3, True).eval()
    with torch.no_grad():
        whole, last = ar(x, marks, **kwargs), direct(x, marks, **kwargs)
    assert last.shape[1] == TASK["output_token_len"]
    torch.testing.assert_close(last, whole[:, -TASK["output_token_len"]:])


MULTI = [(name, nar, cov) for name, nar, cov in CASES if models.capabilities(name).multi_output]


@pytest.mark.parametrize("name,nonautoregressive,covariate", MULTI)
def test_k_outputs_per_point_widen_the_forecast_and_one_output_is_the_point_model(name, nonautoregressive, covariate):
    """n_outputs k: (batch, time, channels, k), each of the k a forecast of its own; k = 1: the point model, made
    from the same random draws (so runs recorded before multi_output are unchanged)."""
    point, one = build(name, 3, nonautoregressive, covariate), build(name, 3, nonautoregressive, covariate, n_outputs=1)
    x, marks, kwargs = inputs(name, 4, 3)
    for model in (point, one):
        model.eval()
    with torch.no_grad():
        assert torch.equal(point(x, marks, **kwargs), one(x, marks, **kwargs))
    wide = build(name, 3, nonautoregressive, covariate, n_outputs=5).eval()
    out, base = wide(x, marks, **kwargs), point(x, marks, **kwargs)
    assert out.shape == (*base.shape, 5) and torch.isfinite(out).all()
    assert not torch.equal(out[..., 0], out[..., 1]), "the k values are outputs of their own"
    pred, terms = predict(wide.train(), name, x, marks, kwargs)  # training: heads used only there learn too
    (torch.nn.functional.mse_loss(pred, torch.randn_like(pred)) + sum(terms.values())).backward()
    assert all(p.grad is not None for p in wide.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", models.NAMES)
def test_two_optimizer_steps_lower_the_loss(name):
    nonautoregressive = models.capabilities(name).direct
    model = build(name, 3, nonautoregressive)
    batch = inputs(name, 16, 3)
    target = torch.randn_like(predict(model, name, *batch)[0])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(3):
        pred, terms = predict(model, name, *batch)
        loss = torch.nn.functional.mse_loss(pred, target) + sum(terms.values())
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert losses[2] < losses[0]


@pytest.mark.parametrize("name", models.NAMES)
def test_state_dict_round_trip_gives_identical_outputs(name):
    nonautoregressive = models.capabilities(name).direct
    model = build(name, 3, nonautoregressive)
    model.train()
    x, marks, kwargs = inputs(name, 8, 3)
    model(x, marks, **kwargs)  # move BatchNorm running statistics away from their initial values
    model.eval()
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    torch.manual_seed(123)  # a different initialisation, overwritten by the load
    fresh = build(name, 3, nonautoregressive)
    fresh.load_state_dict(torch.load(buffer, weights_only=True), strict=True)
    fresh.eval()
    with torch.no_grad():
        assert torch.equal(model(x, marks, **kwargs), fresh(x, marks, **kwargs))


STATEFUL = [name for name in models.NAMES if models.capabilities(name).stateful]


@pytest.mark.parametrize("name", STATEFUL)
def test_a_stateful_model_started_is_the_plain_forward_and_continues_in_steps_as_in_one_call(name):
    """state () at a window: the plain forward's output, and a state; the points that follow fed one output token
    at a time from that state: what they give fed together (a rolled-out forecast feeds them a step at a time)."""
    model, O, L = build(name, 3, False).eval(), TASK["output_token_len"], TASK["seq_len"]
    x, _, kwargs = inputs(name, 4, 3)
    ahead = O if models.capabilities(name).future_marks else 0
    marks = torch.rand(4, L + 2 * O + ahead, N_MARKS) - 0.5
    follow = torch.randn(4, 2 * O, 3)
    with torch.no_grad():
        plain = model(x, marks[:, :L + ahead], **kwargs)
        started, state = model(x, marks[:, :L + ahead], state=(), **kwargs)
        together, _ = model(follow, marks[:, L:L + 2 * O + ahead], state=state, **kwargs)
        first, middle = model(follow[:, :O], marks[:, L:L + O + ahead], state=state, **kwargs)
        second, _ = model(follow[:, O:], marks[:, L + O:L + 2 * O + ahead], state=middle, **kwargs)
    assert torch.equal(started, plain)
    torch.testing.assert_close(torch.cat([first, second], dim=1), together, rtol=1e-5, atol=1e-6)


def test_deepar_continued_from_its_state_is_deepar_over_the_whole_history():
    """The state holds the LSTM's and the window's scale: the points after a window, fed from its state, give what
    one forward over the window and those points gives where both have the same scale (|x| = 1 throughout)."""
    model = build("deepar", 2, False, input_token_len=1, output_token_len=1).eval()
    x = (torch.randint(0, 2, (3, 24, 2)) * 2 - 1).float()
    marks = torch.rand(3, 25, N_MARKS) - 0.5
    with torch.no_grad():
        whole = model(x, marks)
        _, state = model(x[:, :16], marks[:, :17], state=())
        rest, _ = model(x[:, 16:], marks[:, 16:], state=state)
    torch.testing.assert_close(rest, whole[:, 16:], rtol=1e-5, atol=1e-6)


def test_model_flags_come_from_the_models_and_only_the_chosen_models_count():
    from exp.config import parse_args, resolve
    from exp.flags import model_hparams
    args = resolve(parse_args(["--model", "dlinear", "--nonautoregressive", "--d_model", "64", "--moving_avg", "13"]))
    assert model_hparams(args) == {"moving_avg": 13, "individual": False, "use_norm": False}
    args = resolve(parse_args(["--model", "patchtst", "--nonautoregressive", "--d_model", "64"]))
    assert model_hparams(args)["d_model"] == 64 and "moving_avg" not in model_hparams(args)


def test_help_shows_each_default_once():
    from exp.flags import parser
    for action in parser()._actions:
        text = parser()._get_formatter()._expand_help(action) if action.help else ""
        assert text.count("default") <= 1, (action.dest, text)


def test_patchtst_takes_a_patch_longer_than_its_window_while_the_end_padding_makes_it_fit():
    """TSLib's PatchTST on M4 Yearly: 12 points, patches of 16 every 8; the window padded by 8 holds one patch."""
    hparams = {**models.tiny_hyperparameters("patchtst"), "patch_len": 16, "stride": 8}
    task = {**TASK, "seq_len": 12, "enc_in": 1, "covariate": False, "nonautoregressive": True}
    model = models.build("patchtst", task, hparams)
    assert model.position.shape[0] == 1
    assert model(torch.randn(3, 12, 1)).shape == (3, TASK["output_token_len"], 1)
    with pytest.raises(ValueError, match="plus the stride 8"):
        models.build("patchtst", task, {**hparams, "patch_len": 21})
