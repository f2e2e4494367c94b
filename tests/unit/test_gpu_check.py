"""The GPU check's pure parts: TSLib's command, its epoch time, and the goals read off a table of rows."""
import pytest
import torch

from scripts.benchmark import gpu_check, throughput


def test_tslibs_command_trains_two_epochs_with_our_throughput_settings():
    cmd = gpu_check.tslib_command("patchtst", "/data", torch.device("cuda"), "python")
    flags = dict(zip(cmd[3::2], cmd[4::2]))
    assert cmd[:3] == ["python", "-u", gpu_check.TSLIB_RUN] and cmd[-2:] == ["--gpu", "0"]
    assert flags["--model"] == "PatchTST" and flags["--root_path"] == "/data/ETT-small/"
    assert (flags["--seq_len"], flags["--pred_len"], flags["--batch_size"], flags["--train_epochs"]) == \
        ("96", "96", "32", "2"), "two epochs: the second's time, after the first has started CUDA and the loader"
    assert (flags["--d_model"], flags["--d_ff"], flags["--e_layers"], flags["--n_heads"], flags["--dropout"]) == \
        ("512", "2048", "1", "2", "0.1")
    assert "--use_norm" not in cmd, "a flag of ours without a value is not passed as one of TSLib's"
    assert gpu_check.tslib_command("dlinear", "/data", torch.device("cpu"))[-1] == "--no_use_gpu"


def test_tslibs_epoch_time_is_read_from_its_output_and_its_absence_is_an_error():
    output = ("\titers: 100, epoch: 1 | loss: 0.4\n\tspeed: 0.01s/iter\nEpoch: 1 cost time: 7.5\nEpoch: 1, Steps: 264\n"
              "Epoch: 2 cost time: 3.25\n")
    assert gpu_check.tslib_epoch_seconds(output) == 3.25
    with pytest.raises(RuntimeError, match="ModuleNotFoundError: No module named 'reformer_pytorch'"):
        gpu_check.tslib_epoch_seconds("Traceback ...\nModuleNotFoundError: No module named 'reformer_pytorch'")


def _rows(fp16_status="ok", compiled_ms=9.0, over_limit=1.05, versus=2.5, offload_mb=40.0):
    models = [{"model": "dlinear", "precision": "fp32", "step_ms": 10.0, "status": "ok"},
              {"model": "dlinear", "precision": "fp16", "step_ms": 8.0, "status": fp16_status},
              {"model": "dlinear", "precision": "bf16", "step_ms": 8.0, "status": "ok"},
              {"model": "dlinear", "precision": "compile", "step_ms": compiled_ms, "status": "ok"}]
    throughput = [{"model": "dlinear", "ours_over_limit": over_limit, "ours_over_tslib": versus, "status": "ok"},
                  {"model": "timer_xl", "ours_over_limit": 1.0, "status": "ok"}]
    fsdp = [{"configuration": "plain", "state_on_gpu_mb": 1200.0, "status": "ok"},
            {"configuration": "fsdp_offload", "state_on_gpu_mb": offload_mb, "status": "ok"}]
    return {"models": models, "throughput": throughput, "fsdp": fsdp}


def test_the_goals_are_met_only_when_every_row_meets_them():
    assert gpu_check.goals(_rows()) == {"amp_every_model_finite": "met", "compile_never_slower": "met",
                                        "within_10pct_of_limit": "met", "2x_tslib_dlinear_patchtst": "met",
                                        "offload_state_on_gpu_le_20pct": "met"}
    assert gpu_check.goals(_rows(fp16_status="non-finite"))["amp_every_model_finite"] == "NOT met"
    assert gpu_check.goals(_rows(compiled_ms=10.5))["compile_never_slower"] == "NOT met"
    assert gpu_check.goals(_rows(over_limit=1.11))["within_10pct_of_limit"] == "NOT met"
    assert gpu_check.goals(_rows(versus=1.9))["2x_tslib_dlinear_patchtst"] == "NOT met"
    assert gpu_check.goals(_rows(offload_mb=300.0))["offload_state_on_gpu_le_20pct"] == "NOT met"
    assert gpu_check.goals({"models": [], "throughput": [], "fsdp": []}) == {}, "nothing measured, nothing claimed"
    assert "- compile_never_slower: NOT met" in gpu_check.markdown(
        {"device": "GPU", "torch": "2.13", "cuda": "13.0", "commit": "abc", "date": "today"}, _rows(compiled_ms=11.0))


