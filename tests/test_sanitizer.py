"""torch.foo.sanitizer: planted stream bugs, each caught at the call that causes it, and its corrected twin
silent with CPU's results (a false positive is a defect too).

The planted programs follow the ideas of PyTorch's CUDA sanitizer tests (test/test_cuda_sanitizer.py) and of
torch_npu's stream-check tests: a producer and a consumer on two streams, ordered or not; memory freed while
another stream uses it; views into one storage; copies, host reads, graphs, compiled and custom kernels. Each
bug is planted on a call's first run (it learns its launch plan, running at once) and on a queued one.
"""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import foo_backend

N = 4096


@pytest.fixture
def sanitizer():
    torch.foo.synchronize()
    torch.foo.sanitizer.enable()
    yield
    torch.foo.sanitizer.disable()
    torch.foo.synchronize()


@pytest.fixture(params=["first call", "queued"])
def path(request):
    """How the racing call runs: its first call (run at once, after its stream) or a queued one."""
    foo_backend._C._forget_launch_plans()
    return request.param


def learn(path, op):
    """Makes `op`'s later calls queued when `path` asks for it (calls it once, ordered, on fresh tensors)."""
    if path == "queued":
        op()
        torch.foo.synchronize()


def default():
    return torch.foo.default_stream()


def caught(kind=""):
    return pytest.raises(RuntimeError, match=f"foo sanitizer: {kind}")


# ---- A producer on the default stream, a consumer on a side stream ------------------------------------

def _producer_consumer(order):
    """y = x * 2 on the default stream, then y + 1 on a side stream, ordered as `order` says."""
    side = torch.foo.Stream()
    x = torch.arange(N, dtype=torch.float32, device="foo")
    side.wait_stream(default())  # x is ready for both streams
    event = torch.foo.Event()
    if order == "event recorded before the write":
        event.record()
    y = x * 2
    if order == "wait_stream":
        side.wait_stream(default())
    elif order == "event":
        event.record()
        side.wait_event(event)
    elif order == "event recorded before the write":
        side.wait_event(event)
    elif order == "event synchronize":
        event.record()
        event.synchronize()
    elif order == "stream synchronize":
        default().synchronize()
    elif order == "device synchronize":
        torch.foo.synchronize()
    elif order == "query":
        while not default().query():
            pass
    with torch.foo.stream(side):
        z = y + 1
    default().wait_stream(side)
    return z


@pytest.mark.parametrize("order", [None, "event recorded before the write"])
def test_a_consumer_not_ordered_after_its_producer_is_caught(sanitizer, path, order):
    learn(path, lambda: _producer_consumer("wait_stream"))
    with caught("read after write"):
        _producer_consumer(order)


@pytest.mark.parametrize("order", ["wait_stream", "event", "event synchronize", "stream synchronize",
                                   "device synchronize", "query"])
def test_a_consumer_ordered_after_its_producer_is_silent(sanitizer, path, order):
    learn(path, lambda: _producer_consumer(order))
    z = _producer_consumer(order)
    assert torch.equal(z.cpu(), torch.arange(N, dtype=torch.float32) * 2 + 1)


def _consumer_then_producer(producer_waits):
    """y + 1 on a side stream, then y.mul_(3) on the default stream, after the side stream or not."""
    side = torch.foo.Stream()
    y = torch.ones(N, device="foo")
    side.wait_stream(default())
    with torch.foo.stream(side):
        z = y + 1  # the consumer reads y
    if producer_waits:
        default().wait_stream(side)
    y.mul_(3)  # the producer writes y again
    default().wait_stream(side)
    return y, z


def test_a_producer_overwriting_what_a_consumer_reads_is_caught(sanitizer, path):
    learn(path, lambda: _consumer_then_producer(True))
    with caught("write after read"):
        _consumer_then_producer(False)


def test_a_producer_waiting_for_its_consumer_is_silent(sanitizer, path):
    learn(path, lambda: _consumer_then_producer(True))
    y, z = _consumer_then_producer(True)
    assert torch.equal(y.cpu(), torch.full((N,), 3.0)) and torch.equal(z.cpu(), torch.full((N,), 2.0))


@pytest.mark.parametrize("overlap", [False, True])
def test_views_of_one_storage_race_only_where_they_overlap(sanitizer, path, overlap):
    def program(first_of_b):
        side = torch.foo.Stream()
        buffer = torch.zeros(2 * N, device="foo")
        side.wait_stream(default())
        buffer[:N].fill_(1)  # the default stream writes the first half
        with torch.foo.stream(side):
            buffer[first_of_b:].add_(2)  # the side stream writes from first_of_b on
        default().wait_stream(side)
        return buffer

    learn(path, lambda: program(N))
    if overlap:
        with caught("write after write"):
            program(N - 1)
    else:
        expected = torch.cat([torch.ones(N), torch.full((N,), 2.0)])
        assert torch.equal(program(N).cpu(), expected)


# ---- Memory freed while another stream uses it --------------------------------------------------------

