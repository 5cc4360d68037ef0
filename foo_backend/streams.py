"""Streams and events of foo devices, as ``torch.cuda.streams`` and the stream functions of ``torch.cuda``.

``torch.foo.Stream`` and ``torch.foo.Event`` subclass the generic ``torch.Stream`` and ``torch.Event``, which
reach foo's DeviceGuardImpl; so they are accepted wherever those are (``torch.accelerator.set_stream``,
``with stream:``), and generic foo streams are accepted here. As on CUDA, the
current stream is per thread and per device, and stream 0 of each device is its default stream.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from ._utils import _C, DEVICE_TYPE, _check_device_index, _get_device_index, _lazy_init

__all__ = ["Stream", "Event", "current_stream", "default_stream", "set_stream", "stream", "StreamContext"]

# c10::DeviceType::PrivateUse1, the ``device_type`` of every foo stream.
_FOO_DEVICE_TYPE = int(torch._C._autograd.DeviceType.PrivateUse1.value)
# As on CUDA, a lower number is a higher priority; out-of-range priorities map to the nearest valid one.
_LEAST_PRIORITY, _GREATEST_PRIORITY = 0, -1


def _checked_index(device: Any) -> int:
    """The index of foo device ``device`` (None or a negative int: the current device), range-checked."""
    index = _get_device_index(device, optional=True)
    if index < 0:
        index = _C._get_device()
    return _check_device_index(index)


def _check_stream(stream: Any, what: str) -> None:
    if not isinstance(stream, torch.Stream):
        raise TypeError(
            f"{what} expected a foo stream (torch.foo.Stream or torch.Stream on a foo device), "
            f"but got {type(stream).__name__}"
        )
    if stream.device_type != _FOO_DEVICE_TYPE:
        raise ValueError(f"{what} expected a foo stream, but got a stream on device type '{stream.device.type}'")


def _check_event(event: Any, what: str) -> None:
    if not isinstance(event, torch.Event):
        raise TypeError(
            f"{what} expected a foo event (torch.foo.Event or torch.Event), but got {type(event).__name__}"
        )


class Stream(torch.Stream):
    r"""A foo stream: an ordered queue of work on one foo device, independent from other streams.

    Args:
        device (torch.device, str or int, optional): the foo device of the stream. ``None`` (default) or a
            negative int means the current foo device.
        priority (int, optional): 0 (default, lowest) or -1 (high); a lower number is a higher priority.
            Values out of that range map to the nearest valid priority, as on CUDA.

    Used as a context manager (``with stream:``) it makes itself and its device current, as ``torch.Stream``.
    """

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs):
        if kwargs:  # wrap an existing stream: stream_id, device_index, device_type
            if device is not None:
                raise TypeError("torch.foo.Stream: give either a device or stream_id/device_index/device_type")
            device_type = kwargs.get("device_type", _FOO_DEVICE_TYPE)
            if device_type != _FOO_DEVICE_TYPE:
                raise ValueError(
                    f"torch.foo.Stream expected the foo device type ({_FOO_DEVICE_TYPE}), got {device_type}")
            kwargs["device_index"] = _checked_index(kwargs.get("device_index"))
            return super().__new__(cls, priority=priority, **kwargs)
        _lazy_init()
        index = _checked_index(device)
        priority = min(max(int(priority), _GREATEST_PRIORITY), _LEAST_PRIORITY)
        return super().__new__(cls, torch.device(DEVICE_TYPE, index), priority=priority)

    @staticmethod
    def priority_range() -> tuple[int, int]:
        """The (least, greatest) stream priorities of foo: ``(0, -1)``."""
        return _LEAST_PRIORITY, _GREATEST_PRIORITY

    @property
    def priority(self) -> int:
        """The priority of the stream (0 for default streams)."""
        return _C._stream_priority(self.device_index, self.stream_id)

    def wait_event(self, event: torch.Event) -> None:
        """Make all future work submitted to this stream wait for an event. Returns without waiting.

        Args:
            event (torch.Event): an event to wait for (a ``torch.foo.Event`` or a ``torch.Event``).
        """
        _check_event(event, "Stream.wait_event")
        event.wait(self)

    def wait_stream(self, stream: torch.Stream) -> None:
        """Make all future work on this stream wait for the work queued on another stream so far. Returns
        without waiting.

        Args:
            stream (torch.Stream): a foo stream to synchronize with (a ``torch.foo.Stream`` or a
                ``torch.Stream`` on a foo device).
        """
        _check_stream(stream, "Stream.wait_stream")
        self.wait_event(stream.record_event())

    def record_event(self, event: Optional[torch.Event] = None) -> torch.Event:
        """Record an event on this stream.

        Args:
            event (torch.Event, optional): the event to record. If not given, a new ``torch.foo.Event`` is
                created.

        Returns:
            torch.Event: the recorded event.
        """
        if event is None:
            event = Event()
        _check_event(event, "Stream.record_event")
        event.record(self)
        return event

    def query(self) -> bool:
        """True if all work queued on this stream has completed."""
        return super().query()

    def synchronize(self) -> None:
        """Wait for all work queued on this stream to complete."""
        super().synchronize()

    def __eq__(self, other: object) -> bool:
        # Equal to any torch.Stream naming the same stream (unlike torch.cuda.Stream, which is never equal
        # to a plain torch.Stream), so foo and generic stream objects mix in comparisons, sets and dicts.
        if isinstance(other, torch.Stream):
            return (self.stream_id, self.device_index, self.device_type) == (
                other.stream_id, other.device_index, other.device_type)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return super().__hash__()  # torch.Stream's hash, consistent with the equality above

    def __repr__(self) -> str:
        return f"<torch.foo.Stream device={self.device} stream_id={self.stream_id}>"


class Event(torch.Event):
    r"""A foo event: a marker in a stream, to synchronize streams, wait from the host or measure time.

    Args:
        enable_timing (bool, optional): whether the event measures time (default ``False``).
        blocking (bool, optional): accepted for compatibility with ``torch.cuda.Event``; ``synchronize()``
            always blocks the calling thread.
        interprocess (bool, optional): whether other processes can share the event (default ``False``), as
            ``torch.cuda.Event``: see :meth:`ipc_handle` and :meth:`from_ipc_handle`. Such an event measures no
            time (``enable_timing=True`` with it raises ``ValueError``).

    The underlying event is created when first recorded; it can then only be recorded on streams of the
    same device, while streams on any foo device can wait for it.
    """

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        if interprocess and enable_timing:
            raise ValueError("foo: an interprocess event cannot measure time: enable_timing=True and "
                             "interprocess=True cannot be combined (as on CUDA)")
        event = super().__new__(cls, torch.device(DEVICE_TYPE), enable_timing=enable_timing, blocking=blocking)
        event._interprocess = interprocess
        return event

    @classmethod
    def from_ipc_handle(cls, device: Any, handle: bytes) -> "Event":
        """Open an event another process shared with :meth:`ipc_handle`: recording, waiting on, querying or
        synchronizing it here reaches the same event, whose latest record in any process counts.

        Args:
            device (torch.device, str or int): the foo device whose streams it is recorded on here.
            handle (bytes): the other process's ``ipc_handle()``.
        """
        _lazy_init()
        event = cls(interprocess=True)
        _C._open_event_ipc_handle(event, _checked_index(device), handle)
        return event

    def ipc_handle(self) -> bytes:
        """Return an IPC handle of this event, for :meth:`from_ipc_handle` in another process. The event must
        have been created with ``interprocess=True``; if not recorded yet, it belongs to the current device."""
        _lazy_init()
        self._create_interprocess(_checked_index(None))
        return _C._event_ipc_handle(self)

    def _create_interprocess(self, device_index: int) -> None:
        if getattr(self, "_interprocess", False) and not self.event_id:
            _C._create_interprocess_event(self, device_index)

    def record(self, stream: Optional[torch.Stream] = None) -> None:
        """Record the event on a stream.

        Args:
            stream (torch.Stream, optional): the foo stream to record on. Default: the current stream of the
                current foo device.
        """
        if stream is None:
            stream = current_stream()
        _check_stream(stream, "Event.record")
        self._create_interprocess(stream.device_index)
        super().record(stream)

    def wait(self, stream: Optional[torch.Stream] = None) -> None:
        """Make all future work submitted to a stream wait for this event. Returns without waiting; a no-op
        if the event was never recorded.

        Args:
            stream (torch.Stream, optional): the foo stream whose future work waits. Default: the current
                stream of the current foo device.
        """
        if stream is None:
            stream = current_stream()
        _check_stream(stream, "Event.wait")
        super().wait(stream)

    def query(self) -> bool:
        """True if the work captured by the event has completed (or it was never recorded)."""
        return super().query()

    def synchronize(self) -> None:
        """Wait for the work captured by the event to complete."""
        super().synchronize()

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Return the time elapsed between the recording of this event and of ``end_event``, in
        milliseconds. Both must have been created with ``enable_timing=True``, recorded and completed
        (ValueError / RuntimeError otherwise).

        Args:
            end_event (torch.Event): the event that ends the measured interval.
        """
        _check_event(end_event, "Event.elapsed_time")
        # torch.Event.elapsed_time does not accept a subclass as its argument: ask the runtime directly.
        return _C._event_elapsed_time(self.event_id, end_event.event_id)

    def __repr__(self) -> str:
        return f"<torch.foo.Event {self.event_id:#x}>" if self.event_id else "<torch.foo.Event uninitialized>"