def test_a_goal_met_by_the_rows_so_far_is_incomplete_while_planned_rows_are_missing():
    """A run cut off by a lease's time limit (the first H200 run measured 11 of 45 models) claims nothing for the
    models it never reached."""
    planned = {"models": ["dlinear", "patchtst", "tirex"], "compile_models": ["dlinear", "patchtst"],
               "throughput": ["dlinear", "autoformer"]}
    rows = _rows()
    rows["models"].append({"model": "tirex", "precision": "fp16", "status": "skipped: needs the package tirex-ts"})
    found = gpu_check.goals(rows, planned)
    assert found["amp_every_model_finite"] == "incomplete: 1 of 3 models not measured (patchtst)"
    assert found["compile_never_slower"] == "incomplete: 1 of 2 compiled models not measured (patchtst)"
    assert found["within_10pct_of_limit"] == "incomplete: 1 of 2 models not measured (autoformer)"
    rows["models"].append({"model": "patchtst", "precision": "fp16", "status": "ok"})
    assert gpu_check.goals(rows, planned)["amp_every_model_finite"].startswith("incomplete"), "bf16 is missing"
    rows["models"] += [{"model": "patchtst", "precision": "bf16", "status": "ok"},
                       {"model": "patchtst", "precision": "compile", "step_ms": 1.0, "status": "ok"},
                       {"model": "patchtst", "precision": "fp32", "step_ms": 2.0, "status": "ok"}]
    found = gpu_check.goals(rows, planned)
    assert found["amp_every_model_finite"] == found["compile_never_slower"] == "met"
    rows["models"][1]["status"] = "non-finite"
    assert gpu_check.goals(rows, planned)["amp_every_model_finite"] == "NOT met", "a failure outranks a gap"
    rows["models"][1]["status"] = "ok"
    fp16_only = {**planned, "precisions": ["fp32", "fp16"]}
    rows["models"] = [r for r in rows["models"] if r["precision"] != "bf16"]
    assert gpu_check.goals(rows, fp16_only)["amp_every_model_finite"] == "met", "only the precisions planned"


def test_a_report_appended_by_later_code_keeps_each_rows_commit_and_the_union_of_the_plans(tmp_path):
    machine = {"device": "GPU", "device_type": "cuda", "torch": "2.11", "cuda": "13.0", "commit": "old", "date": "d"}
    first = gpu_check.Report(str(tmp_path), machine, {"models": ["dlinear"], "throughput": ["dlinear"]})
    first.add("models", {"model": "dlinear", "precision": "fp32", "step_ms": 1.0, "status": "ok"})
    later = gpu_check.Report(str(tmp_path), {**machine, "commit": "new"}, {"models": ["dlinear", "nlinear"]},
                             append=True)
    later.add("models", {"model": "nlinear", "precision": "fp32", "step_ms": 1.0, "status": "ok"})
    assert [r["commit"] for r in later.rows["models"]] == ["old", "new"]
    assert later.planned == {"models": ["dlinear", "nlinear"], "throughput": ["dlinear"]}
    table = (tmp_path / "gpu_check.md").read_text()
    assert "commits old (1 rows), new (1 rows)" in table and "| dlinear | fp32 | 1 |" in table


def test_a_missing_package_is_a_skip_and_a_failure_keeps_its_first_line():
    from utils.errors import ConfigError
    assert gpu_check.failure(ConfigError("model tirex: needs the package tirex-ts: pip install -r "
                                         "requirements-foundation.txt")) == "skipped: needs the package tirex-ts"
    assert gpu_check.failure(RuntimeError("CUDA error: an illegal memory access\nmore")) == \
        "RuntimeError: CUDA error: an illegal memory access"
    assert gpu_check.failed("RuntimeError: x") and not gpu_check.failed("ok") and not gpu_check.failed("skipped: y")


