from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from models.base import Capabilities, d_ff, d_model, dropout, e_layers, hparam, n_heads
from models.layers.batch_stats import BatchMean
from models.layers.dropout import Dropout
from models.layers.embed import sinusoidal_positions
from models.layers.normalization import denormalize, normalize
from models.layers.outputs import channels_last, split_points

SPATIAL, TEMPORAL, SPATIO_TEMPORAL, SELF = range(4)  # the regions of a token's neighbours


def regions(channels: int, patches: int) -> torch.Tensor:
    """(L, L) region of token j seen from token i, tokens channel-major (i = channel * patches + patch): SPATIAL the
    same patch of another channel, TEMPORAL another patch of the same channel, SPATIO_TEMPORAL the rest, SELF i."""
    token = torch.arange(channels * patches)
    same_channel = (token[:, None] // patches) == (token[None] // patches)
    same_patch = (token[:, None] % patches) == (token[None] % patches)
    found = torch.full(same_patch.shape, SPATIO_TEMPORAL)
    found[same_patch] = SPATIAL
    found[same_channel] = TEMPORAL
    found[token, token] = SELF
    return found


def squared_variation(x: torch.Tensor) -> torch.Tensor:
    """The squared coefficient of variation of x's entries (the official cv_squared, 0 for a single row)."""
    if x.shape[0] == 1:
        return x.new_zeros(())
    return x.float().var() / (x.float().mean() ** 2 + 1e-10)


class RegionRouter(nn.Module):
    """Mixture-of-experts routing of each token's adjacency row (L scores) over the three region filters: the
    gate's softmax (with learned Gaussian noise in training), the smallest set of regions, most probable first,
    whose probabilities reach top_p; the chosen regions' entries (and the token's own) are kept."""

    def __init__(self, n_tokens: int, top_p: float, noise_floor: float = 1e-2):
        super().__init__()
        self.gate = nn.Linear(n_tokens, 3, bias=False)
        self.noise = nn.Linear(n_tokens, 3, bias=False)
        self.top_p, self.noise_floor = top_p, noise_floor
        self.importance = BatchMean()

    def forward(self, adj: torch.Tensor, region: torch.Tensor):
        """adj (B, H, L, L) -> the keep mask (B, H, L, L) and, in training, the balance loss."""
        logits = self.gate(adj)
        if self.training:
            logits = logits + torch.randn_like(logits) * (F.softplus(self.noise(adj)) + self.noise_floor)
        probs = logits.softmax(-1)
        ordered, order = probs.sort(-1, descending=True)
        beyond = ordered.cumsum(-1) > self.top_p
        # the region whose probability first reaches top_p is kept, those after it dropped
        dropped = beyond & ~F.one_hot(beyond.long().argmax(-1), 3).bool()
        chosen = torch.zeros_like(probs).scatter(-1, order, (~dropped).to(probs.dtype))
        gates = torch.cat([chosen, torch.ones_like(chosen[..., :1])], -1)  # SELF always kept
        mask = torch.take_along_dim(gates, region.expand(*adj.shape), dim=-1)
        if not self.training:
            return mask, None
        return mask, self._balance(probs, ordered.masked_fill(dropped, 0.0))

    def _balance(self, probs: torch.Tensor, kept: torch.Tensor) -> torch.Tensor:
        """cv^2 of the kept probabilities per token and rank (most probable first) summed over the windows and
        heads: a BatchMean (cv^2 is blind to the scale), so under DDP the global batch's; plus 0.1 x the routing
        entropy summed over the tokens, averaged over windows, heads and ranks."""
        rows = kept.flatten(0, 1).flatten(1)  # (B * H, L * 3)
        local = rows.mean(0)
        means = self.importance(rows.detach()) + local - local.detach()
        entropy = -(probs * torch.log(probs + 1e-10)).sum(2).mean()
        return squared_variation(means.view(-1, 3)) + 0.1 * entropy


class GraphBlock(nn.Module):
    """Pre-norm block: graph filtration and message passing over the tokens, then a feed-forward network, each
    added back.

    Filtration per head: the adjacency GELU(q k^T) of two projections of the head's features; the int(alpha L)
    smallest entries of each row zeroed (k-nearest neighbours); the router's regions kept. The adjacency's softmax
    over the row (zeroed entries included, as the official code), dropout, each row rescaled to sum 1; message
    passing: the rows average a linear projection of the tokens, head by head."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float, alpha: float, top_p: float,
                 n_tokens: int):
        super().__init__()
        head = d_model // n_heads
        self.n_heads, self.alpha, self.top_p = n_heads, alpha, top_p
        self.norm1 = nn.LayerNorm(d_model)
        self.query, self.key = nn.Linear(head, head), nn.Linear(head, head)  # shared by the heads
        self.router = RegionRouter(n_tokens, top_p) if top_p > 0 else None
        self.adj_dropout = Dropout(dropout)
        self.message = nn.Linear(d_model, d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.ffn = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), Dropout(dropout), nn.Linear(d_ff, d_model))

    def forward(self, x: torch.Tensor, region: torch.Tensor):
        B, L, D = x.shape
        h = self.norm1(x)
        heads = h.view(B, L, self.n_heads, -1).transpose(1, 2)  # (B, H, L, D / H)
        adj = F.gelu(self.query(heads) @ self.key(heads).transpose(-1, -2))  # (B, H, L, L)
        nearest = torch.ones_like(adj).scatter(-1, adj.topk(int(self.alpha * L), dim=-1, largest=False).indices, 0.0)
        adj = adj * nearest
        loss = None
        if self.router is None:  # top_p 0: each token its own neighbour alone
            adj = adj * torch.eye(L, device=adj.device, dtype=adj.dtype)
        else:
            mask, loss = self.router(adj, region)
            adj = adj * mask
        adj = F.normalize(self.adj_dropout(adj.softmax(-1)), p=1, dim=-1)
        values = self.message(h).view(B, L, self.n_heads, -1).transpose(1, 2)
        x = x + (adj @ values).transpose(1, 2).reshape(B, L, D)
        return x + self.ffn(self.norm2(x)), loss


class Model(nn.Module):
    """TimeFilter: a graph over the patches of every channel, filtered per patch into the neighbours that matter
    (temporal, spatial, spatio-temporal regions chosen by a mixture of experts), and message passing over it.

    Hu, Zhang, Liu, Lan, Li, Cheng, Dai, Xia, Pan. "TimeFilter: Patch-Specific Spatial-Temporal Graph
    Filtration for Time Series Forecasting." ICML 2025. https://arxiv.org/abs/2501.13041 (official code:
    github.com/TROUBADOUR000/TimeFilter, models/TimeFilter.py and layers/TimeFilter_layers.py; TSLib's
    models/TimeFilter.py is the same model)

    Each window is standardised per channel (no affine). Every channel is cut into seq_len / patch_len patches,
    each embedded linearly to d_model, plus (pos) a sinusoidal position over all C x N tokens (channel-major, as
    the official code). e_layers graph blocks (GraphBlock) filter and pass messages between the tokens: each token's
    adjacency row is cut to its nearest neighbours (the smallest alpha of its scores dropped) and to the regions a
    router chooses (RegionRouter: top-p of its softmax over the spatial, temporal and spatio-temporal regions;
    top_p 0: no neighbours but the token itself). A linear head maps each channel's N tokens, flattened, to the
    horizon, and the standardisation is undone.

    Training loss: forward returns {"router_balance": aux_loss_coef x the mean over the blocks of the router's
    cv^2 of the kept probabilities + 0.1 x its routing entropy} (the official exp's 0.05 and lambda 0.1), 0 with
    top_p 0 (as the official). TSLib's copy of the model drops the term from its loss; the official code adds it.

    Deviations from the official code: the importance statistic is the mean over the batch's windows and heads
    where the official code sums them (cv^2 is the same, up to its 1e-10), taken as a BatchMean so that DDP gives
    the global batch's; the official entropy term is 0 when a batch holds one window with one head, here it is the
    entropy; the normalisation statistics are not detached (the input carries no gradient).
    """
    capabilities = Capabilities(direct=True, autoregressive=False, covariate=True, aux_loss=True, multi_output=True)

    @dataclass
    class Config:  # defaults: the official run.py's
        d_model: int = d_model(512)
        n_heads: int = n_heads(4)
        e_layers: int = e_layers(2)
        d_ff: int = d_ff(2048)
        dropout: float = dropout(0.1)
        patch_len: int = hparam(16, "points per patch (the patches do not overlap; seq_len must be a multiple)",
                                tiny=8, low=1)
        pos: bool = hparam(True, "sinusoidal position embedding of the patch tokens (the official --pos)")
        alpha: float = hparam(0.1, "share of each token's smallest adjacency scores dropped (the official k-nearest "
                                   "filter, --alpha)", low=0.0, high=1.0)
        top_p: float = hparam(0.5, "probability mass of the regions the router keeps per token; 0: no routing, no "
                                   "neighbours but the token itself (the official --top_p)", low=0.0, high=1.0)
        aux_loss_coef: float = hparam(0.05, "weight of the router's balance loss (the official exp's 0.05)", low=0.0)

    def __init__(self, configs):
        super().__init__()
        L, P, C = configs.seq_len, configs.patch_len, configs.enc_in
        if L % P:
            raise ValueError(f"seq_len {L} must be a multiple of patch_len {P}")
        if configs.d_model % configs.n_heads:
            raise ValueError(f"d_model {configs.d_model} must be a multiple of n_heads {configs.n_heads}")
        self.patch_len, self.pos, self.n_outputs = P, configs.pos, configs.n_outputs
        self.aux_loss_coef, self.horizon = configs.aux_loss_coef, configs.output_token_len
        n_patches = L // P
        self.embed = nn.Linear(P, configs.d_model)
        self.blocks = nn.ModuleList(
            GraphBlock(configs.d_model, configs.n_heads, configs.d_ff, configs.dropout, configs.alpha, configs.top_p,
                       C * n_patches) for _ in range(configs.e_layers))
        self.head = nn.Linear(n_patches * configs.d_model, configs.output_token_len * configs.n_outputs)
        self.register_buffer("region", regions(C, n_patches), persistent=False)

    def forward(self, x: torch.Tensor, x_mark: torch.Tensor | None = None):
        B, L, C = x.shape
        x, stats = normalize(x)
        h = self.embed(x.transpose(1, 2).reshape(B, C * L // self.patch_len, self.patch_len))  # (B, C * N, D)
        if self.pos:
            h = h + sinusoidal_positions(h.shape[1], h.shape[2], h.device).to(h.dtype)
        losses = []
        for block in self.blocks:
            h, loss = block(h, self.region)
            losses.append(loss)
        out = self.head(h.view(B, C, -1))  # (B, C, H * k)
        out = denormalize(channels_last(split_points(out, self.n_outputs)), stats)
        if not self.training:
            return out
        terms = [loss for loss in losses if loss is not None]
        balance = sum(terms) / len(losses) if terms else out.new_zeros(())
        return out, {"router_balance": self.aux_loss_coef * balance}
