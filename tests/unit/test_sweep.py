"""scripts.sweep: a grid of cells in long-lived workers equals the same runs one by one; resumable; failures."""
import os

import pytest

from scripts import sweep
from utils.errors import ConfigError


def test_an_axis_is_several_values_or_a_comma_list_and_list_valued_flags_stay_whole():
    cells = sweep.expand(["--model", "a,b", "--nonautoregressive", "--seed", "1", "2", "3", "--horizons", "1,8"],
                         whole={"--horizons"})
    assert len(cells) == 6 and cells[0] == ["--model", "a", "--nonautoregressive", "--seed", "1", "--horizons", "1,8"]
    assert [c[1] for c in cells] == ["a"] * 3 + ["b"] * 3 and [c[4] for c in cells[:3]] == ["1", "2", "3"]
    assert "--horizons" in sweep.list_valued_flags()  # Time-MoE's comma-list hyper-parameter
    with pytest.raises(ValueError, match="comes before any flag"):
        sweep.expand(["dlinear", "--seed", "1"])
    assert sweep.label(["--model", "x", "--data", "ETTh1", "--output_token_len", "96", "--seed", "3", "--seed", "4"]) \
        == "x_ETTh1_96_s4"  # the last value given wins, as in run.py


def test_the_time_to_table_benchmark_runs_tslib_at_the_paper_setting_once_per_horizon(tmp_path):
    from scripts.benchmark.time_to_table import tslib_commands
    (tmp_path / "ETT-small").mkdir()
    (tmp_path / "ETT-small" / "ETTh1.csv").write_text("date,HUFL,HULL,MUFL,MULL,LUFL,LULL,OT\n")
    commands = tslib_commands("dlinear", "ETTh1", 3, str(tmp_path))
    assert [c[c.index("--model=DLinear") + 1:][0] for c in commands] == ["--data=ETTh1"] * 4
    assert [next(f for f in c if f.startswith("--pred_len=")) for c in commands] == \
        [f"--pred_len={h}" for h in (96, 192, 336, 720)]
    for flag in ("--seq_len=336", "--batch_size=32", "--learning_rate=0.005", "--train_epochs=10", "--patience=3",
                 "--lradj=type1", "--itr=3", "--enc_in=7", "--c_out=7", "--no_use_gpu",
                 f"--root_path={tmp_path}/ETT-small/"):
        assert all(flag in c for c in commands), flag
    with pytest.raises(ConfigError, match="no TSLib translation of patchtst"):
        tslib_commands("patchtst", "ETTh1", 3, str(tmp_path))


def test_workers_are_one_per_core_without_a_gpu_and_nproc_gpus_each_with_them():
    import torch
    cores = os.cpu_count()
    if not torch.cuda.is_available():
        assert sweep.plan_workers(1, None) == (cores, 1, None)
    workers, threads, gpus = sweep.plan_workers(2, ["0", "1", "2", "3", "4"])
    assert (workers, gpus) == (2, [["0", "1"], ["2", "3"]]) and threads == max(cores // 5, 1)
    with pytest.raises(ConfigError, match="1 GPUs cannot run cells of --nproc 2"):
        sweep.plan_workers(2, ["0"])


def test_workers_beyond_the_gpus_share_them_in_turn():
    gpus = [["0", "1"], ["2", "3"]]
    assert [sweep.worker_gpus(gpus, w) for w in range(5)] == [gpus[0], gpus[1], gpus[0], gpus[1], gpus[0]]
    assert sweep.worker_gpus(None, 3) is None


def test_paper_cells_are_the_scripts_commands_with_the_data_root():
    from scripts import make_scripts
    cells, notes = sweep.paper_cells(["dlinear", "cyclenet"], ["ETTh1", "Exchange"], "/data")
    dlinear_etth1 = [c for c in cells if c[1] == "dlinear" and "ETTh1" in c]
    assert len(dlinear_etth1) == 4 and dlinear_etth1[0][:8] == [
        "--model", "dlinear", "--model_id", "ETTh1", "--data", "ETTh1", "--root_path", "/data/ETT-small/"]
    assert dlinear_etth1[0][8:] == make_scripts.run_flags("dlinear", "ETTh1", 96)[8:]
    assert notes == ["cyclenet has no paper setting on Exchange"]
    only, _ = sweep.paper_cells(["dlinear"], ["ILI"], "/data", horizons=[24, 96])
    assert [c[c.index("--output_token_len") + 1] for c in only] == ["24"]  # ILI has no horizon 96
    m4, notes = sweep.paper_cells(["nbeats", "dlinear", "patchtst"], ["M4-Hourly", "ETTh1"], "/data")
    hourly = [[*flags[:9], "/data/m4/", *flags[10:]] for flags in
              (make_scripts.short_term_flags(model, "Hourly") for model in ("nbeats", "dlinear"))]
    assert m4[:6] == [hourly[0], hourly[1], *dlinear_etth1] and {c[1] for c in m4[6:]} == {"patchtst"}
    assert notes == ["nbeats has no paper setting on ETTh1", "patchtst has no short-term (M4) paper setting"]
    assert len(sweep.paper_cells(["nbeats"], ["M4"], "/data")[0]) == 6
    with pytest.raises(ConfigError, match="the M4 subsets are Yearly"):
        sweep.paper_cells(["nbeats"], ["M4-Minutely"], "/data")
