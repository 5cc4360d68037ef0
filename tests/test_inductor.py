"""torch.compile with Inductor on foo: generated C++ kernels launched on foo's streams.

The oracle is the same function in eager mode on CPU, with PyTorch's tolerances: Inductor itself chooses some
lowerings by device type (a two-pass variance on CPU, Welford elsewhere), so foo's generated code is not
always CPU's. Random numbers, which must be equal, are compared with CPU's compiled ones.
"""
import copy
import hashlib
import inspect
import os

import pytest
import torch
import torch._dynamo
import torch._inductor.config as inductor_config
from torch._inductor.utils import run_and_get_code

from foo_backend import _patches as foo_patches
from foo_backend.compiler import dynamo as foo_dynamo
from foo_backend.compiler import graph_trees as foo_graph_trees
from foo_backend.compiler import inductor as foo_inductor
from support.subprocesses import labelled


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each test compiles from scratch, in this process (no compile workers to start or leave behind)."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    with inductor_config.patch(compile_threads=1):
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


def test_loading_foo_imports_neither_dynamo_nor_inductor(subprocesses):
    out = labelled(subprocesses.check("lazy"))
    assert out["loaded_at_start"] == "[]"
    assert out["dynamo_interface"] == "FooInterface"
    assert out["inductor_after_compile"] == "True"


SCRIPTS = {
    "lazy": ("""
        import sys
        import torch
        x = torch.ones(3, device="foo") + 1
        print("loaded_at_start", [m for m in ("torch._dynamo", "torch._inductor") if m in sys.modules])
        from torch._dynamo.device_interface import get_interface_for_device
        print("dynamo_interface", get_interface_for_device("foo").__name__)
        y = torch.compile(lambda a: a * 2)(x)
        assert y.cpu().tolist() == [4.0, 4.0, 4.0], y
        print("inductor_after_compile", "foo_backend.compiler.inductor" in sys.modules)
    """, {}),
    "cpu_scalar_first": ("""
        import torch
        a = torch.randn(7, device="foo")
        for label, fn in (("fmax", lambda a: torch.fmax(torch.tensor(0.0), a + 1)),
                          ("mul_add", lambda a: torch.tensor(2.0) * a + torch.tensor(1.0))):
            out = torch.compile(fn)(a)
            print(label, out.device, torch.allclose(out.cpu(), fn(a.cpu())))
    """, {}),
    "pad_at_memory_start": ("""
        import torch
        a = torch.tensor([True, False, True, True], device="foo")  # the first allocation: offset 0 of foo:0
        b = torch.ones(6, dtype=torch.bool, device="foo")
        fn = lambda a, b: torch.constant_pad_nd(a, (1, 1), 1.0) & b
        print(torch.equal(torch.compile(fn)(a, b).cpu(), fn(a.cpu(), b.cpu())))
    """, {}),
    # foo's Dynamo module imported before torch._dynamo: it imports Dynamo, whose import hook finds it half done.
    "dynamo_module_first": ("""
        import torch
        from foo_backend.compiler import dynamo
        from torch._dynamo.device_interface import get_interface_for_device
        print(get_interface_for_device("foo").__name__)
    """, {}),
    # Inductor's default: kernels compile in a pool of worker processes.
    "compile_workers": ("""
        import torch
        import torch._inductor.config as config
        config.compile_threads = 2
        fn = lambda a, b: ((a.sin() + b) @ b.t()).cos().sum(0) + b.sum()  # kernels on both sides of a matmul
        f = torch.compile(fn, fullgraph=True)
        generator = torch.Generator().manual_seed(0)
        a, b = torch.randn(64, 8, generator=generator), torch.randn(64, 8, generator=generator)
        # Sums of 64 products, fused in another order than eager's: a sum's rounding, not an exact match.
        torch.testing.assert_close(f(a.foo(), b.foo()).cpu(), fn(a, b), rtol=1e-4, atol=1e-4)
        print("ok")
    """, {}),
}


def test_pointwise_op_with_a_cpu_scalar_first_runs_on_foo(subprocesses):
    """With a 0-dim CPU tensor as its first input, Inductor would make a pointwise op a CPU kernel reading foo
    memory (the process dies): in a fresh interpreter, so that a regression fails this test only."""
    out = labelled(subprocesses.check("cpu_scalar_first"))
    assert out["fmax"] == "foo:0 True" and out["mul_add"] == "foo:0 True"


