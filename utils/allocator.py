"""glibc malloc thresholds for a training loop.

A training step frees and allocates the same large blocks every time (a gathered batch, activations,
gradients). glibc's defaults serve blocks from 128 KiB up (a threshold it raises by itself, to at most
32 MiB) with mmap, and give a freed heap top larger than twice that back to the OS, so every step
page-faults its fresh memory in again: ~8,500 minor faults per DLinear epoch on ETTh1 (several per cent
of its step time on a 2-core CPU) and ~8,000 per PatchTST step. Fixed thresholds keep those blocks in
the heap, sized for the largest steps run here (TSMixer's ETTh1 setting: 32 MiB activations, over 1 GB freed
and taken again each step; docs/performance.md).
"""
import ctypes
import os
import platform

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters of glibc's malloc.h


def user_chose_malloc(environ=os.environ) -> bool:
    """The environment already configures malloc: glibc's own variables, or an allocator preloaded in its
    place (jemalloc, tcmalloc, mimalloc)."""
    return bool(environ.get("MALLOC_TRIM_THRESHOLD_") or environ.get("MALLOC_MMAP_THRESHOLD_")
                or "glibc.malloc." in environ.get("GLIBC_TUNABLES", "") or "malloc" in environ.get("LD_PRELOAD", ""))


def keep_freed_memory(trim_bytes: int = 1 << 30, mmap_bytes: int = 256 << 20) -> bool:
    """Serve blocks below `mmap_bytes` from the heap and keep up to `trim_bytes` of freed heap top.

    Process-wide; returns whether glibc took both. A no-op off glibc, or where the environment already
    configures malloc.
    """
    if platform.libc_ver()[0] != "glibc" or user_chose_malloc():
        return False
    libc = ctypes.CDLL("libc.so.6")
    return bool(libc.mallopt(_M_TRIM_THRESHOLD, trim_bytes)) and bool(libc.mallopt(_M_MMAP_THRESHOLD, mmap_bytes))
