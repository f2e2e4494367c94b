"""The worked examples of docs/extending.md, each added as one file to a copy of the code and run end to end."""
import csv
import json
import math
import os
import re
import sys

import pytest

from tests.conftest import REPO, run_cli, run_process


def _examples() -> dict:
    """path -> code of every example block (its first line names the file)."""
    text = open(os.path.join(REPO, "docs", "extending.md")).read()
    blocks = re.findall(r"```python\n# (\S+)\n(.*?)```", text, re.S)
    return {path: code for path, code in blocks}


def test_the_documented_model_metric_loss_schedule_and_dataset_each_extend_the_code_with_one_file(
        repo_copy, tiny_args, tiny_csv, tmp_path):
    examples = _examples()
    assert sorted(examples) == ["data_provider/datasets/sensors.py", "data_provider/protocols/halves.py",
                                "models/my_linear.py", "utils/losses/log_cosh.py", "utils/metrics/maape.py",
                                "utils/schedules/step_decay.py"]
    for path, code in examples.items():
        assert not (repo_copy / path).exists()
        (repo_copy / path).write_text(code)
    data = tmp_path / "plant"
    data.mkdir()
    (data / "sensors.csv").write_text(tiny_csv.read_text().replace(",OT\n", ",load\n", 1))
    flags = tiny_args[tiny_args.index("--seq_len"):] + ["--data", "Sensors", "--root_path", str(data)]
    proc = run_cli(flags + ["--model", "my_linear", "--nonautoregressive", "--use_norm", "--lradj", "step_decay",
                            "--loss", "log_cosh", "--train_epochs", "4", "--patience", "4"], tmp_path, repo=repo_copy)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (metrics_file,) = (tmp_path / "results").glob("*_my_linear_Sensors_M_*/tp16/metrics.json")
    metrics = json.loads(metrics_file.read_text())
    assert metrics["model"] == "my_linear" and metrics["config"]["model"] == {"model": "my_linear", "use_norm": True}
    assert metrics["config"]["training"]["loss"] == "log_cosh"
    assert metrics["config"]["data"]["target"] == "load" and metrics["config"]["data"]["file"] == "sensors.csv"
    assert metrics["n_test_windows"] == int(602 * 0.1) - 16 + 1, "the last 10% of 602 rows, each forecast once"
    assert 0 < metrics["maape"] < math.pi / 2 and metrics["mse"] < 2
    assert 0 < metrics["maape_original"] < math.pi / 2 and metrics["maape_original"] != metrics["maape"], \
        "computed again"
    with open(tmp_path / "results" / "results.csv") as f:
        header = next(csv.reader(f))
    assert header[header.index("mspe") + 1] == "maape", "new metrics follow the papers' five"
    assert re.search(r"mspe [0-9.]+ \| maape [0-9.]+", proc.stderr)
    history = list(csv.DictReader(open(metrics_file.parent.parent / "history.csv")))
    assert [float(h["lr"]) for h in history] == pytest.approx([1e-4, 1e-4, 1e-4, 1e-5])
    proc = run_cli(flags + ["--model", "my_linear", "--nonautoregressive", "--train_epochs", "1", "--protocol",
                            "halves", "--test_drop_last"], tmp_path, repo=repo_copy)
    assert proc.returncode == 2 and proc.stderr.strip().endswith(
        "--test_drop_last: the halves protocol scores every test window"), proc.stderr[-3000:]
    proc = run_cli(flags + ["--model", "my_linear", "--nonautoregressive", "--train_epochs", "1", "--protocol",
                            "halves"], tmp_path, repo=repo_copy)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (halves,) = [m for m in (json.loads(p.read_text()) for p in (tmp_path / "results").glob("*/tp16/metrics.json"))
                 if m["config"]["task"].get("protocol") == "halves"]
    assert halves["n_test_windows"] == 602 - 3 * 602 // 4 - 16 + 1, "the last quarter of 602 rows"


def test_a_model_added_as_the_readme_says_keeps_the_suite_green(repo_copy, tmp_path):
    """A plain Config field (no hparam) is a flag too; the tests of the shipped models' tables do not ask the new
    model for a README row, scripts or paper numbers; the contract test runs on it."""
    code = _examples()["models/my_linear.py"].replace("        use_norm: bool = use_norm()",
                                                       "        use_norm: bool = use_norm()\n        scale: float = 1.0")
    (repo_copy / "models" / "my_linear.py").write_text(code)
    suites = ["tests/unit/test_docs.py", "tests/unit/test_reproduce.py", "tests/unit/test_models.py",
              "tests/integration/test_models.py"]
    proc = run_process([sys.executable, "-m", "pytest", "-q", *suites,
                        "-k", "my_linear or models_table or scripts_sentence or reference_table"],
                       300, {**os.environ, "OMP_NUM_THREADS": "1"}, repo_copy)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert re.search(r"\b(\d+) passed", proc.stdout) and int(re.search(r"(\d+) passed", proc.stdout)[1]) >= 6
    help_text = run_process([sys.executable, "run.py", "--help"], 120, {**os.environ}, repo_copy).stdout
    assert "--scale SCALE" in help_text and "a plain Config field of models/my_linear.py" in " ".join(help_text.split())
