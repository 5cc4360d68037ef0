"""Graph capture and replay on foo (torch.foo.FooGraph, torch.foo.graph, torch.accelerator.Graph), against
eager results and CUDA's documented semantics: capture on a side stream after a warm-up, static inputs and
outputs, a private memory pool per graph (shareable), random operators that draw at each replay what eager
calls would draw, and "operation not permitted when stream is capturing" for whatever would make the host
wait for the capturing stream."""
import os

import pytest
import torch

CAPTURE_ERROR = "operation not permitted when stream is capturing"


def warm_up(fn, *args):
    """Runs fn on a side stream first, as CUDA's docs ask before a capture (foo learns each operator's
    outputs on its first call, synchronously)."""
    side = torch.foo.Stream()
    side.wait_stream(torch.foo.current_stream())
    with torch.foo.stream(side):
        for _ in range(2):
            fn(*args)
    torch.foo.current_stream().wait_stream(side)


def pointwise_and_reduction(a, w):
    return torch.relu(a * w + 1).sum(0, keepdim=True), (a @ w.t()).tanh()


def test_replay_recomputes_on_new_input_values():
    torch.manual_seed(0)
    w = torch.randn(16, 8, device="foo")
    static_input = torch.randn(16, 8, device="foo")
    warm_up(pointwise_and_reduction, static_input, w)
    graph = torch.foo.FooGraph()
    with torch.foo.graph(graph):
        static_outputs = pointwise_and_reduction(static_input, w)
    for _ in range(3):
        data = torch.randn(16, 8)
        static_input.copy_(data)  # queued on the current stream, before the replay
        graph.replay()
        for got, expected in zip(static_outputs, pointwise_and_reduction(data, w.cpu())):
            torch.testing.assert_close(got.cpu(), expected)


def test_capture_records_without_running():
    x = torch.zeros(4, device="foo")
    warm_up(lambda t: t.add_(1), x.clone())
    graph = torch.foo.FooGraph()
    with torch.foo.graph(graph):
        x.add_(1)
    assert x.cpu().eq(0).all()  # captured, not run
    graph.replay()
    graph.replay()
    assert x.cpu().eq(2).all()


def test_accelerator_graph_on_foo():
    x = torch.arange(6.0, device="foo")
    warm_up(lambda t: t * 3, x)
    graph = torch.accelerator.Graph()
    with torch.foo.Stream(), graph:
        y = x * 3
    x.fill_(2)
    graph.replay()
    assert y.cpu().eq(6).all()
    assert isinstance(torch.foo.FooGraph(), torch.accelerator.Graph)


def test_outputs_live_in_the_graphs_private_pool_until_reset():
    x = torch.ones(1000, device="foo")
    warm_up(lambda t: t * 2, x)
    graph = torch.foo.FooGraph()
    with torch.foo.graph(graph):
        y = x * 2
    pool = graph.pool()
    assert pool != (0, 0)
    segments = [s for s in torch.foo.memory_snapshot() if s["device"] == 0]
    owned = [s for s in segments if tuple(s["segment_pool_id"]) == tuple(pool)]
    address = y.untyped_storage().data_ptr()
    assert any(b["address"] == address for s in owned for b in s["blocks"])
    # Memory of the pool is never handed to tensors allocated outside a capture.
    others = [torch.empty(1000, device="foo") for _ in range(8)]
    pool_blocks = {b["address"] for s in owned for b in s["blocks"]}
    assert not any(t.untyped_storage().data_ptr() in pool_blocks for t in others)
    graph.replay()
    assert y.cpu().eq(2).all()
    graph.reset()
    del y

    def pool_segments():
        return [s for s in torch.foo.memory_snapshot() if tuple(s["segment_pool_id"]) == tuple(pool)]

    # As CUDA's: a pool no graph uses is freeable, its segments go back to the device when the cache is emptied.
    assert pool_segments() != [] and all(b["state"] == "inactive" for s in pool_segments() for b in s["blocks"])
    torch.foo.empty_cache()
    assert pool_segments() == []