def test_masked_load_before_the_first_byte_of_device_memory(subprocesses):
    """Inductor's kernel for a padded input loads the element before it and masks it out; with the input at the
    very start of foo:0's memory (a fresh process's first allocation), that load must not fault."""
    assert subprocesses.check("pad_at_memory_start").strip() == "True"


def test_dynamo_registration_when_foos_dynamo_module_is_imported_first(subprocesses):
    assert subprocesses.check("dynamo_module_first").strip() == "FooInterface"


def test_kernels_compile_in_inductors_worker_processes(subprocesses):
    assert subprocesses.check("compile_workers").strip() == "ok"


def test_compiled_code_launches_generated_foo_kernels():
    def fn(a, b):
        return torch.relu(a * b + 1).sum(-1)

    a, b = torch.randn(8, 16, device="foo"), torch.randn(8, 16, device="foo")
    with inductor_config.patch(fx_graph_cache=False):
        result, (code,) = run_and_get_code(torch.compile(fn), a, b)
    assert "foo_inductor.compile_kernel(" in code and "cpp_fused_" in code
    assert "cpp_pybinding" not in code  # no kernel runs as a CPU function on host memory
    assert "aten." not in code  # fused, not an eager fallback
    torch.testing.assert_close(result.cpu(), fn(a.cpu(), b.cpu()))


def several_kernels(a, b):
    return ((((a.sin() + b) @ b.t()).cos() @ b).relu() + 1).sum(0)  # kernels between extern matmuls


def test_a_graphs_kernels_compile_in_one_module(monkeypatch):
    """Each kernel is its own launch, but one compiler run per compile worker builds them all."""
    loaded = []
    load = foo_inductor.CppCodeCache.load
    monkeypatch.setattr(foo_inductor.CppCodeCache, "load", lambda source, *a, **k: loaded.append(source) or load(source, *a, **k))
    a, b = torch.randn(64, 8, device="foo"), torch.randn(64, 8, device="foo")
    with inductor_config.patch(fx_graph_cache=False):
        result, (code,) = run_and_get_code(torch.compile(several_kernels), a, b)
    kernels = code.count("foo_inductor.compile_kernel(")
    assert kernels >= 3 and len(loaded) == 1
    assert all(f"foo_launch_{i}(" in loaded[0] for i in range(kernels))
    torch.testing.assert_close(result.cpu(), several_kernels(a.cpu(), b.cpu()))


def test_kernels_that_do_not_compile_together_compile_one_by_one(monkeypatch):
    loaded = []
    load = foo_inductor.CppCodeCache.load

    def refuse_batches(source, *args, **kwargs):
        loaded.append(source)
        if "foo_launch_0(" in source:  # as if two kernels defined the same helper
            raise RuntimeError("redefinition")
        return load(source, *args, **kwargs)

    monkeypatch.setattr(foo_inductor.CppCodeCache, "load", refuse_batches)
    a, b = torch.randn(64, 8, device="foo"), torch.randn(64, 8, device="foo")
    with inductor_config.patch(fx_graph_cache=False):
        result, (code,) = run_and_get_code(torch.compile(several_kernels), a, b)
    assert len(loaded) == 1 + code.count("foo_inductor.compile_kernel(")
    torch.testing.assert_close(result.cpu(), several_kernels(a.cpu(), b.cpu()))


def test_pointwise_and_reduction_fusions():
    x = torch.randn(16, 33)
    check_compiled(lambda a: torch.softmax(a, -1), x)
    check_compiled(lambda a: torch.nn.functional.layer_norm(a, (33,)) * 2, x)
    check_compiled(lambda a: ((a.sin() + a.cos()) ** 2).mean(0), x)
    check_compiled(lambda a: (a.argmax(-1), a.amax(0), a.cumsum(1)), x)


