"""What the offline equivalence scripts share: their options and one-line errors, and the comparison of the official
generate's forecasts with ours. They run in environments of their own, beside the official code's old transformers,
with this repository on PYTHONPATH."""
import argparse
import sys


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
