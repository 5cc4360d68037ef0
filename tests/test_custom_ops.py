"""User custom operators routed by device type to foo (CONTRACT: "Custom operators routed by device type").

Registrations are global and permanent (custom_op objects live in a global registry), so every
operator gets its own namespace ``_foo_test_<n>``.
"""
import itertools
import re
from pathlib import Path

import pytest
import torch
from torch import Tensor
from torch.testing._internal.common_device_type import (
    PrivateUse1TestBase,
    dtypes,
    instantiate_device_type_tests,
)
from torch.testing._internal.common_utils import TestCase

import foo_backend.ops  # noqa: F401  (registers the foo:: operators' fake impls and autograd)

FOO = torch.device("foo", 0)
_ids = itertools.count()


def _qualname(name):
    return f"_foo_test_{next(_ids)}::{name}"


# ---------------------------------------------------------------------------------------------------
# torch.library.custom_op(device_types=...), op.register_kernel, torch.library.register_kernel


def test_custom_op_device_types_foo_and_separate_cpu_kernel():
    calls = []

    @torch.library.custom_op(_qualname("plus"), mutates_args=(), device_types="foo")
    def plus(x: Tensor) -> Tensor:
        calls.append(("foo", x.device))
        return x + 1

    @plus.register_kernel("cpu")
    def _(x):
        calls.append(("cpu", x.device))
        return x + 2

    x = torch.arange(4.0)
    out_foo = plus(x.to("foo"))
    assert calls == [("foo", FOO)]
    assert out_foo.device == FOO
    torch.testing.assert_close(out_foo.cpu(), x + 1, rtol=0, atol=0)

    out_cpu = plus(x)
    assert calls == [("foo", FOO), ("cpu", torch.device("cpu"))]
    assert out_cpu.device == torch.device("cpu")
    torch.testing.assert_close(out_cpu, x + 2, rtol=0, atol=0)


def test_custom_op_one_kernel_for_cpu_and_foo():
    calls = []

    @torch.library.custom_op(_qualname("twice"), mutates_args=(), device_types=("cpu", "foo"))
    def twice(x: Tensor) -> Tensor:
        calls.append(x.device.type)
        return x * 2

    x = torch.randn(3)
    torch.testing.assert_close(twice(x.to("foo")).cpu(), x * 2, rtol=0, atol=0)
    torch.testing.assert_close(twice(x), x * 2, rtol=0, atol=0)
    assert calls == ["foo", "cpu"]


def _cpu_only_op(calls):
    @torch.library.custom_op(_qualname("scale"), mutates_args=(), device_types="cpu")
    def scale(x: Tensor) -> Tensor:
        calls.append("cpu")
        return x * 3

    return scale


def _check_routes(op, calls, foo_factor):
    x = torch.randn(5)
    out = op(x.to("foo"))
    assert out.device == FOO
    torch.testing.assert_close(out.cpu(), x * foo_factor, rtol=0, atol=0)
    assert calls == ["foo"]
    torch.testing.assert_close(op(x), x * 3, rtol=0, atol=0)
    assert calls == ["foo", "cpu"]


def test_op_register_kernel_foo():
    calls = []
    op = _cpu_only_op(calls)

    @op.register_kernel("foo")
    def _(x):
        calls.append("foo")
        return x * 5

    _check_routes(op, calls, 5)


@pytest.mark.parametrize("by", ["opdef", "qualified_name"])
def test_torch_library_register_kernel_foo(by):
    calls = []
    op = _cpu_only_op(calls)

    def foo_kernel(x):
        calls.append("foo")
        return x * 7

    torch.library.register_kernel(op if by == "opdef" else op._qualname, "foo", foo_kernel)
    assert torch._C._dispatch_has_kernel_for_dispatch_key(op._qualname, "PrivateUse1")
    _check_routes(op, calls, 7)


