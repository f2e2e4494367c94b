"""MICN's kernels from the task (models/micn.py): the codes' isometric kernel is the downsampled sequence's length,
so the isometric convolution, padded before by that length less one, keeps it."""
import pytest
import torch
from torch import nn

from models.micn import decomposition_kernel, isometric_kernel


@pytest.mark.parametrize("conv_kernel", [2, 3, 5, 12, 16, 17, 18])
@pytest.mark.parametrize("length", [40, 48, 61, 192, 816])
def test_the_isometric_kernel_spans_the_downsampled_sequence(length, conv_kernel):
    down = nn.Conv1d(1, 1, conv_kernel, stride=conv_kernel, padding=conv_kernel // 2)
    downsampled = down(torch.zeros(1, 1, length)).shape[-1]
    # TSLib's and the official run.py's formula
    codes = (length + conv_kernel) // conv_kernel if conv_kernel % 2 == 0 else \
        (length + conv_kernel - 1) // conv_kernel
    assert isometric_kernel(length, conv_kernel) == codes == downsampled
    assert decomposition_kernel(conv_kernel) % 2 == 1 and 0 <= decomposition_kernel(conv_kernel) - conv_kernel <= 1
