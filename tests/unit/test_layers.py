"""The project's layers (docs/layout.md): a package imports only the packages beneath it, so no import runs from a
lower layer to a higher one and the packages import each other in no loop. Read from every import statement of the
code, those inside functions too; a package is judged whole, whatever files it gains. tests/ stand outside."""
import ast
import glob
import os

import pytest

from tests.conftest import REPO

# the training stack, ground floor first: each package may import those before it
STACK = ["models", "utils", "data_provider", "exp", "run", "scripts"]
BENEATH = {name: set(STACK[:i]) for i, name in enumerate(STACK)}
# analysis reads finished runs with the utilities alone, and only scripts call it: no run needs it
BENEATH["analysis"] = {"models", "utils"}
BENEATH["scripts"].add("analysis")


def _packages() -> dict:
    """Each top-level package (a folder with __init__.py, or a module beside them) and its source files."""
    found = {os.path.basename(path)[:-3]: [path] for path in glob.glob(os.path.join(REPO, "*.py"))}
    for init in glob.glob(os.path.join(REPO, "*", "__init__.py")):
        folder = os.path.dirname(init)
        found[os.path.basename(folder)] = glob.glob(os.path.join(folder, "**", "*.py"), recursive=True)
    del found["tests"]
    return found


@pytest.fixture(scope="module")
def imports() -> dict:
    """package -> {package it imports: the first 'file:line' that does}; a relative import stays in its package."""
    packages = _packages()
    found = {name: {} for name in packages}
    for name, paths in packages.items():
        for path in sorted(paths):
            for node in ast.walk(ast.parse(open(path).read())):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    modules = [node.module]
                else:
                    continue
                for top in {m.split(".")[0] for m in modules} & set(packages) - {name}:
                    found[name].setdefault(top, f"{os.path.relpath(path, REPO)}:{node.lineno}")
    return found


def test_every_package_has_a_layer(imports):
    assert set(imports) == set(BENEATH), f"{sorted(set(imports) ^ set(BENEATH))}: place a new package in " \
                                         "BENEATH and docs/layout.md, drop a gone one"


def test_no_package_imports_one_above_it(imports):
    upward = [f"{where} imports {top}" for name, tops in imports.items() for top, where in sorted(tops.items())
              if top not in BENEATH[name]]
    assert not upward, upward


def test_the_packages_import_each_other_in_no_loop(imports):
    def loop_from(path: list):
        for top in sorted(imports[path[-1]]):
            if top in path:
                return path[path.index(top):] + [top]
            if (found := loop_from(path + [top])) is not None:
                return found
        return None
    for name in imports:
        assert (loop := loop_from([name])) is None, " -> ".join(loop)


def test_no_function_of_the_run_stack_is_longer_than_a_screen():
    """exp/ and run.py read top-down: each function at most 60 lines (the training loop, Trainer.train, far less)."""
    paths = glob.glob(os.path.join(REPO, "exp", "*.py")) + [os.path.join(REPO, "run.py")]
    long = [f"{os.path.relpath(path, REPO)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in paths for node in ast.walk(ast.parse(open(path).read()))
            if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > 60]
    assert not long, long
