"""torch.compile(mode="reduce-overhead") on foo: Inductor's graph trees warm up, record foo graphs and replay
them (foo_backend.compiler.graph_trees).

The oracles: the same functions in eager mode on CPU, and CUDA's behaviour as PyTorch's graph trees define it
(the tree's nodes, CUDA's errors and skip messages, which the trees raise and log themselves on foo).
"""
import ast
import gc
import inspect
import logging

import pytest
import torch
import torch._dynamo
import torch._inductor.config as inductor_config
from torch._inductor import cudagraph_utils
from torch._dynamo.utils import counters

from foo_backend import _patches
from foo_backend.compiler import graph_trees
from foo_backend.compiler import inductor as foo_inductor


def trees():
    foo_inductor.register()  # what the first compilation for foo does: it gives the trees to foo
    from torch._inductor import cudagraph_trees

    return cudagraph_trees


def graph_segments():
    """The segments of graph pools (every pool but the default one), as PyTorch's tests of graph trees see them."""
    return [s for s in torch.foo.memory_snapshot() if tuple(s["segment_pool_id"]) != (0, 0)]


@pytest.fixture(autouse=True)
def fresh_trees():
    """Each test compiles from scratch, and leaves no tree and no graph memory behind (as PyTorch's own tests of
    graph trees check after each test)."""
    torch._dynamo.reset()
    counters.clear()
    with inductor_config.patch(compile_threads=1, force_disable_caches=True):
        yield
    torch._dynamo.reset()
    gc.collect()
    torch.foo.synchronize()
    torch.foo.empty_cache()
    for device in range(torch.foo.device_count()):
        assert trees().get_container(device).tree_manager is None
    assert graph_segments() == []


def manager(device=0):
    return trees().get_container(device).tree_manager


def recorded_graphs(device=0):
    """The foo graphs a device's tree has recorded (one per node)."""
    nodes, found = list(manager(device).get_roots()), []
    while nodes:
        node = nodes.pop()
        found.append(node.graph)
        nodes.extend(child for children in node.children.values() for child in children)
    return found


def chain(x, y):
    return ((x @ y).relu() * 2 + x).sin().sum(dim=1)


@pytest.mark.parametrize("compile_options", [{"mode": "reduce-overhead"}, {"options": {"triton.cudagraphs": True}},
                                             {"backend": "cudagraphs"}], ids=["mode", "options", "dynamo_backend"])
def test_replays_equal_eager_cpu(compile_options):
    compiled = torch.compile(chain, **compile_options)
    torch.manual_seed(0)
    cases = [(torch.randn(16, 16), torch.randn(16, 16)) for _ in range(5)]
    for x, y in cases:  # the first call warms up, the second records, the others replay
        out = compiled(x.to("foo"), y.to("foo"))
        torch.testing.assert_close(out.cpu(), chain(x, y))
    assert [type(g) for g in recorded_graphs()] == [torch.foo.FooGraph]
    assert counters["inductor"]["cudagraph_skips"] == 0


def test_replays_make_the_host_wait_nowhere():
    compiled = torch.compile(chain, mode="reduce-overhead")
    x, y = torch.randn(8, 8, device="foo"), torch.randn(8, 8, device="foo")
    for _ in range(3):
        compiled(x, y).clone()
    inputs = [x + i for i in range(3)]
    torch.foo.synchronize()
    torch.foo.set_sync_debug_mode("error")  # a host wait raises, as CUDA's sync debug mode
    try:
        outs = [compiled(inp, y).clone() for inp in inputs]
    finally:
        torch.foo.set_sync_debug_mode("default")
    for inp, out in zip(inputs, outs):
        torch.testing.assert_close(out.cpu(), chain(inp.cpu(), y.cpu()))


def test_an_output_a_later_run_overwrote_raises_cudas_error():
    @torch.compile(mode="reduce-overhead")
    def square(x):
        return x @ x

    x = torch.randn(10, 10, device="foo")
    first = square(x)
    kept = first.clone()
    square(x)
    with pytest.raises(RuntimeError, match="accessing tensor output of CUDAGraphs that has been overwritten by a "
                                           "subsequent run"):
        print(first)
    torch.testing.assert_close(kept.cpu(), x.cpu() @ x.cpu())