def test_a_released_graph_keeps_its_memory_from_the_replay_still_queued():
    """Memory a graph's replay writes is not handed to new tensors while that replay is queued: deleting the
    graph and its outputs frees nothing the device still uses (CUDA gives a graph pool's segments back with
    cudaFree, which waits for the device)."""
    x = torch.randn(1 << 20, device="foo")
    stream = torch.foo.Stream()
    graph = torch.foo.FooGraph()
    with torch.foo.graph(graph, stream=stream):
        y = (x * 2 + 1).sin()
    written = y.data_ptr()
    with torch.foo._hold_stream(stream):
        with torch.foo.stream(stream):
            graph.replay()  # queued behind the hold
        del graph, y
        fresh = [torch.zeros(1 << 20, device="foo") for _ in range(4)]  # on the default stream, not held
        torch.foo.current_stream().synchronize()
        assert all(t.data_ptr() != written for t in fresh)
    torch.foo.synchronize()
    assert all(t.count_nonzero().item() == 0 for t in fresh)


def test_graphs_share_a_pool_handle():
    pool = torch.foo.graph_pool_handle()
    x = torch.ones(10, device="foo")
    warm_up(lambda t: (t + 1, t - 1), x)
    first, second = torch.foo.FooGraph(), torch.foo.FooGraph()
    with torch.foo.graph(first, pool=pool):
        a = x + 1
    with torch.foo.graph(second, pool=pool):
        b = x - 1
    assert first.pool() == second.pool() == pool
    ids = {tuple(s["segment_pool_id"]) for s in torch.foo.memory_snapshot()
           if any(blk["address"] in (a.untyped_storage().data_ptr(), b.untyped_storage().data_ptr())
                  for blk in s["blocks"])}
    assert ids == {tuple(pool)}
    first.replay()
    second.replay()
    assert a.cpu().eq(2).all() and b.cpu().eq(0).all()


def test_is_current_stream_capturing():
    x = torch.ones(3, device="foo")
    warm_up(torch.neg, x)
    assert not torch.foo.is_current_stream_capturing()
    graph = torch.foo.FooGraph()
    with torch.foo.graph(graph):
        torch.neg(x)
        inside = torch.foo.is_current_stream_capturing()
    assert inside and not torch.foo.is_current_stream_capturing()


@pytest.mark.parametrize("operation", ["synchronize", "item", "cpu", "first_call", "first_random_call"])
def test_what_would_wait_for_the_capturing_stream_raises(operation):
    x = torch.ones(8, device="foo")
    odd = torch.ones(5, 3, 11, device="foo")
    warm_up(lambda t: t + 1, x)
    graph = torch.foo.FooGraph()
    with pytest.raises(RuntimeError, match=CAPTURE_ERROR):
        with torch.foo.graph(graph):
            x + 1
            if operation == "synchronize":
                torch.foo.synchronize()
            elif operation == "item":
                x.sum().item()
            elif operation == "cpu":
                x.cpu()
            elif operation == "first_call":
                torch.special.erfcx(odd)  # a signature this process has not run yet
            else:
                torch.poisson(odd)  # a random operator without a meta function foo plans from, not run yet
    # The failed capture left the device usable.
    graph.reset()
    assert (x + 1).cpu().eq(2).all()
    torch.foo.synchronize()


def test_structured_operators_not_seen_before_are_captured_as_on_cuda():
    # CUDA captures a kernel it never ran. foo plans such a call from its operator's meta function (the
    # structured operators: arithmetic, matrix products, softmax, losses...), so a capture records it.
    generator = torch.Generator().manual_seed(0)
    x_cpu, w_cpu = torch.randn(13, 11, generator=generator), torch.randn(17, 11, generator=generator)
    target_cpu = torch.randint(17, (13,), generator=generator)
    x, w, target = x_cpu.to("foo"), w_cpu.to("foo"), target_cpu.to("foo")
    warm_up(lambda: x * 2)

    def step(x, w, target):
        y = x * 2 + 1  # the addition's shape is new; its output shape too for the ones below
        return torch.nn.functional.cross_entropy(y @ w.T, target), torch.sigmoid(y).sum(1)

    graph = torch.foo.FooGraph()
    with torch.foo.graph(graph):
        outputs = step(x, w, target)
    x.copy_(x_cpu * 3)
    graph.replay()
    for got, want in zip(outputs, step(x_cpu * 3, w_cpu, target_cpu)):
        torch.testing.assert_close(got.cpu(), want)


def test_an_empty_capture_warns_as_on_cuda():
    x = torch.ones(4, device="foo")  # filled on the default stream
    graph = torch.foo.FooGraph()
    with torch.foo.stream(torch.foo.Stream()):
        with pytest.warns(UserWarning, match="The foo graph is empty"):
            graph.capture_begin()
            other = torch.foo.Stream()
            other.wait_stream(torch.foo.default_stream())  # after the fill (without it, a race)
            with torch.foo.stream(other):
                x.add_(1)  # on another stream: not captured, run
            graph.capture_end()
    graph.replay()
    torch.foo.synchronize()
    assert x.cpu().eq(2).all()


