"""Work on a foo stream runs asynchronously, in stream order, as on a GPU (CONTRACT: streams/events,
non_blocking copies). Where a test needs "the stream is still busy", ``torch.foo._hold_stream()`` keeps
the stream busy until the test releases it, so nothing depends on how fast the host is; device sleeps
(``torch.foo._sleep``, as ``torch.cuda._sleep``) only give work a chance to be reordered where the
result must be the same either way. Every test ends by synchronizing."""
import contextlib
import os
import subprocess
import sys

import pytest
import torch

import foo_backend
from support.host_wait_cases import sync_debug_mode

LONG = 1_000_000_000  # cycles of the 1 GHz simulated device: 1 s
N = 1 << 16


def _warm(fn):
    """Runs fn once: the first call of a signature runs synchronously and learns its outputs' metadata."""
    fn()
    torch.foo.synchronize()


def test_host_returns_before_queued_work_ends():
    s = torch.foo.Stream()
    done = torch.foo.Event()
    with torch.foo._hold_stream(s):
        done.record(s)
        assert not s.query()
        assert not done.query()
        assert torch.foo.current_stream().query()  # other streams are not held up
    done.synchronize()
    assert done.query() and s.query()


def test_stream_order_is_kept_without_synchronizing_in_between():
    src = torch.arange(float(N)).pin_memory()
    dst = torch.zeros(N, device="foo")
    _warm(lambda: dst * 2)  # a first call would wait for the stream
    with torch.foo._hold_stream():
        dst.copy_(src, non_blocking=True)
        result = dst * 2  # same stream: runs after the copy
    assert torch.equal(result.cpu(), torch.arange(float(N)) * 2)


def test_missing_wait_stream_is_a_visible_race():
    src = torch.ones(N).pin_memory()
    dst = torch.zeros(N, device="foo")
    side = torch.foo.Stream()
    with torch.foo._hold_stream(side):
        with torch.foo.stream(side):
            dst.copy_(src, non_blocking=True)
        stale = dst.cpu()  # the default stream does not wait for the side stream
        assert stale.sum().item() == 0
    torch.foo.current_stream().wait_stream(side)
    assert dst.cpu().sum().item() == N


def test_wait_event_orders_two_streams():
    x = torch.zeros(N, device="foo")
    y = torch.empty(N, device="foo")
    producer, consumer = torch.foo.Stream(), torch.foo.Stream()
    producer.wait_stream(torch.foo.current_stream())  # x's zeros are written on the default stream
    with torch.foo._hold_stream(producer):
        with torch.foo.stream(producer):
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
    with torch.foo._hold_stream():
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
    assert start.elapsed_time(end) >= LONG // 10 / 1e6  # in ms: at least the 100 ms the stream slept


def test_pinned_source_outlives_a_pending_copy():
    src = torch.full((N,), 4.0).pin_memory()
    ptr = src.data_ptr()
    dst = torch.zeros(N, device="foo")
    with torch.foo._hold_stream():
        dst.copy_(src, non_blocking=True)
        del src
        reused = torch.empty(N).pin_memory()  # must not receive the block the pending copy reads
        assert reused.data_ptr() != ptr
        reused.fill_(-1.0)
    assert torch.equal(dst.cpu(), torch.full((N,), 4.0))