def _assert_no_foo_kernel_error(excinfo, qualname):
    msg = str(excinfo.value)
    assert f"Could not run '{qualname}' with arguments from the 'foo' backend" in msg, msg
    assert "privateuseone" not in msg.lower(), msg
    # The only mention of the key is the C++ registration hint, where it cannot be spelled "foo".
    assert "privateuse1" not in msg.replace("TORCH_LIBRARY_IMPL(ns, PrivateUse1, m)", "").lower(), msg


def test_cpu_only_custom_op_on_foo_raises_not_implemented():
    calls = []
    op = _cpu_only_op(calls)
    x = torch.randn(3, device="foo")
    before = x.cpu()
    with pytest.raises(NotImplementedError) as excinfo:
        op(x)
    _assert_no_foo_kernel_error(excinfo, op._qualname)
    assert calls == []  # the CPU kernel was not run on device memory
    torch.testing.assert_close(x.cpu(), before, rtol=0, atol=0)


def test_cpu_only_library_op_on_foo_raises_not_implemented():
    qualname = _qualname("neg")
    ns, name = qualname.split("::")
    lib = torch.library.Library(ns, "FRAGMENT")
    lib.define(f"{name}(Tensor x) -> Tensor")
    lib.impl(name, lambda x: -x, "CPU")
    op = getattr(getattr(torch.ops, ns), name)
    torch.testing.assert_close(op(torch.ones(2)), -torch.ones(2))
    with pytest.raises(NotImplementedError) as excinfo:
        op(torch.ones(2, device="foo"))
    _assert_no_foo_kernel_error(excinfo, qualname)


def test_custom_op_for_all_device_types_runs_on_foo():
    calls = []

    @torch.library.custom_op(_qualname("sq"), mutates_args=(), device_types=None)
    def sq(x: Tensor) -> Tensor:
        calls.append(x.device.type)
        return x * x

    x = torch.randn(4)
    out = sq(x.to("foo"))
    assert out.device == FOO
    torch.testing.assert_close(out.cpu(), x * x, rtol=0, atol=0)
    assert sq(x).device == torch.device("cpu")
    assert calls == ["foo", "cpu"]


def test_custom_op_foo_kernel_mixed_devices_raises_inside_kernel():
    @torch.library.custom_op(_qualname("add"), mutates_args=(), device_types="foo")
    def add(x: Tensor, y: Tensor) -> Tensor:
        return x + y

    x, y = torch.randn(3, device="foo"), torch.randn(3)
    x_before, y_before = x.cpu(), y.clone()
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device.*foo:0 and cpu"):
        add(x, y)
    torch.testing.assert_close(x.cpu(), x_before, rtol=0, atol=0)
    torch.testing.assert_close(y, y_before, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------------
# torch.library.Library / torch.library.impl


def _define(schema_tail):
    qualname = _qualname(schema_tail.split("(")[0])
    ns, name = qualname.split("::")
    lib = torch.library.Library(ns, "FRAGMENT")
    lib.define(name + schema_tail[schema_tail.index("("):])
    return lib, qualname, getattr(getattr(torch.ops, ns), name)


def test_library_fragment_impl_privateuse1_dispatch_key():
    lib, qualname, op = _define("triple(Tensor x) -> Tensor")
    calls = []
    lib.impl(qualname.split("::")[1], lambda x: (calls.append(x.device), x * 3)[1], "PrivateUse1")
    assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "PrivateUse1")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "CPU")
    x = torch.randn(4)
    out = op(x.to("foo"))
    assert out.device == FOO and calls == [FOO]
    torch.testing.assert_close(out.cpu(), x * 3, rtol=0, atol=0)
    with pytest.raises(NotImplementedError, match="Could not run"):
        op(x)  # no CPU kernel: the foo kernel is not used for CPU tensors


def test_library_impl_takes_dispatch_keys_not_device_types():
    # Library.impl is the low-level API: it parses a DispatchKey name, so "foo" is rejected, as "cuda" is.
    lib, _, _ = _define("ident(Tensor x) -> Tensor")
    for device_type in ("foo", "cuda"):
        with pytest.raises(RuntimeError, match=f"could not parse dispatch key: {device_type}"):
            lib.impl("ident", lambda x: x, device_type)