@pytest.mark.parametrize("record_stream", [False, True])
def test_memory_freed_without_record_stream_is_caught_when_reused(sanitizer, path, record_stream):
    side = torch.foo.Stream()

    def program():
        x = torch.ones(N, device="foo")
        side.wait_stream(default())
        with torch.foo.stream(side):
            z = x * 2  # the side stream reads x, allocated on the default stream
        if record_stream:
            x.record_stream(side)
        del x
        return z, torch.empty(N, device="foo")  # the same size: the freed block, when the allocator may reuse it

    if path == "queued":
        x = torch.ones(N, device="foo")
        x * 2
        torch.foo.synchronize()
    if record_stream:
        z, _ = program()
        default().wait_stream(side)
        assert torch.equal(z.cpu(), torch.full((N,), 2.0))
    else:
        with caught("memory freed while another stream may still use it is reused") as error:
            program()
        assert "Tensor.record_stream" in str(error.value) and "Stack of the free" in str(error.value)


# ---- Memory never written ----------------------------------------------------------------------------

@pytest.mark.parametrize("written", ["half", "all"])
def test_a_read_of_memory_never_written_is_caught(sanitizer, path, written):
    torch.foo.sanitizer.enable(check_initialization=True)

    def program(rows):
        x = torch.empty(8, 4, device="foo")
        x[:rows].fill_(1.0)
        return x.sum(dim=1)

    learn(path, lambda: program(8))
    if written == "all":
        assert torch.equal(program(8).cpu(), torch.full((8,), 4.0))
    else:
        with caught("a read of memory never written since its allocation") as error:
            program(4)
        assert "aten::sum on foo:0 (default stream), which reads a tensor of shape [8, 4]" in str(error.value)


@pytest.mark.parametrize("dtype,poison", [(torch.float32, "nan"), (torch.int32, -1), (torch.uint8, 255)])
def test_memory_handed_out_is_poisoned(sanitizer, dtype, poison):
    values = torch.empty(16, dtype=dtype, device="foo").cpu()
    if poison == "nan":
        assert values.isnan().all()
    else:
        assert (values == poison).all()


def test_a_graph_reads_what_its_own_launches_wrote(sanitizer):
    torch.foo.sanitizer.enable(check_initialization=True)
    x = torch.ones(N, device="foo")
    graph = torch.foo.FooGraph()
    with torch.foo.graph(graph):
        y = x * 2  # memory allocated in the capture, written by its first launch
        z = y + 1  # and read by the next
    graph.replay()
    graph.replay()
    assert torch.equal(z.cpu(), torch.full((N,), 3.0))


# ---- Copies and host reads ----------------------------------------------------------------------------

@pytest.mark.parametrize("ordered", [False, True])
def test_a_non_blocking_copy_from_pinned_memory_on_a_side_stream(sanitizer, path, ordered):
    def program(ordered):
        side = torch.foo.Stream()
        source = torch.arange(N, dtype=torch.float32).pin_memory()
        with torch.foo.stream(side):
            on_device = source.to("foo", non_blocking=True)  # the side stream writes it
        if ordered:
            default().wait_stream(side)
        result = on_device * 2
        default().wait_stream(side)
        return result

    learn(path, lambda: program(True))
    if ordered:
        assert torch.equal(program(True).cpu(), torch.arange(N, dtype=torch.float32) * 2)
    else:
        with caught("read after write"):
            program(False)


@pytest.mark.parametrize("read", ["cpu", "item", "tolist", "numpy"])
@pytest.mark.parametrize("ordered", [False, True])
def test_a_host_read_of_a_side_streams_result(sanitizer, path, read, ordered):
    side = torch.foo.Stream()
    x = torch.arange(4, dtype=torch.float32, device="foo")
    side.wait_stream(default())
    learn(path, lambda: x * 2)
    with torch.foo.stream(side):
        y = x * 2
    if ordered:
        side.synchronize()
    reads = {"cpu": lambda: y.cpu().tolist(), "item": lambda: y[1].item(), "tolist": y.tolist,
             "numpy": lambda: y.cpu().numpy().tolist()}
    if ordered:
        assert reads[read]() == {"item": 2.0}.get(read, [0.0, 2.0, 4.0, 6.0])
    else:
        with caught("read after write"):
            reads[read]()


# ---- Graphs, compiled kernels, custom operators ------------------------------------------------------

@pytest.mark.parametrize("ordered", [False, True])
def test_a_graph_replay_is_checked_as_the_launches_it_captured(sanitizer, ordered):
    x = torch.ones(N, device="foo")
    graph = torch.foo.FooGraph()
    with torch.foo.graph(graph):
        y = x * 2
    side = torch.foo.Stream()
    side.wait_stream(default())
    with torch.foo.stream(side):
        x.add_(1)  # the side stream writes what the graph reads
    if ordered:
        default().wait_stream(side)
        graph.replay()
        assert torch.equal(y.cpu(), torch.full((N,), 4.0))
    else:
        with caught("read after write") as error:
            graph.replay()
        assert "replays a graph" in str(error.value)
        default().wait_stream(side)