@pytest.mark.slow  # a fresh interpreter
def test_launch_blocking_runs_everything_inline():
    script = f"""
import pytest
import torch

import foo_backend
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
    with torch.foo._hold_stream(side):
        with torch.foo.stream(side):
            x.copy_(torch.ones(N).pin_memory(), non_blocking=True)  # x is still in use on the side stream
        x.record_stream(side)
        del x
        y = torch.empty(N, device="foo")
        assert y.data_ptr() != ptr
    side.synchronize()
    del y
    reused = [torch.empty(N, device="foo") for _ in range(2)]
    assert ptr in {t.data_ptr() for t in reused}


# ---- Operators: queued once their outputs' shapes are known (csrc/execution/QueuedLaunch.h) -----------------------

def test_operators_are_queued_behind_a_long_kernel():
    x = torch.randn(64, 32, device="foo")
    w = torch.randn(16, 32, device="foo")
    step = lambda: torch.nn.functional.linear(x, w).relu().sum(0)  # noqa: E731
    _warm(step)
    with torch.foo._hold_stream():
        result = step()
        assert not torch.foo.current_stream().query()  # the host returned; the kernels wait behind the hold
        assert result.shape == (16,) and result.device.type == "foo"  # metadata is known at once
    expected = torch.nn.functional.linear(x.cpu(), w.cpu()).relu().sum(0)
    assert torch.equal(result.cpu(), expected)  # reading it synchronizes


def test_a_new_signature_runs_synchronously_first():
    # erfcx has no meta function foo plans from (see the next tests for those that do).
    x = torch.randn(10, device="foo")
    torch.foo._sleep(LONG // 4)
    y = torch.special.erfcx(x)  # never seen with this signature: runs after the sleep, on the host's time
    assert torch.foo.current_stream().query()
    assert torch.equal(y.cpu(), torch.special.erfcx(x.cpu()))


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)), (8,)


def _normalized_convnet():
    return torch.nn.Sequential(
        torch.nn.Conv2d(2, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.GroupNorm(2, 4),
        torch.nn.Dropout(0.2), torch.nn.Flatten(), torch.nn.Linear(4 * 5 * 5, 3)), (2, 5, 5)


def _train_on_batch_sizes(device, sizes, make_model=_mlp):
    """SGD steps of a small classifier, the batch size changing at every step; the losses and weights."""
    generator = torch.Generator().manual_seed(0)
    model, sample_shape = make_model()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, *sample_shape, generator=generator).to(device)
    target = torch.randint(3, (64,), generator=generator).to(device)
    if device == "foo":
        torch.foo.manual_seed(1)  # dropout's draws: foo's generator gives CPU's numbers for CPU's seed
    else:
        torch.manual_seed(1)

    def step(b):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x[:b]), target[:b])
        loss.backward()
        optimizer.step()
        return loss.detach()

    losses = [step(sizes[0])]
    if device == "foo":
        torch.foo.synchronize()  # each kernel's first use with these dtypes ran at its call
    with sync_debug_mode("foo", "error") if device == "foo" else contextlib.nullcontext():
        losses += [step(b) for b in sizes[1:]]
    return torch.stack(losses).cpu(), [p.detach().cpu() for p in model.parameters()]


def test_new_shapes_of_structured_operators_are_queued_without_waiting():
    # Every operator of these steps (linear, ReLU, cross-entropy and their backward) is a structured
    # operator: a shape not seen before is planned from its meta function on the host, as CUDA's
    # structured kernels size their outputs, once its kernel ran with the same dtypes. In "error" mode a
    # host wait would raise.
    sizes = [3, 17, 64, 1, 40, 9, 33, 2]
    losses, parameters = _train_on_batch_sizes("foo", sizes)
    expected_losses, expected_parameters = _train_on_batch_sizes("cpu", sizes)
    assert torch.equal(losses, expected_losses)
    for got, want in zip(parameters, expected_parameters):
        assert torch.equal(got, want)


def test_new_batch_sizes_of_normalization_and_dropout_are_queued_without_waiting():
    # Batch and group norm, dropout and their backward (hand-written meta functions from CPU's kernels;
    # group norm's sizes are integer arguments, which stay out of its kernel key) and convolutions.
    sizes = [3, 17, 64, 1, 40, 9]
    losses, parameters = _train_on_batch_sizes("foo", sizes, _normalized_convnet)
    expected_losses, expected_parameters = _train_on_batch_sizes("cpu", sizes, _normalized_convnet)
    torch.testing.assert_close(losses, expected_losses)
    for got, want in zip(parameters, expected_parameters):
        torch.testing.assert_close(got, want)


def _embedding_bag_steps(device, sizes):
    """Embedding bags of the first b rows of fixed indices, for each b of `sizes` and each mode: the outputs
    and the weight's gradients."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(10, 4, generator=generator).to(device).requires_grad_()
    indices = torch.randint(10, (64, 3), generator=generator).to(device)
    per_sample = torch.rand(64 * 3, generator=generator).to(device)
    offsets = torch.arange(0, 64 * 3, 3).to(device)

    def step(b, mode):
        weights = per_sample[:b * 3] if mode == "sum" else None
        out = torch.nn.functional.embedding_bag(indices[:b].flatten(), weight, offsets[:b], mode=mode,
                                                per_sample_weights=weights)
        return out.detach(), torch.autograd.grad(out.sum(), weight)[0]

    results = [step(sizes[0], mode) for mode in ("sum", "mean", "max")]
    if device == "foo":
        torch.foo.synchronize()  # each kernel's first use with these dtypes ran at its call
    with sync_debug_mode("foo", "error") if device == "foo" else contextlib.nullcontext():
        results += [step(b, mode) for b in sizes[1:] for mode in ("sum", "mean", "max")]
    return [tensor.cpu() for result in results for tensor in result]


def test_new_batch_sizes_of_embedding_bags_are_queued_without_waiting():
    # (A batch of one would be a new input layout for the backward, whose gradient is then an expanded row:
    # its first call runs at the call, as any kernel's first call of a layout.)
    sizes = [3, 17, 64, 2, 40]
    for got, want in zip(_embedding_bag_steps("foo", sizes), _embedding_bag_steps("cpu", sizes)):
        torch.testing.assert_close(got, want)