def test_dtypes_and_integer_arithmetic():
    x = torch.randn(16, 32)
    check_compiled(lambda a: ((a * 10).long() // 3, torch.where(a > 0, a, a * 0.1), (a > 0.5).sum()), x)
    check_compiled(lambda a: (a.double() * 3).sum(1), x)


def test_extern_matmul_on_the_same_stream():
    x, w = torch.randn(16, 32), torch.randn(24, 32)
    check_compiled(lambda a, b: torch.relu(a @ b.t() + 1), x, w)


def test_dynamic_shapes_reuse_one_graph():
    fn = torch.compile(lambda a: (a.sin() * 2).mean(0), dynamic=True)
    for rows in (8, 13, 21):
        x = torch.randn(rows, 5)
        torch.testing.assert_close(fn(x.foo()).cpu(), (x.sin() * 2).mean(0))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def test_graph_on_foo1_allocates_there():
    torch.foo.set_device(0)
    (out,) = check_compiled(lambda a, b: (a * b).sum(0) + 1, torch.randn(8, 4), torch.randn(8, 4), device="foo:1")
    assert out.device == torch.device("foo:1")
    assert torch.foo.current_device() == 0


def test_cpu_scalar_is_passed_by_value():
    check_compiled(lambda a, s: a * s + s, torch.randn(4, 5), torch.tensor(3.0))
    # A queued kernel reads the scalar's value at launch, not a later one.
    fn = torch.compile(lambda a, s: a * s)
    x, scale = torch.ones(4, device="foo"), torch.tensor(2.0)
    fn(x, scale)
    with torch.foo._hold_stream() as release:
        out = fn(x, scale)
        scale.fill_(5.0)
        release()
    assert out.cpu().tolist() == [2.0] * 4


def test_mutated_inputs_and_view_outputs():
    def fn(a, b):
        a.add_(1)
        b.mul_(2)
        return (a + b).view(-1)[3:11], a.t()

    a, b = torch.randn(4, 5), torch.randn(4, 5)
    a_foo, b_foo = a.foo(), b.foo()
    got = torch.compile(fn)(a_foo, b_foo)
    expected = fn(a.clone(), b.clone())
    for g, e in zip(got, expected):
        torch.testing.assert_close(g.cpu(), e)
    torch.testing.assert_close(a_foo.cpu(), a + 1)
    torch.testing.assert_close(b_foo.cpu(), b * 2)
    assert got[1]._base is a_foo or got[1].untyped_storage().data_ptr() == a_foo.untyped_storage().data_ptr()


def test_control_flow_cond():
    def fn(a):
        return torch.cond(a.sum() > 0, lambda t: t.sin() + 1, lambda t: t.cos() - 1, (a,))

    check_compiled(fn, torch.randn(6, 3).abs())
    check_compiled(fn, -torch.randn(6, 3).abs())


def test_graph_with_cpu_and_foo_parts():
    def fn(a, b):
        c = (a * 2).cpu() + b  # a device-to-host copy, then CPU kernels
        return c.sum(), (c.to("foo") * 3).mean()

    a, b = torch.randn(8, 8), torch.randn(8, 8)
    on_cpu, on_foo = torch.compile(fn)(a.foo(), b)
    expected = fn(a, b)
    assert on_cpu.device.type == "cpu" and on_foo.device.type == "foo"
    torch.testing.assert_close(on_cpu, expected[0])
    torch.testing.assert_close(on_foo.cpu(), expected[1].cpu())


@pytest.mark.parametrize("cpu_first", [True, False])
def test_a_cpu_kernel_and_a_foo_kernel_of_the_same_source_stay_two_kernels(cpu_first):
    """Inductor's C++ code generator defines a kernel once per source text in a graph: CPU's kernel and foo's of
    the same operations must not share one definition (a CPU kernel would read foo memory on the host)."""
    def fn(x_cpu, x_foo):
        if cpu_first:
            return x_cpu + 1, x_foo + 1
        out_foo = x_foo + 1
        return x_cpu + 1, out_foo

    x = torch.randn(3, 3)
    on_cpu, on_foo = torch.compile(fn)(x, x.foo())
    assert on_cpu.device.type == "cpu" and on_foo.device.type == "foo"
    assert torch.equal(on_cpu, x + 1)
    assert torch.equal(on_foo.cpu(), x + 1)


def test_graph_break_runs_both_graphs_on_foo():
    def fn(a):
        b = a * 2
        torch._dynamo.graph_break()
        return b.sum() + 1

    check_compiled(fn, torch.randn(10))


def test_autocast_bf16():
    linear = torch.nn.Linear(16, 8)

    def fn(m, a):
        with torch.autocast(a.device.type, dtype=torch.bfloat16):
            return torch.relu(m(a))

    x = torch.randn(4, 16)
    on_foo = torch.compile(fn)(copy.deepcopy(linear).foo(), x.foo())
    assert on_foo.dtype == torch.bfloat16
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(on_foo.cpu(), torch.relu(linear(x)))


def test_training_step_with_optimizer_inside_compiled_function():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3))
    model_foo = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3)).foo()
    model_foo.load_state_dict(model.state_dict())
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
        got = compiled_step(model_foo, opt_foo, x.foo(), target.foo())
        torch.testing.assert_close(got.cpu(), expected)
    for p, p_foo in zip(model.parameters(), model_foo.parameters()):
        torch.testing.assert_close(p_foo.cpu(), p)


