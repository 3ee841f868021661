"""Peak memory of a piece of work, on CUDA or on the CPU.

CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus what was
allocated at the start: the tensors the work itself needed (the model's weights excluded).
CPU: the peak resident set size during the work minus the resident size at its start. Linux
resets the peak (``VmHWM``) by writing 5 to ``/proc/self/clear_refs``; where that is not
possible a thread samples ``VmRSS`` every ``SAMPLE_S``. Memory the allocator reuses from
earlier work does not show as growth, so on the CPU this is a lower bound; it also counts
any other thread of the process that allocates meanwhile (a worker runs one batch at a time).
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import TracebackType
from typing import Self

SAMPLE_S = 0.002
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kb(field: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_mb() -> float:
    kb = _status_kb("VmRSS")
    return (kb or 0) / 1024.0


def _reset_hwm() -> bool:
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


class PeakMemory:
    """``with PeakMemory(device) as pm: ...`` then ``pm.peak_mb``: memory the block added at
    its peak, in MiB (module docstring)."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self.peak_mb = 0.0
        self._base = 0.0
        self._sampled = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._hwm = False

    def __enter__(self) -> Self:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._base = torch.cuda.memory_allocated() / 2**20
            return self
        self._base = rss_mb()
        self._hwm = _reset_hwm()
        if not self._hwm:
            self._sampled = self._base
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._sampled = max(self._sampled, rss_mb())

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated() / 2**20
        elif self._hwm:
            peak = (_status_kb("VmHWM") or 0) / 1024.0
        else:
            self._stop.set()
            if self._thread is not None:
                self._thread.join()
            peak = max(self._sampled, rss_mb())
        self.peak_mb = max(0.0, peak - self._base)


def available_mb(device: str = "cpu") -> float:
    """Memory free for new work now: on CUDA what the driver reports free on the device
    (``torch.cuda.mem_get_info``), on the CPU ``MemAvailable`` of ``/proc/meminfo``."""
    if device.startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info()
        return float(free) / 2**20
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("inf")
