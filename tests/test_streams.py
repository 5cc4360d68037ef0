"""Streams and events of ``torch.foo`` (CONTRACT: "torch.foo" streams/events). The oracle is ``torch.cuda``'s
documented semantics: the current stream is per thread and per device, stream contexts restore what they
changed, ``set_stream`` also makes the stream's device current, events order streams and time work.

The tests hold for an executor that runs launches inline and for one that runs streams asynchronously:
work is taken as complete only after a synchronize or a wait, and never assumed to be still pending."""
import threading

import pytest
import torch

F = torch.foo

two_devices = pytest.mark.skipif(F.device_count() < 2, reason="needs two foo devices")


def _reset():
    for index in range(F.device_count()):
        F.set_stream(F.default_stream(index))
    F.set_device(0)


@pytest.fixture(autouse=True)
def default_streams():
    """Every test starts, and leaves the next one, on device 0 with default streams current."""
    _reset()
    yield
    _reset()


def _in_thread(fn):
    result, errors = [], []

    def run():
        try:
            result.append(fn())
        except BaseException as e:  # re-raised in the test's thread
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


# ---- API surface ------------------------------------------------------------------------------------------

def test_exports_and_device_module():
    names = {"Stream", "Event", "current_stream", "default_stream", "set_stream", "stream", "StreamContext"}
    assert names <= set(F.__all__)
    module = torch.get_device_module("foo")
    assert module.Stream is F.Stream and module.Event is F.Event
    assert issubclass(F.Stream, torch.Stream) and issubclass(F.Event, torch.Event)
    assert isinstance(module.current_stream(), F.Stream)


# ---- current and default streams --------------------------------------------------------------------------

def test_current_and_default_stream_identity():
    current, default = F.current_stream(), F.default_stream()
    assert type(current) is F.Stream and type(default) is F.Stream
    assert current == default == F.current_stream(0) == F.default_stream("foo:0")
    assert hash(current) == hash(default)
    assert len({current, default, F.current_stream(torch.device("foo", 0))}) == 1
    assert current.device == torch.device("foo", 0) and current.device_index == 0
    assert not (current != default)


@two_devices
def test_streams_per_device():
    s0, s1 = F.current_stream(0), F.current_stream(1)
    assert s1.device_index == 1 and s1.device == torch.device("foo:1")
    assert F.current_stream("foo:1") == s1 == F.default_stream(1)
    assert s0 != s1 and hash(s0) != hash(s1)
    assert F.current_device() == 0  # asking about another device does not switch to it
    side = F.Stream(device=1)
    F.set_stream(side)
    assert F.current_stream(1) == side and F.current_stream(0) == s0
    assert F.default_stream(1) == s1 != side


def test_negative_or_none_device_means_current():
    assert F.current_stream(-1) == F.current_stream(None) == F.current_stream()
    assert F.Stream(device=-1).device_index == F.current_device()
    assert F.Stream(device="foo").device_index == F.current_device()


def test_current_stream_is_per_thread():
    side = F.Stream()
    F.set_stream(side)
    assert F.current_stream() == side
    # A new thread starts on the default stream, as on CUDA.
    assert _in_thread(F.current_stream) == F.default_stream()
    assert _in_thread(torch.accelerator.current_stream) == F.default_stream()

    # Setting a stream in another thread does not change this thread's current stream.
    other = F.Stream()

    def set_and_read():
        F.set_stream(other)
        return F.current_stream()

    assert _in_thread(set_and_read) == other
    assert F.current_stream() == side


# ---- Stream objects ---------------------------------------------------------------------------------------

def test_new_streams_are_distinct():
    a, b = F.Stream(), F.Stream()
    assert a != b and a != F.default_stream() and len({a, b, F.default_stream()}) == 3
    assert a == a and hash(a) == hash(F.Stream(stream_id=a.stream_id, device_index=a.device_index,
                                               device_type=a.device_type))
    assert a != 5 and not (a == None)  # noqa: E711


def test_stream_repr_names_foo():
    s = F.Stream()
    assert repr(s).startswith("<torch.foo.Stream device=foo:0 ")
    assert f"stream_id={s.stream_id}" in repr(s)
    assert "privateuseone" not in repr(s).lower()


