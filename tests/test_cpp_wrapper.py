"""torch.compile on foo with Inductor's C++ wrapper (``torch._inductor.config.cpp_wrapper``).

The wrapper is C++ compiled with its graph's kernels into one library; it launches each kernel through foo's C
functions (foo_backend/include/foo_backend/aoti.h) on the current foo stream and calls the operators left to
ATen through foo's C shim. The oracle is the same function eagerly on CPU (random numbers: CPU's compiled
ones), as for the Python wrapper in test_inductor.py.
"""
import copy

import pytest
import torch
import torch._dynamo
import torch._inductor.config as inductor_config
from torch._inductor.utils import run_and_get_code


@pytest.fixture(autouse=True)
def cpp_wrapper():
    """Each test compiles from scratch with the C++ wrapper, in this process."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    with inductor_config.patch(cpp_wrapper=True, compile_threads=1):
        yield
    torch._dynamo.reset()


def to_foo(value, device="foo"):
    """Tensors with dimensions move to foo; 0-dim CPU tensors (scalars) stay, as users pass them."""
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return value.to(device)
    return value


def outputs(result):
    return torch.utils._pytree.tree_leaves(result)


def check_compiled(fn, *args, device="foo", **compile_options):
    """fn compiled on foo gives fn's results in eager mode on CPU, on the device of its inputs."""
    expected = outputs(fn(*args))
    got = outputs(torch.compile(fn, **compile_options)(*[to_foo(a, device) for a in args]))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.device == (torch.device(device) if ":" in device else torch.device("foo", 0))
        torch.testing.assert_close(g.cpu(), e)
    return got


def test_the_wrapper_launches_foo_kernels_and_calls_foos_shim():
    def fn(a, b):
        return torch.relu(a * b + 1) @ b.t()

    a, b = torch.randn(8, 16), torch.randn(8, 16)
    with inductor_config.patch(fx_graph_cache=False):
        result, (code,) = run_and_get_code(torch.compile(fn), a.foo(), b.foo())
    assert "foo_aoti_launch_kernel(" in code and "cpp_fused_" in code
    assert "aoti_torch_foo_mm_out(" in code  # the extern matmul: foo's shim, the dispatcher
    assert "data_ptr()" not in code  # the host never takes a device address to call a kernel itself
    assert "cached_torch_device_type_privateuse1" in code  # buffers are allocated on foo
    torch.testing.assert_close(result.cpu(), fn(a, b))