def small_cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3, padding=1),
        torch.nn.Flatten(), torch.nn.Linear(4 * 6 * 6, 10))


@pytest.mark.parametrize("memory_format", [torch.contiguous_format, torch.channels_last])
def test_compiled_cnn_inference_with_inductors_layout_optimization(memory_format):
    """Inductor lays out a convolution network's activations channels_last; foo's convolutions keep the
    layouts CPU's do, which the compiled graph checks."""
    model = small_cnn().eval().to(memory_format=memory_format)
    x = torch.randn(2, 3, 8, 8).to(memory_format=memory_format)
    model_foo = copy.deepcopy(model).foo()
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model_foo)(x.foo()).cpu(), model(x))


def test_compiled_cnn_training_step_channels_last():
    model = small_cnn().to(memory_format=torch.channels_last)
    model_foo = copy.deepcopy(model).foo()
    x = torch.randn(4, 3, 8, 8).to(memory_format=torch.channels_last)

    def step(m, a):
        loss = m(a).square().mean()
        loss.backward()
        return loss

    expected = step(model, x)
    torch.testing.assert_close(torch.compile(step)(model_foo, x.foo()).cpu(), expected)
    for p, p_foo in zip(model.parameters(), model_foo.parameters()):
        torch.testing.assert_close(p_foo.grad.cpu(), p.grad)


@pytest.mark.parametrize("case", ["conv1d", "conv2d_channels_last", "conv3d_channels_last", "transposed",
                                  "float64_channels_last", "channels_last_weight_only"])
