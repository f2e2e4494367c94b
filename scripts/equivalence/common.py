"""What the offline equivalence scripts share: their options and one-line errors, and the comparison of the official
generate's forecasts with ours. They run in environments of their own, beside the official code's old transformers,
with this repository on PYTHONPATH."""
import argparse
import importlib
import os
import sys
import types


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def ints(text: str) -> list:
    try:
        found = [int(n) for n in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not found or min(found) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return found


def hugging_face_modeling(folder: str, files: tuple, modeling: str):
    """The publisher's modeling module `modeling` (e.g. "modeling_timer") of a checkpoint's Hugging Face folder, or of
    its copy in the sktime wheel (sktime/libs/<model>/, whose imports go through sktime.utils.dependencies: a stand-in
    is put in its place where sktime is not installed), imported from `folder` as a package of its own (its relative
    imports); one line where the folder lacks one of `files` or the code does not import here."""
    absent = [name for name in files if not os.path.isfile(os.path.join(folder, name))]
    if absent:
        fail(f"--official {folder}: expected the publisher's {', '.join(files)}; missing {', '.join(absent)}")
    with open(os.path.join(folder, f"{modeling}.py")) as f:
        through_sktime = "from sktime" in f.read()
    if through_sktime:
        try:
            importlib.import_module("sktime.utils.dependencies")
        except ImportError:
            _stand_in_for_sktime()
    name = f"{modeling}_official"
    package = types.ModuleType(name)
    package.__path__ = [folder]
    sys.modules[name] = package
    try:
        return importlib.import_module(f"{name}.{modeling}")
    except Exception as e:  # noqa: BLE001 - one line naming why, whatever the publisher's code raised
        fail(f"--official {folder}: its {modeling}.py does not import here: {type(e).__name__}: {e} "
             "(it needs transformers 4.40.1, safetensors and torch)")


def _stand_in_for_sktime() -> None:
    """sktime.utils.dependencies._safe_import: the object at a dotted path (module, or module attribute)."""
    def safe_import(path: str):
        try:
            return importlib.import_module(path)
        except ImportError:
            module, _, name = path.rpartition(".")
            return getattr(importlib.import_module(module), name)

    for name in ("sktime", "sktime.utils", "sktime.utils.dependencies"):
        sys.modules[name] = types.ModuleType(name)
    sys.modules["sktime.utils.dependencies"]._safe_import = safe_import


def parser(description: str, official: str, horizons: list, seq_lens: list, series: int,
           tolerance: float) -> argparse.ArgumentParser:
    """The options every script takes, with its defaults; errors in one line, not the usage."""
    found = argparse.ArgumentParser(description=description)
    found.add_argument("--official", required=True, help=official)
    found.add_argument("--horizons", type=ints, default=horizons, help="max_new_tokens compared")
    found.add_argument("--seq_lens", type=ints, default=seq_lens, help="context lengths compared")
    found.add_argument("--series", type=int, default=series, help="series per batch")
    found.add_argument("--tolerance", type=float, default=tolerance,
                       help="largest difference accepted, relative to the forecast's largest |value|")
    found.error = fail
    return found


def check(args) -> None:
    if args.series < 1 or args.tolerance < 0:
        fail("--series must be at least 1 and --tolerance at least 0")
    if not os.path.isdir(args.official):
        fail(f"--official {args.official}: no such folder")


class Comparison:
    """Each (context length, horizon)'s largest absolute and relative difference, printed as it comes; the verdict."""

    def __init__(self):
        self.worst = 0.0

    def generate(self, official, seqs, horizon: int):
        """The official generate(seqs, max_new_tokens=horizon)'s last horizon points (on a copy of seqs: it may change
        its input in place); one line where it fails (another transformers)."""
        import transformers
        try:
            return official.generate(seqs.clone(), max_new_tokens=horizon)[:, -horizon:]
        except Exception as e:  # noqa: BLE001 - the official code on another transformers: one line
            fail(f"the official generate failed under transformers {transformers.__version__}: {type(e).__name__}: "
                 f"{e} (it runs under 4.40.1)")

    def add(self, seq_len: int, horizon: int, got, expected, note: str = "") -> None:
        if got.shape != expected.shape:
            print(f"seq_len {seq_len:4d} horizon {horizon:4d}: shapes differ, ours {tuple(got.shape)}, generate's "
                  f"{tuple(expected.shape)}")
            self.worst = float("inf")
            return
        diff, scale = (got - expected).abs().max().item(), expected.abs().max().item()
        self.worst = max(self.worst, diff / scale)
        print(f"seq_len {seq_len:4d} horizon {horizon:4d}{note}: max abs diff {diff:.3e}, max rel diff "
              f"{diff / scale:.3e} (of the forecast's largest |value| {scale:.3g})")

    def verdict(self, tolerance: float) -> int:
        equal = self.worst <= tolerance
        print(f"{'equal' if equal else 'DIFFERENT'} within relative {tolerance:g}: largest {self.worst:.3e}")
        return 0 if equal else 1