@two_devices
def test_stream_device_arguments():
    for device in (1, "foo:1", torch.device("foo", 1)):
        s = F.Stream(device=device)
        assert s.device == torch.device("foo:1") and "device=foo:1" in repr(s)
    assert F.current_device() == 0  # creating a stream on foo:1 leaves the current device alone


def test_priorities():
    assert F.Stream.priority_range() == (0, -1)
    assert F.default_stream().priority == 0
    assert F.Stream().priority == 0
    assert F.Stream(priority=0).priority == 0
    assert F.Stream(priority=-1).priority == -1
    # Out of range maps to the nearest valid priority, as on CUDA.
    assert F.Stream(priority=-10).priority == -1
    assert F.Stream(priority=5).priority == 0
    high = F.Stream(priority=-1)
    F.set_stream(high)
    assert F.current_stream().priority == -1  # a stream rebuilt from its id keeps its priority
    # A high-priority stream runs work like any other.
    with F.stream(high):
        x = torch.arange(6.0, device="foo") * 3
    F.current_stream().wait_stream(high)
    assert x.cpu().tolist() == [0.0, 3.0, 6.0, 9.0, 12.0, 15.0]


@two_devices
def test_priority_on_second_device():
    s = F.Stream(device=1, priority=-1)
    assert s.priority == -1 and s.device_index == 1


def test_priority_of_generic_stream():
    generic = torch.Stream(device="foo", priority=-1)
    wrapped = F.Stream(stream_id=generic.stream_id, device_index=generic.device_index,
                       device_type=generic.device_type)
    assert wrapped.priority == -1


def test_wait_and_record_return_types():
    s, current = F.Stream(), F.current_stream()
    assert s.wait_stream(current) is None
    event = current.record_event()
    assert type(event) is F.Event
    assert s.wait_event(event) is None
    mine = F.Event()
    assert s.record_event(mine) is mine
    generic = torch.Event(device="foo")
    assert s.record_event(generic) is generic
    assert s.wait_event(generic) is None
    assert s.wait_stream(torch.Stream(device="foo")) is None


def test_query_after_synchronize():
    s = F.Stream()
    with F.stream(s):
        torch.ones(1000, device="foo").mul_(2)
    s.synchronize()
    assert s.query() is True
    F.synchronize()
    assert F.current_stream().query() is True


# ---- set_stream and stream contexts -----------------------------------------------------------------------

def test_set_stream():
    s = F.Stream()
    F.set_stream(s)
    assert F.current_stream() == s and torch.accelerator.current_stream() == s
    F.set_stream(None)  # no-op, as torch.cuda.set_stream
    assert F.current_stream() == s
    F.set_stream(F.default_stream())
    assert F.current_stream() == F.default_stream()


@two_devices
def test_set_stream_makes_its_device_current():
    s1 = F.Stream(device=1)
    F.set_stream(s1)
    assert F.current_device() == 1 and F.current_stream() == s1


def test_stream_context_nesting():
    default, a, b = F.current_stream(), F.Stream(), F.Stream()
    ctx = F.stream(a)
    assert isinstance(ctx, F.StreamContext)
    with ctx:
        assert F.current_stream() == a
        with F.stream(b):
            assert F.current_stream() == b
            with F.StreamContext(None):  # None is a no-op
                assert F.current_stream() == b
        assert F.current_stream() == a
        with F.stream(a):
            assert F.current_stream() == a
        assert F.current_stream() == a
    assert F.current_stream() == default


def test_stream_context_none_is_noop():
    s = F.Stream()
    F.set_stream(s)
    with F.stream(None):
        assert F.current_stream() == s
    assert F.current_stream() == s


def test_stream_context_restores_on_exception():
    default, a, b = F.current_stream(), F.Stream(), F.Stream()
    with pytest.raises(ZeroDivisionError):
        with F.stream(a):
            with F.stream(b):
                1 / 0
    assert F.current_stream() == default
    with pytest.raises(KeyError):
        with F.stream(a):
            try:
                with F.stream(b):
                    raise KeyError("inner")
            finally:
                assert F.current_stream() == a
    assert F.current_stream() == default


