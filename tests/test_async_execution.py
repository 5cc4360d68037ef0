"""Work on a foo stream runs asynchronously, in stream order, as on a GPU (CONTRACT: streams/events,
non_blocking copies). ``torch.foo._sleep`` is ``torch.cuda._sleep``: a kernel that keeps its stream busy.
Device sleeps are long (seconds) so that "still running" holds however slow the host is; every test ends
by synchronizing, so nothing depends on how long they really take."""
import os
import subprocess
import sys

import torch

LONG = 1_000_000_000  # cycles of the 1 GHz simulated device: 1 s
N = 1 << 16


def test_host_returns_before_a_long_kernel_ends():
    s = torch.foo.Stream()
    done = torch.foo.Event()
    with torch.foo.stream(s):
        torch.foo._sleep(LONG)
        done.record()
    assert not s.query()
    assert not done.query()
    assert torch.foo.current_stream().query()  # other streams are not held up
    done.synchronize()
    assert done.query() and s.query()


def test_stream_order_is_kept_without_synchronizing_in_between():
    src = torch.arange(float(N)).pin_memory()
    dst = torch.zeros(N, device="foo")
    torch.foo._sleep(LONG // 4)
    dst.copy_(src, non_blocking=True)
    result = dst * 2  # same stream: runs after the copy
    assert torch.equal(result.cpu(), torch.arange(float(N)) * 2)


def test_missing_wait_stream_is_a_visible_race():
    src = torch.ones(N).pin_memory()
    dst = torch.zeros(N, device="foo")
    side = torch.foo.Stream()
    with torch.foo.stream(side):
        torch.foo._sleep(LONG)
        dst.copy_(src, non_blocking=True)
    stale = dst.cpu()  # the default stream does not wait for the side stream
    assert stale.sum().item() == 0
    torch.foo.current_stream().wait_stream(side)
    assert dst.cpu().sum().item() == N


def test_wait_event_orders_two_streams():
    x = torch.zeros(N, device="foo")
    y = torch.empty(N, device="foo")
    producer, consumer = torch.foo.Stream(), torch.foo.Stream()
    with torch.foo.stream(producer):
        torch.foo._sleep(LONG // 4)
        x.copy_(torch.full((N,), 3.0).pin_memory(), non_blocking=True)
        ready = producer.record_event()
    with torch.foo.stream(consumer):
        consumer.wait_event(ready)
        y.copy_(x)  # foo->foo: asynchronous, after the wait
    assert not consumer.query()
    consumer.synchronize()
    assert torch.equal(y.cpu(), torch.full((N,), 3.0))


def test_non_blocking_device_to_host_needs_a_synchronize():
    x = torch.full((N,), 5.0, device="foo")
    torch.foo._sleep(LONG // 2)
    host = x.to("cpu", non_blocking=True)
    assert host.is_pinned()
    assert host.sum().item() != 5.0 * N  # not copied yet: the host must synchronize first
    torch.foo.synchronize()
    assert host.sum().item() == 5.0 * N


def test_pageable_copies_and_reads_wait_for_queued_work():
    src = torch.arange(float(N)).pin_memory()
    dst = torch.zeros(N, device="foo")
    torch.foo._sleep(LONG // 4)
    dst.copy_(src, non_blocking=True)
    assert dst[7].item() == 7.0  # .item() waits for the stream, as on CUDA
    torch.foo._sleep(LONG // 4)
    dst.copy_(torch.full((N,), 2.0), non_blocking=True)  # pageable source: done when it returns
    assert torch.foo.current_stream().query()
    assert torch.equal(dst.cpu(), torch.full((N,), 2.0))


def test_elapsed_time_measures_device_work():
    start, end = torch.foo.Event(enable_timing=True), torch.foo.Event(enable_timing=True)
    start.record()
    torch.foo._sleep(LONG // 10)
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) > 0


def test_pinned_source_outlives_a_pending_copy():
    src = torch.full((N,), 4.0).pin_memory()
    ptr = src.data_ptr()
    dst = torch.zeros(N, device="foo")
    torch.foo._sleep(LONG // 4)
    dst.copy_(src, non_blocking=True)
    del src
    reused = torch.empty(N).pin_memory()  # must not receive the block the pending copy reads
    assert reused.data_ptr() != ptr
    reused.fill_(-1.0)
    assert torch.equal(dst.cpu(), torch.full((N,), 4.0))


def test_launch_blocking_runs_everything_inline():
    script = f"""
import torch
src = torch.ones({N}).pin_memory()
dst = torch.zeros({N}, device="foo")
side = torch.foo.Stream()
with torch.foo.stream(side):
    torch.foo._sleep(10_000_000)
    print(side.query())
    dst.copy_(src, non_blocking=True)
print(dst.cpu().sum().item())
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "FOO_LAUNCH_BLOCKING": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", f"{float(N)}"]  # the race above cannot happen


def test_caching_allocator_is_stream_ordered():
    x = torch.empty(N, device="foo")
    ptr = x.data_ptr()
    del x
    side = torch.foo.Stream()
    with torch.foo.stream(side):
        on_side = torch.empty(N, device="foo")  # a block freed on the default stream stays with it
    assert on_side.data_ptr() != ptr
    again = torch.empty(N, device="foo")  # same stream: reused at once, its queued work comes first
    assert again.data_ptr() == ptr


def test_record_stream_delays_reuse_until_the_other_stream_is_done():
    x = torch.zeros(N, device="foo")
    ptr = x.data_ptr()
    side = torch.foo.Stream()
    side.wait_stream(torch.foo.current_stream())
    with torch.foo.stream(side):
        torch.foo._sleep(LONG // 4)
        x.copy_(torch.ones(N).pin_memory(), non_blocking=True)  # x is still in use on the side stream
    x.record_stream(side)
    del x
    y = torch.empty(N, device="foo")
    assert y.data_ptr() != ptr
    side.synchronize()
    del y
    reused = [torch.empty(N, device="foo") for _ in range(2)]
    assert ptr in {t.data_ptr() for t in reused}