def test_capture_on_the_default_stream_is_refused():
    graph = torch.foo.FooGraph()
    with pytest.raises(RuntimeError, match="default stream"):
        graph.capture_begin()


def test_compiled_kernels_are_captured():
    import torch._dynamo
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    x = torch.randn(64, device="foo")
    with inductor_config.patch(compile_threads=1):
        fn = torch.compile(lambda a: torch.sin(a) * 2 + 1)
        warm_up(fn, x)
        graph = torch.foo.FooGraph()
        with torch.foo.graph(graph):
            y = fn(x)
    torch._dynamo.reset()
    x.copy_(torch.linspace(-1, 1, 64))
    graph.replay()
    torch.testing.assert_close(y.cpu(), torch.sin(torch.linspace(-1, 1, 64)) * 2 + 1)


def test_compiled_random_kernels_are_captured():
    import torch._dynamo
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    x = torch.ones(64, device="foo")
    with inductor_config.patch(compile_threads=1):
        fn = torch.compile(lambda a: torch.nn.functional.dropout(a, 0.5, training=True) * 2 + torch.rand_like(a))
        graph, y = capture(fn, x)
        torch.foo.manual_seed(3)
        eager = [fn(x).cpu() for _ in range(2)]
    torch._dynamo.reset()
    torch.foo.manual_seed(3)
    for expected in eager:
        graph.replay()
        assert torch.equal(y.cpu(), expected)
    assert not torch.equal(eager[0], eager[1])


def test_debug_dump_lists_the_captured_launches(tmp_path):
    x = torch.ones(4, device="foo")
    warm_up(lambda t: (t * 2).exp(), x)
    graph = torch.foo.FooGraph()
    graph.enable_debug_mode()
    with torch.foo.graph(graph):
        (x * 2).exp()
    path = tmp_path / "graph.txt"
    graph.debug_dump(str(path))
    lines = path.read_text().splitlines()
    assert lines[0] == "foo graph on foo:0, 2 launches"
    assert lines[1:] == ["0 aten::mul kernel", "1 aten::exp kernel"]


def train_step(model, optimizer, x, target):
    optimizer.zero_grad(set_to_none=False)
    loss = torch.nn.functional.mse_loss(model(x), target)
    loss.backward()
    optimizer.step()
    return loss


def assert_captured_step_trains_as_eager_cpu(reference, make_optimizer, x, target):
    """A copy of `reference` on foo trains with one step captured in a graph and replayed; `reference` trains
    eagerly on CPU. Warm-up steps on both sides first (the optimizer's state exists before the capture, which
    then records its updates); both sides seeded alike, through foo's generator and CPU's (dropout)."""
    import copy

    model = copy.deepcopy(reference).foo()
    optimizer, reference_optimizer = make_optimizer(model.parameters(), True), make_optimizer(reference.parameters())
    static_x, static_target = x.foo(), target.foo()
    torch.foo.manual_seed(1)
    warm_up(lambda: train_step(model, optimizer, static_x, static_target))  # 2 steps
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        for _ in range(2):
            train_step(reference, reference_optimizer, x, target)
        graph = torch.foo.FooGraph()
        with torch.foo.graph(graph):
            static_loss = train_step(model, optimizer, static_x, static_target)
        torch.foo.manual_seed(2)
        torch.manual_seed(2)
        for _ in range(4):
            graph.replay()
            expected = train_step(reference, reference_optimizer, x, target)
            torch.testing.assert_close(static_loss.cpu(), expected.detach())
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.cpu(), q.detach())


def test_a_whole_training_step_is_captured_and_replayed():
    """Forward, backward and Adam(capturable=True) in one graph: replays train as eager CPU does."""
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
    assert_captured_step_trains_as_eager_cpu(
        reference, lambda params, capturable=False: torch.optim.Adam(params, lr=0.01, capturable=capturable),
        torch.randn(4, 8), torch.randn(4, 2))

