"""ModernTCN's convolutions as matrix products on the CPU (models/moderntcn.py) are nn.Conv1d's functions, forward
and backward: the depthwise one's Toeplitz path at every length against its tile length (one tile, several, a ragged
last one, a sequence shorter than the kernel), taken only for long kernels; the grouped pointwise one's product."""
import pytest
import torch
from torch import nn

from models.moderntcn import TOEPLITZ_FROM, DepthwiseConv1d, GroupedPointwiseConv1d


def reference(conv: DepthwiseConv1d) -> nn.Conv1d:
    c, k = conv.in_channels, conv.kernel_size[0]
    direct = nn.Conv1d(c, c, k, padding=k // 2, groups=c, bias=False)
    direct.weight = nn.Parameter(conv.weight.detach().clone())
    return direct


def assert_same_function(apply, module: nn.Module, direct: nn.Module, x: torch.Tensor) -> None:
    """apply(x) (module's path) and direct(x) agree in float64, and so do the gradients of x and of every parameter."""
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    y1, y2 = apply(x1), direct(x2)
    torch.testing.assert_close(y1, y2, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(y2)
    (y1 * g).sum().backward()
    (y2 * g).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-12, atol=1e-12)
    for (name, ours), theirs in zip(module.named_parameters(), direct.parameters()):
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-12, atol=1e-12, msg=name)


@pytest.mark.parametrize("kernel,length", [(51, 84), (51, 102), (51, 204), (51, 250), (51, 20), (5, 3), (1, 9),
                                           (7, 15)])
def test_the_toeplitz_path_is_the_convolution_forward_and_backward(kernel, length):
    torch.manual_seed(0)
    conv = DepthwiseConv1d(6, kernel)
    direct = reference(conv)
    x = torch.randn(3, 6, length, dtype=torch.float64)
    conv, direct = conv.double(), direct.double()
    assert conv.toeplitz(x).shape == (3, 6, length)
    assert_same_function(conv.toeplitz, conv, direct, x)


@pytest.mark.parametrize("kernel", [TOEPLITZ_FROM - 2, TOEPLITZ_FROM, 51])
def test_forward_takes_the_toeplitz_path_from_its_kernel_size(kernel, monkeypatch):
    conv = DepthwiseConv1d(4, kernel)
    taken = []
    monkeypatch.setattr(DepthwiseConv1d, "toeplitz", lambda self, x: taken.append(x) or x)
    conv(torch.randn(2, 4, 30))
    assert bool(taken) == (kernel >= TOEPLITZ_FROM)


def test_the_weight_is_a_depthwise_conv1d_weight():
    """Checkpoints and the official weights load unchanged: the parameter is nn.Conv1d's, under the same key."""
    conv = DepthwiseConv1d(8, 51)
    assert isinstance(conv, nn.Conv1d) and list(conv.state_dict()) == ["weight"]
    assert conv.weight.shape == (8, 1, 51) and conv.padding == (25,) and conv.groups == 8


@pytest.mark.parametrize("in_channels,out_channels,groups", [(12, 12, 3), (12, 24, 4), (6, 3, 3), (5, 7, 1)])
def test_the_grouped_pointwise_product_is_the_convolution_forward_and_backward(in_channels, out_channels, groups):
    torch.manual_seed(0)
    conv = GroupedPointwiseConv1d(in_channels, out_channels, groups).double()
    direct = nn.Conv1d(in_channels, out_channels, 1, groups=groups).double()
    direct.load_state_dict(conv.state_dict())
    assert_same_function(conv, conv, direct, torch.randn(4, in_channels, 9, dtype=torch.float64))
