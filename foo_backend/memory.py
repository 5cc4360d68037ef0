"""Memory management of foo devices, as ``torch.cuda.memory``.

The statistics come from foo's caching allocator (a ``c10::DeviceAllocator``), the same numbers
``torch.accelerator.memory_*`` reports.
"""
import collections
from typing import Any

import torch

from ._utils import _C, _get_device_index, is_initialized

__all__ = [
    "empty_cache", "max_memory_allocated", "max_memory_reserved", "mem_get_info", "memory_allocated",
    "memory_reserved", "memory_stats", "reset_accumulated_memory_stats", "reset_peak_memory_stats",
    "set_per_process_memory_fraction", "host_memory_stats", "host_memory_stats_as_nested_dict",
    "reset_accumulated_host_memory_stats", "reset_peak_host_memory_stats",
]


def empty_cache() -> None:
    """Release all unoccupied cached memory back to the device."""
    if is_initialized():
        _C._empty_cache()


def _flatten(nested: dict[str, Any]) -> "collections.OrderedDict[str, Any]":
    flat: list[tuple[str, Any]] = []

    def visit(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                visit(f"{prefix}.{key}" if prefix else key, inner)
        else:
            flat.append((prefix, value))

    visit("", nested)
    flat.sort()
    return collections.OrderedDict(flat)


def memory_stats(device: Any = None) -> dict[str, Any]:
    """A dictionary of caching-allocator statistics, keyed as ``torch.cuda.memory_stats``.

    For example ``"allocated_bytes.all.current"``, ``"reserved_bytes.large_pool.peak"``,
    ``"num_alloc_retries"``, ``"num_ooms"``.
    """
    index = _get_device_index(device, optional=True)
    if not is_initialized():
        return collections.OrderedDict()
    return _flatten(torch._C._accelerator_getDeviceStats(index))


def _stat(device: Any, key: str) -> int:
    return memory_stats(device).get(key, 0)


def memory_allocated(device: Any = None) -> int:
    """Bytes currently occupied by tensors on a foo device."""
    return _stat(device, "allocated_bytes.all.current")


def max_memory_allocated(device: Any = None) -> int:
    """Peak of ``memory_allocated`` since start or the last ``reset_peak_memory_stats``."""
    return _stat(device, "allocated_bytes.all.peak")


def memory_reserved(device: Any = None) -> int:
    """Bytes held by the caching allocator on a foo device (allocated plus cached)."""
    return _stat(device, "reserved_bytes.all.current")


def max_memory_reserved(device: Any = None) -> int:
    """Peak of ``memory_reserved`` since start or the last ``reset_peak_memory_stats``."""
    return _stat(device, "reserved_bytes.all.peak")


def reset_peak_memory_stats(device: Any = None) -> None:
    """Reset the "peak" statistics of a foo device to their current values."""
    index = _get_device_index(device, optional=True)
    if is_initialized():
        torch._C._accelerator_resetPeakStats(index)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    """Reset the accumulated ("allocated"/"freed") statistics of a foo device."""
    index = _get_device_index(device, optional=True)
    if is_initialized():
        torch._C._accelerator_resetAccumulatedStats(index)


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of a foo device's memory, as ``cudaMemGetInfo`` reports them."""
    return _C._mem_get_info(_get_device_index(device, optional=True))


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Limit this process to ``fraction`` of a foo device's memory; beyond it allocations raise
    ``torch.OutOfMemoryError``."""
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if not 0 <= fraction <= 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _C._set_memory_fraction(fraction, _get_device_index(device, optional=True))


def host_memory_stats() -> dict[str, Any]:
    """Statistics of foo's pinned host allocator, keyed as ``torch.cuda.host_memory_stats``.

    For example ``"allocated_bytes.current"`` (pinned blocks held, in use or cached),
    ``"active_bytes.current"`` (blocks handed out), ``"num_host_alloc"``, ``"num_host_free"``.
    ``torch.accelerator.empty_host_cache()`` releases the cached blocks.
    """
    return _flatten(host_memory_stats_as_nested_dict())


def host_memory_stats_as_nested_dict() -> dict[str, Any]:
    """:func:`host_memory_stats` as a nested dictionary."""
    return _C._host_memory_stats()


def reset_accumulated_host_memory_stats() -> None:
    """Reset the accumulated ("allocated"/"freed") statistics of the pinned host allocator."""
    _C._reset_accumulated_host_memory_stats()


def reset_peak_host_memory_stats() -> None:
    """Reset the "peak" statistics of the pinned host allocator to their current values."""
    _C._reset_peak_host_memory_stats()
