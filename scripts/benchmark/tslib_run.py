"""Time-Series-Library's run.py, run from its checkout (the working directory) with its arguments:

    python /path/to/scripts/benchmark/tslib_run.py --task_name long_term_forecast --model DLinear ...

TSLib imports, at the top of the modules every run loads, packages that only other tasks and models call: sktime
(the UEA classification loader), datasets and patool (downloads), reformer_pytorch (Reformer's attention). Where one
is not installed (a GPU machine that cannot reach a package index) it is stood in for by a module whose every name
raises when used, so that the long-term-forecasting loop, its datasets and models run as TSLib wrote them; a run that
reaches a stood-in name fails with its name. Installed packages are used as they are.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import runpy
import sys
import types

CALLED_ELSEWHERE = ("sktime", "datasets", "patoolib", "reformer_pytorch")


class _Missing:
    def __init__(self, name: str):
        self.name = name

    def __call__(self, *args, **kwargs):
        raise ImportError(f"{self.name}: not installed (stood in for by scripts/benchmark/tslib_run.py)")

    def __getattr__(self, attribute: str):
        return _Missing(f"{self.name}.{attribute}")


class _StandIn(types.ModuleType):
    def __getattr__(self, attribute: str):
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _Missing(f"{self.__name__}.{attribute}")


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: set):
        self.roots = roots

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StandIn(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def main() -> None:
    missing = {root for root in CALLED_ELSEWHERE if importlib.util.find_spec(root) is None}
    if missing:
        print(f"tslib_run: standing in for {', '.join(sorted(missing))} (not installed)", file=sys.stderr)
        sys.meta_path.append(_StandInFinder(missing))
    sys.path.insert(0, os.getcwd())
    sys.argv = ["run.py", *sys.argv[1:]]
    runpy.run_path("run.py", run_name="__main__")


if __name__ == "__main__":
    main()
