
import torch
from torch import nn

from models.base import Capabilities, TransformerConfig
from models.layers.dropout import Dropout
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import channels_last, split_points
from models.layers.transformer import encoder_layers


class Model(nn.Module):
    """iTransformer: the Transformer inverted, so that every variate's whole lookback is one token.

    Liu, Hu, Zhang, Wu, Wang, Ma, Long. "iTransformer: Inverted Transformers Are Effective for Time
    Series Forecasting." ICLR 2024. https://arxiv.org/abs/2310.06625

    Each variate's series of seq_len points is embedded by one linear layer; calendar features, when
    present, are embedded the same way as extra tokens. Self-attention mixes variates, the
    feed-forward network works on each variate's representation, and a linear projection gives each
    variate's forecast. Covariates inform the target through attention.
    """
    capabilities = Capabilities(direct=True, covariate=True, time_marks=True, multi_output=True)

    Config = TransformerConfig  # d_model, n_heads, e_layers, d_ff, dropout, activation, use_norm

    def __init__(self, configs):
        super().__init__()
        self.use_norm, self.n_outputs = configs.use_norm, configs.n_outputs
        self.embedding = nn.Sequential(nn.Linear(configs.seq_len, configs.d_model), Dropout(configs.dropout))
        self.layers = encoder_layers(configs)
        self.norm = nn.LayerNorm(configs.d_model)
        self.projection = nn.Linear(configs.d_model, configs.output_token_len * self.n_outputs)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None) -> torch.Tensor:
        if self.use_norm:
            x, stats = normalize(x)
        C = x.shape[2]
        tokens = x if x_mark is None else torch.cat([x, x_mark], dim=2)
        h = self.embedding(tokens.transpose(1, 2))  # (B, C [+ F], D)
        for layer in self.layers:
            h = layer(h)
        out = self.projection(self.norm(h))[:, :C]  # drop the calendar tokens
        out = channels_last(split_points(out, self.n_outputs))
        return denormalize(out, stats) if self.use_norm else out