@pytest.mark.filterwarnings("ignore:The AccumulateGrad node's stream")
def test_make_graphed_callables_trains_a_module_as_eager_cpu():
    import copy

    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    module = copy.deepcopy(reference).foo()
    graphed = torch.foo.make_graphed_callables(module, (torch.randn(4, 8, device="foo", requires_grad=True),))
    optimizer = torch.optim.SGD(graphed.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for _ in range(3):
        data = torch.randn(4, 8)
        x, x_ref = data.foo().requires_grad_(), data.clone().requires_grad_()
        loss = graphed(x).square().sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        expected = reference(x_ref).square().sum()
        expected.backward()
        reference_optimizer.step()
        reference_optimizer.zero_grad()
        torch.testing.assert_close(loss.cpu(), expected.detach())
        torch.testing.assert_close(x.grad.cpu(), x_ref.grad)
    for p, q in zip(module.parameters(), reference.parameters()):
        torch.testing.assert_close(p.cpu(), q.detach())
    # In eval mode (another state than at capture) the module runs eagerly.
    graphed.eval()
    with torch.no_grad():
        torch.testing.assert_close(graphed(torch.ones(2, 8, device="foo")).cpu(), reference.eval()(torch.ones(2, 8)))


@pytest.mark.filterwarnings("ignore:The AccumulateGrad node's stream")
def test_make_graphed_callables_of_functions_share_a_pool():
    w = torch.randn(6, 6, device="foo", requires_grad=True)

    def first(a):
        return (a @ w).sin()

    def second(b):
        return b.square().sum(1)

    a = torch.randn(3, 6, device="foo", requires_grad=True)
    graphed_first, graphed_second = torch.foo.make_graphed_callables(
        (first, second), ((a,), (torch.randn(3, 6, device="foo", requires_grad=True),)))
    data = torch.randn(3, 6)
    x = data.foo().requires_grad_()
    out = graphed_second(graphed_first(x))
    out.sum().backward()
    x_ref, w_ref = data.clone().requires_grad_(), w.detach().cpu().requires_grad_()
    expected = ((x_ref @ w_ref).sin()).square().sum(1)
    expected.sum().backward()
    torch.testing.assert_close(out.detach().cpu(), expected.detach())
    torch.testing.assert_close(x.grad.cpu(), x_ref.grad)


def test_make_graphed_callables_refuses_what_cuda_refuses():
    module = torch.nn.Linear(2, 2).foo()
    module.register_forward_hook(lambda *_: None)
    with pytest.raises(RuntimeError, match="hooks"):
        torch.foo.make_graphed_callables(module, (torch.ones(1, 2, device="foo"),))
    with pytest.raises(TypeError, match="tensors only"):
        torch.foo.make_graphed_callables(lambda a, k: a * k, (torch.ones(2, device="foo"), 3))


def test_copies_and_the_backends_own_operators_are_captured():
    x = torch.randn(4, 8, device="foo")
    weight = torch.randn(8, device="foo")
    copy_target = torch.empty(4, 8, device="foo")

    def work():
        copy_target.copy_(x)  # a copy between foo tensors
        return torch.ops.foo.rms_norm(copy_target, weight, 1e-6)

    warm_up(work)
    graph = torch.foo.FooGraph()
    with torch.foo.graph(graph):
        out = work()
    data = torch.randn(4, 8)
    x.copy_(data)
    graph.replay()
    torch.testing.assert_close(copy_target.cpu(), data)
    expected = data * torch.rsqrt(data.square().mean(-1, keepdim=True) + 1e-6) * weight.cpu()
    torch.testing.assert_close(out.cpu(), expected)


# ---- Random operators -----------------------------------------------------------------------------------
# As CUDA's graphs, which take their philox offsets from the generator at each replay, a replay draws new
# numbers from the device's generator: the ones the same calls would draw eagerly at that point.

def noisy(x):
    return torch.nn.functional.dropout(x, 0.5, training=True) + torch.rand_like(x), torch.randn(3, 5, device="foo")


def capture(fn, *args):
    warm_up(fn, *args)
    graph = torch.foo.FooGraph()
    with torch.foo.graph(graph):
        outputs = fn(*args)
    return graph, outputs


def test_replays_draw_what_eager_calls_draw():
    x = torch.ones(64, device="foo")
    graph, static = capture(noisy, x)
    torch.foo.manual_seed(7)  # the device generator alone
    eager = [[t.cpu() for t in noisy(x)] for _ in range(3)]
    with torch.random.fork_rng(devices=[]):  # CPU's numbers for the same seed (the contract's oracle)
        torch.manual_seed(7)
        cpu = [[t for t in (torch.nn.functional.dropout(torch.ones(64), 0.5, training=True) + torch.rand(64),
                            torch.randn(3, 5))] for _ in range(3)]
    torch.foo.manual_seed(7)
    for expected, on_cpu in zip(eager, cpu):
        graph.replay()
        for got, want, want_cpu in zip(static, expected, on_cpu):
            assert torch.equal(got.cpu(), want) and torch.equal(want, want_cpu)
    assert not torch.equal(eager[0][1], eager[1][1])  # each replay draws new numbers


def test_host_draws_and_rng_state_come_after_earlier_replays():
    x = torch.ones(32, device="foo")
    graph, static = capture(noisy, x)
    torch.foo.manual_seed(11)
    noisy(x)
    expected_state = torch.foo.get_rng_state()
    expected_next = torch.rand(6, device="foo").cpu()
    for stream in (torch.foo.current_stream(), torch.foo.Stream()):  # the replay's stream or another one
        torch.foo.manual_seed(11)
        with torch.foo.stream(stream):
            torch.foo._sleep(50_000_000)  # the replay runs well after the host's next draw is asked for
            graph.replay()
        assert torch.equal(torch.rand(6, device="foo").cpu(), expected_next)
        torch.foo.manual_seed(11)
        with torch.foo.stream(stream):
            torch.foo._sleep(50_000_000)
            graph.replay()
        assert torch.equal(torch.foo.get_rng_state(), expected_state)
        torch.foo.synchronize()


def test_seeding_after_a_replay_does_not_change_its_draws():
    x = torch.ones(16, device="foo")
    graph, static = capture(noisy, x)
    torch.foo.manual_seed(5)
    expected = [t.cpu() for t in noisy(x)]
    torch.foo.manual_seed(5)
    torch.foo._sleep(50_000_000)
    graph.replay()
    torch.foo.manual_seed(99)  # after the replay in program order: the replay drew with seed 5
    for got, want in zip(static, expected):
        assert torch.equal(got.cpu(), want)


def test_an_explicit_generator_is_drawn_from_at_each_replay():
    generator = torch.Generator(device="foo")
    out = torch.empty(4, 4, device="foo")

    def draw():
        return out.normal_(generator=generator), torch.randint(0, 100, (8,), device="foo", generator=generator)

    graph, static = capture(draw)
    generator.manual_seed(21)
    expected = [[t.cpu() for t in draw()] for _ in range(2)]
    generator.manual_seed(21)
    default_state = torch.foo.get_rng_state()
    for want in expected:
        graph.replay()
        for got, w in zip(static, want):
            assert torch.equal(got.cpu(), w)
    assert torch.equal(torch.foo.get_rng_state(), default_state)  # the default generator was not drawn from


@pytest.mark.parametrize("capture", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("seed_with", ["torch", "device_generator"])
def test_graph_safe_generator_states_replay_a_forwards_numbers(capture, seed_with):
    """CUDA's graph-safe RNG states (AOT Autograd's way to make a graph's recomputed random operator draw its
    forward's numbers, PyTorch's test_cudagraph_trees TestSAC.test_cudagraph_uneven_forward_backward): a clone
    of the generator's state, drawn from through graphsafe_set_state, eagerly or in a graph replayed after the
    clone was set to the forward's state, gives the forward's numbers: CPU's for that state."""
    torch.manual_seed(0) if seed_with == "torch" else torch.foo.manual_seed(0)
    generator = torch.foo.default_generators[0]

    def recompute(state):
        current = generator.graphsafe_get_state()
        generator.graphsafe_set_state(state)
        perm = torch.randperm(10, device="foo")
        generator.graphsafe_set_state(current)
        return perm

    state = generator.graphsafe_get_state().clone_state()
    if capture:
        graph = torch.foo.FooGraph()
        graph.register_generator_state(state)
        with torch.foo.graph(graph):
            recomputed = recompute(state)
    for _ in range(3):  # some uneven forwards
        torch.randperm(10, device="foo")
    forward_state = generator.get_state()
    forward = torch.randperm(10, device="foo")
    state.set_state(forward_state)
    if capture:
        graph.replay()
    else:
        recomputed = recompute(state)
    cpu = torch.Generator().set_state(forward_state)
    expected = torch.randperm(10, generator=cpu)
    assert torch.equal(forward.cpu(), expected) and torch.equal(recomputed.cpu(), expected)
    with pytest.raises(TypeError, match="foo generator's state"):
        torch.foo.FooGraph().register_generator_state(torch.Generator())
    with pytest.raises(RuntimeError, match="state of a foo generator"):
        generator.graphsafe_set_state(torch.Generator())


def test_a_training_step_with_dropout_is_captured_and_replays_as_eager_cpu():
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                                    torch.nn.Linear(32, 2))
    assert_captured_step_trains_as_eager_cpu(
        reference, lambda params, capturable=False: torch.optim.SGD(params, lr=0.05, momentum=0.9),
        torch.randn(16, 8), torch.randn(16, 2))

@pytest.mark.filterwarnings("ignore:The AccumulateGrad node's stream")
def test_make_graphed_callables_of_a_module_with_dropout():
    import copy

    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Dropout(0.5), torch.nn.Linear(12, 2))
    module = copy.deepcopy(reference).foo()
    graphed = torch.foo.make_graphed_callables(module, (torch.randn(5, 6, device="foo", requires_grad=True),))
    data = torch.randn(5, 6)
    x, x_ref = data.foo().requires_grad_(), data.clone().requires_grad_()
    torch.foo.manual_seed(4)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(4)
        expected = reference(x_ref)
    out = graphed(x)
    torch.testing.assert_close(out.detach().cpu(), expected.detach())
    out.sum().backward()
    expected.sum().backward()
    torch.testing.assert_close(x.grad.cpu(), x_ref.grad)
    for p, q in zip(module.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad)


