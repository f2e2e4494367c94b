
from dataclasses import dataclass

import torch
from torch import nn

from models.base import Capabilities, TransformerConfig, hparam
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import channels_last, split_points
from models.layers.transformer import encoder_layers, rotary_tables


class Model(nn.Module):
    """Timer-XL: a decoder-only Transformer over patch tokens of every variable, trained on next-token
    prediction and rolled out autoregressively.

    Liu, Qin, Huang, Wang, Long. "Timer-XL: Long-Context Transformers for Unified Time Series
    Forecasting." ICLR 2025. https://arxiv.org/abs/2410.04803

    TimeAttention over the flattened (variable, token) sequence: causal in time, rotary position
    embedding, and a learnable per-head bias for same- versus cross-variable pairs. With covariates,
    each covariate attends to its own past only and the target (last variable) to the past of every
    variable.

    --attention_form picks between the paper's description and the official code (thuml/OpenLTM
    0b30050, layers/SelfAttention_Family.TimeAttention), which produced the published numbers:
    paper    rotary over the whole head on each token's time index; the bias starts at zero.
    openltm  rotary over the first half of each head on the token's index in the flattened
             (variable, token) sequence; the bias starts from N(0, 1) and is added before the
             1/sqrt(head size) scaling of the scores. (Its rotary pairs features (2i, 2i+1), ours
             (i, i + width/2): the same rotations of permuted features.)
    """
    capabilities = Capabilities(autoregressive=True, direct=True, covariate=True, token_input=True,
                                multi_output=True)

    @dataclass
    class Config(TransformerConfig):  # d_model, n_heads, e_layers, d_ff, dropout, activation, use_norm
        attention_form: str = hparam("paper", "Timer-XL's attention as its paper describes it or as OpenLTM's "
                                              "code computes it (see models/timer_xl.py)",
                                     choices=("paper", "openltm"), later=True)

    def __init__(self, configs):
        super().__init__()
        rotated = 4 if configs.attention_form == "openltm" else 2  # its rotary halves the head, then pairs
        if (configs.d_model // configs.n_heads) % rotated:
            raise ValueError(f"Timer-XL's {configs.attention_form} attention needs a head size (d_model / n_heads) "
                             f"divisible by {rotated} for rotary embedding")
        self.token_len, self.direct = configs.input_token_len, configs.nonautoregressive
        self.out_len, self.n_outputs = configs.output_token_len, configs.n_outputs
        self.head_dim = configs.d_model // configs.n_heads
        self.use_norm, self.covariate = configs.use_norm, configs.covariate
        self.embedding = nn.Linear(self.token_len, configs.d_model)
        self.layers = encoder_layers(configs)
        self.norm = nn.LayerNorm(configs.d_model)
        self.head = nn.Linear(configs.d_model, self.out_len * self.n_outputs)
        self.official = configs.attention_form == "openltm"
        if self.official:  # each layer its own bias, from N(0, 1)
            self.variable_bias = nn.Parameter(torch.randn(configs.e_layers, 2, configs.n_heads))
        else:  # [same variable, other variable]
            self.variable_bias = nn.Parameter(torch.zeros(2, configs.n_heads))

    def _attention_masks(self, n_vars: int, n_tokens: int, device: torch.device) -> tuple:
        """An additive (H, S, S) mask per layer over the variable-major token sequence, and the rotary tables."""
        time = torch.arange(n_tokens, device=device).repeat(n_vars)
        var = torch.arange(n_vars, device=device).repeat_interleave(n_tokens)
        same_var = var[:, None] == var[None, :]
        allowed = time[:, None] >= time[None, :]
        if self.covariate:
            allowed &= same_var | (var[:, None] == n_vars - 1)

        def mask(weight):  # (2, H): [same variable, other variable]
            bias = torch.where(same_var, weight[0, :, None, None], weight[1, :, None, None])
            return bias.masked_fill(~allowed, float("-inf"))

        if self.official:  # the bias enters before the scores' 1/sqrt(head size) scaling
            masks = [mask(weight) for weight in self.variable_bias * self.head_dim ** -0.5]
            return masks, rotary_tables(torch.arange(n_vars * n_tokens, device=device), self.head_dim // 2)
        return [mask(self.variable_bias)] * len(self.layers), rotary_tables(time, self.head_dim)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        B, _, C = x.shape
        if self.use_norm:
            x, stats = normalize(x)
        tokens = x.transpose(1, 2).unfold(-1, self.token_len, self.token_len)  # (B, C, N, P)
        n_tokens = tokens.shape[2]
        h = self.embedding(tokens).reshape(B, C * n_tokens, -1)
        masks, rotary = self._attention_masks(C, n_tokens, x.device)
        for layer, mask in zip(self.layers, masks):
            h = layer(h, mask, rotary)
        if self.direct:  # the forecast after each variable's last token alone
            h = h.view(B, C, n_tokens, -1)[:, :, -1]
        # a channel's tokens, each of output_token_len points of k values, in order: (B, N * output_token_len, C[, k])
        out = channels_last(split_points(self.head(self.norm(h)).reshape(B, C, -1), self.n_outputs))
        return denormalize(out, stats) if self.use_norm else out
