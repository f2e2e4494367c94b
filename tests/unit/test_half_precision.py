"""Mixed dtypes that CUDA's autocast gives a model (--use_amp) and the CPU's autocast does not, fed directly: each
failed the GPU check on an H200 (docs/performance.md, "The GPU check")."""
import pytest
import torch

from models.informer import probsparse_attention
from models.pathformer import MultiScaleLayer


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_pathformers_router_takes_its_fft_in_float32_from_a_half_precision_series(half):
    """No FFT takes bfloat16, and cuFFT takes float16 only at powers of two (its series are 96 or 192 long): the
    router's spectrum is taken in float32, the same as from the float32 copy of the series."""
    torch.manual_seed(0)
    layer = MultiScaleLayer(48, 3, [4, 8, 12], k=2, width=4, hidden=8, dropout=0.0, ffn_dropout=0.0, residual=True)
    z = torch.randn(2, 48, 3).to(half)
    with torch.no_grad():
        routed = layer._router_input(z)
        torch.testing.assert_close(routed, layer._router_input(z.float()), rtol=0, atol=0)
    assert routed.dtype == torch.float32


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
def test_informers_causal_probsparse_scatters_into_a_float32_running_sum(half, monkeypatch):
    """CUDA's autocast computes cumsum in float32 and the selected queries' product in half precision; scatter
    refused the two dtypes. The product is cast to the running sum's dtype."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 48, 8).to(half) for _ in range(3))
    torch.manual_seed(1)  # the keys ProbSparse samples, alike in both calls
    expected = probsparse_attention(q.float(), k.float(), v.float(), 2, causal=True)
    cumsum = torch.Tensor.cumsum
    monkeypatch.setattr(torch.Tensor, "cumsum", lambda self, *a, **kw: cumsum(self.float(), *a, **kw))
    torch.manual_seed(1)
    out = probsparse_attention(q, k, v, 2, causal=True)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected, rtol=0.05, atol=0.05)