def test_fake_convolution_has_foos_strides(case):
    """What torch.compile predicts for a convolution and its backward on foo (fake tensors) is what foo's
    convolution returns: CPU's layouts."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    torch.manual_seed(0)
    conv, x_format, w_format, dtype, shape = {
        "conv1d": (torch.nn.functional.conv1d, None, None, torch.float32, ((2, 4, 9), (6, 4, 3))),
        "conv2d_channels_last": (torch.nn.functional.conv2d, torch.channels_last, torch.channels_last,
                                 torch.float32, ((2, 4, 9, 7), (6, 4, 3, 3))),
        "conv3d_channels_last": (torch.nn.functional.conv3d, torch.channels_last_3d, None, torch.float32,
                                 ((2, 4, 5, 6, 7), (6, 4, 3, 3, 3))),
        "transposed": (torch.nn.functional.conv_transpose2d, torch.channels_last, None, torch.float32,
                       ((2, 4, 5, 6), (4, 3, 3, 3))),
        "float64_channels_last": (torch.nn.functional.conv2d, torch.channels_last, None, torch.float64,
                                  ((2, 4, 9, 7), (6, 4, 3, 3))),
        "channels_last_weight_only": (torch.nn.functional.conv2d, None, torch.channels_last, torch.float32,
                                      ((2, 4, 9, 7), (6, 4, 3, 3))),
    }[case]
    x = torch.randn(shape[0], dtype=dtype, device="foo")
    w = torch.randn(shape[1], dtype=dtype, device="foo")
    x = x.to(memory_format=x_format) if x_format else x
    w = w.to(memory_format=w_format) if w_format else w

    def forward_and_backward(a, b):
        a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
        out = conv(a, b)
        grad_a, grad_b = torch.autograd.grad(out, (a, b), torch.ones_like(out))
        return [out, grad_a, grad_b]

    real = forward_and_backward(x, w)
    with FakeTensorMode() as mode:
        fake = forward_and_backward(mode.from_tensor(x), mode.from_tensor(w))
    for r, f in zip(real, fake):
        assert (f.device, f.shape, f.stride()) == (r.device, r.shape, r.stride())


def test_compiled_kernel_waits_for_work_queued_on_the_stream():
    consumer = torch.compile(lambda a: (a * 2).sum())
    y = torch.zeros(1000, 100, device="foo")
    y.add_(1)  # first calls learn their signatures synchronously: do them before the hold
    consumer(y)
    y.zero_()
    with torch.foo._hold_stream() as release:
        y.add_(1)  # queued behind the hold
        out = consumer(y)  # queued behind the add
        assert not torch.foo.current_stream().query()  # the compiled call returned without waiting
        release()
    assert out.item() == 2 * 1000 * 100


def test_compiled_kernels_run_on_the_current_stream():
    fn = torch.compile(lambda a: a.cos() + 1)
    x = torch.randn(64, device="foo")
    fn(x)
    side = torch.foo.Stream()
    torch.foo.current_stream().synchronize()  # from here on, the default stream gets no work from this test
    with torch.foo._hold_stream(side) as release:
        with torch.foo.stream(side):
            out = fn(x)
        assert torch.foo.current_stream().query()  # nothing was queued on the default stream
        release()
    torch.foo.current_stream().wait_stream(side)
    torch.testing.assert_close(out.cpu(), x.cpu().cos() + 1)


@pytest.mark.parametrize("fullgraph", [False, True])
def test_streams_inside_compiled_code(fullgraph):
    side = torch.foo.Stream()

    def fn(a):
        current = torch.foo.current_stream()
        side.wait_stream(current)
        with torch.foo.stream(side):
            b = a * 2
        current.wait_stream(side)
        return b + 1

    compiled = torch.compile(fn, fullgraph=fullgraph)
    x = torch.randn(100, 100, device="foo")
    torch.testing.assert_close(compiled(x).cpu(), x.cpu() * 2 + 1)
    torch.foo.synchronize()
    with torch.foo._hold_stream(side) as release:
        out = compiled(x)  # the multiply is queued on `side`, behind the hold
        assert not torch.foo.current_stream().query()  # the default stream waits for `side`
        release()
    torch.testing.assert_close(out.cpu(), x.cpu() * 2 + 1)


def test_streams_created_and_events_inside_compiled_code():
    def new_stream(a):
        stream = torch.foo.Stream()
        stream.wait_stream(torch.accelerator.current_stream())
        with torch.foo.stream(stream):
            b = a * 3
        torch.foo.current_stream().wait_stream(stream)
        return b

    def events(a):
        event = torch.foo.Event()
        event.record()
        b = a + 1
        event.wait()
        return b

    x = torch.randn(64, 8, device="foo")
    torch.testing.assert_close(torch.compile(new_stream, fullgraph=True)(x).cpu(), x.cpu() * 3)
    torch.testing.assert_close(torch.compile(events, fullgraph=True)(x).cpu(), x.cpu() + 1)


def test_random_ops_equal_cpu_compiled_for_the_same_seed():
    def fn(a):
        return a + torch.rand_like(a) + torch.randn_like(a)

    torch.manual_seed(7)
    cpu = torch.compile(fn)(torch.zeros(64))
    torch._dynamo.reset()
    torch.manual_seed(123)
    torch.foo.manual_seed(7)  # the device generator alone decides foo's numbers
    on_foo = torch.compile(fn)(torch.zeros(64, device="foo"))
    torch.testing.assert_close(on_foo.cpu(), cpu, rtol=0, atol=0)


def test_kernel_errors_are_raised_at_the_next_synchronization():
    fn = torch.compile(lambda a, i: a[i] * 2)
    x = torch.randn(10, device="foo")
    fn(x, torch.tensor([1, 2], device="foo"))
    out = fn(x, torch.tensor([1, 20], device="foo"))  # queued: the bounds check fails on the stream
    with pytest.raises(RuntimeError, match="index out of bounds"):
        torch.foo.synchronize()
    torch.foo.synchronize()  # reported once
    torch.testing.assert_close(fn(x, torch.tensor([3], device="foo")).cpu(), x.cpu()[[3]] * 2)
    del out


def test_mixed_devices_name_foo():
    with pytest.raises(Exception, match="foo:0") as error:
        torch.compile(lambda a, b: a + b)(torch.ones(3, device="foo"), torch.ones(3))
    assert "privateuseone" not in str(error.value)


def test_cache_of_compiled_graphs_is_keyed_by_foos_code_generator():
    """Inductor's cache key hashes each device's registered configuration: a graph generated by another
    version of foo's code generator is never loaded."""
    from pathlib import Path

    from torch._inductor.codegen.common import custom_backend_codegen_configs

    from foo_backend.compiler import config as foo_config

    torch.compile(lambda a: a + 1)(torch.ones(2, device="foo"))  # registers foo with Inductor
    assert custom_backend_codegen_configs["foo"] is foo_config
    saved = foo_config.save_config_portable()
    sources = b"".join(Path(module.__file__).read_bytes() for module in (foo_inductor, foo_dynamo, foo_graph_trees))
    sources += (Path(foo_inductor.__file__).parent.parent / "include" / "foo_backend" / "aoti.h").read_bytes()
    assert saved["codegen_version"] == hashlib.sha256(sources).hexdigest()


