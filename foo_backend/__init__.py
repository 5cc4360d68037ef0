r"""foo_backend: a simulated PyTorch accelerator, the device ``"foo"``.

``import foo_backend`` (or just ``import torch``, through PyTorch's backend autoload) registers the
device on the PrivateUse1 dispatch key and installs this module as ``torch.foo``, the counterpart of
``torch.cuda``. Like CUDA, foo is initialised lazily, on first use.
"""
import atexit
import contextlib
import functools
import sys
from typing import Any

import torch

from . import _multiprocessing, _patches, amp, compiler, faults, lightning, memory, ops, sanitizer
from ._utils import _C, DEVICE_TYPE, _get_device_index, _lazy_init, is_initialized
from .random import (
    default_generators,
    get_rng_state,
    get_rng_state_all,
    initial_seed,
    manual_seed,
    manual_seed_all,
    seed,
    seed_all,
    set_rng_state,
    set_rng_state_all,
)
from .memory import (
    MemPool,
    caching_allocator_alloc,
    caching_allocator_delete,
    empty_cache,
    host_memory_stats,
    host_memory_stats_as_nested_dict,
    max_memory_allocated,
    max_memory_reserved,
    mem_get_info,
    memory_allocated,
    memory_reserved,
    memory_snapshot,
    memory_stats,
    memory_summary,
    reset_accumulated_host_memory_stats,
    reset_accumulated_memory_stats,
    reset_peak_host_memory_stats,
    reset_peak_memory_stats,
    set_per_process_memory_fraction,
    use_mem_pool,
)
from .graphs import FooGraph, graph, graph_pool_handle, is_current_stream_capturing, make_graphed_callables
from .streams import Event, Stream, StreamContext, current_stream, default_stream, set_stream, stream

__all__ = [
    "is_available", "device_count", "current_device", "set_device", "device", "device_of", "synchronize",
    "get_device_name", "get_device_properties", "get_device_capability", "is_initialized", "init",
    "empty_cache", "max_memory_allocated", "max_memory_reserved", "mem_get_info", "memory_allocated",
    "memory_reserved", "memory_snapshot", "memory_stats", "memory_summary", "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "set_per_process_memory_fraction", "host_memory_stats", "host_memory_stats_as_nested_dict",
    "reset_accumulated_host_memory_stats", "reset_peak_host_memory_stats", "default_generators",
    "get_rng_state", "get_rng_state_all", "initial_seed", "manual_seed", "manual_seed_all", "seed", "seed_all",
    "set_rng_state", "set_rng_state_all", "_is_in_bad_fork", "amp", "get_amp_supported_dtype",
    "is_bf16_supported", "Stream", "Event", "current_stream", "default_stream", "set_stream", "stream",
    "StreamContext", "FooGraph", "graph", "graph_pool_handle", "is_current_stream_capturing",
    "make_graphed_callables", "set_sync_debug_mode", "get_sync_debug_mode", "ipc_collect", "MemPool",
    "use_mem_pool", "caching_allocator_alloc", "caching_allocator_delete",
]

def is_available() -> bool:
    """True when at least one foo device exists (``FOO_DEVICE_COUNT``, default 2)."""
    return device_count() > 0


def device_count() -> int:
    """The number of foo devices. Does not initialise foo."""
    return _C._device_count()


def _is_in_bad_fork() -> bool:
    """True in a child process forked after foo was initialised (foo cannot be used there)."""
    return _C._is_in_bad_fork()


def init() -> None:
    """Initialise foo. Rarely needed: every foo operation initialises it on first use."""
    _lazy_init()


def current_device() -> int:
    """The index of the current foo device."""
    _lazy_init()
    return _C._get_device()


def set_device(device: Any) -> None:
    """Set the current foo device.

    Args:
        device (torch.device, str or int): selected device; it must have an index (``"foo:1"``, not
            ``"foo"``). This function is a no-op if this argument is negative, as ``torch.cuda.set_device``.
    """
    index = _get_device_index(device)
    if index >= 0:
        _lazy_init()
        _C._set_device(index)


