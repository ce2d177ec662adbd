"""The process's resident memory, per stage, and handing freed heap back to the system.

A pipeline runs SFT, evaluations and RL in one process. Each stage frees its tensors when it
ends, but glibc may keep freed chunks of its heap (and of its per-thread arenas) mapped, and
reference cycles wait for the collector; `release_freed` returns both before the next stage
(after SFT the main job was back at 0.59 GB, `benchmarks/memory-cpu.md`). `StagePeak` samples
the resident set while a stage runs (a thread reading /proc a few times a second; the kernel's
high-water mark is left alone, so `/usr/bin/time` still reports the whole job's true peak). Everything here is
a no-op where the platform lacks the feature (not Linux, not glibc).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import os
import resource
import sys
import threading
from pathlib import Path

__all__ = ["rss_gb", "peak_rss_gb", "release_freed", "StagePeak", "cap_onednn_primitive_cache",
           "ONEDNN_PRIMITIVE_CACHE"]

_STATUS = Path("/proc/self/status")

#: compiled oneDNN primitives kept for reuse (oneDNN's default: 1,024). A bf16 CPU update of
#: packed micro-batches gives nearly every matmul a new shape, so the default cache fills with
#: ~1 GB of primitives over a long run; 256 still holds one update's set, at the same speed
#: (`benchmarks/20q-learning-diagnosis.md`, W).
ONEDNN_PRIMITIVE_CACHE = 256


def _status_kib(field: str) -> float | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return float(line.split()[1])
    except OSError:
        pass
    return None


def rss_gb() -> float | None:
    """Resident set size now, in GB (10^9 bytes); None where /proc is missing."""
    kib = _status_kib("VmRSS")
    return None if kib is None else kib * 1024 / 1e9


def peak_rss_gb() -> float:
    """Peak resident set size of the process so far, in GB."""
    kib = _status_kib("VmHWM")
    if kib is None:  # no /proc: the whole-process peak (KiB on Linux, bytes on macOS)
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1024 if sys.platform == "darwin" else 1)
    return kib * 1024 / 1e9


@functools.lru_cache(maxsize=1)
def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None  # glibc only (not musl)
    except OSError:
        return None


def cap_onednn_primitive_cache(capacity: int = ONEDNN_PRIMITIVE_CACHE) -> None:
    """Set oneDNN's primitive cache capacity unless the user set one. oneDNN reads it once, when
    it creates its first primitive, so call this before any work (the CLI does, first thing);
    processes spawned later inherit it."""
    if "ONEDNN_PRIMITIVE_CACHE_CAPACITY" not in os.environ and "DNNL_PRIMITIVE_CACHE_CAPACITY" not in os.environ:
        os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = str(capacity)


def release_freed() -> None:
    """Collect garbage cycles, then give freed heap pages back to the system (glibc)."""
    gc.collect()
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


class StagePeak:
    """`with StagePeak() as p: ...` → `p.peak_gb`: the largest RSS sampled inside the block
    (every `interval` s, so a spike shorter than that can be missed), `p.after_gb`: RSS after the
    block and `release_freed`; both None where /proc is missing."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.peak_gb: float | None = None
        self.after_gb: float | None = None
        self._stop = threading.Event()

    def _sample(self) -> None:
        while True:
            now = rss_gb()
            if now is not None:
                self.peak_gb = max(self.peak_gb or 0.0, now)
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> "StagePeak":
        release_freed()
        self._thread = threading.Thread(target=self._sample, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        now = rss_gb()  # the block's last moment counts too
        if now is not None:
            self.peak_gb = round(max(self.peak_gb or 0.0, now), 2)
        release_freed()
        after = rss_gb()
        self.after_gb = None if after is None else round(after, 2)