@pytest.mark.parametrize("seed_with", ["torch", "device_generator"])
def test_dynamos_preserve_rng_state_restores_foos_generator(seed_with):
    """What PyTorch runs inside torch._dynamo.utils.preserve_rng_state leaves foo's random numbers as they were,
    as it leaves CUDA's."""
    from torch._dynamo.utils import preserve_rng_state

    torch.manual_seed(0) if seed_with == "torch" else torch.foo.manual_seed(0)
    with preserve_rng_state():
        inside = torch.rand(8, device="foo").cpu()
        torch.randn(100, device="foo")
    after = torch.rand(8, device="foo").cpu()
    assert torch.equal(inside, after)


def _checkpointed_random_step(device, backend, seed):
    """A random operator inside activation checkpointing, compiled (recomputed in the backward): the output and
    the gradients, after seeding with ``seed``."""
    def block(x, y):
        return torch.sigmoid(torch.rand_like(x) * y) * x

    def step(x, y):
        return torch.utils.checkpoint.checkpoint(block, x, y, use_reentrant=True)

    x = torch.linspace(0.5, 2.0, 16).reshape(4, 4).to(device).requires_grad_()
    y = torch.full((4, 4), 3.0, device=device, requires_grad=True)
    torch._dynamo.reset()
    seed()
    out = torch.compile(step, backend=backend)(x, y)
    out.sum().backward()
    return out.detach().cpu(), x.grad.cpu(), y.grad.cpu(), x.detach().cpu()


@pytest.mark.parametrize("backend", ["aot_eager", "aot_eager_decomp_partition", "inductor"])
@pytest.mark.parametrize("seed_with", ["torch", "device_generator"])
def test_a_recomputed_random_operator_draws_its_forwards_numbers_as_on_cpu(backend, seed_with):
    """AOT Autograd recomputes a checkpointed random operator in the backward under run_with_rng_state, with the
    generator state run_and_save_rng_state saved in the forward: on foo (foo's generator) as on CPU."""
    on_foo = torch.manual_seed if seed_with == "torch" else torch.foo.manual_seed
    cpu = _checkpointed_random_step("cpu", backend, lambda: torch.manual_seed(0))
    foo = _checkpointed_random_step("foo", backend, lambda: on_foo(0))
    for expected, got in zip(cpu, foo):
        torch.testing.assert_close(got, expected)
    out, x_grad, _, x = foo
    torch.testing.assert_close(x_grad, out / x)  # the backward's numbers are the forward's


