
import torch
from torch import nn

from models.base import Capabilities, TransformerConfig
from models.layers.normalization import denormalize, normalize
from models.layers.transformer import encoder_layers, rotary_tables


class Model(nn.Module):
    """Timer-XL: a decoder-only Transformer over patch tokens of every variable, trained on next-token
    prediction and rolled out autoregressively.

    Liu, Qin, Huang, Wang, Long. "Timer-XL: Long-Context Transformers for Unified Time Series
    Forecasting." ICLR 2025. https://arxiv.org/abs/2410.04803

    TimeAttention over the flattened (variable, token) sequence: causal in time, rotary position
    embedding of the token's time index, and a learnable per-head bias for same- versus
    cross-variable pairs. With covariates, each covariate attends to its own past only and the
    target (last variable) to the past of every variable.
    """
    capabilities = Capabilities(autoregressive=True, direct=True, covariate=True, token_input=True)

    Config = TransformerConfig  # d_model, n_heads, e_layers, d_ff, dropout, activation, use_norm

    def __init__(self, configs):
        super().__init__()
        if (configs.d_model // configs.n_heads) % 2:
            raise ValueError("Timer-XL needs an even head size (d_model / n_heads) for rotary embedding")
        self.token_len = configs.input_token_len
        self.out_len = configs.output_token_len
        self.head_dim = configs.d_model // configs.n_heads
        self.use_norm, self.covariate = configs.use_norm, configs.covariate
        self.embedding = nn.Linear(self.token_len, configs.d_model)
        self.layers = encoder_layers(configs)
        self.norm = nn.LayerNorm(configs.d_model)
        self.head = nn.Linear(configs.d_model, self.out_len)
        self.variable_bias = nn.Parameter(torch.zeros(2, configs.n_heads))  # [same variable, other variable]

    def _attention_bias(self, n_vars: int, n_tokens: int, device: torch.device):
        """Additive (H, S, S) mask over the variable-major token sequence, and each token's time index."""
        time = torch.arange(n_tokens, device=device).repeat(n_vars)
        var = torch.arange(n_vars, device=device).repeat_interleave(n_tokens)
        same_var = var[:, None] == var[None, :]
        allowed = time[:, None] >= time[None, :]
        if self.covariate:
            allowed &= same_var | (var[:, None] == n_vars - 1)
        bias = torch.where(same_var, self.variable_bias[0, :, None, None], self.variable_bias[1, :, None, None])
        return bias.masked_fill(~allowed, float("-inf")), time

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        B, _, C = x.shape
        if self.use_norm:
            x, stats = normalize(x)
        tokens = x.transpose(1, 2).unfold(-1, self.token_len, self.token_len)  # (B, C, N, P)
        n_tokens = tokens.shape[2]
        h = self.embedding(tokens).reshape(B, C * n_tokens, -1)
        bias, time = self._attention_bias(C, n_tokens, x.device)
        rotary = rotary_tables(time, self.head_dim)
        for layer in self.layers:
            h = layer(h, bias, rotary)
        out = self.head(self.norm(h)).reshape(B, C, n_tokens * self.out_len).transpose(1, 2)
        return denormalize(out, stats) if self.use_norm else out
