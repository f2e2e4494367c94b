"""Paper reproduction tooling: the report against published numbers, plots, the drop-last emulation."""
import csv
import os

import pytest

from analysis import report
from exp.config import parse_args
from scripts.make_scripts import MODELS as SHIPPED
from tests.conftest import REPO
from utils.errors import ConfigError
from utils.provenance import machine_kind

REFERENCE_COLUMNS = ["paper", "table", "model", "dataset", "seq_len", "horizon", "mse", "mae", "source", "protocol",
                     "crps", "nmae", "smape", "mase", "owa", "msis", "acd", "checkpoint"]
# the numbers each protocol's rows give; M4's point and interval sheets each give a set
PROTOCOL_METRICS = {"tslib": [("mse", "mae")], "tfb": [("mse", "mae")], "probts": [("crps", "nmae")],
                    "zero_shot": [("mse", "mae")],
                    "m4": [("smape", "mase", "owa"), ("msis", "acd"), ("smape", "mase", "owa", "msis", "acd")]}


def test_shipped_reference_table_names_a_source_for_every_number():
    with open(report.DEFAULT_REFERENCE, newline="") as f:
        every = list(csv.DictReader(f))
    assert list(every[0]) == REFERENCE_COLUMNS
    for r in every:
        given = {k for k in REFERENCE_COLUMNS[6:] if k not in ("source", "protocol", "checkpoint") and r[k]}
        assert bool(r["checkpoint"]) == (r["protocol"] == "zero_shot"), "a zero-shot number names its checkpoint"
        sets = [set(s) for s in PROTOCOL_METRICS[r["protocol"]]]
        assert r["source"].startswith("https://") and given <= sets[-1], r
        assert given in sets or "only" in r["table"], "a source that publishes fewer metrics says so"
        assert all(float(r[k]) > 0 for k in given)
    probts = report.load_reference(report.DEFAULT_REFERENCE, "probts")
    assert probts[("patchtst", "ETTh1", 96, 96)]["crps"] == "0.328"
    rows = [r for r in every if r["protocol"] in ("tslib", "tfb")]  # the long-term protocols
    keys = [(r["model"], r["dataset"], r["seq_len"], r["horizon"]) for r in rows]
    assert len({(*key, r["protocol"]) for key, r in zip(keys, rows)}) == len(keys)
    assert ("dlinear", "ETTh1", "336", "96") in keys and ("patchtst", "ILI", "104", "24") in keys
    # docs/reproducing.md: which models' ETTh1 rows have the paper beside them
    etth1 = {m for m in SHIPPED if {h for mm, d, _, h in keys if (mm, d) == (m, "ETTh1")} ==
             {"96", "192", "336", "720"}}
    # SOFTS publishes averages only; the other papers print no ETTh1 in the tables read here (docs/reproducing.md)
    assert set(SHIPPED) - etth1 == {"ttm", "time_moe", "deepar", "nhits", "softs", "nonstationary_transformer", "koopa",
                                    "film", "micn", "amplifier", "timefilter", "patchmlp", "moderntcn"}
    # a published MSE without MAE (N-HiTS): the gap of the MSE, none of the MAE
    assert report._published(report.load_reference(report.DEFAULT_REFERENCE)[("nhits", "ILI", 120, 24)], "mae") \
        is None


def test_time_per_run_keeps_each_gpus_runs_apart_from_the_cpus():
    timed = [(100.0, 1, "CPU"), (300.0, 2, "CPU"), (20.0, 1, "NVIDIA H200 x1"), (50.0, 3, "NVIDIA H100 x1")]
    assert report._time_per_run(timed) == "233 s; 20 s (NVIDIA H200 x1); 50 s (NVIDIA H100 x1)"
    assert report._time_per_run([]) == "—"
    assert report._time_per_run([(0.32, 3, "CPU"), (0.04, 1, "NVIDIA H200 x1")]) == "0.3 s; 0.04 s (NVIDIA H200 x1)"
    assert [machine_kind(m) for m in ("AMD EPYC, 1 threads, vm", "Intel(R) Xeon(R) Processor, 2 threads",
                                      "NVIDIA H200 x1")] == ["CPU", "CPU", "NVIDIA H200 x1"]