# ---- Several streams in one capture ----------------------------------------------------------------------
# As on CUDA: a stream that waits on an event recorded in a capture (wait_stream on the capturing stream)
# joins the capture, and its work is part of the graph until the capture ends.

def test_work_forked_onto_another_stream_is_captured_and_joined_back():
    x = torch.randn(32, device="foo")
    side = torch.foo.Stream()

    def work():
        y = x * 2
        side.wait_stream(torch.foo.current_stream())
        with torch.foo.stream(side):
            z = y.sin()
            inside = torch.foo.is_current_stream_capturing()
        torch.foo.current_stream().wait_stream(side)
        return y + z, z, inside

    warm_up(work)
    graph = torch.foo.FooGraph()
    with torch.foo.graph(graph):
        out, z, side_was_capturing = work()
    assert side_was_capturing
    with torch.foo.stream(side):
        assert not torch.foo.is_current_stream_capturing()
    side.synchronize()  # an ordinary stream again
    owned = {b["address"] for seg in torch.foo.memory_snapshot() if tuple(seg["segment_pool_id"]) == graph.pool()
             for b in seg["blocks"]}
    assert z.untyped_storage().data_ptr() in owned  # the side stream allocated from the graph's pool
    for _ in range(2):
        data = torch.randn(32)
        x.copy_(data)
        graph.replay()
        torch.testing.assert_close(out.cpu(), data * 2 + (data * 2).sin())


