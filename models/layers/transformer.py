"""Transformer pieces shared by the attention models; attention is F.scaled_dot_product_attention."""
import torch
import torch.nn.functional as F
from torch import nn

from models.layers.dropout import Dropout


def rotary_tables(positions: torch.Tensor, head_dim: int, base: float = 10000.0):
    """cos/sin tables of rotary position embedding (Su et al., RoFormer) for integer positions (S,)."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    angles = positions.float()[:, None] * inv_freq[None, :]
    return angles.cos(), angles.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (first half, second half) feature pairs of x (B, H, S, D) by position-dependent angles. Tables
    narrower than D/2 rotate the first 2 * width features only and pass the rest through (partial rotary)."""
    half = cos.shape[-1]
    x1, x2 = x[..., :half], x[..., half:2 * half]
    rotated = [x1 * cos - x2 * sin, x1 * sin + x2 * cos]
    return torch.cat(rotated + [x[..., 2 * half:]] if 2 * half < x.shape[-1] else rotated, dim=-1)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} must be divisible by n_heads {n_heads}")
        self.n_heads, self.dropout = n_heads, dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, rotary=None,
                is_causal: bool = False) -> torch.Tensor:
        B, S, D = x.shape
        # (B, S, 3, H, Dh) -> three (B, H, S, Dh) views: no copies before SDPA
        q, k, v = self.qkv(x).view(B, S, 3, self.n_heads, D // self.n_heads).permute(2, 0, 3, 1, 4)
        if rotary is not None:
            q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal,
                                             dropout_p=self.dropout if self.training else 0.0)
        return self.out(out.transpose(1, 2).reshape(B, S, D))


class SwiGLU(nn.Module):
    """Bias-free gated feed-forward block down(silu(gate(x)) * up(x)) (Time-MoE's experts, Timer's MLP)."""

    def __init__(self, d_in: int, d_hidden: int):
        super().__init__()
        self.gate = nn.Linear(d_in, d_hidden, bias=False)
        self.up = nn.Linear(d_in, d_hidden, bias=False)
        self.down = nn.Linear(d_hidden, d_in, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


def init_linear(model: nn.Module, std: float) -> None:
    """Every Linear weight of `model` ~ N(0, std), every bias 0: the initialisation of the Hugging Face checkpoints'
    own code (initializer_range), which Timer, Sundial and Time-MoE keep."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def activation(name: str) -> nn.Module:
    return {"relu": nn.ReLU(), "gelu": nn.GELU()}[name]


class BatchNormTokens(nn.Module):
    """BatchNorm1d over the features of (B, S, D) tokens (PatchTST's normalisation), on a (B*S, D) view:
    the same statistics as over (B, D, S), without transposing copies."""

    def __init__(self, d_model: int):
        super().__init__()
        self.norm = nn.BatchNorm1d(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.reshape(-1, x.shape[-1])).view(x.shape)


class EncoderLayer(nn.Module):
    """Post-norm Transformer layer (as in the TSLib/OpenLTM/PatchTST models): x = norm(x + attn); norm(x + ffn).

    attn_dropout defaults to dropout (TSLib); PatchTST uses 0 there and BatchNorm (norm="batch").
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, act: str = "gelu",
                 attn_dropout: float | None = None, norm: str = "layer"):
        super().__init__()
        self.attention = MultiHeadAttention(d_model, n_heads, dropout if attn_dropout is None else attn_dropout)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), activation(act), Dropout(dropout),
                                 nn.Linear(d_ff, d_model))
        make_norm = {"layer": nn.LayerNorm, "batch": BatchNormTokens}[norm]
        self.norm1, self.norm2 = make_norm(d_model), make_norm(d_model)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor, attn_mask=None, rotary=None, is_causal: bool = False) -> torch.Tensor:
        x = self.norm1(x + self.dropout(self.attention(x, attn_mask, rotary, is_causal)))
        return self.norm2(x + self.dropout(self.ffn(x)))


def encoder_layers(configs, **layer_kwargs) -> nn.ModuleList:
    """configs.e_layers EncoderLayers of the run's d_model, n_heads, d_ff, dropout and activation."""
    return nn.ModuleList(EncoderLayer(configs.d_model, configs.n_heads, configs.d_ff, configs.dropout,
                                      configs.activation, **layer_kwargs) for _ in range(configs.e_layers))