class device:
    """Context manager that changes the current foo device.

    Args:
        device (torch.device, str, int or None): device to select. It's a no-op if this argument is a
            negative integer or ``None``; ``"foo"`` without an index selects the current device.
    """

    def __init__(self, device: Any):
        self.idx = _get_device_index(device, optional=True) if device is not None else -1
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C._exchange_device(self.idx)

    def __exit__(self, *exc_info):
        self.idx = _C._exchange_device(self.prev_idx)
        return False


class _DeviceGuard(device):
    """``torch.cuda._DeviceGuard(index)``: the current foo device is ``index`` inside the context (PyTorch's
    code and tests enter it by that name)."""


class device_of(device):
    """Context manager that changes the current foo device to that of the given object.

    Args:
        obj (Tensor or Storage): object allocated on the selected device. It's a no-op if the object is not
            on a foo device (a CPU tensor, say).
    """

    def __init__(self, obj: Any):
        super().__init__(obj.get_device() if obj.device.type == DEVICE_TYPE else -1)


def synchronize(device: Any = None) -> None:
    """Wait for all kernels in all streams on a foo device to complete.

    Args:
        device (torch.device, str or int, optional): device for which to synchronize. It uses the current
            device, given by :func:`current_device`, if :attr:`device` is ``None`` (default).
    """
    _C._synchronize(_get_device_index(device, optional=True))


_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def ipc_collect() -> bool:
    """Free the foo memory this process shared with other processes (``torch.multiprocessing``) that every
    receiver has released since, as ``torch.cuda.ipc_collect``. A block the sender let go of while a receiver
    still held it is kept out of the caching allocator until then; foo looks again at each such free and
    when an allocation fails. Returns whether memory was freed."""
    return _C._ipc_collect()


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """Set the debug mode for foo operations that make the host wait for a stream.

    Unlike CUDA's, which covers some operations, foo's reports every such wait (every call that waits
    for queued work other than an explicit ``synchronize``): ``"warn"`` warns and ``"error"`` raises
    ``RuntimeError: called a synchronizing foo operation`` before the host waits.

    Args:
        debug_mode (str or int): if "default" or 0, don't error or warn on synchronizing operations,
            if "warn" or 1, warn on synchronizing operations, if "error" or 2, error out synchronizing operations.
    """
    _lazy_init()
    if isinstance(debug_mode, str):
        if debug_mode not in _SYNC_DEBUG_MODES:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        debug_mode = _SYNC_DEBUG_MODES[debug_mode]
    _C._set_sync_debug_mode(debug_mode)


def get_sync_debug_mode() -> int:
    """Return the current debug mode for foo synchronizing operations (0, 1 or 2; see :func:`set_sync_debug_mode`)."""
    _lazy_init()
    return _C._get_sync_debug_mode()


class _FooDeviceProperties:
    def __init__(self, name: str, total_memory: int, major: int, minor: int, multi_processor_count: int):
        self.name = name
        self.total_memory = total_memory
        self.major = major
        self.minor = minor
        self.multi_processor_count = multi_processor_count

    def __repr__(self) -> str:
        return (
            f"_FooDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // (1024 * 1024)}MB, "
            f"multi_processor_count={self.multi_processor_count})"
        )


def get_device_properties(device: Any = None) -> _FooDeviceProperties:
    """Get the properties of a foo device.

    Args:
        device (torch.device, str or int, optional): device for which to return the properties. It uses
            the current device, given by :func:`current_device`, if :attr:`device` is ``None`` (default).

    Returns:
        _FooDeviceProperties: the device's ``name``, ``total_memory`` (bytes), ``major`` and ``minor``
        (its capability) and ``multi_processor_count``.
    """
    _lazy_init()
    return _FooDeviceProperties(*_C._get_device_properties(_get_device_index(device, optional=True)))


def get_device_name(device: Any = None) -> str:
    """Get the name of a foo device.

    Args:
        device (torch.device, str or int, optional): device for which to return the name. It uses the
            current device, given by :func:`current_device`, if :attr:`device` is ``None`` (default).

    Returns:
        str: the name of the device
    """
    return get_device_properties(device).name


