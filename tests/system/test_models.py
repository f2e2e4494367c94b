"""The contract every model in the registry passes; a model dropped into models/ is tested here unedited."""
from tests.conftest import run_cli


def test_a_broken_model_file_only_fails_runs_that_choose_it(repo_copy, tiny_args, tmp_path):
    (repo_copy / "models" / "broken.py").write_text("import not_a_module_anywhere\n")
    (repo_copy / "models" / "incomplete.py").write_text("from torch import nn\n\nclass Model(nn.Module):\n    pass\n")
    ok = run_cli(tiny_args + ["--model", "dlinear", "--nonautoregressive", "--train_epochs", "1"], tmp_path,
                 repo=repo_copy)
    assert ok.returncode == 0, ok.stderr[-2000:]
    incomplete = run_cli(tiny_args + ["--model", "incomplete"], tmp_path, repo=repo_copy)
    assert incomplete.returncode == 2 and incomplete.stderr.strip().splitlines() == [
        "error: models/incomplete.py: Model.capabilities must be a models.base.Capabilities"]