def test_shipped_scripts_are_what_make_scripts_writes():
    """Every scripts/long_term_forecast/*.sh is make_scripts.py's script of its (model, dataset), none stale or
    missing; a dataset with its own source (FEDformer's ILI: the official script) says so in the header."""
    from scripts import make_scripts
    folder = os.path.join(REPO, "scripts", "long_term_forecast")
    expected = {f"{model}_{ds}.sh": make_scripts.script(model, ds) for model in make_scripts.MODELS
                for ds in make_scripts.DATASETS if make_scripts.MODELS[model](ds) is not None}
    shipped = {name: open(os.path.join(folder, name)).read() for name in os.listdir(folder) if name.endswith(".sh")}
    assert shipped == expected
    assert "official FEDformer scripts/run_M.sh" in shipped["fedformer_ILI.sh"].splitlines()[1]
    assert "TSLib's FEDformer_ETTh1.sh" in shipped["fedformer_ETTh1.sh"].splitlines()[1]


def test_shipped_short_term_scripts_are_what_make_scripts_writes_and_resolve_for_every_subset():
    from exp.config import resolve
    from scripts import make_scripts
    folder = os.path.join(REPO, "scripts", "short_term_forecast")
    shipped = {name: open(os.path.join(folder, name)).read() for name in os.listdir(folder) if name.endswith(".sh")}
    assert shipped == {f"{model}_M4.sh": make_scripts.short_term_script(model) for model in make_scripts.SHORT_TERM}
    for model in make_scripts.SHORT_TERM:
        for subset in make_scripts.M4_SUBSETS:
            config = resolve(parse_args(make_scripts.short_term_flags(model, subset)))
            assert config.task == "short_term" and config.seasonal_patterns == subset
    hourly = resolve(parse_args(make_scripts.short_term_flags("nbeats", "Hourly")))
    assert (hourly.seq_len, hourly.train_steps, hourly.batch_size) == (96, 5000, 1024)


# TSLib's scripts/short_term_forecast/<Model>_M4.sh (4e938a1), transcribed from its lines: the flags every line has,
# then each script's own; {d_model} and {d_ff} are TimesNet_M4.sh's per subset, {mixer_d_ff} TimeMixer_M4.sh's
TSLIB_M4_LINE = ("--task_name short_term_forecast --is_training 1 --root_path ./dataset/m4 --data m4 --features M "
                 "--d_layers 1 --factor 3 --enc_in 1 --dec_in 1 --c_out 1 --des Exp --itr 1 --loss SMAPE")
TSLIB_M4_WIDTHS = {"Monthly": (32, 32), "Yearly": (16, 32), "Quarterly": (64, 64), "Daily": (16, 16),
                   "Weekly": (32, 32), "Hourly": (32, 32)}
_PLAIN = "--e_layers 2 --batch_size 16 --learning_rate 0.001 --d_model 512"
_WIDTHS = "--e_layers 2 --batch_size 16 --learning_rate 0.001 --d_model {d_model} --d_ff {d_ff} --top_k 5"
TSLIB_M4 = {
    "dlinear": ("DLinear", _PLAIN), "autoformer": ("Autoformer", _PLAIN), "fedformer": ("FEDformer", _PLAIN),
    "informer": ("Informer", _PLAIN), "itransformer": ("iTransformer", _PLAIN),
    "nonstationary_transformer": ("Nonstationary_Transformer",
                                  _PLAIN + " --p_hidden_dims 256 256 --p_hidden_layers 2"),
    "timesnet": ("TimesNet", _WIDTHS), "crossformer": ("Crossformer", _WIDTHS), "film": ("FiLM", _WIDTHS),
    "micn": ("MICN", _WIDTHS),
    "timemixer": ("TimeMixer", "--e_layers 4 --batch_size 128 --d_model 32 --d_ff {mixer_d_ff} --learning_rate 0.01 "
                               "--train_epochs 50 --patience 20 --down_sampling_layers 1 --down_sampling_method avg "
                               "--down_sampling_window 2"),
}


