"""Model layers against their reference code: dropout, series decomposition, TimesNet's inception block,
Autoformer's Auto-Correlation, Crossformer's attention and embedding, rotary embeddings, Timer-XL's attention."""
import math

import pytest
import torch
import torch.nn.functional as F

from models.layers.dropout import LEVELS, Dropout


def test_cpu_dropout_drops_independently_with_probability_p_and_keeps_the_mean():
    torch.manual_seed(0)
    n, p = 1 << 20, 0.3
    out = Dropout(p).train()(torch.ones(n))
    dropped = out == 0
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(dropped.double().mean().item() - p) < 5 * sigma
    assert torch.all(out[~dropped] == 1 / (1 - round(p * LEVELS) / LEVELS))  # the exact inverse keep rate
    assert abs(out.double().mean().item() - 1) < 5 * sigma / (1 - p)
    # the four words of one 64-bit draw are independent: neighbours agree as often as two coin flips
    agree = (dropped[0::2] == dropped[1::2]).double().mean().item()
    assert abs(agree - (p * p + (1 - p) * (1 - p))) < 5 * math.sqrt(0.5 / (n / 2))


def test_cpu_dropout_follows_the_seed_backpropagates_through_its_mask_and_keeps_the_dtype():
    layer = Dropout(0.5).train()
    x = torch.randn(3, 50, requires_grad=True)
    torch.manual_seed(1)
    first = layer(x)
    first.sum().backward()
    torch.manual_seed(1)
    assert torch.equal(layer(x), first) and not torch.equal(layer(x), first)
    assert torch.equal(x.grad, torch.where(first == 0, 0.0, 2.0))
    assert layer(x.detach().bfloat16()).dtype == torch.bfloat16
    assert torch.equal(layer.eval()(x), x) and torch.equal(Dropout(0.0).train()(x), x)


def test_compiled_dropout_uses_torch_dropout():
    layer = torch.compile(Dropout(0.5).train())
    out = layer(torch.ones(4096))
    assert set(out.unique().tolist()) == {0.0, 2.0} and 0.4 < (out == 0).double().mean().item() < 0.6