def test_fusions_dtypes_and_operators_left_to_aten():
    x = torch.randn(16, 33)
    check_compiled(lambda a: (torch.softmax(a, -1), torch.nn.functional.layer_norm(a, (33,)) * 2), x)
    check_compiled(lambda a: (a.argmax(-1), a.amax(0), a.cumsum(1), ((a * 10).long() // 3), (a > 0.5).sum()), x)
    # foo's shim (sort, topk), the dispatcher without a shim function (kthvalue), an index.
    check_compiled(lambda a, i: (torch.sort(a, -1), torch.topk(a, 3), torch.kthvalue(a, 3, -1), a[i] * 2),
                   x, torch.tensor([3, 1, 5]))


def test_dynamic_shapes_reuse_one_graph():
    fn = torch.compile(lambda a: (a.sin() * 2).mean(0) + a.shape[0], dynamic=True)
    for rows in (8, 13, 21):
        x = torch.randn(rows, 5)
        torch.testing.assert_close(fn(x.foo()).cpu(), (x.sin() * 2).mean(0) + rows)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def test_graph_on_foo1_allocates_and_launches_there():
    torch.foo.set_device(0)
    (out,) = check_compiled(lambda a, b: (a * b).sum(0) + 1, torch.randn(8, 4), torch.randn(8, 4), device="foo:1")
    assert out.device == torch.device("foo:1")
    assert torch.foo.current_device() == 0


def test_value_dependent_shapes_and_control_flow():
    x = torch.randn(16, 5)
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True):
        check_compiled(lambda a: torch.nonzero(a > 0) * 2, x)
        check_compiled(lambda a: a * a.sum().item(), x)
    cond = lambda a: torch.cond(a.sum() > 0, lambda t: t.sin() + 1, lambda t: t.cos() - 1, (a,))  # noqa: E731
    check_compiled(cond, x.abs())
    check_compiled(cond, -x.abs())


def test_mutated_inputs_and_view_outputs():
    def fn(a, b):
        a.add_(1)
        b.mul_(2)
        return (a + b).view(-1)[3:11], a.t()

    a, b = torch.randn(4, 5), torch.randn(4, 5)
    a_foo, b_foo = a.foo(), b.foo()
    got = torch.compile(fn)(a_foo, b_foo)
    expected = fn(a, b)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g.cpu(), e)
    torch.testing.assert_close(a_foo.cpu(), a)
    torch.testing.assert_close(b_foo.cpu(), b)


def test_a_graph_with_cpu_and_foo_parts():
    def fn(a, b):
        c = (a * 2).cpu() + b  # a device-to-host copy, then CPU kernels
        return c.sum(), (c.to("foo") * 3).mean()

    a, b = torch.randn(8, 8), torch.randn(8, 8)
    cpu_sum, foo_mean = torch.compile(fn)(a.foo(), b)
    assert (cpu_sum.device, foo_mean.device) == (torch.device("cpu"), torch.device("foo", 0))
    expected_sum, expected_mean = fn(a, b)  # eagerly, from a on the CPU
    torch.testing.assert_close((cpu_sum, foo_mean.cpu()), (expected_sum, expected_mean.cpu()))


def test_kernels_are_queued_on_the_current_stream_without_a_host_wait():
    fn = torch.compile(lambda a, s: (a * s).sum() + a.cos().mean())
    x, scale = torch.ones(1000, 10, device="foo"), torch.tensor(2.0)
    fn(x, scale)  # compiled, and first calls done, before the hold
    side = torch.foo.Stream()
    torch.foo.current_stream().synchronize()
    with torch.foo._hold_stream(side) as release:
        with torch.foo.stream(side):
            out = fn(x, scale)  # queued behind the hold: the call returned without waiting
        scale.fill_(5.0)  # a queued kernel reads the scalar it was launched with
        assert not side.query()
        assert torch.foo.current_stream().query()  # nothing went to the default stream
        release()
    torch.foo.current_stream().wait_stream(side)
    assert out.item() == pytest.approx(2 * 1000 * 10 + torch.tensor(1.0).cos().item())


def test_kernel_errors_are_raised_at_the_next_synchronization():
    fn = torch.compile(lambda a, i: a[i] * 2)
    x = torch.randn(10, device="foo")
    fn(x, torch.tensor([1, 2], device="foo"))
    fn(x, torch.tensor([1, 20], device="foo"))  # queued: the bounds check fails on the stream
    with pytest.raises(RuntimeError, match="index out of bounds"):
        torch.foo.synchronize()
    torch.testing.assert_close(fn(x, torch.tensor([3], device="foo")).cpu(), x.cpu()[[3]] * 2)


def test_random_operators_equal_cpus_compiled_ones():
    def fn(a):
        return a + torch.rand_like(a) + torch.randn_like(a)

    torch.manual_seed(7)
    cpu = torch.compile(fn)(torch.zeros(64))
    torch._dynamo.reset()
    torch.manual_seed(123)
    torch.foo.manual_seed(7)  # the device generator alone decides foo's numbers
    on_foo = torch.compile(fn)(torch.zeros(64, device="foo"))
    torch.testing.assert_close(on_foo.cpu(), cpu, rtol=0, atol=0)


def test_mlp_training_step_with_the_optimizer_inside():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))
    model_foo = copy.deepcopy(model).foo()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt_foo = torch.optim.SGD(model_foo.parameters(), lr=0.1, momentum=0.9)

    def step(m, o, a, t):
        o.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(a), t)
        loss.backward()
        o.step()
        return loss

    compiled_step = torch.compile(step)
    x, target = torch.randn(16, 12), torch.randint(0, 3, (16,))
    for _ in range(3):
        expected = step(model, opt, x, target)
        torch.testing.assert_close(compiled_step(model_foo, opt_foo, x.foo(), target.foo()).cpu(), expected)
    for p, p_foo in zip(model.parameters(), model_foo.parameters()):
        torch.testing.assert_close(p_foo.cpu(), p)


def test_cnn_channels_last_inference_and_training_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3, padding=1),
        torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 10)).to(memory_format=torch.channels_last)
    model_foo = copy.deepcopy(model).foo()
    x = torch.randn(4, 3, 8, 8).to(memory_format=torch.channels_last)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(copy.deepcopy(model_foo).eval())(x.foo()).cpu(), model.eval()(x))
    model.train(), model_foo.train()

    def step(m, a):
        loss = m(a).square().mean()
        loss.backward()
        return loss

    torch.testing.assert_close(torch.compile(step)(model_foo, x.foo()).cpu(), step(model, x))
    for p, p_foo in zip(model.parameters(), model_foo.parameters()):
        torch.testing.assert_close(p_foo.grad.cpu(), p.grad)


def test_transformer_block_forward_and_backward():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    layer_foo = copy.deepcopy(layer).foo()
    src = torch.randn(2, 5, 16)
    out = torch.compile(layer_foo)(src.foo())
    out.square().sum().backward()
    expected = layer(src)
    expected.square().sum().backward()
    torch.testing.assert_close(out.cpu(), expected)
    for p, p_foo in zip(layer.parameters(), layer_foo.parameters()):
        torch.testing.assert_close(p_foo.grad.cpu(), p.grad, rtol=1e-4, atol=1e-4)