@pytest.mark.parametrize("seed_with", ["torch", "device_generator"])
def test_random_ops_draw_as_eager_through_warm_up_recording_and_replays(seed_with):
    """The warm-up runs the function eagerly, the recording captures it, replays draw: as on CUDA, each call
    draws what eager draws from the same seed (a capture advances no generator that its replays do not)."""
    def sample(probs):
        return torch.multinomial(probs, 6, replacement=True), torch.rand(5, device=probs.device)

    def seed():
        torch.manual_seed(0) if seed_with == "torch" else torch.foo.manual_seed(0)

    probs = torch.tensor([0.1, 0.2, 0.3, 0.4], device="foo")
    compiled = torch.compile(sample, mode="reduce-overhead")
    with inductor_config.patch(fallback_random=True):
        seed()
        eager = [tuple(t.cpu() for t in sample(probs)) for _ in range(4)]
        seed()
        replayed = [tuple(t.cpu() for t in compiled(probs)) for _ in range(4)]
    assert len(recorded_graphs()) == 1
    for (eager_samples, eager_uniform), (samples, uniform) in zip(eager, replayed):
        assert torch.equal(samples, eager_samples)
        assert torch.equal(uniform, eager_uniform)


def test_dynamic_shapes_record_one_graph_per_shape():
    compiled = torch.compile(chain, mode="reduce-overhead", dynamic=True)
    torch.manual_seed(0)
    for rows in (4, 8, 4, 8, 4):
        x, y = torch.randn(rows, rows), torch.randn(rows, rows)
        for _ in range(3):
            out = compiled(x.to("foo"), y.to("foo"))
        torch.testing.assert_close(out.cpu(), chain(x, y))
    assert len(recorded_graphs()) == 2