@pytest.mark.parametrize("kernel", [1, 4, 25])
def test_the_moving_average_is_avg_pool_over_the_replicated_ends_rounded_once(kernel):
    """Window sums from one running sum in float64: avg_pool1d's moving average computed in float64 and rounded
    once to float32 (avg_pool1d in float32 rounds at each of its k additions), values and gradients; also far
    from zero over a long series, where a float32 running sum would lose digits."""
    import torch.nn.functional as F

    from models.layers.decomposition import SeriesDecomposition

    def exact(x):
        flat = x.double().reshape(-1, 1, x.shape[-1])
        trend = F.avg_pool1d(F.pad(flat, (kernel // 2, (kernel - 1) // 2), mode="replicate"), kernel, stride=1)
        return trend.reshape(x.shape)

    generator = torch.Generator().manual_seed(0)
    for x in (torch.randn(3, 7, 96, generator=generator), 1000 + torch.randn(2, 5000, generator=generator)):
        x.requires_grad_(True)
        seasonal, trend = SeriesDecomposition(kernel)(x)
        expected = exact(x)
        torch.testing.assert_close(trend, expected.float(), rtol=1.2e-7, atol=0)  # one rounding: half an ulp
        ulp = torch.finfo(torch.float32).eps * x.detach().abs().max()
        torch.testing.assert_close(seasonal, (x.double() - expected).float(), rtol=0, atol=float(ulp))
        weights = torch.randn(x.shape, generator=generator)
        ours, = torch.autograd.grad((trend * weights).sum(), x)
        theirs, = torch.autograd.grad((expected * weights.double()).sum(), x)
        torch.testing.assert_close(ours, theirs.float(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("num_kernels", [1, 2, 6])
def test_the_inception_block_is_the_mean_of_its_convolutions_in_values_and_gradients(num_kernels):
    """One convolution with the mean of the zero-padded kernels equals the paper's mean of 'same' convolutions
    (computed in float64 to compare the mathematics, not the rounding), on folds narrower or shorter than the
    largest kernel (which it crops) and on one larger in both directions."""
    from models.timesnet import InceptionBlock

    torch.manual_seed(0)
    block = InceptionBlock(3, 5, num_kernels).double()
    for conv in block.convs:
        torch.nn.init.normal_(conv.bias)  # zero at initialisation: the bias' mean must be tested too
    for shape in ((2, 3, 1, 24), (2, 3, 4, 6), (1, 3, 13, 2), (1, 3, 12, 14)):
        x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
        ours = block(x)
        theirs = torch.stack([conv(x) for conv in block.convs], dim=-1).mean(-1)
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
        weights = torch.randn_like(ours)
        inputs = [x, *block.parameters()]
        for a, b in zip(torch.autograd.grad((ours * weights).sum(), inputs),
                        torch.autograd.grad((theirs * weights).sum(), inputs), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("training", [True, False])
def test_auto_correlation_sums_the_values_rolled_by_each_top_delay_as_the_official_code(training):
    """The one-FFT-product aggregation equals the official per-delay torch.roll sum (time_delay_agg_training:
    the batch's top delays; _inference: each window's own), values and gradients, in float64."""
    import math

    from models.autoformer import AutoCorrelation

    def official(q, k, v, factor):
        B, L = q.shape[:2]
        corr = torch.fft.irfft(torch.fft.rfft(q, dim=1) * torch.fft.rfft(k, dim=1).conj(), n=L, dim=1).mean((2, 3))
        top_k = int(factor * math.log(L))
        if training:
            delays = torch.topk(corr.detach().mean(0), top_k).indices
            weights = torch.softmax(corr[:, delays], dim=-1)
            return sum(torch.roll(v, -int(d), 1) * weights[:, i, None, None, None] for i, d in enumerate(delays))
        weights, delays = torch.topk(corr, top_k, dim=-1)
        weights = torch.softmax(weights, dim=-1)
        rolled = [torch.stack([torch.roll(v[b], -int(delays[b, i]), 0) for b in range(B)]) for i in range(top_k)]
        return sum(r * weights[:, i, None, None, None] for i, r in enumerate(rolled))

    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 40, 2, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    layer = AutoCorrelation(factor=3).train(training)
    ours = layer(q, k, v).double().view(3, 40, 2, 4)
    theirs = official(q, k, v, 3)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)  # the FFTs run in float32, as under AMP
    weights = torch.randn_like(ours)
    for a, b in zip(torch.autograd.grad((ours * weights).sum(), (q, k, v)),
                    torch.autograd.grad((theirs * weights).sum(), (q, k, v)), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


@pytest.mark.parametrize("head_mixup", [False, True])
@pytest.mark.parametrize("cross", [False, True])
def test_crossformer_attention_is_the_official_attention_layer(head_mixup, cross):
    """The official AttentionLayer with separate projections: since c10c8ea it merges (B, L, H, E) heads as
    (B, L, H * E); before, with mix, it transposed them to (B, H, L, E) first (head_mixup)."""
    from models.crossformer import Attention

    def official(layer, queries, keys):
        D, H = queries.shape[-1], layer.n_heads
        w, b = layer.qkv.weight, layer.qkv.bias
        q, k, v = (F.linear(x, w[i * D:(i + 1) * D], b[i * D:(i + 1) * D]).unflatten(-1, (H, -1))
                   for i, x in enumerate((queries, keys, keys)))
        scores = torch.softmax(torch.einsum("blhe,bshe->bhls", q, k) / (D // H) ** 0.5, dim=-1)
        out = torch.einsum("bhls,bshd->blhd", scores, v)
        out = out.transpose(2, 1) if head_mixup else out
        return layer.out(out.reshape(queries.shape[0], queries.shape[1], -1))

    torch.manual_seed(0)
    layer = Attention(16, 4, 0.0, head_mixup).double().eval()
    x, memory = torch.randn(3, 5, 16, dtype=torch.float64), torch.randn(3, 7, 16, dtype=torch.float64)
    ours = layer(x, memory) if cross else layer(x)
    torch.testing.assert_close(ours, official(layer, x, memory if cross else x), rtol=0, atol=1e-12)
    mixed = Attention(16, 4, 0.0, not head_mixup).double().eval()
    mixed.load_state_dict(layer.state_dict())
    assert not torch.allclose(mixed(x, memory) if cross else mixed(x), ours)  # the two merges are other functions


def test_crossformer_tslib_embedding_adds_a_fixed_sine_table_and_no_bias():
    """TSLib's segment embedding, Linear(seg_len, d_model, bias=False)(x) + sinusoid + learnable positions: the
    default model computes the same once its positions absorb the sine table and its embedding bias is zero."""
    import models
    from models.layers.embed import sinusoidal_positions
    torch.manual_seed(0)
    task = dict(seq_len=24, input_token_len=24, output_token_len=12, enc_in=3, n_marks=0, covariate=False)
    hp = dict(seg_len=6, win_size=2, router_factor=2, d_model=16, d_ff=16, n_heads=2, e_layers=2, dropout=0.0,
              baseline=False, head_mixup=False)
    tslib = models.build("crossformer", task, {**hp, "tslib_embedding": True}).double().eval()
    default = models.build("crossformer", task, {**hp, "tslib_embedding": False}).double().eval()
    assert tslib.embed.bias is None
    state = tslib.state_dict()
    state["enc_position"] = state["enc_position"] + sinusoidal_positions(4, 16).double()
    default.load_state_dict({**state, "embed.bias": torch.zeros(16, dtype=torch.float64)})
    x = torch.randn(5, 24, 3, dtype=torch.float64)
    torch.testing.assert_close(tslib(x), default(x), rtol=0, atol=1e-12)
    default.load_state_dict({**tslib.state_dict(), "embed.bias": torch.zeros(16, dtype=torch.float64)})
    assert not torch.allclose(tslib(x), default(x))  # the table is what differs


def test_partial_rotary_rotates_the_leading_features_and_passes_the_rest():
    from models.layers.transformer import apply_rotary, rotary_tables
    x = torch.randn(2, 3, 5, 16)
    cos, sin = rotary_tables(torch.arange(5), 8)  # tables 4 wide: features 0..7 rotate
    out = apply_rotary(x, cos, sin)
    assert torch.equal(out[..., 8:], x[..., 8:])
    assert torch.allclose(out[..., :8], apply_rotary(x[..., :8], cos, sin))
    assert torch.allclose(out.norm(dim=-1), x.norm(dim=-1), atol=1e-5)  # a rotation


def _openltm_time_attention(x, layer, bias, n_vars, n_tokens):
    """OpenLTM's TimeAttention (0b30050) transcribed from its code: rotary with interleaved pairs (2i, 2i + 1) over
    the first half of each head at the flattened token index, the binary bias (rows: other, same variable) added to
    the scores before their scaling, a multivariate causal mask in time."""
    B, S, D = x.shape
    H = layer.n_heads
    E = D // H
    q, k, v = layer.qkv(x).view(B, S, 3, H, E).permute(2, 0, 3, 1, 4)
    width = E // 2
    theta = 10000.0 ** (-torch.arange(0, width, 2).float() / width)
    angle = torch.arange(S).float()[:, None] * theta.repeat_interleave(2)[None, :]

    def rotate(t):
        part, rest = t[..., :width], t[..., width:]
        swapped = torch.stack([-part[..., 1::2], part[..., 0::2]], dim=-1).flatten(-2)
        return torch.cat([part * angle.cos() + swapped * angle.sin(), rest], dim=-1)

    time = torch.arange(n_tokens).repeat(n_vars)
    var = torch.arange(n_vars).repeat_interleave(n_tokens)
    same = (var[:, None] == var[None, :]).float()
    scores = torch.einsum("bhle,bhse->bhls", rotate(q), rotate(k))
    scores = scores + (1 - same) * bias[0][:, None, None] + same * bias[1][:, None, None]
    scores = scores.masked_fill(time[:, None] < time[None, :], float("-inf"))
    out = torch.einsum("bhls,bhsd->blhd", torch.softmax(scores / math.sqrt(E), dim=-1), v).reshape(B, S, D)
    return layer.out(out)


def test_timer_xl_openltm_form_is_openltms_attention_on_permuted_features():
    """With each head's rotated features reordered from OpenLTM's interleaved pairs to ours, a one-layer Timer-XL of
    the openltm form computes OpenLTM's attention (transcribed above) inside the same post-norm layer."""
    import models
    torch.manual_seed(0)
    n_vars, n_tokens, P, D, H = 3, 4, 8, 32, 4
    task = dict(seq_len=n_tokens * P, input_token_len=P, output_token_len=P, enc_in=n_vars, n_marks=0, covariate=False)
    model = models.build("timer_xl", task, dict(d_model=D, n_heads=H, e_layers=2, d_ff=64, dropout=0.0,
                                                activation="relu", use_norm=False, attention_form="openltm")).eval()
    assert model.variable_bias.shape == (2, 2, H)  # a bias per layer, drawn from N(0, 1)
    E = D // H
    ours_from_openltm = [2 * i for i in range(E // 4)] + [2 * i + 1 for i in range(E // 4)] + list(range(E // 2, E))
    x = torch.randn(2, n_tokens * P, n_vars)
    h = model.embedding(x.transpose(1, 2).unfold(-1, P, P)).reshape(2, n_vars * n_tokens, D)
    expected = h
    for layer, bias in zip(model.layers, model.variable_bias):
        reference = type(layer.attention)(D, H, 0.0)
        reference.load_state_dict(layer.attention.state_dict())
        with torch.no_grad():  # OpenLTM's feature order for q and k: the inverse of ours_from_openltm
            for part in (reference.qkv.weight, reference.qkv.bias):
                rows = part.view(3, H, E, *part.shape[1:])
                rows[:2, :, ours_from_openltm] = rows[:2].clone()
        attention = _openltm_time_attention(expected, reference, bias.flip(0), n_vars, n_tokens)
        expected = layer.norm1(expected + attention)
        expected = layer.norm2(expected + layer.ffn(expected))
    expected = model.head(model.norm(expected)).reshape(2, n_vars, n_tokens * P).transpose(1, 2)
    assert torch.allclose(model(x), expected, atol=1e-5)
