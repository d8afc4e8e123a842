"""Memory probes shared by the benchmark scripts (resident set size of this process)."""

from __future__ import annotations

import os
import sys
import threading


def rss_mb() -> float:
    """Current resident set size in MiB (Linux /proc)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def maxrss_mb() -> float:
    """Peak resident set size of this process so far, in MiB."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 1024.0 if sys.platform.startswith("linux") else r / 2**20  # KiB on Linux, bytes on macOS


class RssSampler:
    """Samples this process's resident set size every ``interval`` seconds in a thread
    (XLA releases the GIL while it runs, so the samples cover the computation)."""

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self.peak = rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb())
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_mb())