def test_training_with_an_optimizer_equals_cpu():
    torch.manual_seed(0)
    torch.foo.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    foo_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to("foo")
    foo_model.load_state_dict(cpu_model.state_dict())
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1, momentum=0.9)
    foo_opt = torch.optim.SGD(foo_model.parameters(), lr=0.1, momentum=0.9)

    @torch.compile(mode="reduce-overhead")
    def foo_loss(inputs, targets):
        return torch.nn.functional.mse_loss(foo_model(inputs), targets)

    for _ in range(5):
        inputs, targets = torch.randn(8, 16), torch.randn(8, 4)
        torch.compiler.cudagraph_mark_step_begin()
        loss = foo_loss(inputs.to("foo"), targets.to("foo"))
        loss.backward()
        foo_opt.step()
        foo_opt.zero_grad()
        expected = torch.nn.functional.mse_loss(cpu_model(inputs), targets)
        expected.backward()
        cpu_opt.step()
        cpu_opt.zero_grad()
        torch.testing.assert_close(loss.cpu(), expected.detach())
    for foo_param, cpu_param in zip(foo_model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(foo_param.detach().cpu(), cpu_param.detach())
    # A forward graph and, below it, its backward one; parameters are static inputs, not copied at each replay.
    (root,) = manager().get_roots()
    assert root.num_descendants() == 1
    assert counters["inductor"]["cudagraph_recorded_non_static_inputs"] > 0
    static = root.wrapped_function.static_input_idxs
    assert len(static) == len(list(foo_model.parameters()))


def test_a_graph_on_a_second_device_is_recorded_there():
    compiled = torch.compile(chain, mode="reduce-overhead")
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    for _ in range(3):
        out = compiled(x.to("foo:1"), y.to("foo:1"))
    assert out.device == torch.device("foo", 1)
    torch.testing.assert_close(out.cpu(), chain(x, y))
    assert manager(0) is None and len(recorded_graphs(1)) == 1
    assert all(s["device"] == 1 for s in graph_segments())


class SkipMessages(logging.Handler):
    """The "skipping cudagraphs due to ..." messages Inductor logs while it is installed."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        if record.getMessage().startswith("skipping cudagraphs due to"):
            self.messages.append(record.getMessage())

    def __enter__(self):
        cudagraph_utils.cudagraphs_log.addHandler(self)
        return self.messages

    def __exit__(self, *exc_info):
        cudagraph_utils.cudagraphs_log.removeHandler(self)


def test_a_mutated_input_runs_without_graphs_with_cudas_message():
    @torch.compile(mode="reduce-overhead")
    def add_two(x):
        x.add_(2)
        return x

    with SkipMessages() as messages:
        x = torch.ones(10, device="foo")
        for _ in range(3):
            add_two(x)
    assert x.cpu().tolist() == [7.0] * 10
    assert counters["inductor"]["cudagraph_skips"] == 1
    (message,) = messages
    assert "mutated inputs" in message and "x.add_(2)" in message
    assert list(manager().get_roots()) == []


def test_two_devices_run_without_graphs_with_cudas_message():
    @torch.compile(mode="reduce-overhead")
    def add(x, y):
        return x + 1, y + 2

    with SkipMessages() as messages:
        a, b = add(torch.ones(4, device="foo:0"), torch.ones(4, device="foo:1"))
    assert (a.device, b.device) == (torch.device("foo", 0), torch.device("foo", 1))
    assert a.cpu().tolist() == [2.0] * 4 and b.cpu().tolist() == [3.0] * 4
    assert counters["inductor"]["cudagraph_skips"] == 1
    (message,) = messages
    assert "multiple devices: device(type='foo', index=0), device(type='foo', index=1)" in message
    with inductor_config.patch("triton.cudagraph_or_error", True):
        torch._dynamo.reset()
        with pytest.raises(Exception, match="multiple devices"):
            add(torch.ones(4, device="foo:0"), torch.ones(4, device="foo:1"))


@pytest.mark.parametrize("graph_partition", [False, True])
def test_symbolic_shapes_run_without_graphs_with_cudas_message_where_cuda_logs_it(graph_partition):
    """With ``cudagraph_skip_dynamic_graphs``, a graph with symbolic shapes runs without graphs: Inductor logs
    and counts why when it records whole graphs, and says nothing when it records partitions (as for CUDA)."""
    @torch.compile(mode="reduce-overhead", dynamic=True)
    def add(x, y):
        return x + y

    config = {"graph_partition": graph_partition, "triton.cudagraph_skip_dynamic_graphs": True}
    with inductor_config.patch(config), SkipMessages() as messages:
        for size in (4, 6):
            x, y = torch.rand(size), torch.rand(size)
            torch.testing.assert_close(add(x.foo(), y.foo()).cpu(), x + y)
    assert manager() is None or list(manager().get_roots()) == []
    if graph_partition:
        assert messages == [] and counters["inductor"]["cudagraph_skips"] == 0
        return
    (message,) = messages
    assert message.startswith("skipping cudagraphs due to graph with symbolic shapes inputs") and "x + y" in message
    assert counters["inductor"]["cudagraph_skips"] == 1
    torch._dynamo.reset()
    with inductor_config.patch(config | {"triton.cudagraph_or_error": True}):
        with pytest.raises(Exception, match="skipping cudagraphs due to graph with symbolic shapes"):
            add(torch.rand(5, device="foo"), torch.rand(5, device="foo"))


def test_cpu_work_is_partitioned_out_of_the_graphs():
    @torch.compile(mode="reduce-overhead")
    def both(x, y):
        return (x * 2).sin(), y.cos() + 1

    for _ in range(3):
        on_foo, on_cpu = both(torch.ones(6, device="foo"), torch.ones(5))
    assert on_foo.device.type == "foo" and on_cpu.device.type == "cpu"
    torch.testing.assert_close(on_foo.cpu(), torch.ones(6).mul(2).sin())
    torch.testing.assert_close(on_cpu, torch.ones(5).cos() + 1)
    assert counters["inductor"]["cudagraph_skips"] == 0 and len(recorded_graphs()) == 1


def test_a_cpu_scalar_input_is_copied_to_foo_outside_the_graph():
    """As for CUDA (Inductor's pass moving CPU constructors and scalars to the device): a CPU scalar tensor
    input is copied to foo by the compiled code, outside the recorded graph, which reads it from foo memory;
    each call's value is the one used."""
    from torch._inductor.utils import run_and_get_code

    def scale(x, s):
        return x * s + 1

    compiled = torch.compile(scale, mode="reduce-overhead")
    x = torch.arange(6.0)
    _, (code,) = run_and_get_code(compiled, x.foo(), torch.tensor(1.5))
    assert code.count(".copy_(") == 1
    for value in (2.0, 3.0, -5.0):
        torch.testing.assert_close(compiled(x.foo(), torch.tensor(value)).cpu(), scale(x, torch.tensor(value)))
    assert len(recorded_graphs()) == 1 and counters["inductor"]["cudagraph_skips"] == 0


# What graph trees (and the control-flow modes they enter) ask of torch.cuda in this release; foo_backend's
# adapter answers each, and each function of torch._C they call that the CPU build lacks. A release that asks
# more or otherwise fails here.
ASKED_OF_CUDA = {"CUDAGraph", "Stream", "current_stream", "device", "graph", "graph_pool_handle",
                 "is_current_stream_capturing", "memory", "memory_snapshot", "stream", "synchronize"}
# What each release's trees ask of torch.cuda beyond that.
ASKED_OF_CUDA_SINCE = {"2.13": set(), "2.14": {"current_device", "is_initialized"}}


def _attributes_of(source, prefix):
    """The names ``prefix.<name>`` reads in ``source`` (``prefix`` a dotted name such as ``torch.cuda``)."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) == prefix:
            names.add(node.attr)
    return names


def test_graph_trees_ask_foo_exactly_what_its_adapter_answers():
    """The ``"graph_trees_on_foo"`` patch's guard: what PyTorch's graph trees ask of CUDA is what foo's adapter
    answers, they read ``is_cuda`` where foo has them read ``is_foo``, and Inductor still refuses graphs on
    a device other than CUDA's and partitions other devices' work out of them."""
    tree_module = trees()
    from torch._higher_order_ops import cudagraph_conditional_nodes

    assert _patches.applied("graph_trees_on_foo")
    sources = [inspect.getsource(m) for m in (tree_module, cudagraph_conditional_nodes)]
    asked = set().union(*(_attributes_of(s, "torch.cuda") for s in sources))
    assert asked == ASKED_OF_CUDA | ASKED_OF_CUDA_SINCE[_patches.torch_release()]
    assert all(hasattr(graph_trees.FooAsCuda(), name) for name in asked)
    from_torch_c = set().union(*(_attributes_of(s, "torch._C") for s in sources))
    answered = set(graph_trees.CUDA_FUNCTIONS_ANSWERED)
    if torch.version.cuda is None:  # a CPU build lacks exactly CUDA's functions: foo answers each of them
        assert {name for name in from_torch_c if name.startswith("_cud") or not hasattr(torch._C, name)} == answered
    else:  # a CUDA build has them all: foo answers every _cuda one asked, and answers nothing no longer asked
        assert {name for name in from_torch_c if name.startswith("_cud")} <= answered <= from_torch_c
    is_cuda_reads = {"2.13": [3, 1], "2.14": [3, 2]}[_patches.torch_release()]  # in the trees, in the modes
    modules = (tree_module, cudagraph_conditional_nodes)
    assert [graph_trees._code_reading_is_foo(m)[1] for m in modules] == is_cuda_reads
    assert isinstance(tree_module.torch, graph_trees.GraphTreesTorch)
    # PyTorch's own check and partitioning, which the patch extends to foo.
    check, device_index, should_partition = _patches.upstream("graph_trees_on_foo")
    refused = "skipping cudagraphs due to multiple devices: device(type='foo', index=0)"
    assert check({torch.device("foo", 0): None}) == refused
    lowering_check = cudagraph_utils.check_lowering_disable_cudagraph  # asks the check by its module's name
    assert "check_multiple_devices_or_any_cpu_nodes(device_node_mapping)" in inspect.getsource(lowering_check)
    assert 'if device.type != "cuda":' in inspect.getsource(device_index)
    assert "if not node.is_gpu():" in inspect.getsource(should_partition)


def test_inductor_logs_skipped_graphs_of_cuda_alone():
    """The guard of the ``"graph_skips_logged_by_device_types"`` (2.13) and ``"graph_skips_logged_as_gpus"``
    (2.14) patches: Inductor logs why a graph runs without graphs only for a CUDA graph (2.13) or a GPU's
    (2.14), in the three places the patch extends to foo."""
    trees()
    from torch._inductor import output_code

    places = {"cudagraph_post_compile", "CompiledFxGraph.__init__", "CompiledFxGraph.post_compile"}
    if _patches.torch_release() == "2.13":
        assert _patches.applied("graph_skips_logged_by_device_types")
        assert set(graph_trees._skips_of_foo_graphs_in_code()) == places
        for qualname, code in _patches.upstream("graph_skips_logged_by_device_types").items():
            assert '"cuda" in' in inspect.getsource(code) and "foo" not in inspect.getsource(code), qualname
    else:
        assert _patches.applied("graph_skips_logged_as_gpus")
        assert _patches.upstream("graph_skips_logged_as_gpus")("foo") is False
        asking = [line.strip() for line in inspect.getsource(output_code).splitlines()
                  if line.strip().startswith("if") and "device_types" in line]
        assert asking == ["if any(is_gpu(device) for device in compiled_graph.device_types):"] + \
            ["if any(is_gpu(device) for device in self.device_types):"] * 2