# Boxed structured operators (the fallback's table of meta functions): pointwise, comparisons, reductions, scans,
# batched products; on two tensors of their own memory (operands sharing memory are learnt by running).
BOXED_STRUCTURED = {
    "exp": lambda x, y: x.exp(),
    "pow": lambda x, y: torch.pow(x, 2.0),
    "gt": lambda x, y: x > 0.5,
    "clamp": lambda x, y: torch.clamp(x, -0.5, 0.5),
    "gelu": lambda x, y: torch.nn.functional.gelu(x),
    "silu": lambda x, y: torch.nn.functional.silu(x),
    "maximum": torch.maximum,
    "mean": lambda x, y: x.mean(1),
    "amax": lambda x, y: x.amax(1),
    "argmax": lambda x, y: x.argmax(1),
    "cumsum": lambda x, y: x.cumsum(0),
    "addcmul": lambda x, y: torch.addcmul(x, x, y, value=0.5),
    "bmm": lambda x, y: torch.bmm(x.unsqueeze(0), y.t().unsqueeze(0)),
    # Indexing, concatenation, normalization, factories, out=, sorting (MetaFunctions.cpp); convolutions (FastOps).
    "gather": lambda x, y: x.gather(1, (y > 0).long()),
    "scatter_add": lambda x, y: x.scatter_add(1, (y > 0).long(), y),
    "index": lambda x, y: x[:, (y[:, 0] > 0).long()],
    "index_select": lambda x, y: x.index_select(1, (y[:, 0] > 0).long()),
    "cat": lambda x, y: torch.cat([x, y], 0),
    "where": lambda x, y: torch.where(x > 0, x, y),
    "masked_fill": lambda x, y: x.masked_fill(y > 0, 0.5),
    "layer_norm": lambda x, y: torch.nn.functional.layer_norm(x, (6,)),
    "zeros": lambda x, y: torch.zeros(x.shape[0], 3, device=x.device),
    "arange": lambda x, y: torch.arange(x.shape[0], device=x.device),
    "abs_out": lambda x, y: torch.abs(x, out=torch.empty(0, device=x.device)),
    "sort": lambda x, y: x.sort(1).values,
    "max_dim": lambda x, y: x.max(1).indices,
    "conv1d": lambda x, y: torch.nn.functional.conv1d(x.unsqueeze(1), y[:1, :3].reshape(1, 1, 3)),
    "batch_norm": lambda x, y: torch.nn.functional.batch_norm(x.view(-1, 2, 3), None, None, training=True),
    "batch_norm_channels_last": lambda x, y: torch.nn.functional.batch_norm(
        x.view(-1, 3, 2, 1).contiguous(memory_format=torch.channels_last), y[0, :3].clone(), y[0, 3:].abs(),
        y[0, :3], y[0, 3:], training=True),  # running statistics updated in copies, of a new shape each time
    "group_norm": lambda x, y: torch.nn.functional.group_norm(x.view(-1, 6, 1), 3, y[0], y[0].flip(0)),
    "dropout_backward": lambda x, y: torch.ops.aten.native_dropout_backward(x, y > 0, 2.0),
    "index_put": lambda x, y: x.clone().index_put_(((y[:, 0] > 0).long(),), y, accumulate=True),
    "index_put_mask": lambda x, y: x.clone().index_put_((y > 0,), torch.tensor(2.0)),
    "index_fill": lambda x, y: x.clone().index_fill_(1, (y[0] > 0).long(), -1.0),
    "cummax": lambda x, y: x.cummax(0).indices,
    "linspace": lambda x, y: torch.linspace(-1, 1, x.shape[0], device=x.device),
    "eye": lambda x, y: torch.eye(x.shape[0], 3, device=x.device),
}


def test_new_shapes_of_boxed_structured_operators_are_queued_without_waiting():
    generator = torch.Generator().manual_seed(0)
    x_cpu, y_cpu = torch.randn(40, 6, generator=generator), torch.randn(40, 6, generator=generator)
    x, y = x_cpu.to("foo"), y_cpu.to("foo")
    for fn in BOXED_STRUCTURED.values():
        fn(x[:3], y[:3])  # each kernel's first use with these dtypes runs at its call
    torch.foo.synchronize()
    with sync_debug_mode("foo", "error"):  # a host wait would raise
        results = [(rows, name, fn(x[:rows], y[:rows]))
                   for rows in (5, 17, 40, 1) for name, fn in BOXED_STRUCTURED.items()]
    for rows, name, got in results:
        assert torch.equal(got.cpu(), BOXED_STRUCTURED[name](x_cpu[:rows], y_cpu[:rows])), (name, rows)


