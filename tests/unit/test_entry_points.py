"""Every command meets bad input as run.py does: one line on stderr, `error: <message>`, exit code 2, no traceback
(utils/cli.py). The table runs each command's main in this process through cli.run, as its `__main__` does; every
`__main__` is checked to go through cli.run, and a few commands are started as a user starts them."""
import ast
import glob
import os

import pytest

from tests.conftest import REPO


def _main_block(path: str):
    """The `if __name__ == "__main__":` block of a module (None: it has none)."""
    tree = ast.parse(open(path).read())
    return next((node for node in tree.body if isinstance(node, ast.If) and
                 ast.unparse(node.test) == "__name__ == '__main__'"), None)
# every benchmark that takes input: scaling prints its tables and reads no argument; tslib_run hands its arguments to
# Time-Series-Library's run.py, in whose checkout it runs, importing nothing of ours
BENCHMARKS = sorted(f"scripts.benchmark.{os.path.basename(path)[:-3]}"
                    for path in glob.glob(os.path.join(REPO, "scripts", "benchmark", "*.py"))
                    if _main_block(path) and not path.endswith(("scaling.py", "tslib_run.py")))
COMMANDS = ["scripts.sweep", "scripts.tune", "analysis.report", "analysis.compare", "data_provider.corpus",
            "data_provider.synthetic", "scripts.pretrain.zero_shot", *BENCHMARKS]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_leaves_through_cli_run(command):
    block = _main_block(os.path.join(REPO, *command.split(".")) + ".py")
    assert "cli.run(main" in ast.unparse(block), f"{command}: its __main__ must call cli.run(main)"