def get_device_capability(device: Any = None) -> tuple[int, int]:
    """Get the capability of a foo device, as ``torch.cuda.get_device_capability``.

    Args:
        device (torch.device, str or int, optional): device for which to return the capability. It uses
            the current device, given by :func:`current_device`, if :attr:`device` is ``None`` (default).

    Returns:
        tuple(int, int): the major and minor capability of the device
    """
    prop = get_device_properties(device)
    return prop.major, prop.minor


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes ``torch.autocast("foo", dtype=...)`` accepts; others warn and disable autocast, as on CUDA."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Return True: foo computes bfloat16 natively (with CPU's kernels).

    Args:
        including_emulation (bool): accepted for ``torch.cuda.is_bf16_supported``'s signature; the answer
            is the same either way.
    """
    return True


def _sleep(cycles: int) -> None:
    """As ``torch.cuda._sleep``: keep the current stream busy for ``cycles`` cycles of a 1 GHz device."""
    _lazy_init()
    _C._sleep(cycles)


_INDUCTOR_CODEGEN = {"Scheduling": "FooScheduling", "PythonWrapperCodegen": "FooWrapperCodegen",
                     "CppWrapperCodegen": "FooCppWrapperCodegen"}


def __getattr__(name: str) -> Any:
    # torch.cuda keeps `_initialized`, and PyTorch's device-generic code reads it from any device module:
    # torch.utils.checkpoint saves and restores a device's RNG state only when it is true.
    if name == "_initialized":
        return is_initialized()
    # Inductor looks up a PrivateUse1 device's code generators on its device module when it first compiles
    # for it: only then is foo_backend.compiler.inductor (and Inductor itself) imported.
    if name in _INDUCTOR_CODEGEN:
        from .compiler import inductor

        inductor.register()
        return getattr(inductor, _INDUCTOR_CODEGEN[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@contextlib.contextmanager
def _hold_stream(stream=None):
    """Keep ``stream`` (default: the current stream) busy until the ``with`` block ends: work queued on
    it waits behind the hold, however fast or slow the host is. For tests of asynchronous behaviour,
    where a device sleep would make "still running" depend on the machine's load. Yields the function
    that releases the hold early. Nothing in the block may wait for the held stream."""
    _lazy_init()
    with StreamContext(stream):
        release = _C._hold_stream()
    try:
        yield release
    finally:
        release()


def _drain_before(change_default: Any) -> Any:
    """Wraps a setter of PyTorch's default dtype: queued kernels finish first. A CPU kernel reads the
    (process-wide) default dtype when it runs, and a queued one must see the default of its launch."""

    @functools.wraps(change_default)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if is_initialized():
            for index in range(device_count()):
                _C._wait_for_device(index)
        return change_default(*args, **kwargs)

    return wrapper


def _drain_queues_before_default_dtype_changes() -> tuple[Any, Any]:
    """The ``"default_dtype_setters"`` patch (``foo_backend._patches``): wraps PyTorch 2.13's setters of the
    default dtype, which ``torch.set_default_dtype`` and ``torch.set_default_tensor_type`` call, with
    :func:`_drain_before`. Returns the setters it wrapped."""
    set_default_dtype, set_default_tensor_type = torch._C._set_default_dtype, torch._C._set_default_tensor_type
    torch._C._set_default_dtype = _drain_before(set_default_dtype)
    torch._C._set_default_tensor_type = _drain_before(set_default_tensor_type)
    return set_default_dtype, set_default_tensor_type


def _register() -> None:
    """Make "foo" a PyTorch device: rename PrivateUse1, install ``torch.foo``, generate methods.

    Idempotent; PyTorch's autoload reaches it through ``foo_backend._autoload``.
    """
    if getattr(torch, DEVICE_TYPE, None) is not None:
        return
    torch.utils.rename_privateuse1_backend(DEVICE_TYPE)
    _C._register_graph_impl()  # keyed by the device type's name: "FOO" from now on
    torch._register_device_module(DEVICE_TYPE, sys.modules[__name__])
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
    _multiprocessing.register_reductions()
    _patches.apply("default_dtype_setters")
    if torch.distributed.is_available():
        from . import distributed

        distributed._register()
    compiler.install()
    _patches.apply("accelerator_snapshot")
    lightning._install()  # Trainer(accelerator="foo"), once the program imports Lightning
    sanitizer._enable_from_environment()  # FOO_SANITIZER, before any work
    atexit.register(_C._finish_work_at_exit)


_register()