def test_rng_state_operators_know_the_devices_foo_is_added_to():
    """The ``"rng_state_operators_on_foo"`` patch's guard: PyTorch's run_and_save_rng_state and run_with_rng_state
    choose a device's kernel from a table of CPU, CUDA, HPU and XPU, refusing foo, which the fake and tracing
    functions of run_and_save_rng_state find in their closures."""
    from torch._C import DispatchKey
    from torch._higher_order_ops.utils import registered_hop_fake_fns
    from torch._prims import rng_prims
    from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode

    assert foo_patches.applied("rng_state_operators_on_foo")
    select_save, select_run_with = foo_patches.upstream("rng_state_operators_on_foo")
    x = torch.ones(2, device="foo")
    for select, arguments in ((select_save, (torch.ops.aten.rand_like.default, x)),
                              (select_run_with, (torch.foo.get_rng_state(), torch.ops.aten.rand_like.default, x))):
        assert set(select.__code__.co_freevars) == {"impl_cpu", "impl_cuda", "impl_hpu", "impl_xpu"}
        with pytest.raises(AssertionError, match="Backend not supported for foo"):
            select(*arguments)
    save = rng_prims.run_and_save_rng_state
    for function in (registered_hop_fake_fns[save], save.python_key_table[ProxyTorchDispatchMode]):
        cell = function.__closure__[function.__code__.co_freevars.index("impl_backend_select")]
        assert cell.cell_contents is save.py_kernels[DispatchKey.BackendSelect] is not select_save


def test_inductor_assumptions_foo_patches_work_around():
    """Each patch of Dynamo and Inductor in foo_backend._patches works around a behaviour of PyTorch's own: if a
    release changes it, this fails, and the patch must be reviewed (dropped, or its releases extended)."""
    foo_inductor.register()  # what the first compilation for foo does
    patches = ("dynamo_stream_classes", "dynamo_current_stream", "fake_convolution", "dynamo_preserve_rng_state",
               "inductor_current_backend", "inductor_is_cpu", "inductor_lowering_is_gpu", "inductor_device_need_guard",
               "inductor_cpp_wrapper_header")
    assert all(foo_patches.applied(patch) for patch in patches), [p for p in patches if not foo_patches.applied(p)]
    upstream = foo_patches.upstream
    # Dynamo knows the stream and event classes, and the current_stream functions, of CUDA and XPU by name.
    from torch._dynamo.variables.torch import TorchInGraphFunctionVariable
    from torch._dynamo.variables.user_defined import UserDefinedClassVariable

    assert "torch.cuda.Stream," in inspect.getsource(UserDefinedClassVariable._in_graph_classes)
    assert "torch.foo" not in inspect.getsource(UserDefinedClassVariable._in_graph_classes)
    assert "torch.cuda.current_stream," in inspect.getsource(TorchInGraphFunctionVariable._get_handlers)
    # Dynamo's preserve_rng_state restores the generators of CPU, CUDA and XPU, no other device's.
    preserved = inspect.getsource(upstream("dynamo_preserve_rng_state"))
    assert "torch.cuda.set_rng_state" in preserved and "torch.xpu.set_rng_state" in preserved
    assert not any(name in preserved for name in ("privateuse1", "accelerator", "foo"))
    assert upstream("inductor_current_backend")("foo") == inductor_config.cuda_backend  # not the C++ backend
    assert upstream("inductor_device_need_guard")("foo") is False
    assert upstream("inductor_lowering_is_gpu")("foo") is False
    node = type("Node", (), {"get_device": lambda self: torch.device("foo", 0)})()
    assert upstream("inductor_is_cpu")(node) is False
    # The C++ wrapper headers Inductor precompiles are PyTorch's devices': none for foo.
    headers = [upstream("inductor_cpp_wrapper_header")("foo", aot_mode) for aot_mode in (False, True)]
    assert headers == ["torch/csrc/inductor/cpp_wrapper/foo.h", "torch/csrc/inductor/aoti_include/foo.h"]
    include = os.path.join(os.path.dirname(torch.__file__), "include")
    assert not any(os.path.exists(os.path.join(include, header)) for header in headers)
    # PyTorch's fake convolution lays out a PrivateUse1 convolution's output contiguous, whatever its inputs.
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.randn(2, 3, 6, 6, device="foo").to(memory_format=torch.channels_last))
        w = mode.from_tensor(torch.randn(4, 3, 3, 3, device="foo"))
        out = upstream("fake_convolution")(
            mode, torch.ops.aten.convolution.default, x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    assert out.is_contiguous()
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    # Kernel calls of a device that is not cpu/cuda/xpu/mps are refused: foo's wrapper writes its own.
    assert 'raise RuntimeError(f"device {device.type} nyi")' in inspect.getsource(
        PythonWrapperCodegen._generate_kernel_call_helper)
