"""What the offline equivalence scripts share: their options and one-line errors, and the comparison of the official
generate's forecasts with ours. They run in environments of their own, beside the official code's old transformers,
with this repository on PYTHONPATH."""
import argparse
import importlib.util
import os
import re
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
        return verdict(self.worst, tolerance, relative=True)


def verdict(worst: float, tolerance: float, relative: bool = False, qualifier: str = "",
            largest: str | None = None) -> int:
    """The comparison's last line, 'equal' or 'DIFFERENT' within the tolerance; the script's exit code."""
    equal = worst <= tolerance
    print(f"{'equal' if equal else 'DIFFERENT'} within {'relative ' if relative else ''}{tolerance:g}{qualifier}: "
          f"largest {largest or f'{worst:.3e}'}")
    return 0 if equal else 1


# ---- checkouts laid out as Time-Series-Library's (models/, layers/, utils/, ...): TSLib's and the papers' own ------
CHECKOUT_PACKAGES = ("models", "layers", "utils", "data_provider", "exp")  # top-level names that clash with ours


def checkout_arguments(description: str, repository: str, required: str, extra=(),
                       tolerance: str = "largest absolute difference accepted"):
    """The options of a script that compares one of our models with a checkout's (--official, --series, --tolerance,
    and the optional folders `extra` names: (flag, help)), checked: the checkout must hold `required` (a path in it);
    errors in one line."""
    found = argparse.ArgumentParser(description=description)
    found.add_argument("--official", required=True, help=f"a checkout of {repository}")
    for flag, text in extra:
        found.add_argument(flag, help=text)
    found.add_argument("--series", type=int, default=4, help="windows per batch")
    found.add_argument("--tolerance", type=float, default=1e-5, help=tolerance)
    found.error = fail
    args = found.parse_args()
    if args.series < 1 or args.tolerance < 0:
        fail("--series must be at least 1 and --tolerance at least 0")
    if not os.path.isfile(os.path.join(args.official, required)):
        fail(f"--official {args.official}: expected a checkout of {repository} ({required} not found)")
    return args


def checkout_module(folder: str, path: str, stand_ins: dict | None = None):
    """The checkout's file `path` (models/SOFTS.py) as a module, its imports (layers.*, models.*) resolved in the
    checkout first; this repository's packages of the same names are put back afterwards (the module keeps its
    references to the checkout's). The file is loaded alone (TSLib's models/__init__ imports every model).
    stand_ins: modules put in sys.modules for the import where they are missing or clash (packages it imports for
    other models, or TSLib's data_provider)."""
    ours = {key: module for key, module in sys.modules.items() if key.split(".")[0] in CHECKOUT_PACKAGES}
    for key in ours:
        del sys.modules[key]
    top = lambda key: key.split(".")[0]  # noqa: E731
    sys.modules.update({key: module for key, module in (stand_ins or {}).items()
                        if top(key) in CHECKOUT_PACKAGES or importlib.util.find_spec(top(key)) is None})
    sys.path.insert(0, os.path.abspath(folder))
    try:
        spec = importlib.util.spec_from_file_location(f"checkout_{len(sys.modules)}", os.path.join(folder, path))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - one line naming why, whatever the checkout's code raised on import
        fail(f"--official {folder}: {path} does not import here: {type(e).__name__}: {e}")
    finally:
        sys.path.remove(os.path.abspath(folder))
        for key in [key for key in sys.modules if key.split(".")[0] in CHECKOUT_PACKAGES]:
            del sys.modules[key]
        sys.modules.update(ours)
    return module


def stand_in(name: str, **attributes) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    return module


def copy_state(theirs: dict, ours, rules: list, computed: tuple = (), convert=None) -> None:
    """Every tensor of the checkout's state dict into our model under the name the first matching (pattern,
    replacement) of rules gives (a replacement None passes it over: a constant ours computes). A width-1
    convolution's weight into a linear layer loses its last dimension; convert(name, tensor) reshapes others.
    Refuses a tensor left over on either side, but ours named in `computed` (ours sets it from the data)."""
    mine, done = ours.state_dict(), set()
    for name, tensor in theirs.items():
        rule = next(((pattern, replacement) for pattern, replacement in rules if re.fullmatch(pattern, name)), None)
        if rule is not None and rule[1] is None:
            continue
        target = None if rule is None else re.sub(*rule, name)
        if target not in mine:
            fail(f"the checkout's {name} has no counterpart here (mapped to {target})")
        tensor = convert(name, tensor) if convert else tensor
        if mine[target].dim() == tensor.dim() - 1:
            tensor = tensor.squeeze(-1)
        if mine[target].shape != tensor.shape:
            fail(f"the checkout's {name} {tuple(tensor.shape)} does not fit {target} {tuple(mine[target].shape)}")
        mine[target] = tensor
        done.add(target)
    left = sorted(set(mine) - done - set(computed))
    if left:
        fail(f"ours has tensors the checkout lacks: {left}")
    ours.load_state_dict(mine, strict=True)


def perturb(model) -> None:
    """Trained weights moved off their initial values: LayerNorm's ones and zeros and the zero biases matter too;
    constants held as parameters without gradient (PDF's attention scale) kept."""
    import torch
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(torch.randn_like(parameter) * 0.1)


def random_walks(batch: int, length: int, channels: int):
    """Non-stationary windows: random walks with a level and a scale per channel."""
    import torch
    level, scale = torch.randn(batch, 1, channels) * 3, torch.rand(batch, 1, channels) * 2 + 0.5
    return torch.randn(batch, length, channels).cumsum(1) * scale * 0.3 + level