def test_record_stream_and_frees_on_a_joined_stream_during_capture():
    # PyTorch's own test_graph_record_stream, on foo: a tensor freed on another stream of the capture.
    a = torch.ones(3, device="foo")
    s1, s2 = torch.foo.Stream(), torch.foo.Stream()
    graph = torch.foo.FooGraph()
    warm_up(lambda: a.clone().fill_(1.0))
    torch.foo.synchronize()
    with torch.foo.stream(s1):
        graph.capture_begin()
        b = a.clone()
        s2.wait_stream(s1)
        with torch.foo.stream(s2):
            b.fill_(1.0)
            b.record_stream(s2)
            del b
        s1.wait_stream(s2)
        graph.capture_end()
    graph.replay()
    torch.foo.synchronize()
    assert a.cpu().eq(1).all()


def test_events_recorded_in_a_capture_cannot_be_waited_for_by_the_host():
    x = torch.ones(4, device="foo")
    warm_up(lambda t: t + 1, x)
    outside = torch.foo.Event()
    outside.record()
    graph = torch.foo.FooGraph()
    with pytest.raises(RuntimeError, match=CAPTURE_ERROR):
        with torch.foo.graph(graph):
            x + 1
            point = torch.foo.Event()
            point.record()
            point.synchronize()
    graph.reset()
    with pytest.raises(RuntimeError, match=CAPTURE_ERROR):
        with torch.foo.graph(graph):
            x + 1
            torch.foo.Event().record()
            torch.foo.current_stream().wait_event(outside)  # work outside the capture is not in its replays
    graph.reset()
    assert (x + 1).cpu().eq(2).all()
