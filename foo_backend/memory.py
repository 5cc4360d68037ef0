"""Memory management of foo devices, as ``torch.cuda.memory``.

The statistics come from foo's caching allocator (a ``c10::DeviceAllocator``), the same numbers
``torch.accelerator.memory_*`` reports.
"""
import collections
import contextlib
import functools
import pickle
import sys
from typing import Any, Optional

import torch

from ._utils import _C, _get_device_index, _lazy_init, is_initialized
from .streams import current_stream, stream as stream_context

__all__ = [
    "empty_cache", "max_memory_allocated", "max_memory_reserved", "mem_get_info", "memory_allocated",
    "memory_reserved", "memory_snapshot", "memory_stats", "memory_summary", "reset_accumulated_memory_stats", "reset_peak_memory_stats",
    "set_per_process_memory_fraction", "host_memory_stats", "host_memory_stats_as_nested_dict",
    "reset_accumulated_host_memory_stats", "reset_peak_host_memory_stats", "MemPool", "use_mem_pool",
    "caching_allocator_alloc", "caching_allocator_delete",
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
    """A dictionary of caching-allocator statistics for a given device, keyed as ``torch.cuda.memory_stats``.

    For example ``"allocated_bytes.all.current"``, ``"reserved_bytes.large_pool.peak"``,
    ``"num_alloc_retries"``, ``"num_ooms"``. Before foo is initialised the dictionary is empty (and the
    query initialises nothing), as CUDA's.

    Args:
        device (torch.device, str or int, optional): selected device. Returns statistics for the
            current device, given by :func:`~torch.foo.current_device`, if :attr:`device` is
            ``None`` (default).
    """
    index = _get_device_index(device, optional=True)
    if not is_initialized():
        return collections.OrderedDict()
    return _flatten(torch._C._accelerator_getDeviceStats(index))


def _format_bytes(value: int, scale_of: int) -> str:
    """``value`` in the unit that suits ``scale_of`` (its row's first column), as CUDA's summary prints."""
    unit = "B  "
    for bigger in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if scale_of < 768 * 1024:
            break
        unit, value, scale_of = bigger, value // 1024, scale_of / 1024
    return f"{value:6d} {unit}"


def _format_count(value: int, scale_of: int) -> str:
    unit = " "
    for bigger in ("K", "M"):
        if scale_of < 750 * 1000:
            break
        unit, value, scale_of = bigger, value // 1000, scale_of / 1000
    return f"{value:7d} {unit} "


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A human-readable table of the caching allocator's statistics for a foo device, laid out as
    ``torch.cuda.memory_summary``: current, peak, total allocated and total freed of each metric, for all
    memory and (unless ``abbreviated``) the large and small pools.

    Args:
        device (torch.device, str or int, optional): selected device. Returns the printout for the
            current device, given by :func:`~torch.foo.current_device`, if :attr:`device` is
            ``None`` (default).
        abbreviated (bool, optional): whether to leave out the large and small pools' rows (default: False).
    """
    index = _get_device_index(device, optional=True)
    stats = collections.defaultdict(int, memory_stats(index))
    index = torch.foo.current_device() if index is None or index < 0 else index
    columns = ("current", "peak", "allocated", "freed")
    rows = [
        ("allocated_bytes", "Allocated memory", _format_bytes),
        ("active_bytes", "Active memory", _format_bytes),
        ("requested_bytes", "Requested memory", _format_bytes),
        ("reserved_bytes", "foo reserved memory", _format_bytes),
        ("inactive_split_bytes", "Non-releasable memory", _format_bytes),
        ("allocation", "Allocations", _format_count),
        ("active", "Active allocs", _format_count),
        ("segment", "foo reserved segments", _format_count),
        ("inactive_split", "Non-releasable allocs", _format_count),
    ]
    rule, double_rule = "-" * 75, "=" * 75
    lines = [double_rule, f" {'':16} PyTorch foo memory summary, device ID {index:<18d} ", rule,
             f"  {'':9} foo OOMs: {stats['num_ooms']:<13d} | {'':6} fooMalloc retries: {stats['num_alloc_retries']:<9d}  ",
             double_rule, "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  "]
    for key, name, formatter in rows:
        lines.append(rule)
        pools = [("all", name)] + ([] if abbreviated else [("large_pool", "      from large pool"),
                                                          ("small_pool", "      from small pool")])
        scale = [stats[f"{key}.all.{column}"] for column in columns]  # each column's unit follows "all"
        for pool, label in pools:
            cells = " | ".join(formatter(stats[f"{key}.{pool}.{column}"], s) for column, s in zip(columns, scale))
            lines.append(f" {label:<21} | {cells} ")
    for key, name in (("oversize_allocations", "Oversize allocations"), ("oversize_segments", "Oversize foo segments")):
        lines.append(rule)
        cells = " | ".join(_format_count(stats[f"{key}.{column}"], stats[f"{key}.{column}"]) for column in columns)
        lines.append(f" {name:<21} | {cells} ")
    lines.append(double_rule)
    return "|" + "|\n|".join(lines) + "|\n"


def _stat(device: Any, key: str) -> int:
    return memory_stats(device).get(key, 0)


def memory_allocated(device: Any = None) -> int:
    """The memory currently occupied by tensors on a foo device, in bytes.

    Args:
        device (torch.device, str or int, optional): selected device. Returns the statistic for the
            current device, given by :func:`~torch.foo.current_device`, if :attr:`device` is
            ``None`` (default).
    """
    return _stat(device, "allocated_bytes.all.current")


def max_memory_allocated(device: Any = None) -> int:
    """The peak of :func:`memory_allocated` on a foo device, in bytes, since the program started or the last
    :func:`reset_peak_memory_stats`.

    Args:
        device (torch.device, str or int, optional): selected device. Returns the statistic for the
            current device, given by :func:`~torch.foo.current_device`, if :attr:`device` is
            ``None`` (default).
    """
    return _stat(device, "allocated_bytes.all.peak")


def memory_reserved(device: Any = None) -> int:
    """The memory held by the caching allocator on a foo device (allocated plus cached), in bytes.

    Args:
        device (torch.device, str or int, optional): selected device. Returns the statistic for the
            current device, given by :func:`~torch.foo.current_device`, if :attr:`device` is
            ``None`` (default).
    """
    return _stat(device, "reserved_bytes.all.current")


def max_memory_reserved(device: Any = None) -> int:
    """The peak of :func:`memory_reserved` on a foo device, in bytes, since the program started or the last
    :func:`reset_peak_memory_stats`.

    Args:
        device (torch.device, str or int, optional): selected device. Returns the statistic for the
            current device, given by :func:`~torch.foo.current_device`, if :attr:`device` is
            ``None`` (default).
    """
    return _stat(device, "reserved_bytes.all.peak")


def reset_peak_memory_stats(device: Any = None) -> None:
    """Reset the "peak" statistics of a foo device's caching allocator to their current values. Does
    nothing before foo is initialised.

    Args:
        device (torch.device, str or int, optional): selected device. Resets the statistics of the current
            device, given by :func:`~torch.foo.current_device`, if :attr:`device` is ``None`` (default).
    """
    index = _get_device_index(device, optional=True)
    if is_initialized():
        torch._C._accelerator_resetPeakStats(index)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    """Reset the accumulated ("allocated"/"freed") statistics of a foo device's caching allocator. Does
    nothing before foo is initialised.

    Args:
        device (torch.device, str or int, optional): selected device. Resets the statistics of the current
            device, given by :func:`~torch.foo.current_device`, if :attr:`device` is ``None`` (default).
    """
    index = _get_device_index(device, optional=True)
    if is_initialized():
        torch._C._accelerator_resetAccumulatedStats(index)


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """Return the free and total memory of a foo device, in bytes, as ``cudaMemGetInfo`` reports them.

    Args:
        device (torch.device, str or int, optional): selected device. Returns the information for the
            current device, given by :func:`~torch.foo.current_device`, if :attr:`device` is
            ``None`` (default).

    Returns:
        tuple(int, int): ``(free, total)``
    """
    return _C._mem_get_info(_get_device_index(device, optional=True))


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Limit the caching allocator of this process to a fraction of a foo device's memory; an allocation
    beyond it raises ``torch.OutOfMemoryError``.

    Args:
        fraction (float): range 0~1. The allowed memory equals ``total_memory * fraction``.
        device (torch.device, str or int, optional): selected device. It uses the current device, given by
            :func:`~torch.foo.current_device`, if :attr:`device` is ``None`` (default).
    """
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


def _record_memory_history(enabled: Any = "all", context: Optional[str] = "all", stacks: str = "all",
                           max_entries: int = sys.maxsize, device: Any = None, clear_history: bool = False) -> None:
    """Record what allocates foo memory, as ``torch.cuda.memory._record_memory_history``, for
    :func:`_snapshot` and PyTorch's memory visualiser.

    Args:
        enabled: ``None`` stops recording (what was recorded stays, for a snapshot); ``"state"`` keeps the
            stack of each live allocation; ``"all"`` also keeps a history of every allocator action (alloc,
            free_requested, free_completed, segment_alloc, segment_free, oom, snapshot). ``True`` and
            ``False`` (CUDA's older form) mean ``"all"`` and ``None``.
        context: which stacks to keep: ``None``, ``"state"`` (live allocations'), ``"alloc"`` (also in the
            history's allocations), ``"all"`` (also its frees).
        stacks: ``"python"`` (Python and TorchScript frames) or ``"all"`` (also C++ frames).
        max_entries: the history keeps the last ``max_entries`` actions of each device.
        device: ignored, as by CUDA's: every device records.
        clear_history: forget the history recorded so far.
    """
    if isinstance(enabled, bool):
        enabled = "all" if enabled else None
    _lazy_init()
    _C._record_memory_history(enabled, context, stacks, max_entries, clear_history)


def _snapshot(device: Any = None, augment_with_fx_traces: bool = False) -> dict[str, Any]:
    """The state of foo's caching allocator, in the format of ``torch.cuda.memory._snapshot()``:
    ``{"segments": [...], "device_traces": [[...] per device]}``. A segment (one device allocation) lists its
    blocks with their state (``active_allocated``, ``active_pending_free``, ``inactive``) and, when
    :func:`_record_memory_history` records stacks, the frames that allocated them; ``device_traces``
    holds each device's recorded history (``time_us``: microseconds since the epoch).
    ``torch.accelerator.memory._snapshot()`` returns it when foo is the accelerator.

    Render it with PyTorch's visualiser: ``torch.cuda._memory_viz.segment_plot(snapshot)`` or
    ``trace_plot(snapshot)`` write an HTML page; ``_dump_snapshot`` writes the pickle its web viewer opens.

    Args:
        device: unused, as by ``torch.cuda.memory._snapshot``: the snapshot covers every foo device.
        augment_with_fx_traces (bool): add to the frames of code that torch.compile generated the FX
            nodes and original source they came from, as ``torch.cuda.memory._snapshot`` does.
    """
    _lazy_init()
    snapshot = _C._memory_snapshot()
    if augment_with_fx_traces:
        snapshot = torch._utils._augment_memory_snapshot_stack_traces(snapshot)
    return snapshot


def _route_accelerator_snapshot() -> Any:
    """The ``"accelerator_snapshot"`` patch (``foo_backend._patches``): PyTorch 2.13's
    ``torch.accelerator.memory._snapshot()`` knows XPU and otherwise asks CUDA; wrapped, it returns foo's
    snapshot when foo is the accelerator. Returns the function it wrapped."""
    accelerator_memory = sys.modules["torch.accelerator.memory"]
    original = accelerator_memory._snapshot
    if getattr(original, "_foo_wrapped", False):
        return original.__wrapped__

    @functools.wraps(original)
    def snapshot(device: Any = None, augment_with_fx_traces: bool = False) -> dict[str, Any]:
        accelerator = torch.accelerator.current_accelerator()
        if accelerator is not None and accelerator.type == "foo":
            return _snapshot(device, augment_with_fx_traces=augment_with_fx_traces)
        return original(device, augment_with_fx_traces=augment_with_fx_traces)

    snapshot._foo_wrapped = True
    accelerator_memory._snapshot = snapshot
    return original


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickle :func:`_snapshot` to ``filename``, the file PyTorch's memory viewer opens."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


def memory_snapshot(mempool_id: Optional[tuple[int, int]] = None, include_traces: bool = True) -> list[dict[str, Any]]:
    """The segments of every foo device's caching allocator (``_snapshot()["segments"]``), as
    ``torch.cuda.memory_snapshot``.

    Args:
        mempool_id (tuple[int, int], optional): only the segments of this private pool (a :class:`MemPool`'s
            ``id``, or a graph's pool).
        include_traces (bool): accepted as by ``torch.cuda.memory_snapshot``; segments carry no traces.
    """
    segments = _snapshot()["segments"]
    if mempool_id is None:
        return segments
    return [segment for segment in segments if tuple(segment["segment_pool_id"]) == tuple(mempool_id)]


def caching_allocator_alloc(size: int, device: Any = None, stream: Optional[torch.Stream] = None) -> int:
    """Allocate ``size`` bytes of device memory from foo's caching allocator and return its address, as
    ``torch.cuda.caching_allocator_alloc``: for memory that no tensor owns (free it with
    :func:`caching_allocator_delete`).

    Args:
        size (int): the number of bytes.
        device (torch.device, str or int, optional): the foo device; the current foo device if ``None``.
        stream (torch.Stream, optional): the foo stream the memory is used on (its reuse is ordered after that
            stream's work); the device's current stream if ``None``.
    """
    _lazy_init()
    index = _C._get_device() if device is None else _get_device_index(device, optional=True)
    with stream_context(current_stream(index) if stream is None else stream):
        return _C._caching_allocator_alloc(index, size)


def caching_allocator_delete(mem_ptr: int) -> None:
    """Free memory from :func:`caching_allocator_alloc`, as ``torch.cuda.caching_allocator_delete``: it goes back to
    the cache, reusable once the work queued on its stream so far is done.

    Args:
        mem_ptr (int): the address :func:`caching_allocator_alloc` returned.
    """
    _C._caching_allocator_delete(mem_ptr)


class MemPool:
    r"""A private pool of foo's caching allocator, as ``torch.cuda.MemPool``: the allocations a thread makes
    inside :func:`use_mem_pool` come from segments only the pool serves, and go back to it when freed. Graphs
    share it when captured with ``pool=mem_pool.id``. The pool belongs to the device current at its creation;
    when the pool and the tensors allocated from it are gone, its segments go back to the device.

    Args:
        allocator: must be ``None``: foo has one caching allocator (CUDA's pluggable allocators have no foo
            counterpart).
        use_on_oom (bool): must be ``False`` (not supported on foo).
        no_split (bool): must be ``False`` (not supported on foo).
    """

    def __init__(self, allocator: Any = None, use_on_oom: bool = False, no_split: bool = False):
        if allocator is not None:
            raise NotImplementedError("torch.foo.MemPool: foo has no pluggable allocators: pass allocator=None")
        if use_on_oom or no_split:
            raise NotImplementedError("torch.foo.MemPool: use_on_oom and no_split are not supported on foo")
        _lazy_init()
        self._device = _C._get_device()
        self._id = tuple(_C._mem_pool_create(self._device))

    @property
    def id(self) -> tuple[int, int]:
        """The ID of this pool, a tuple of two ints."""
        return self._id

    @property
    def allocator(self) -> None:
        """``None``: the pool's memory comes from foo's caching allocator."""
        return None

    def use_count(self) -> int:
        """How many hold the pool: the pool itself, each open :func:`use_mem_pool` on it, each graph using it."""
        return _C._mem_pool_use_count(self._device, self._id)

    def snapshot(self, include_traces: bool = True) -> list[dict[str, Any]]:
        """The segments of this pool, as :func:`memory_snapshot` gives them.

        Args:
            include_traces (bool): accepted as by ``torch.cuda.MemPool.snapshot``; segments carry no traces.
        """
        return memory_snapshot(self._id, include_traces=include_traces)

    def __del__(self) -> None:
        if getattr(self, "_id", None) is not None and _C is not None:
            _C._release_pool(self._device, self._id)


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device: Any = None):
    r"""Route the calling thread's allocations on a foo device to ``pool``, as ``torch.cuda.use_mem_pool``.
    Other threads (autograd's backward threads too) allocate as before.

    Args:
        pool (torch.foo.MemPool): the pool the allocations come from.
        device (torch.device, str or int, optional): the foo device; the current foo device if ``None``.
    """
    _lazy_init()
    index = _C._get_device() if device is None else _get_device_index(device, optional=True)
    _C._begin_allocate_current_thread_to_pool(index, pool.id)
    try:
        yield
    finally:
        _C._end_allocate_to_pool(index, pool.id)
        _C._release_pool(index, pool.id)


def _set_allocator_settings(env: str) -> None:
    """Change the allocator's settings at run time, in ``PYTORCH_ALLOC_CONF``'s format (as
    ``torch.cuda.memory._set_allocator_settings``): ``max_split_size_mb``, ``max_non_split_rounding_mb``,
    ``roundup_power2_divisions``, ``garbage_collection_threshold``. The settings are PyTorch's, shared by every
    accelerator; foo's allocator reads them at each allocation."""
    torch._C._accelerator_setAllocatorSettings(env)