def _tslib_m4_argv(model: str, subset: str) -> list:
    name, flags = TSLIB_M4[model]
    d_model, d_ff = TSLIB_M4_WIDTHS[subset]
    flags = flags.format(d_model=d_model, d_ff=d_ff, mixer_d_ff={"Quarterly": 64, "Daily": 16}.get(subset, 32))
    return [*TSLIB_M4_LINE.split(), "--seasonal_patterns", subset, "--model_id", f"m4_{subset}", "--model", name,
            *flags.split()]


def test_tslib_sourced_short_term_scripts_run_tslibs_own_lines():
    """Each TSLib-sourced M4 script has, per subset, the identity (but its tag) that TSLib's own line resolves to
    through the dialect: TSLib's label_len = pred_len, its models' fixed choices, its list-valued flags."""
    from data_provider import m4
    from exp.config import resolve
    from exp.identity import run_config
    from scripts import make_scripts

    def config(argv: list, subset: str) -> dict:
        found = run_config(resolve(parse_args(argv)), m4.file_name(subset), None, world_size=1)
        del found["tag"], found["training"]["seed"]
        return found
    assert set(TSLIB_M4) == set(make_scripts.SHORT_TERM) - {"nbeats"}
    assert make_scripts.M4_HORIZONS == {s: m4.SUBSETS[s].horizon for s in make_scripts.M4_SUBSETS}
    for model in TSLIB_M4:
        for subset in make_scripts.M4_SUBSETS:
            ours = config(make_scripts.short_term_flags(model, subset), subset)
            theirs = config(_tslib_m4_argv(model, subset), subset)
            assert theirs == ours, (model, subset)


def test_benchmark_file_names_map_to_paper_dataset_names():
    from data_provider.factory import dataset_name
    assert dataset_name(parse_args(["--data", "custom", "--data_path", "national_illness.csv"])) == "ILI"
    assert dataset_name(parse_args(["--data", "custom", "--data_path", "x/exchange_rate.csv"])) == "Exchange"
    assert dataset_name(parse_args(["--data", "custom", "--data_path", "mine.csv"])) == "mine"
    assert dataset_name(parse_args(["--data", "ETTm2"])) == "ETTm2"


def test_probts_scores_its_test_windows_one_every_96_steps():
    """ProbTS's ETTh1 test: targets from the test split's first row + 96 i, i < ceil((2880 - H) / 96): 29, 28, 27
    and 23 windows; ours forecasts from every row, window j from row j."""
    from scripts.reproduce.probts import probts_windows
    counts = {h: len(probts_windows(2880 - h + 1, h)) for h in (96, 192, 336, 720)}
    assert counts == {96: 29, 192: 28, 336: 27, 720: 23}
    assert probts_windows(2785, 96)[-1] == 96 * 28 <= 2784


def test_probts_without_its_data_is_one_line(tmp_path):
    from scripts.reproduce import probts
    with pytest.raises(ConfigError, match="no ETT-small/ETTh1.csv there"):
        probts.main(["--data_root", str(tmp_path)])


def test_a_paper_setting_that_drops_the_last_test_batch_is_met_only_by_a_run_tested_so():
    """xPatch's official test drops its last incomplete batch of 2048: the setting names that test, and a run of
    every window (or of another global batch) is not at the paper's setting."""
    training = {"batch_size": 2048, "accum_steps": 1, "learning_rate": 0.0005}
    setting = {"model": {"model": "xpatch"}, "task": {}, "training": training, "data": {}, "test": "tp96_droplast2048"}
    run = {"test_pred_len": 96, "global_batch_size": 2048, "effective_lr": 0.0005, "world_size": 1,
           "config": {"model": {"model": "xpatch"}, "task": {}, "training": training, "data": {}}}
    assert report.paper_mismatch({**run, "test": "tp96_droplast2048"}, setting) is None
    assert report.paper_mismatch({**run, "test": "tp96"}, setting) == \
        "test tp96 is not the paper's protocol (tp96_droplast2048)"
    assert "(tp96)" in report.paper_mismatch({**run, "test": "tp96_droplast2048"},
                                             {k: v for k, v in setting.items() if k != "test"})