@pytest.mark.parametrize("ordered", [False, True])
def test_a_custom_operator_on_a_side_stream(sanitizer, ordered):
    x = torch.randn(8, 16, device="foo", generator=torch.Generator("foo").manual_seed(0))
    weight = torch.ones(16, device="foo")
    side = torch.foo.Stream()
    if ordered:
        side.wait_stream(default())
    with torch.foo.stream(side):
        if ordered:
            y = torch.ops.foo.rms_norm(x, weight, 1e-6)
        else:
            with caught("read after write"):
                torch.ops.foo.rms_norm(x, weight, 1e-6)
            return
    default().wait_stream(side)
    cpu = torch.ops.foo.rms_norm(x.cpu(), weight.cpu(), 1e-6)
    torch.testing.assert_close(y.cpu(), cpu)


@pytest.mark.parametrize("cpp_wrapper", [False, True])
@pytest.mark.parametrize("ordered", [False, True])
def test_a_compiled_kernel_on_a_side_stream(sanitizer, ordered, cpp_wrapper):
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: t * 2 + 1, options={"cpp_wrapper": cpp_wrapper})
    x = torch.arange(N, dtype=torch.float32, device="foo")
    compiled(x)  # compiled, ordered
    side = torch.foo.Stream()
    side.wait_stream(default())
    y = x.neg()
    if ordered:
        side.wait_stream(default())
    with torch.foo.stream(side):
        if not ordered:
            with caught("read after write") as error:
                compiled(y)
            assert "cpp_fused" in str(error.value) or "kernel" in str(error.value)
            return
        z = compiled(y)
    default().wait_stream(side)
    assert torch.equal(z.cpu(), -torch.arange(N, dtype=torch.float32) * 2 + 1)


# ---- The report, and what a hazard leaves behind ------------------------------------------------------

def _plant_race():
    side = torch.foo.Stream()
    x = torch.ones(4, 8, device="foo")
    side.wait_stream(default())
    x[1:3].mul_(5)  # producer: the default stream writes rows 1 and 2
    with torch.foo.stream(side):
        return x[2], side  # the caller's consumer reads row 2


def test_a_report_names_both_launches_their_streams_the_tensor_and_both_stacks(sanitizer):
    row, side = _plant_race()
    with torch.foo.stream(side):
        with caught("read after write between two streams") as error:
            row.sum()
    report = str(error.value)
    assert f"This call:   aten::sum on foo:0 stream {side.stream_id}, which reads a tensor of shape [8], " \
           "dtype torch.float32, storage offset 16" in report
    assert "Racing with: aten::mul_ on foo:0 (default stream), which writes a tensor of shape [2, 8], " \
           "dtype torch.float32, storage offset 8" in report
    assert "on the same 32 bytes" in report  # the overlap: one row of 8 floats
    this_stack, earlier_stack = report.split("Stack of this call")[1].split("Stack of the earlier launch")
    assert "in test_a_report_names_both_launches_their_streams_the_tensor_and_both_stacks" in this_stack
    assert "in _plant_race" in earlier_stack and "in _plant_race" not in this_stack


def test_a_refused_call_launches_nothing_and_leaves_its_inputs_intact(sanitizer):
    row, side = _plant_race()
    with torch.foo.stream(side):
        with caught():
            row.add_(1)  # refused: not launched
        side.wait_stream(default())
        row.add_(1)  # ordered now
    default().wait_stream(side)
    expected = torch.ones(4, 8)
    expected[1:3] *= 5
    expected[2] += 1
    assert torch.equal(row._base.cpu(), expected)


def test_warn_only_reports_and_goes_on(sanitizer):
    torch.foo.sanitizer.enable(warn_only=True)
    row, side = _plant_race()
    with torch.foo.stream(side):
        with pytest.warns(UserWarning, match="foo sanitizer: read after write"):
            total = row.sum()
    default().wait_stream(side)
    assert total.item() in (8.0, 40.0)  # launched: whichever order the streams ran in


def test_enabled_from_the_environment():
    script = textwrap.dedent("""
        import torch
        print(torch.foo.sanitizer.is_enabled())
        side = torch.foo.Stream()
        x = torch.ones(8, device="foo")
        with torch.foo.stream(side):
            x + 1
        torch.empty(4, device="foo").sum()  # reads memory never written
        """)
    for setting, enabled in (("1", True), ("warn", True), ("warn,initcheck", True), ("0", False)):
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                             env={**os.environ, "FOO_SANITIZER": setting})
        assert out.stdout.split() == [str(enabled)], out.stderr
        assert (out.returncode != 0) == (setting == "1"), out.stderr
        assert ("never written" in out.stderr) == (setting == "warn,initcheck"), out.stderr
        assert ("foo sanitizer: read after write" in out.stderr) == enabled, out.stderr