def _wrap(stream: torch.Stream) -> Stream:
    return Stream(stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type)


def current_stream(device: Any = None) -> Stream:
    """Return the currently selected :class:`Stream` of this thread for a given foo device.

    Args:
        device (torch.device, str or int, optional): selected device. Returns the current stream of the
            current device, given by :func:`~torch.foo.current_device`, if :attr:`device` is ``None``
            (default) or a negative integer.
    """
    _lazy_init()
    return _wrap(torch.accelerator.current_stream(_checked_index(device)))


def default_stream(device: Any = None) -> Stream:
    """Return the default :class:`Stream` (stream 0) of a given foo device.

    Args:
        device (torch.device, str or int, optional): selected device. Returns the default stream of the
            current device, given by :func:`~torch.foo.current_device`, if :attr:`device` is ``None``
            (default) or a negative integer.
    """
    _lazy_init()
    return Stream(stream_id=0, device_index=_checked_index(device), device_type=_FOO_DEVICE_TYPE)


def set_stream(stream: Optional[torch.Stream]) -> None:
    """Set the current stream, as ``torch.cuda.set_stream``: the stream becomes the current stream of its
    device, and its device the current foo device. Prefer the :func:`stream` context manager.

    Args:
        stream (torch.Stream or None): selected stream, a ``torch.foo.Stream`` or a ``torch.Stream`` on a
            foo device. This function is a no-op if this argument is ``None``.
    """
    if stream is None:
        return
    _check_stream(stream, "torch.foo.set_stream")
    _checked_index(stream.device_index)
    torch.accelerator.set_stream(stream)


