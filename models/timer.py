
import torch
from torch import nn

from models.base import Capabilities, TransformerConfig
from models.layers.dropout import Dropout
from models.layers.embed import sinusoidal_positions
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import channels_last, split_points
from models.layers.transformer import encoder_layers


class Model(nn.Module):
    """Timer: a generative, decoder-only Transformer over patch tokens of a single series.

    Liu, Zhang, Li, Wang, Wang, Long. "Timer: Generative Pre-trained Transformers Are Large Time
    Series Models." ICML 2024. https://arxiv.org/abs/2402.02368

    Every channel is its own series (channel independence). The series is cut into tokens of
    input_token_len points, embedded linearly with a sinusoidal position, and passed through
    causally masked Transformer layers (GPT-style next-token prediction); each token's output is the
    next output_token_len points. Forecasts longer than one token are generated autoregressively.
    """
    capabilities = Capabilities(autoregressive=True, direct=True, covariate=False, token_input=True,
                                multi_output=True)

    Config = TransformerConfig  # d_model, n_heads, e_layers, d_ff, dropout, activation, use_norm

    def __init__(self, configs):
        super().__init__()
        self.token_len, self.use_norm, self.n_outputs = configs.input_token_len, configs.use_norm, configs.n_outputs
        self.direct = configs.nonautoregressive
        self.embedding = nn.Linear(self.token_len, configs.d_model)
        self.dropout = Dropout(configs.dropout)
        self.layers = encoder_layers(configs)
        self.norm = nn.LayerNorm(configs.d_model)
        self.head = nn.Linear(configs.d_model, configs.output_token_len * self.n_outputs)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.use_norm:
            x, stats = normalize(x)
        B, _, C = x.shape
        tokens = x.transpose(1, 2).unfold(-1, self.token_len, self.token_len).flatten(0, 1)  # (B*C, N, P)
        h = self.embedding(tokens)
        h = self.dropout(h + sinusoidal_positions(h.shape[1], h.shape[2], h.device))
        for layer in self.layers:
            h = layer(h, is_causal=True)
        if self.direct:  # the forecast after the last token alone
            h = h[:, -1:]
        # a channel's tokens, each of output_token_len points of k values, in order: (B, N * output_token_len, C[, k])
        out = channels_last(split_points(self.head(self.norm(h)).reshape(B, C, -1), self.n_outputs))
        return denormalize(out, stats) if self.use_norm else out
