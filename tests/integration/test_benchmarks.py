"""The benchmark scripts run: they call the training loop's internals, which a refactor can move from under them
(the throughput benchmark's `ours` called a method that training by steps had removed, and nothing failed)."""
import re


def test_the_fingerprint_benchmark_times_the_first_hash_the_cached_one_and_the_read(capsys):
    from scripts.benchmark import fingerprint
    fingerprint.main(["--rows", "500", "--columns", "3", "--repeat", "1"])
    out = capsys.readouterr().out
    for step in ("fingerprint, first time", "fingerprint, cached", "reading the CSV"):
        assert re.search(rf"\| {step}[^|]* \| [\d.]+ \| \d+ \|", out), step