def test_an_input_layout_not_seen_before_runs_once_at_the_call():
    # A kernel key holds each tensor's layout class (order of strides): a meta function that lays out an
    # output otherwise than CPU's kernel for some layout (logical_xor's, with a 0-dim operand of another
    # dtype) is caught at the first call of that layout, which runs, and never plans it.
    x_cpu = torch.arange(24, dtype=torch.int32).reshape(4, 3, 2)
    x = x_cpu.to("foo")
    number = torch.tensor(0.5)
    _warm(lambda: torch.logical_xor(x, number.to("foo")))
    for rows in (4, 2):
        got = torch.logical_xor(x[:rows].permute(2, 1, 0), number.to("foo"))
        expected = torch.logical_xor(x_cpu[:rows].permute(2, 1, 0), number)
        assert got.stride() == expected.stride() and torch.equal(got.cpu(), expected)


def test_a_new_shape_whose_values_do_not_broadcast_raises_at_the_call():
    # PyTorch's Python meta function of index_put_ does not check the values' shape; foo's checks it as CPU's
    # kernel does, so the error is raised at the call, not asynchronously.
    x = torch.zeros(6, 3, device="foo")
    index = torch.tensor([0, 2], device="foo")
    _warm(lambda: x.index_put_((index,), torch.ones(2, 3, device="foo")))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        x[:4].index_put_((index,), torch.ones(5, 3, device="foo"))
    mask = torch.ones(6, 3, dtype=torch.bool, device="foo")
    _warm(lambda: x.index_put_((mask,), torch.tensor(1.0)))
    with pytest.raises(IndexError, match="The shape of the mask"):
        x[:4].index_put_((mask,), torch.tensor(1.0))
    torch.foo.synchronize()  # nothing was left pending


def test_new_shapes_of_uniform_are_queued_and_check_their_range_at_the_call():
    _warm(lambda: torch.rand(3, device="foo"))
    torch.foo.manual_seed(5)
    with sync_debug_mode("foo", "error"):
        draws = [torch.rand(n, device="foo") for n in (5, 17, 2)]
    torch.manual_seed(5)
    for got in draws:
        assert torch.equal(got.cpu(), torch.rand(got.shape[0]))
    x = torch.empty(8, device="foo")
    with pytest.raises(RuntimeError, match=r"uniform_ expects to return a \[from, to\) range"):
        x[:5].uniform_(1, 0)
    with pytest.raises(RuntimeError, match="uniform_ expects to-from"):
        x[:6].uniform_(-3e38, 3e38)
    torch.foo.synchronize()  # nothing was left pending


def test_a_new_shape_raises_its_input_errors_at_the_call():
    a, b = torch.ones(4, 3, device="foo"), torch.ones(5, 3, device="foo")
    _warm(lambda: (a + a, a @ a.T))
    with pytest.raises(RuntimeError, match=r"size of tensor a \(4\) must match the size of tensor b \(5\)"):
        a + b
    with pytest.raises(RuntimeError, match="mat1 and mat2 shapes cannot be multiplied"):
        a @ b
    torch.foo.synchronize()  # nothing was left pending
    assert torch.equal((a[:2] + b[:2]).cpu(), torch.full((2, 3), 2.0))


def test_a_kernel_that_refuses_what_its_meta_function_accepts_raises_at_every_call():
    # CPU's softmax has no half-to-float kernel, which the meta function allows: that call never ran, so
    # each of its shapes runs at the call and raises there, never from a queued launch.
    x = torch.randn(6, 5, device="foo")
    _warm(lambda: torch._softmax(x, 1, False))
    for rows in (6, 4, 3):
        with pytest.raises(RuntimeError, match="conversion is not supported on CPU"):
            torch._softmax(x[:rows].half(), 1, True)
    torch.foo.synchronize()