@two_devices
def test_stream_context_on_other_device():
    # foo:1 has a non-default current stream, which the context must restore.
    s1_prev = F.Stream(device=1)
    F.set_stream(s1_prev)
    F.set_device(0)
    s0_prev = F.Stream(device=0)
    F.set_stream(s0_prev)
    target = F.Stream(device=1)
    with F.stream(target):
        assert F.current_device() == 1
        assert F.current_stream() == target == F.current_stream(1)
        assert F.current_stream(0) == s0_prev
    assert F.current_device() == 0
    assert F.current_stream(0) == s0_prev and F.current_stream(1) == s1_prev

    with pytest.raises(RuntimeError, match="boom"):
        with F.stream(target):
            raise RuntimeError("boom")
    assert F.current_device() == 0
    assert F.current_stream(0) == s0_prev and F.current_stream(1) == s1_prev


def test_stream_as_context_manager():
    default, s = F.current_stream(), F.Stream()
    with s:
        assert F.current_stream() == s
    assert F.current_stream() == default
    with pytest.raises(ValueError):
        with s:
            raise ValueError
    assert F.current_stream() == default


# ---- interplay with the generic torch.Stream / torch.Event / torch.accelerator ---------------------------

def test_generic_and_foo_streams_interoperate():
    assert torch.accelerator.current_stream() == F.current_stream()
    assert F.current_stream() == torch.accelerator.current_stream()
    assert hash(F.current_stream()) == hash(torch.accelerator.current_stream())

    generic = torch.Stream(device="foo")
    F.set_stream(generic)
    assert F.current_stream() == generic and type(F.current_stream()) is F.Stream
    with F.stream(torch.Stream(device="foo")) as nothing:
        assert nothing is None  # as torch.cuda.StreamContext
        assert F.current_stream() != generic
    assert F.current_stream() == generic

    mine = F.Stream()
    torch.accelerator.set_stream(mine)
    assert F.current_stream() == mine and torch.accelerator.current_stream() == mine
    with torch.Stream(device="foo") as g:
        assert F.current_stream() == g
    assert F.current_stream() == mine


def test_generic_event_and_foo_stream():
    s = F.Stream()
    with F.stream(s):
        y = torch.full((64,), 2.0, device="foo").pow_(3)
    generic = torch.Event(device="foo", enable_timing=True)
    generic.record(s)  # torch.Event accepts a torch.foo.Stream
    F.current_stream().wait_event(generic)
    generic.synchronize()
    assert generic.query() is True
    assert torch.equal(y.cpu(), torch.full((64,), 8.0))


# ---- events ----------------------------------------------------------------------------------------------

def test_event_repr_and_lazy_creation():
    e = F.Event()
    assert repr(e) == "<torch.foo.Event uninitialized>"
    assert e.query() is True  # never recorded: nothing to wait for, as on CUDA
    e.synchronize()
    e.record()
    assert repr(e).startswith("<torch.foo.Event 0x")
    assert e.device == torch.device("foo:0")


def test_event_record_wait_query_synchronize():
    s = F.Stream()
    event = F.Event()
    with F.stream(s):
        x = torch.randn(256, 256, device="foo")
        y = x @ x
    assert event.record(s) is None
    assert event.wait() is None  # the current (default) stream waits for s's work so far
    event.synchronize()
    assert event.query() is True
    torch.testing.assert_close(y.cpu(), x.cpu() @ x.cpu())


def test_event_record_defaults_to_current_stream():
    s = F.Stream()
    with F.stream(s):
        e = F.Event()
        e.record()
        torch.ones(10, device="foo").add_(1)
    e.synchronize()
    assert e.query() is True
    s.synchronize()
    assert s.query() is True


def test_elapsed_time():
    start, end = F.Event(enable_timing=True), F.Event(enable_timing=True)
    x = torch.randn(128, 128, device="foo")
    start.record()
    torch.foo._sleep(5_000_000)  # 5 ms of device work, then some kernels
    for _ in range(5):
        x = x @ x / 128
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert isinstance(ms, float) and ms >= 5.0
    # A plain torch.Event with timing works as the end event too.
    generic_end = torch.Event(device="foo", enable_timing=True)
    generic_end.record()
    generic_end.synchronize()
    assert start.elapsed_time(generic_end) >= ms


