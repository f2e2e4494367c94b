"""What a run's identity is made of: content fingerprints of files (cached by stat key), a short hash of a
canonical configuration, and the differences between two configurations."""
import contextlib
import hashlib
import json
import os

from utils.errors import OutputError
from utils.files import write_atomic

HASH_CHUNK = 1 << 20  # bytes hashed per read


def _fingerprint(size: int, digest: str) -> str:
    return f"{size}-{digest[:16]}"


def content_fingerprint(data: bytes) -> str:
    """The size and a SHA-256 of every byte: the fingerprint the same bytes get as a file."""
    return _fingerprint(len(data), hashlib.sha256(data).hexdigest())


def file_fingerprint(path: str) -> str:
    """content_fingerprint of a file's bytes, read whole (any edit anywhere changes it) once: the result is
    cached under the file's path, device, inode, size, modification and change times. The change time (ctime)
    cannot be set back by a program, so an edit that keeps the size and restores the modification time is
    hashed again too."""
    before = os.stat(path)
    key = _stat_key(path, before)
    cached = _FINGERPRINTS.get(key)
    if cached:
        return cached
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
    fingerprint = _fingerprint(before.st_size, digest.hexdigest())
    if _stat_key(path, os.stat(path)) == key:  # not written to while it was read
        _FINGERPRINTS.put(key, fingerprint)
    return fingerprint


def _stat_key(path: str, st: os.stat_result) -> str:
    return f"{os.path.realpath(path)}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}"


class _FingerprintCache:
    """Fingerprints of files by stat key, one small file each under $TSF_CACHE_DIR (default
    $XDG_CACHE_HOME/tsforecast or ~/.cache/tsforecast)/fingerprints, so a file is hashed once across processes.
    A cache that cannot be written only costs time: every lookup then hashes the file."""

    def get(self, key: str) -> str | None:
        try:
            with open(self._entry(key)) as f:
                return f.read().strip() or None
        except OSError:
            return None

    def put(self, key: str, fingerprint: str) -> None:
        with contextlib.suppress(OutputError):
            write_atomic(self._entry(key), lambda f: f.write(fingerprint.encode()))

    @staticmethod
    def _entry(key: str) -> str:
        root = os.environ.get("TSF_CACHE_DIR") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "tsforecast")
        return os.path.join(root, "fingerprints", hashlib.sha256(key.encode()).hexdigest()[:32])


_FINGERPRINTS = _FingerprintCache()


def config_hash(config: dict, length: int = 10) -> str:
    """Hash of a JSON-serialisable configuration, independent of key order."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]


def differences(recorded: dict, current: dict, sections=None) -> list:
    """'name: recorded -> current' for every value of the given sections of two configurations that differs."""
    found = []
    for section in sections or sorted(set(recorded) | set(current)):
        a, b = recorded.get(section, {}), current.get(section, {})
        for name in sorted(set(a) | set(b)):
            if a.get(name, "(absent)") != b.get(name, "(absent)"):
                found.append(f"{name}: {a.get(name, '(absent)')} -> {b.get(name, '(absent)')}")
    return found


def tree_fingerprint(path: str) -> str:
    """content_fingerprint of a file, or of a folder's files: every relative path with its file's fingerprint, so
    a renamed, added, removed or edited file changes it. Hidden entries are left out: `huggingface-cli download
    --local-dir` keeps its download metadata in .cache/, which says nothing about the weights."""
    if os.path.isfile(path):
        return file_fingerprint(path)
    listing = []
    for folder, subfolders, files in os.walk(path):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("."))
        for name in sorted(f for f in files if not f.startswith(".")):
            file = os.path.join(folder, name)
            listing.append(f"{os.path.relpath(file, path)}\t{file_fingerprint(file)}")
    return content_fingerprint("\n".join(listing).encode())