def test_data_dependent_and_host_reading_operators_synchronize():
    x = torch.tensor([0.0, 1.0, 0.0, 2.0], device="foo")
    for read in (lambda: x.nonzero(), lambda: x[x > 0], lambda: x.sum().item(), lambda: x.tolist(),
                 lambda: torch.equal(x, x)):
        _warm(read)
        torch.foo._sleep(LONG // 8)
        read()
        assert torch.foo.current_stream().query()
    assert torch.equal(x.nonzero().cpu(), torch.tensor([[1], [3]]))


def test_queued_chain_with_freed_intermediates_equals_cpu():
    def chain(t):
        for _ in range(6):  # each intermediate is freed while later kernels are still queued
            t = torch.add(t, 1.0)
            t = torch.mul(t, 0.5)
            t = torch.sigmoid(t)
        return t
    x = torch.randn(1000)
    fx = x.to("foo")
    _warm(lambda: chain(fx))
    with torch.foo._hold_stream():
        result = chain(fx)
        assert not torch.foo.current_stream().query()
    assert torch.equal(result.cpu(), chain(x))


def test_a_host_scalar_is_read_when_the_kernel_is_launched():
    x = torch.ones(N, device="foo")
    scale = torch.tensor(2.0)  # a 0-dim CPU tensor, passed by value as on CUDA
    _warm(lambda: x * scale)
    with torch.foo._hold_stream():
        y = x * scale
        scale.fill_(100.0)  # changing it after the launch does not change the queued kernel's result
    assert torch.equal(y.cpu(), torch.full((N,), 2.0))


def test_in_place_and_out_operators_are_queued_in_order():
    x = torch.zeros(N, device="foo")
    out = torch.empty(N, device="foo")
    _warm(lambda: (x.add_(1), torch.mul(x, 3, out=out)))
    with torch.foo._hold_stream():
        for _ in range(5):
            x.add_(1)
        torch.mul(x, 3, out=out)
        assert not torch.foo.current_stream().query()
    assert torch.equal(out.cpu(), torch.full((N,), 18.0))  # (1 + 5) * 3
    assert x._version > 0


def test_an_empty_out_that_the_kernel_resizes_is_queued():
    # out= into an empty tensor (as composites do: abs, kthvalue, arange): the host gives it the memory and
    # layout its kernel gave it at the first call, and queues the kernel, as CUDA sizes outputs on the host.
    x_cpu = torch.arange(12.0).reshape(3, 4).t()
    x = x_cpu.to("foo")
    for call in (lambda x, out: torch.add(x, x, out=out), lambda x, out: torch.arange(7, out=out),
                 lambda x, out: torch.sum(x, 1, out=out)):
        _warm(lambda: call(x, torch.empty(0, device="foo")))
        with torch.foo._hold_stream(), sync_debug_mode("foo", "error"):  # a host wait would raise
            out = torch.empty(0, device="foo")
            assert call(x, out) is out
        expected = call(x_cpu, torch.empty(0))
        assert (out.shape, out.stride()) == (expected.shape, expected.stride())
        assert torch.equal(out.cpu(), expected)


def test_an_empty_view_of_memory_is_resized_in_that_memory_as_on_cpu():
    # An empty out= that is a view of a storage with memory is resized inside it: another signature than an
    # empty tensor without memory, so a plan that gives new memory is never used for it.
    x = torch.arange(4.0)
    for device in ("cpu", "foo"):
        for _ in range(2):
            base = torch.zeros(6, device=device)
            torch.add(x.to(device), 1, out=base[:0])
            assert torch.equal(base.cpu(), torch.tensor([1.0, 2.0, 3.0, 4.0, 0.0, 0.0]))
        _warm(lambda: torch.add(x.to("foo"), 1, out=torch.empty(0, device="foo")))


def test_a_resize_that_grows_the_storage_is_queued_after_earlier_work():
    # As CUDA's resize_, which copies the old bytes to the new memory with cudaMemcpyAsync on the current stream.
    x = torch.arange(6.0, device="foo")
    _warm(lambda: x.mul_(1))
    with torch.foo._hold_stream(), sync_debug_mode("foo", "error"):  # a host wait would raise
        x.mul_(2)
        x.resize_(4, 3)
        assert x.untyped_storage().nbytes() == 12 * 4
    assert torch.equal(x.cpu().flatten()[:6], torch.arange(6.0) * 2)


def test_a_changing_learning_rate_is_one_signature():
    # SGD with a schedule, Adam's bias correction: numbers that only scale values are signed by the dtypes
    # they convert to, not their values, so a new learning rate at every step does not make the host wait.
    p, g = torch.ones(N, device="foo"), torch.full((N,), 0.5, device="foo")
    m, v = torch.zeros(N, device="foo"), torch.ones(N, device="foo")
    _warm(lambda: (p.add_(g, alpha=-0.1), p.addcdiv_(m, v, value=-0.01), m.lerp_(g, 0.1), v.fill_(2.0)))
    with torch.foo._hold_stream(), sync_debug_mode("foo", "error"):
        for step in range(1, 6):
            p.add_(g, alpha=-0.1 / step)
            p.addcdiv_(m, v, value=-0.01 * step)
            m.lerp_(g, 1 / (step + 1))
            v.fill_(1.0 + step)
    expected_p, expected_m = torch.ones(N), torch.zeros(N)
    expected_p.add_(torch.full((N,), 0.5), alpha=-0.1)
    expected_p.addcdiv_(torch.zeros(N), torch.ones(N), value=-0.01)
    expected_m.lerp_(torch.full((N,), 0.5), 0.1)
    v_cpu = torch.full((N,), 2.0)
    for step in range(1, 6):
        expected_p.add_(torch.full((N,), 0.5), alpha=-0.1 / step)
        expected_p.addcdiv_(expected_m, v_cpu, value=-0.01 * step)
        expected_m.lerp_(torch.full((N,), 0.5), 1 / (step + 1))
        v_cpu.fill_(1.0 + step)
    assert torch.equal(p.cpu(), expected_p) and torch.equal(m.cpu(), expected_m) and torch.equal(v.cpu(), v_cpu)


def test_a_number_that_does_not_convert_to_the_dtype_raises_at_the_call():
    # Signed by the dtypes it converts to: a number out of the tensor's range is another signature, which
    # runs at the call and raises CPU's (and CUDA's) error there.
    x, n = torch.ones(4, device="foo"), torch.ones(4, dtype=torch.int32, device="foo")
    _warm(lambda: (x.fill_(2.0), n.fill_(3.0), x.add_(x, alpha=0.5)))
    for call in (lambda: x.fill_(1e300), lambda: n.fill_(3e9), lambda: x.add_(x, alpha=1e300)):
        with pytest.raises(RuntimeError, match="value cannot be converted to type"):
            call()  # queued, it would return and leave the error to the next synchronization
    torch.foo.synchronize()  # nothing was left pending
    assert torch.equal(x.cpu(), torch.full((4,), 3.0)) and torch.equal(n.cpu(), torch.full((4,), 3, dtype=torch.int32))


def test_an_error_in_a_queued_kernel_is_raised_by_the_next_synchronization():
    x = torch.randn(4, 3, device="foo")
    good = torch.tensor([0, 2], device="foo")
    _warm(lambda: x.index_select(0, good))
    bad = torch.tensor([0, 7], device="foo")  # same signature: queued; the index is checked on the device
    x.index_select(0, bad)
    try:
        torch.foo.synchronize()
        raised = None
    except RuntimeError as e:
        raised = str(e)
    assert raised is not None and "asynchronously" in raised and "foo:0" in raised
    torch.foo.synchronize()  # reported once; the device stays usable
    assert torch.equal(x.index_select(0, good).cpu(), x.cpu()[[0, 2]])


@pytest.mark.slow  # a fresh interpreter
def test_launch_blocking_raises_a_queued_kernels_error_at_the_call():
    script = """
import torch, foo_backend
x = torch.randn(4, 3, device="foo")
x.index_select(0, torch.tensor([0, 2], device="foo"))
try:
    x.index_select(0, torch.tensor([0, 7], device="foo"))
    print("no error")
except (RuntimeError, IndexError) as e:
    print("raised at the call")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "FOO_LAUNCH_BLOCKING": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "raised at the call"


def test_operators_on_a_side_stream_race_without_wait_stream():
    x = torch.ones(N, device="foo")
    side = torch.foo.Stream()
    side.wait_stream(torch.foo.current_stream())
    _warm(lambda: x.mul_(1))
    with torch.foo._hold_stream(side):
        with torch.foo.stream(side):
            x.mul_(5)  # queued on the side stream behind the hold
        assert x.sum().item() == N  # the default stream did not wait: the old values
    torch.foo.current_stream().wait_stream(side)
    assert x.sum().item() == 5 * N


def test_operators_with_data_dependent_shapes_are_never_queued():
    # unique is tagged dynamic_output_shape: a learnt signature must not fix its output's shape.
    x = torch.tensor([1.0, 2.0, 3.0], device="foo")
    _warm(lambda: torch.unique(x))
    y = torch.unique(torch.tensor([1.0, 1.0, 3.0], device="foo"))
    assert torch.equal(y.cpu(), torch.tensor([1.0, 3.0]))


# ---- What CUDA checks on the host is checked at the call, before anything is queued -----------------

def _bad_copies():
    """(name, destination, source, the copy), one per way a copy can be queued."""
    side = torch.foo.Stream()

    def on_side(dst, src):
        with torch.foo.stream(side):
            dst.copy_(src)

    def queued(dst, src):
        dst.copy_(src, non_blocking=True)

    dst, wide = torch.full((2, 3), 7.0, device="foo"), torch.ones(5, device="foo")
    return [
        ("same stream", dst, wide, torch.Tensor.copy_),
        ("side stream", dst, wide, on_side),
        ("two devices", dst, torch.ones(5, device="foo:1"), torch.Tensor.copy_),
        ("pinned to foo", dst, torch.ones(5).pin_memory(), queued),
        ("foo to pinned", torch.full((2, 3), 7.0).pin_memory(), wide, queued),
        ("into a smaller destination", torch.full((3,), 7.0, device="foo"), torch.ones(2, 3, device="foo"),
         torch.Tensor.copy_),
    ]


def test_a_bad_copy_raises_at_its_call_and_leaves_nothing_pending():
    for name, dst, src, copy in _bad_copies():
        try:
            torch.empty(dst.shape).copy_(torch.empty(src.shape))
        except RuntimeError as e:
            cpu_error = str(e)
        before = dst.cpu().clone()
        _warm(lambda: copy(dst, dst.clone()))  # a learnt, queued path for this destination
        try:
            copy(dst, src)
            raised = None
        except RuntimeError as e:
            raised = str(e)
        assert raised == cpu_error, f"{name}: {raised!r} at the call, CPU raises {cpu_error!r}"
        torch.foo.synchronize()  # nothing left pending
        assert torch.equal(dst.cpu(), before), f"{name}: the destination changed"


def test_a_copy_into_overlapping_memory_raises_at_its_call():
    dst = torch.zeros(1, device="foo").expand(3)
    src = torch.ones(3, device="foo")
    try:
        dst.copy_(src)
        raised = None
    except RuntimeError as e:
        raised = str(e)
    assert raised is not None and "single memory location" in raised
    torch.foo.synchronize()
    assert dst.cpu().tolist() == [0.0, 0.0, 0.0]


# ---- Launch signatures: everything that decides a call's outputs -----------------------------------

def test_a_queued_call_follows_the_default_dtype():
    a = torch.arange(1, 5, dtype=torch.int32)
    b = torch.full((4,), 3, dtype=torch.int32)
    fa, fb = a.to("foo"), b.to("foo")
    _warm(lambda: fa / fb)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        result, expected = fa / fb, a / b
    finally:
        torch.set_default_dtype(previous)
    torch.foo.synchronize()
    assert result.dtype == expected.dtype == torch.float64
    assert torch.equal(result.cpu(), expected)


def test_a_queued_call_with_a_python_float_follows_the_default_dtype():
    a = torch.arange(4)
    fa = a.to("foo")
    _warm(lambda: fa * 2.5)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        result, expected = fa * 2.5, a * 2.5
    finally:
        torch.set_default_dtype(previous)
    assert result.dtype == expected.dtype == torch.float64
    assert torch.equal(result.cpu(), expected)


@pytest.mark.slow  # a fresh interpreter
def test_queued_kernels_use_the_launching_threads_settings():
    # Run in a fresh process: the thread count and denormal flushing are process state. A stream worker
    # made before set_num_threads(1) must not split a matmul or a reduction differently from CPU.
    script = """
import torch, foo_backend
x = torch.randn(64, 64, device="foo")
with torch.autocast("foo", dtype=torch.bfloat16):
    (x @ x).cpu()  # the stream's worker thread exists from now on
torch.set_num_threads(1)

def train(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(25):
        xb = torch.randn(128, 256, generator=data).to(device)
        yb = torch.randint(0, 10, (128,), generator=data).to(device)
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses

print("losses_equal", train("cpu") == train("foo"))
if torch.set_flush_denormal(True):
    tiny = torch.full((1024,), 1e-40)
    foo_tiny = tiny.to("foo")
    (foo_tiny * 3.0).cpu()
    print("flushed", torch.equal((foo_tiny * 3.0).cpu(), tiny * 3.0), (tiny * 3.0).sum().item() == 0)
else:
    print("flushed True True")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["losses_equal", "True", "flushed", "True", "True"]


def test_a_future_records_its_consumers_stream_with_the_allocator():
    # ivalue::Future reports the streams that use its tensors through the guard's recordDataPtrOnStream.
    side = torch.foo.Stream()
    x = torch.zeros(N, device="foo")
    ptr = x.data_ptr()
    fut = torch.futures.Future(devices=["foo:0"])
    fut.set_result(x)
    with torch.foo._hold_stream(side):
        with torch.foo.stream(side):
            fut.wait()  # the side stream now uses x's memory
        del x, fut
        y = torch.empty(N, device="foo")
        assert y.data_ptr() != ptr  # not reused while the side stream may still read it
    torch.foo.synchronize()


def test_a_signature_whose_outputs_turn_out_to_depend_on_values_runs_synchronously_after_one_error():
    # masked_select is tagged dynamic_output_shape; queueing it anyway is what an untagged operator with
    # value-dependent outputs would do (tools/find_value_dependent_ops.py finds none in PyTorch 2.13).
    x = torch.arange(8.0, device="foo")
    two = torch.tensor([True, True] + [False] * 6, device="foo")
    five = torch.tensor([True] * 5 + [False] * 3, device="foo")
    foo_backend._C._queue_despite_tags("aten::masked_select", True)
    try:
        _warm(lambda: torch.masked_select(x, two))  # learns: one output of 2 elements
        torch.masked_select(x, five)  # queued with the learnt plan; the kernel returns 5 elements
        with pytest.raises(RuntimeError, match="masked_select returned outputs of other shapes"):
            torch.foo.synchronize()
        torch.foo.synchronize()  # reported once
        assert torch.equal(torch.masked_select(x, five).cpu(), torch.arange(5.0))  # synchronous from now on
        assert torch.equal(torch.masked_select(x, two).cpu(), torch.arange(2.0))
    finally:
        foo_backend._C._queue_despite_tags("aten::masked_select", False)


def test_a_queued_kernel_keeps_the_default_dtype_of_its_launch():
    # A CPU kernel reads the process-wide default dtype when it runs: changing it drains queued work first.
    x = torch.arange(4, device="foo")
    _warm(lambda: x / 2)
    previous = torch.get_default_dtype()
    try:
        with torch.foo._hold_stream() as release:
            y = x / 2  # queued: float32, behind the hold
            release()  # the setter below waits for the stream, so the hold must end first
            torch.set_default_dtype(torch.float64)
        torch.foo.synchronize()
    finally:
        torch.set_default_dtype(previous)
    assert y.dtype == torch.float32
    assert torch.equal(y.cpu(), torch.arange(4) / 2)


def test_the_default_dtype_setters_are_the_ones_foo_wraps():
    # foo wraps PyTorch 2.13's setters (the "default_dtype_setters" patch, foo_backend._patches); a torch that
    # moves them must fail here, loudly.
    assert foo_backend._patches.applied("default_dtype_setters")
    set_default_dtype, set_default_tensor_type = foo_backend._patches.upstream("default_dtype_setters")
    assert torch._C._set_default_dtype.__wrapped__ is set_default_dtype
    assert torch._C._set_default_tensor_type.__wrapped__ is set_default_tensor_type
    source = open(torch.__file__).read()
    assert "_C._set_default_dtype(d)" in source and "_C._set_default_tensor_type(t)" in source


def test_an_injected_launch_failure_is_raised_at_the_next_synchronization():
    # As a device-side assert: the call returns, the next synchronizing call raises, once; the device goes on.
    x = torch.ones(4, device="foo")
    _warm(lambda: (x * 2, x + 1, x.exp()))
    torch.foo.faults.fail_launch("aten::mul")
    torch.foo.faults.fail_launch("aten::exp", device=1)  # another device's: never taken here
    x + 1  # another operator
    with torch.foo._hold_stream():
        y = x * 2
    with pytest.raises(RuntimeError, match=r"foo:0 failed: device-side assert triggered in aten::mul \(injected"):
        torch.foo.synchronize()
    assert torch.equal((x * 2).cpu(), torch.full((4,), 2.0))
    assert torch.equal(x.exp().cpu(), torch.full((4,), 1.0).exp())
    with pytest.raises(RuntimeError, match="aten::exp"):
        torch.ones(2, device="foo:1").exp().cpu()
    torch.foo.synchronize(1)
    del y


def test_a_lost_device_fails_every_use_and_leaves_the_others_and_the_allocator_usable():
    x = torch.arange(4.0, device="foo:1")
    on_zero = torch.arange(4.0, device="foo:0")
    _warm(lambda: (x + 1, x * 2))
    before = torch.foo.memory_allocated(1)
    torch.foo.faults.lose_device(after=1, device=1)
    try:
        y = x + 1  # the launch before the loss
        lost = "foo:1 was lost: the device stopped responding"
        for use in (lambda: x * 2, lambda: torch.ones(3, device="foo:1"), lambda: y.cpu(),
                    lambda: torch.foo.synchronize(1), lambda: on_zero.to("foo:1")):
            with pytest.raises(RuntimeError, match=lost):
                use()
        # The other device goes on, and the lost device's tensors can still be freed.
        assert torch.equal((on_zero * 2).cpu(), torch.arange(4.0) * 2)
        del y
        assert torch.foo.memory_allocated(1) == before
    finally:
        torch.foo.faults.restore_device(1)
    assert torch.equal((x * 2).cpu(), torch.arange(4.0) * 2)
    with pytest.raises(ValueError, match="non-negative"):
        torch.foo.faults.lose_device(after=-1)


def test_an_injected_launch_failure_of_a_call_that_raises_is_not_reported():
    x = torch.ones(4, device="foo")
    torch.foo.faults.fail_launch("aten::mul")
    with pytest.raises(RuntimeError, match="must match"):
        x * torch.ones(3, device="foo")  # raised at the call: nothing was launched
    x * 2  # the failure is still armed: this call takes it
    with pytest.raises(RuntimeError, match="device-side assert triggered in aten::mul"):
        torch.foo.synchronize()
    with pytest.raises(ValueError, match="an operator's name"):
        torch.foo.faults.fail_launch("mul")


def test_an_injected_launch_failure_behind_a_pending_error_is_reported_after_it():
    x = torch.ones(4, device="foo")
    _warm(lambda: x * 2)
    torch.foo.faults.fail_launch("aten::mul")
    torch.foo.faults.fail_launch("aten::unfold")
    x * 2
    foo_backend._C._wait_for_device(0)  # the failure ran: its error is pending, not yet raised
    x.unfold(0, 2, 1)  # its failure is queued behind the pending error, not raised by the call
    with pytest.raises(RuntimeError, match="device-side assert triggered in aten::mul"):
        torch.foo.synchronize()
    torch.foo.synchronize()  # a device reports its first asynchronous error: unfold's came after it