def test_elapsed_time_on_side_stream_is_a_difference_of_timestamps():
    # As CUDA's: each event stamps when its stream reached it; elapsed_time subtracts the stamps, so times
    # add up along the stream and a reversed pair is negative.
    s = F.Stream()
    a, b, c = (F.Event(enable_timing=True) for _ in range(3))
    with F.stream(s):
        a.record()
        torch.ones(1000, device="foo").cumsum_(0)
        b.record()
        torch.ones(1000, device="foo").cumsum_(0)
        c.record()
    s.synchronize()
    ab, bc, ac = a.elapsed_time(b), b.elapsed_time(c), a.elapsed_time(c)
    assert 0 <= ab <= ac and 0 <= bc <= ac
    assert ab + bc == pytest.approx(ac, rel=1e-4, abs=1e-3)
    assert b.elapsed_time(a) == -ab


def test_elapsed_time_errors():
    def recorded(**kwargs):
        e = F.Event(**kwargs)
        e.record()
        e.synchronize()
        return e

    with pytest.raises(ValueError, match="enable_timing=True"):
        recorded().elapsed_time(recorded())
    with pytest.raises(ValueError, match="enable_timing=True"):
        recorded(enable_timing=True).elapsed_time(recorded())
    with pytest.raises(ValueError, match="enable_timing=True"):
        recorded().elapsed_time(recorded(enable_timing=True))
    with pytest.raises(ValueError, match="recorded"):
        F.Event(enable_timing=True).elapsed_time(recorded(enable_timing=True))
    with pytest.raises(ValueError, match="recorded"):
        recorded(enable_timing=True).elapsed_time(F.Event(enable_timing=True))
    with pytest.raises(TypeError, match="foo event"):
        recorded(enable_timing=True).elapsed_time(1.0)


def test_blocking_is_accepted():
    F.Event(blocking=True).record()


def test_an_interprocess_event_opened_from_its_handle_is_the_same_event():
    # As torch.cuda.Event(interprocess=True): ipc_handle() / Event.from_ipc_handle() reach one event; its latest
    # record, made through either object, is what both wait for (tests/test_multiprocessing.py: across processes).
    event = F.Event(interprocess=True)
    handle = event.ipc_handle()  # never recorded: it belongs to the current device
    assert isinstance(handle, bytes) and len(handle) == 64
    opened = F.Event.from_ipc_handle(0, handle)
    assert opened.query() and event.query()
    x = torch.ones(4, device="foo")
    x.add_(1), x * 10  # the operators' first calls run at once: before the hold
    with F._hold_stream() as release:
        x.add_(1)
        event.record()
        assert not opened.query()
        side = F.Stream()
        opened.wait(side)  # the side stream waits for the held work
        with F.stream(side):
            y = x * 10
        release()
    opened.synchronize()
    assert event.query() and opened.query()
    side.synchronize()
    assert y.cpu().tolist() == [30.0] * 4
    opened.record()  # recorded through the opened event: the creator's waits see it
    event.synchronize()
    assert event.query()


def test_an_interprocess_event_is_created_on_the_device_it_is_first_recorded_on():
    event = F.Event(interprocess=True)
    assert repr(event) == "<torch.foo.Event uninitialized>"
    event.record(F.default_stream(F.device_count() - 1))
    assert event.device == torch.device("foo", F.device_count() - 1)
    assert F.Event.from_ipc_handle(event.device, event.ipc_handle()).query() in (True, False)


def test_interprocess_event_errors():
    with pytest.raises(ValueError, match="interprocess event cannot measure time"):
        F.Event(enable_timing=True, interprocess=True)
    with pytest.raises(RuntimeError, match="only an event created with interprocess=True"):
        F.Event().ipc_handle()
    plain = F.Event()
    plain.record()
    with pytest.raises(RuntimeError, match="only an event created with interprocess=True"):
        plain.ipc_handle()
    with pytest.raises(RuntimeError, match="handle has 3 bytes, expected 64"):
        F.Event.from_ipc_handle(0, b"abc")


@two_devices
def test_event_across_devices():
    e = F.Event()
    e.record(F.current_stream(0))
    assert e.device == torch.device("foo:0")
    s1 = F.Stream(device=1)
    e.wait(s1)  # any device's stream may wait for it
    s1.wait_event(e)
    with pytest.raises(RuntimeError, match="device index"):
        e.record(s1)  # but only streams of its device may record it