@pytest.mark.parametrize("style", ["call", "decorator"])
def test_torch_library_impl_accepts_device_type_foo(style):
    # torch.library.impl maps a device type to its backend key (torch._C._dispatch_key_for_device).
    assert torch._C._dispatch_key_for_device("foo") == "PrivateUse1"
    lib, qualname, op = _define("quad(Tensor x) -> Tensor")
    calls = []

    def kernel(x):
        calls.append(x.device)
        return x * 4

    if style == "call":
        torch.library.impl(qualname, "foo", kernel, lib=lib)
    else:
        torch.library.impl(qualname, "foo", lib=lib)(kernel)
    torch.library.impl(qualname, "cpu", lambda x: x * 0, lib=lib)
    x = torch.randn(3)
    out = op(x.to("foo"))
    assert out.device == FOO and calls == [FOO]
    torch.testing.assert_close(out.cpu(), x * 4, rtol=0, atol=0)
    torch.testing.assert_close(op(x), x * 0, rtol=0, atol=0)
    assert calls == [FOO]


def test_library_registration_ends_with_library_lifetime():
    lib_def, qualname, op = _define("once(Tensor x) -> Tensor")
    lib = torch.library.Library(qualname.split("::")[0], "FRAGMENT")
    lib.impl("once", lambda x: x + 1, "PrivateUse1")
    torch.testing.assert_close(op(torch.zeros(1, device="foo")).cpu(), torch.ones(1))
    lib._destroy()
    assert not torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "PrivateUse1")
    with pytest.raises(NotImplementedError, match="from the 'foo' backend"):
        op(torch.zeros(1, device="foo"))


# ---------------------------------------------------------------------------------------------------
# C++ kernels: TORCH_LIBRARY_IMPL(foo, PrivateUse1, m) in csrc/CustomOps.cpp

FOO_OPS = ["rms_norm", "rms_norm_backward", "add_gelu_", "sgd_step_"]


def _registration(qualname, key):
    table = torch._C._dispatch_dump_table(qualname)
    m = re.search(rf"^{key}: registered at (\S+) \[kernel\]$", table, re.M)
    assert m is not None, table
    return m.group(1)


@pytest.mark.parametrize("name", FOO_OPS)
def test_foo_ops_have_cpp_kernels_for_privateuse1_and_cpu(name):
    qualname = f"foo::{name}"
    for key in ("PrivateUse1", "CPU"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key)
        where = _registration(qualname, key)
        assert re.search(r"CustomOps\.cpp:\d+$", where), where  # a C++ registration, not torch/library.py
    # The fake impl, by contrast, is registered from Python.
    assert _registration(qualname, "Meta").split(":")[0].endswith("library.py")
    # No composite kernel that could answer for foo instead of the PrivateUse1 one.
    for key in ("CompositeImplicitAutograd", "CompositeExplicitAutograd"):
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key)


def test_cpp_kernels_reached_by_device():
    x, w = torch.randn(3, 8), torch.randn(8)
    y_cpu = torch.ops.foo.rms_norm(x, w, 1e-6)
    y_foo = torch.ops.foo.rms_norm(x.to("foo"), w.to("foo"), 1e-6)
    assert y_cpu.device == torch.device("cpu") and y_foo.device == FOO
    torch.testing.assert_close(y_foo.cpu(), y_cpu, rtol=0, atol=0)
    gx, gw = torch.ops.foo.rms_norm_backward(torch.ones(3, 8, device="foo"), x.to("foo"), w.to("foo"), 1e-6)
    assert gx.device == FOO and gw.device == FOO

    s = torch.randn(2, 8)
    s_foo = s.to("foo")
    torch.ops.foo.add_gelu_(s_foo, w.to("foo"))
    assert s_foo.device == FOO
    torch.testing.assert_close(s_foo.cpu(), torch.nn.functional.gelu(s + w))


