"""SOFTS's STAR pooling against the paper's definition: the softmax-weighted core in eval, drawing nothing; in
training one series' proposal per window and core feature, drawn from torch's generator with the softmax's
probabilities."""
import torch
import torch.nn.functional as F

from models.softs import STAR


def test_eval_pools_the_softmax_weighted_core_and_draws_nothing():
    torch.manual_seed(0)
    star, x = STAR(8, 4).eval(), torch.randn(3, 5, 8)
    proposals = star.propose(x)
    core = (F.softmax(proposals, dim=1) * proposals).sum(1, keepdim=True)
    expected = star.fuse(torch.cat([x, core.expand(-1, 5, -1)], dim=-1))
    state = torch.get_rng_state()
    with torch.no_grad():
        torch.testing.assert_close(star(x), expected)
    assert torch.equal(torch.get_rng_state(), state)


def test_training_draws_one_series_per_core_feature_from_torchs_generator_with_the_softmax_probabilities():
    torch.manual_seed(0)
    star = STAR(4, 3).train()
    x = torch.randn(1, 4, 4).expand(4000, -1, -1)  # one window, drawn 4000 times
    with torch.no_grad():
        proposals = star.propose(x[:1])[0]  # (series, core)
        fuse_input = []
        star.fuse.register_forward_hook(lambda module, args, out: fuse_input.append(args[0]))
        torch.manual_seed(1)
        first = star(x)
        torch.manual_seed(1)
        assert torch.equal(star(x), first)
    core = fuse_input[0][:, 0, 4:]  # (draws, core): the core every series of the window is fused with
    drawn = (core[:, None, :] == proposals[None]).float()  # which series' proposal each feature took
    assert torch.all(drawn.sum(1) >= 1)  # always one series' own value, never a mixture
    frequency, probability = drawn.mean(0), F.softmax(proposals, dim=0)
    assert (frequency - probability).abs().max() < 0.03  # 4000 draws: a standard error below 0.008