# ---- ordering work between streams -----------------------------------------------------------------------

def test_side_stream_results_equal_cpu():
    a_cpu = torch.randn(200, 300)
    b_cpu = torch.randn(300, 100)
    a, b = a_cpu.to("foo"), b_cpu.to("foo")  # produced on the default stream
    side = F.Stream()
    side.wait_stream(F.current_stream())
    with F.stream(side):
        c = torch.relu(a @ b) + 1
        d = c.sum(dim=0)
        c.mul_(2)
    F.current_stream().wait_stream(side)
    torch.testing.assert_close(c.cpu(), (torch.relu(a_cpu @ b_cpu) + 1) * 2)
    torch.testing.assert_close(d.cpu(), (torch.relu(a_cpu @ b_cpu) + 1).sum(dim=0))


def test_chain_of_streams_with_events():
    x_cpu = torch.arange(1000, dtype=torch.float32)
    x = x_cpu.to("foo")
    s1, s2 = F.Stream(), F.Stream()
    s1.wait_stream(F.current_stream())
    with F.stream(s1):
        x.add_(1)
        done1 = s1.record_event()
    s2.wait_event(done1)
    with F.stream(s2):
        x.mul_(3)
    F.current_stream().wait_stream(s2)
    assert torch.equal(x.cpu(), (x_cpu + 1) * 3)


@two_devices
def test_side_stream_on_second_device():
    a_cpu = torch.randn(64, 64)
    a = a_cpu.to("foo:1")
    side = F.Stream(device="foo:1")
    side.wait_stream(F.current_stream(1))
    with F.stream(side):
        assert a.device == torch.device("foo:1")
        b = torch.tanh(a) @ a.t()
    assert F.current_device() == 0
    F.current_stream(1).wait_stream(side)
    with F.device(1):
        result = b.cpu()
    torch.testing.assert_close(result, torch.tanh(a_cpu) @ a_cpu.t())
    F.synchronize(1)
    assert side.query() is True


# ---- bad inputs ------------------------------------------------------------------------------------------

def test_invalid_device_index():
    n = F.device_count()
    with pytest.raises(RuntimeError, match=rf"Invalid device foo:{n}: foo has {n} device"):
        F.current_stream(n)
    with pytest.raises(RuntimeError, match=rf"Invalid device foo:{n + 7}"):
        F.default_stream(n + 7)
    with pytest.raises(RuntimeError, match="Invalid device foo"):
        F.Stream(device=n)
    with pytest.raises(RuntimeError, match="Invalid device foo"):
        F.Stream(stream_id=0, device_index=n, device_type=F.default_stream().device_type)


def test_streams_of_other_device_types_rejected():
    cpu_stream = torch.Stream(device="cpu")
    with pytest.raises(ValueError, match="foo stream.*'cpu'"):
        F.set_stream(cpu_stream)
    with pytest.raises(ValueError, match="foo stream.*'cpu'"):
        F.stream(cpu_stream)
    with pytest.raises(ValueError, match="foo stream.*'cpu'"):
        F.Stream().wait_stream(cpu_stream)
    with pytest.raises(ValueError, match="foo stream.*'cpu'"):
        F.Event().record(cpu_stream)
    with pytest.raises(ValueError, match="foo stream.*'cpu'"):
        F.Event().wait(cpu_stream)
    with pytest.raises(ValueError, match="foo"):
        F.Stream(stream_id=0, device_index=0, device_type=cpu_stream.device_type)
    assert F.current_stream() == F.default_stream()


def test_non_foo_devices_and_non_streams_rejected():
    with pytest.raises(ValueError, match="Expected a foo device"):
        F.Stream(device="cpu")
    with pytest.raises(ValueError, match="Expected a foo device"):
        F.current_stream("cuda:0")
    with pytest.raises(TypeError, match="foo stream"):
        F.set_stream("foo")
    with pytest.raises(TypeError, match="foo stream"):
        F.Event().record(0)
    with pytest.raises(TypeError, match="foo event"):
        F.Stream().wait_event(F.Stream())
    with pytest.raises(TypeError, match="foo event"):
        F.Stream().record_event("event")