def _mixed_device_calls():
    x, w = torch.randn(2, 4), torch.randn(4)
    p, g = torch.randn(4), torch.randn(4)
    return [
        ("rms_norm", lambda a: torch.ops.foo.rms_norm(a[0], a[1], 1e-6), [x.to("foo"), w]),
        ("rms_norm", lambda a: torch.ops.foo.rms_norm(a[0], a[1], 1e-6), [x, w.to("foo")]),
        ("add_gelu_", lambda a: torch.ops.foo.add_gelu_(a[0], a[1]), [x.to("foo"), x]),
        ("add_gelu_", lambda a: torch.ops.foo.add_gelu_(a[0], a[1]), [x, x.to("foo")]),
        ("sgd_step_", lambda a: torch.ops.foo.sgd_step_([a[0], a[1]], [a[2], a[3]], [], 0.1, 0.0, 0.0),
         [p.to("foo"), p.clone(), g.to("foo"), g.to("foo")]),
        ("sgd_step_", lambda a: torch.ops.foo.sgd_step_([a[0]], [a[1]], [a[2]], 0.1, 0.9, 0.0),
         [p.to("foo"), g.to("foo"), torch.zeros(4)]),
    ]


@pytest.mark.parametrize("case", range(6))
def test_cpp_kernel_mixed_devices_raise_and_leave_inputs_intact(case):
    name, call, args = _mixed_device_calls()[case]
    before = [a.cpu().clone() for a in args]
    with pytest.raises(RuntimeError, match=rf"Expected all tensors to be on the same device, but found at least "
                                           rf"two devices, foo:0 and cpu! \(when checking arguments for foo::{name}\)"):
        call(args)
    for a, b in zip(args, before):
        torch.testing.assert_close(a.cpu(), b, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------------------
# opcheck on user custom ops on foo


def _rowsum_op():
    @torch.library.custom_op(_qualname("rowsum_scaled"), mutates_args=(), device_types="foo")
    def rowsum_scaled(x: Tensor, scale: float) -> Tensor:
        return x.sum(-1) * scale

    @rowsum_scaled.register_fake
    def _(x, scale):
        return x.new_empty(x.shape[:-1])

    def setup_context(ctx, inputs, output):
        ctx.shape, ctx.scale = inputs[0].shape, inputs[1]

    def backward(ctx, grad):
        return grad.unsqueeze(-1).expand(ctx.shape) * ctx.scale, None

    rowsum_scaled.register_autograd(backward, setup_context=setup_context)
    return rowsum_scaled


def test_opcheck_user_custom_op_on_foo():
    op = _rowsum_op()
    x = torch.randn(3, 5, device="foo")
    torch.library.opcheck(op, (x, 0.5))
    # With requires_grad inputs: opcheck's test_autograd_registration is NYI for device types other than
    # cpu/cuda/xpu (a PyTorch limitation, see test_opcheck_autograd_registration_nyi_for_foo); the rest runs.
    xr = x.clone().requires_grad_()
    torch.library.opcheck(op, (xr, 0.5), test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    assert torch._C._dispatch_has_kernel_for_dispatch_key(op._qualname, "Autograd")
    y = op(xr, 0.5)
    y.sum().backward()
    torch.testing.assert_close(xr.grad.cpu(), torch.full((3, 5), 0.5))


def test_opcheck_user_mutating_custom_op_on_foo():
    @torch.library.custom_op(_qualname("clamp_"), mutates_args=("x",), device_types="foo")
    def clamp_(x: Tensor, bound: float) -> None:
        x.clamp_(-bound, bound)

    x = torch.randn(4, 4, device="foo") * 3
    torch.library.opcheck(clamp_, (x, 1.0))


def test_opcheck_catches_wrong_fake_on_foo():
    @torch.library.custom_op(_qualname("bad_fake"), mutates_args=(), device_types="foo")
    def bad_fake(x: Tensor) -> Tensor:
        return x.sum(-1)

    @bad_fake.register_fake
    def _(x):
        return x.new_empty(x.shape)  # wrong: should drop the last dimension

    with pytest.raises(torch.testing._internal.optests.OpCheckError, match="test_faketensor"):
        torch.library.opcheck(bad_fake, (torch.randn(3, 4, device="foo"),))


def test_opcheck_autograd_registration_nyi_for_foo():
    # Documents PyTorch's limitation (torch/testing/_internal/optests/autograd_registration.py), which is why
    # requires_grad opchecks on foo skip test_autograd_registration.
    op = _rowsum_op()
    xr = torch.randn(2, 3, device="foo", requires_grad=True)
    with pytest.raises(torch.testing._internal.optests.OpCheckError,
                       match=r"NYI devices other than CPU/CUDA/XPU, got \{'foo'\}"):
        torch.library.opcheck(op, (xr, 1.0), test_utils="test_autograd_registration")


# ---------------------------------------------------------------------------------------------------
# PyTorch's device-generic test machinery with foo


class TestCustomOpDeviceGeneric(TestCase):
    @dtypes(torch.float32, torch.float64)
    def test_custom_op_on_device(self, device, dtype):
        self.assertEqual(torch.device(device).type, "foo")
        calls = []

        @torch.library.custom_op(_qualname("axpy"), mutates_args=(), device_types=torch.device(device).type)
        def axpy(a: float, x: Tensor, y: Tensor) -> Tensor:
            calls.append(x.device)
            return a * x + y

        x = torch.randn(6, dtype=dtype)
        y = torch.randn(6, dtype=dtype)
        out = axpy(2.0, x.to(device), y.to(device))
        self.assertEqual(out.device, torch.device(device))
        self.assertEqual(out.dtype, dtype)
        self.assertEqual(out.cpu(), 2.0 * x + y)
        self.assertEqual(calls, [torch.device(device)])

    def test_register_kernel_for_device_type(self, device):
        self.assertEqual(self.device_type, "foo")
        calls = []
        op = _cpu_only_op(calls)
        torch.library.register_kernel(op, self.device_type, lambda x: (calls.append("foo"), x * 5)[1])
        x = torch.randn(3)
        self.assertEqual(op(x.to(device)).cpu(), x * 5)
        self.assertEqual(calls, ["foo"])

    def test_foo_rms_norm_on_device(self, device):
        x, w = torch.randn(4, 8), torch.randn(8)
        out = foo_backend.ops.rms_norm(x.to(device), w.to(device))
        self.assertEqual(out.device, torch.device(device))
        self.assertEqual(out.cpu(), torch.nn.functional.rms_norm(x, (8,), w, 1e-6))


instantiate_device_type_tests(TestCustomOpDeviceGeneric, globals(), only_for=("foo",))

# The generated class takes its name from PrivateUse1TestBase.device_type *before* setUpClass renames it to
# the backend name: TestCustomOpDeviceGenericPRIVATEUSE1, with tests named test_..._foo[_dtype].
_GENERATED = [v for k, v in dict(globals()).items() if k.startswith("TestCustomOpDeviceGeneric")]


def test_device_generic_tests_were_generated_for_foo_only():
    assert len(_GENERATED) == 1
    cls = _GENERATED[0]
    assert issubclass(cls, PrivateUse1TestBase)
    names = sorted(n for n in vars(cls) if n.startswith("test_"))
    assert names == [
        "test_custom_op_on_device_foo_float32",
        "test_custom_op_on_device_foo_float64",
        "test_foo_rms_norm_on_device_foo",
        "test_register_kernel_for_device_type_foo",
    ], names


# docs/custom_ops.md's Python snippets, in order, in one fresh interpreter (the test-file example imports a
# module of the reader's, so it is left out).
_DOCS_BLOCKS = re.findall(r"```python\n(.*?)```", (Path(__file__).resolve().parent.parent / "docs" / "custom_ops.md").read_text(), re.S)
SCRIPTS = {"docs_snippets": ("\n".join(b for b in _DOCS_BLOCKS if not b.startswith("# test_my_ops.py")), {})}


def test_docs_custom_ops_snippets_run_in_order(subprocesses):
    """docs/custom_ops.md promises its Python snippets run as shown, in order, in one process."""
    assert len(_DOCS_BLOCKS) >= 6 and "torch.compile" in SCRIPTS["docs_snippets"][0]
    assert "tensor([3., 3.], device='foo:0')" in subprocesses.check("docs_snippets")
