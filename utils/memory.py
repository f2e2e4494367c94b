"""A process's memory as the OS counts it: what a rank's peak is, and how much of it is file pages."""
import resource
import sys


def peak_rss_mb() -> float:
    """Peak resident set of this process (MB): anonymous memory plus the file pages it has mapped."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024  # bytes on macOS, KiB on Linux


def resident_mb() -> dict:
    """Now: {'rss', 'anon', 'file'} in MB from /proc/self/status (Linux; empty elsewhere)."""
    fields = {"VmRSS": "rss", "RssAnon": "anon", "RssFile": "file"}
    try:
        with open("/proc/self/status") as f:
            lines = [line.split() for line in f]
    except OSError:
        return {}
    return {fields[line[0][:-1]]: int(line[1]) / 1024 for line in lines if line and line[0][:-1] in fields}
