"""Peak memory over a block of code, from three sources that each see a different part:

- paddle's memory stats ("Allocated": host stats on CPU, max_memory_allocated on GPU): paddle
  tensors, and VTensor chunks too when the ops report their mappings to those stats;
- VTensor mappings: physical memory the plugin mapped for caches;
- the process's resident-set high-water mark (VmHWM, Linux): all host memory actually touched,
  allocator caches included.
Each is reported above its value when the block began (the weights and anything else already held).
"""
from __future__ import annotations

import dataclasses
import functools

import paddle


@dataclasses.dataclass
class PeakBytes:
    paddle_allocated: int  # peak above the start
    vtensor_mapped: int  # peak above the start
    process_rss: int | None  # peak above the start; None where Linux does not let us reset it
    paddle_counts_vtensor: bool  # paddle_allocated already includes the VTensor mappings

    @property
    def total(self) -> int:
        """Tensors and caches together: paddle's peak when it already counts VTensor mappings, else
        the sum of the two peaks (then an upper bound, as the two need not peak together)."""
        if self.paddle_counts_vtensor:
            return self.paddle_allocated
        return self.paddle_allocated + self.vtensor_mapped


@functools.lru_cache(maxsize=None)
def paddle_counts_vtensor(device: str) -> bool:
    """Whether mapping VTensor memory raises paddle's "Allocated" stat on ``device`` (the ops may
    report their mappings to paddle; adding the two would then count the cache twice). Found by
    making one small VTensor and watching both counters."""
    from .. import api

    dense = paddle.zeros([1, 1, 1, 1], dtype="float32")
    allocated, mapped = _paddle_allocated(device), api.memory_stats(device)["mapped_bytes"]
    cache = api.from_dense(dense, max_seq_len=1)
    grew_mapped = api.memory_stats(device)["mapped_bytes"] - mapped
    grew_allocated = _paddle_allocated(device) - allocated
    del cache
    return grew_mapped > 0 and grew_allocated >= grew_mapped


class PeakMemory:
    """``with PeakMemory(device) as m: ...; m.next_phase(); ...`` then ``m.phases`` holds one
    PeakBytes per phase, each measured above what was held when the block began."""

    def __init__(self, device: str):
        self.device = device
        self.phases: list[PeakBytes] = []

    def __enter__(self) -> "PeakMemory":
        from .. import api

        paddle_counts_vtensor(self.device)  # probe now, not inside the measured block
        self._paddle_start = _paddle_allocated(self.device)
        self._mapped_start = api.memory_stats(self.device)["mapped_bytes"]
        self._rss_start = _status_kib("VmRSS")
        self._reset()
        return self

    def next_phase(self) -> None:
        self.phases.append(self._read())
        self._reset()

    def __exit__(self, *exc) -> None:
        self.phases.append(self._read())

    def _reset(self) -> None:
        from .. import api

        _reset_paddle_peak(self.device)
        api.reset_peak_mapped(self.device)
        self._rss_resettable = _reset_rss_high_water()

    def _read(self) -> PeakBytes:
        from .. import api

        rss_peak = _status_kib("VmHWM") if self._rss_resettable and self._rss_start is not None else None
        return PeakBytes(
            paddle_allocated=_paddle_peak(self.device) - self._paddle_start,
            vtensor_mapped=api.memory_stats(self.device)["peak_mapped_bytes"] - self._mapped_start,
            process_rss=None if rss_peak is None else rss_peak - self._rss_start,
            paddle_counts_vtensor=paddle_counts_vtensor(self.device),
        )


def overall(phases: list[PeakBytes]) -> PeakBytes:
    """The peak of each source over all phases."""
    rss = [p.process_rss for p in phases]
    return PeakBytes(max(p.paddle_allocated for p in phases), max(p.vtensor_mapped for p in phases),
                     None if None in rss else max(rss), phases[0].paddle_counts_vtensor)


def _device_id(device: str) -> int:
    return int(device.split(":")[1]) if ":" in device else 0


def _reset_paddle_peak(device: str) -> None:
    if device.startswith("cpu"):
        paddle.base.core.host_memory_stat_reset_peak_value("Allocated", 0)
    else:
        paddle.device.cuda.reset_max_memory_allocated(_device_id(device))


def _paddle_allocated(device: str) -> int:
    if device.startswith("cpu"):
        return int(paddle.base.core.host_memory_stat_current_value("Allocated", 0))
    return int(paddle.device.cuda.memory_allocated(_device_id(device)))


def _paddle_peak(device: str) -> int:
    if device.startswith("cpu"):
        return int(paddle.base.core.host_memory_stat_peak_value("Allocated", 0))
    return int(paddle.device.cuda.max_memory_allocated(_device_id(device)))


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_rss_high_water() -> bool:
    """Resets VmHWM to the current resident size by writing 5 to clear_refs; False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True