class StreamContext:
    r"""Context manager that selects a given stream, as ``torch.cuda.StreamContext``.

    If the stream is on another foo device, that device becomes current too; on exit the previous current
    streams of both devices and the previous current device are restored.

    Args:
        stream (torch.Stream or None): selected stream, a ``torch.foo.Stream`` or a ``torch.Stream`` on a
            foo device. This manager is a no-op if it's ``None``.
    """

    def __init__(self, stream: Optional[torch.Stream]):
        if stream is not None:
            _check_stream(stream, "torch.foo.StreamContext")
        self.stream = stream
        self.src_prev_stream: Optional[Stream] = None
        self.dst_prev_stream: Optional[Stream] = None

    def __enter__(self):
        cur_stream = self.stream
        if cur_stream is None:
            return
        self.src_prev_stream = current_stream(None)
        if self.src_prev_stream.device != cur_stream.device:
            self.dst_prev_stream = current_stream(cur_stream.device_index)
        set_stream(cur_stream)

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        cur_stream = self.stream
        if cur_stream is None:
            return
        if self.src_prev_stream.device != cur_stream.device:
            set_stream(self.dst_prev_stream)
        set_stream(self.src_prev_stream)


def stream(stream: Optional[torch.Stream]) -> StreamContext:
    """Wrap the context manager :class:`StreamContext` that selects a given stream.

    Args:
        stream (torch.Stream or None): selected stream, a ``torch.foo.Stream`` or a ``torch.Stream`` on a
            foo device. This manager is a no-op if it's ``None``.
    """
    return StreamContext(stream)
