"""scripts.tune: search spaces, a 2-worker Optuna study on a shared journal file with pruning, DDP trials."""
import pytest

from scripts import tune


def test_a_space_is_ranges_or_choices_typed_as_their_flags_and_models_declare_defaults():
    space = tune.parse_space(["learning_rate=1e-4:1e-2:log", "d_model=64,128", "e_layers=1:3", "dropout=0:0.5"])
    assert space == {"learning_rate": (1e-4, 1e-2, True, None), "d_model": (None, None, False, (64, 128)),
                     "e_layers": (1, 3, False, None), "dropout": (0.0, 0.5, False, None)}
    for bad, message in (("nope=1:2", "no flag --nope"), ("d_model", "NAME=LOW:HIGH"),
                         ("d_model=1:2:lin", "LOW:HIGH:log"), ("model=a:b", "numeric flag")):
        with pytest.raises(ValueError, match=message):
            tune.parse_space([bad])
    assert set(tune.model_space("dlinear")) == {"learning_rate"}  # a linear model declares no range
    assert {"learning_rate", "d_model", "e_layers", "dropout"} <= set(tune.model_space("patchtst"))


def test_choices_that_are_lists_are_separated_by_bars_and_a_searched_seed_is_the_final_runs_own():
    space = tune.parse_space(["n_freq_downsample=168,24,1|24,12,1", "seed=1:10"])
    assert space == {"n_freq_downsample": (None, None, False, ("168,24,1", "24,12,1")), "seed": (1, 10, False, None)}
    with pytest.raises(ValueError, match="not a value of --seed"):
        tune.parse_space(["seed=1|x"])
    with pytest.raises(ValueError, match="--final_seeds: the seed is searched"):
        tune.main(["--trials", "1", "--space", "seed=1:10", "--final_seeds", "1", "--model", "dlinear",
                   "--nonautoregressive"])