def test_the_compiled_then_the_riskiest_models_run_first():
    order = gpu_check.model_order(["autoformer", "deepar", "dlinear", "itransformer", "tirex", "patchtst"],
                                  ["dlinear", "patchtst"])
    assert order == ["dlinear", "patchtst", "deepar", "tirex", "autoformer", "itransformer"]


def test_a_process_that_outlives_its_time_is_stopped_with_its_children(monkeypatch):
    import sys
    monkeypatch.setattr(gpu_check, "SUBPROCESS_SECONDS", 1)
    child = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " \
            "print('started', flush=True); time.sleep(60)"
    with pytest.raises(RuntimeError, match="stopped after 1 s"):
        gpu_check.bounded([sys.executable, "-c", child], ".")
    assert gpu_check.bounded([sys.executable, "-c", "print('done')"], ".") == (0, "done\n")


def test_after_a_broken_cuda_context_the_rest_goes_on_in_a_new_process_appending_to_the_report(monkeypatch,
                                                                                              tmp_path):
    """Only CUDA breaks a process's context; the command that carries on is checked here: the script's own parser
    takes it, and it runs the models left, appending to the same report."""
    started = []
    monkeypatch.setattr(gpu_check.subprocess, "run", lambda cmd, cwd: started.append(cmd))
    a = gpu_check.parse(["--out", str(tmp_path), "--device", "cpu", "--models", "tirex,dlinear,timer_xl",
                         "--compile_models", "dlinear", "--steps", "3", "--tiny"])
    report = gpu_check.Report(str(tmp_path), {"commit": "abc"}, {})
    gpu_check.continue_elsewhere(report, a, ["dlinear", "timer_xl"])
    (cmd,) = started
    assert cmd[1:3] == ["-m", "scripts.benchmark.gpu_check"]
    again = gpu_check.parse(cmd[3:])
    assert (again.parts, again.models, again.compile_models, again.steps, again.commit, again.append, again.tiny) == \
        (["models"], ["dlinear", "timer_xl"], ["dlinear"], 3, "abc", True, True)


def test_each_model_trains_at_its_etth1_scripts_size_and_one_without_a_script_at_its_defaults(tmp_path):
    a = gpu_check.parse(["--out", str(tmp_path), "--device", "cpu"])
    flags = gpu_check.model_run_flags("timesnet", a, "/data", str(tmp_path))
    sizes = dict(zip(flags[flags.index("--d_model"):][::2], flags[flags.index("--d_model"):][1::2]))
    assert (sizes["--d_model"], sizes["--d_ff"], sizes["--top_k"]) == ("16", "32", "5"), "TSLib's ETTh1 script"
    assert flags[flags.index("--seq_len") + 1] == "192", "the check's own lengths, not the script's"
    assert "--learning_rate" not in flags and "--batch_size" in flags, "the script's sizes, not its training"
    assert gpu_check.script_sizes("pdf")["periods"] == "24" and gpu_check.script_sizes("timesfm") == {}
    tiny = gpu_check.model_run_flags("timesnet", gpu_check.parse(["--out", str(tmp_path), "--device", "cpu",
                                                                  "--tiny"]), "/data", str(tmp_path))
    assert tiny[tiny.index("--top_k") + 1] == "2", "--tiny: the contract test's sizes"


def test_the_host_time_our_loop_adds_is_ours_minus_the_limit_by_operation(monkeypatch):
    from types import SimpleNamespace
    small, large = torch.randn(16, 16), torch.randn(512, 512)

    def limit(exp, steps):  # the work both do
        for _ in range(steps + throughput.WARMUP_STEPS):
            small @ small

    def ours(exp, steps):
        for _ in range(steps + throughput.WARMUP_STEPS):
            small @ small
            large.exp()

    monkeypatch.setattr(throughput, "ours", ours)
    monkeypatch.setattr(throughput, "model_only", limit)
    extra = gpu_check.host_extra_us(SimpleNamespace(env=SimpleNamespace(device=torch.device("cpu"))), 5)
    assert next(iter(extra)) == "aten::exp" and extra["aten::exp"] > 0
    assert len(extra) <= gpu_check.HOST_EXTRA_TOP and all(us > 0 for us in extra.values())
