"""Tensor semantics on foo (CONTRACT: "The device"): every operator gives the CPU result (dtype, shape, strides,
values), views alias storage, in-place and ``out=`` behave as on CPU, autograd works, mixed-device use fails as
on CUDA. The oracle is always the same computation on CPU tensors (or CUDA's documented rule where CPU has
none: mixed devices, ``numpy()``, device addresses)."""
import copy
import ctypes
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

FOO0 = torch.device("foo", 0)
FOO1 = torch.device("foo", 1)

ALL_DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
]


def make(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    return torch.randint(-50 if dtype != torch.uint8 else 0, 50, shape, generator=g, dtype=dtype)


def assert_matches(foo_t, cpu_t, device=FOO0, strides=True, exact=True):
    """``foo_t`` is the foo counterpart of ``cpu_t``: same device class, dtype, shape, strides, values."""
    assert foo_t.device == device, foo_t.device
    assert foo_t.dtype == cpu_t.dtype
    assert foo_t.shape == cpu_t.shape
    if strides:
        assert foo_t.stride() == cpu_t.stride(), (foo_t.stride(), cpu_t.stride())
    if exact:
        torch.testing.assert_close(foo_t.cpu(), cpu_t, rtol=0, atol=0, equal_nan=True)
    else:
        torch.testing.assert_close(foo_t.cpu(), cpu_t, equal_nan=True)


def same_outcome(fn, *cpu_args, device="foo", exact=True):
    """Runs ``fn`` on CPU tensors and on their foo copies: the same exception type, or matching results and
    matching (possibly mutated) arguments."""
    foo_args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in cpu_args]
    try:
        expected = fn(*cpu_args)
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            fn(*foo_args)
        for fa, ca in zip(foo_args, cpu_args):
            if isinstance(ca, torch.Tensor):
                assert_matches(fa, ca, device=torch.device(device) if ":" in device else FOO0)
        return None
    actual = fn(*foo_args)
    dev = torch.device(device) if ":" in device else FOO0
    results = expected if isinstance(expected, (tuple, list)) else [expected]
    actuals = actual if isinstance(actual, (tuple, list)) else [actual]
    for a, e in zip(actuals, results):
        if isinstance(e, torch.Tensor):
            assert_matches(a, e, device=dev, exact=exact)
        else:
            assert a == e
    for fa, ca in zip(foo_args, cpu_args):
        if isinstance(ca, torch.Tensor):
            assert_matches(fa, ca, device=dev, exact=exact)
    return actual


# ---- moving tensors ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_round_trip_all_dtypes(dtype):
    x = make((5, 7), dtype)
    y = x.foo()
    assert_matches(y, x)
    z = x.to("foo:1")
    assert_matches(z, x, device=FOO1)
    assert_matches(y.to("foo:1"), x, device=FOO1)
    assert_matches(z.to("foo:0"), x)
    assert z.cpu().device == torch.device("cpu")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_basic_ops_all_dtypes(dtype):
    x = make((4, 6), dtype)
    same_outcome(lambda t: t == t, x)
    same_outcome(lambda t: t.flip(0), x)
    same_outcome(lambda t: t.sum(), x, exact=False)
    same_outcome(lambda t: t.clone(), x)
    if dtype == torch.bool:
        same_outcome(lambda t: ~t, x)
    else:
        same_outcome(lambda t: t * 2, x)
        same_outcome(lambda t: t - t, x)


ARITHMETIC_WITH_NUMBERS = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "radd": lambda t, n: n + t, "rmul": lambda t, n: n * t, "alpha": lambda t, n: torch.add(t, n, alpha=3),
    "add_": lambda t, n: t.add_(n), "mul_": lambda t, n: t.mul_(n),
}


def _outcome(fn):
    try:
        return fn(), None
    except RuntimeError as e:
        return None, type(e)


# Numbers whose conversion to float32 is easily got wrong: rounding, overflow to inf, denormals, int64 values
# that a detour through float64 would round twice (2**60 + 2**36 + 1).
PYTHON_NUMBERS = [0.1, -2.5, 1e-45, 3.4e38 * 2, 1e300, -1e-320, float("nan"), float("-inf"), 2**24 + 1, 2**53 + 1,
                  2**60 + 2**36 + 1, 2**63 - 1, -7, 0, True, 1.5j]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int32, torch.complex64], ids=str)
@pytest.mark.parametrize("name", list(ARITHMETIC_WITH_NUMBERS))
def test_python_numbers_in_arithmetic_give_cpus_exact_results(name, dtype):
    # foo hands Python numbers to float32/float64 kernels already converted, once per call (not at every kernel
    # run as CPU's TensorIterator does); results must stay bit for bit CPU's, in every dtype and run mode.
    op = ARITHMETIC_WITH_NUMBERS[name]
    base = torch.tensor([1.5, -2.25, 3.0, 1e-3, 0.0, -0.0, 7.0, 1e30]).to(dtype)
    for number in PYTHON_NUMBERS:
        for cpu_base in (base, base[0].clone()):  # a 0-dim tensor too
            for _ in range(3):  # the first call runs synchronously and learns; later ones are queued
                expected, expected_error = _outcome(lambda: op(cpu_base.clone(), number))
                got, error = _outcome(lambda: op(cpu_base.clone().foo(), number))
                assert error == expected_error, number
                if expected is not None:
                    assert got.device.type == "foo" and got.dtype == expected.dtype and got.shape == expected.shape
                    torch.testing.assert_close(got.cpu(), expected, rtol=0, atol=0, equal_nan=True, msg=str(number))


def test_to_semantics():
    x = torch.randn(3, 4, device="foo")
    assert x.to("foo") is x
    assert x.to("foo:0") is x
    assert x.to(FOO0, torch.float32) is x
    c = x.to("foo", copy=True)
    assert c is not x and c.data_ptr() != x.data_ptr()
    assert_matches(c, x.cpu())
    assert_matches(x.to(torch.float64), x.cpu().double())
    assert_matches(x.to("foo:1", non_blocking=True), x.cpu(), device=FOO1)
    assert_matches(torch.ones(3).to("foo", non_blocking=True), torch.ones(3))


def test_device_to_device_copy_is_independent():
    x = torch.arange(12.0).reshape(3, 4)
    a = x.foo()
    b = a.to("foo:1")
    assert b.device == FOO1
    b.add_(100)
    assert_matches(a, x)  # source untouched
    assert_matches(b, x + 100, device=FOO1)
    dst = torch.zeros(3, 4, device="foo:1")
    r = dst.copy_(a)
    assert r is dst
    assert_matches(dst, x, device=FOO1)
    cpu_dst = torch.zeros(3, 4)
    cpu_dst.copy_(b)
    assert torch.equal(cpu_dst, x + 100)


NONCONTIG = {
    "transposed": lambda t: t.t(),
    "sliced": lambda t: t[1:, ::2],
    "expanded": lambda t: t[:1].expand(5, 6),
    "strided_cols": lambda t: t[:, 1::3],
    "permuted3d": lambda t: t.reshape(2, 3, 5).permute(2, 0, 1),
}


@pytest.mark.parametrize("name", NONCONTIG)
def test_non_contiguous_copies(name):
    view = NONCONTIG[name]
    x = torch.arange(30.0).reshape(5, 6)
    cpu_src = view(x)
    # CPU -> foo: .to() keeps dense strides as CPU's .to(copy=True) does
    assert_matches(cpu_src.foo(), cpu_src.clone())
    # foo -> CPU and foo -> foo:1 from a non-contiguous foo view
    foo_src = view(x.foo())
    assert_matches(foo_src, cpu_src)
    torch.testing.assert_close(foo_src.cpu(), cpu_src, rtol=0, atol=0)
    assert_matches(foo_src.to("foo:1"), cpu_src.to("cpu", copy=True), device=FOO1)
    # copy into a non-contiguous foo destination
    base_cpu = torch.zeros(6, 5)
    base_foo = base_cpu.foo()
    base_cpu.t().copy_(x)
    base_foo.t().copy_(x.foo())
    assert_matches(base_foo, base_cpu)
    base_foo1 = torch.zeros(6, 5, device="foo:1")
    base_foo1.t().copy_(x.foo())
    assert_matches(base_foo1, base_cpu, device=FOO1)


def test_copy_broadcasts_like_cpu():
    src = torch.arange(4.0)
    same_outcome(lambda d, s: d.copy_(s), torch.zeros(3, 4), src)
    dst = torch.zeros(3, 4, device="foo:1")
    dst.copy_(src)  # CPU source, broadcast
    assert_matches(dst, torch.arange(4.0).expand(3, 4).contiguous(), device=FOO1)


@pytest.mark.parametrize(
    "src_dtype,dst_dtype",
    [(torch.float32, torch.float16), (torch.float32, torch.bfloat16), (torch.int64, torch.float32),
     (torch.float64, torch.int32), (torch.int32, torch.bool), (torch.float32, torch.complex64),
     (torch.uint8, torch.int8)],
    ids=str,
)
def test_dtype_converting_copies(src_dtype, dst_dtype):
    x = make((4, 5), src_dtype) * (3 if src_dtype != torch.bool else 1)
    expected = x.to(dst_dtype)
    assert_matches(x.foo().to(dst_dtype), expected)  # on device
    assert_matches(x.to("foo", dst_dtype), expected)  # CPU -> foo with conversion
    assert_matches(x.foo().to("foo:1", dst_dtype), expected, device=FOO1)  # across devices
    torch.testing.assert_close(x.foo().to("cpu", dst_dtype), expected, rtol=0, atol=0)  # foo -> CPU
    dst = torch.empty(4, 5, dtype=dst_dtype, device="foo:1")
    dst.copy_(x.foo())
    assert_matches(dst, expected, device=FOO1)
    # non-contiguous source with conversion
    assert_matches(x.foo().t().to("foo:1", dst_dtype), x.t().to(dst_dtype), device=FOO1)


# ---- views alias storage -----------------------------------------------------------------------------

VIEWS = {
    "view": lambda t: t.view(4, 6),
    "view_flat": lambda t: t.view(-1),
    "slice_step": lambda t: t[::2],
    "slice_cols": lambda t: t[:, 1:5:2],
    "t": lambda t: t.t(),
    "transpose": lambda t: t.transpose(0, 1),
    "permute": lambda t: t.view(2, 3, 4).permute(2, 0, 1),
    "unfold": lambda t: t.unfold(1, 2, 2),
    "diagonal": lambda t: t.diagonal(),
    "diagonal_offset": lambda t: t.diagonal(offset=1),
    "narrow": lambda t: t.narrow(1, 1, 3),
    "select": lambda t: t[2],
    "unsqueeze": lambda t: t.unsqueeze(1),
    "squeeze": lambda t: t.view(1, 6, 1, 4).squeeze(),
    "flatten": lambda t: t.flatten(),
    "reshape_view": lambda t: t.reshape(3, 8),
    "as_strided": lambda t: t.as_strided((3, 3), (2, 1), 1),
    "split": lambda t: t.split(2, dim=1)[1],
    "chunk": lambda t: t.chunk(3, dim=0)[2],
    "unbind": lambda t: t.unbind(1)[3],
    "movedim": lambda t: t.view(2, 3, 4).movedim(0, 2),
    "mT": lambda t: t.view(2, 3, 4).mT,
    "dtype_view": lambda t: t.view(torch.int32),
    "detach": lambda t: t.detach(),
    "view_as": lambda t: t.view_as(torch.empty(2, 12)),
}


@pytest.mark.parametrize("name", VIEWS)
def test_views_alias_storage(name):
    fn = VIEWS[name]
    base_cpu = torch.arange(24.0).reshape(6, 4)
    base_foo = base_cpu.foo()
    v_cpu, v_foo = fn(base_cpu), fn(base_foo)
    assert v_foo.untyped_storage().data_ptr() == base_foo.untyped_storage().data_ptr()
    assert v_foo.storage_offset() == v_cpu.storage_offset()
    assert v_foo.data_ptr() - base_foo.data_ptr() == v_cpu.data_ptr() - base_cpu.data_ptr()
    assert_matches(v_foo, v_cpu)
    # writing through the view changes the base ...
    v_cpu.mul_(-1 if not v_cpu.dtype == torch.int32 else 3)
    v_foo.mul_(-1 if not v_foo.dtype == torch.int32 else 3)
    assert_matches(base_foo, base_cpu)
    # ... and writing the base shows through the view
    base_cpu.add_(7)
    base_foo.add_(7)
    assert_matches(v_foo, v_cpu)


COMPLEX_VIEWS = {
    "view_as_real": torch.view_as_real,
    "real": lambda t: t.real,
    "imag": lambda t: t.imag,
    "view_float": lambda t: t.view(torch.float32),
    "t": lambda t: t.t(),
}


@pytest.mark.parametrize("name", COMPLEX_VIEWS)
def test_complex_views_alias_storage(name):
    fn = COMPLEX_VIEWS[name]
    base_cpu = make((3, 4), torch.complex64)
    base_foo = base_cpu.foo()
    v_cpu, v_foo = fn(base_cpu), fn(base_foo)
    assert v_foo.untyped_storage().data_ptr() == base_foo.untyped_storage().data_ptr()
    assert_matches(v_foo, v_cpu)
    v_cpu.add_(5)
    v_foo.add_(5)
    assert_matches(base_foo, base_cpu)


def test_view_as_complex_aliases():
    base_cpu = torch.arange(12.0).reshape(3, 2, 2)
    base_foo = base_cpu.foo()
    c_cpu, c_foo = torch.view_as_complex(base_cpu), torch.view_as_complex(base_foo)
    assert_matches(c_foo, c_cpu)
    c_cpu.mul_(1j)
    c_foo.mul_(1j)
    assert_matches(base_foo, base_cpu)


def test_view_errors_match_cpu():
    x = torch.arange(24.0).reshape(4, 6)
    same_outcome(lambda t: t.t().view(24), x)  # not viewable: RuntimeError on CPU
    same_outcome(lambda t: t.view(5, 5), x)
    same_outcome(lambda t: t.t().reshape(24), x)  # reshape copies instead


def test_view_base_and_is_view():
    x = torch.randn(4, 4, device="foo")
    v = x[1:]
    assert v._is_view() and v._base is x
    assert not x.contiguous()._is_view()


# ---- in-place ops ------------------------------------------------------------------------------------

INPLACE = {
    "add_": lambda t: t.add_(torch.ones_like(t), alpha=2),
    "add_scalar_": lambda t: t.add_(3),
    "mul_broadcast_": lambda t: t.mul_(torch.arange(t.shape[-1], dtype=t.dtype, device=t.device)),
    "clamp_": lambda t: t.clamp_(-0.5, 0.5),
    "relu_": lambda t: t.relu_(),
    "exp_": lambda t: t.exp_(),
    "zero_": lambda t: t.zero_(),
    "fill_": lambda t: t.fill_(2.5),
    "masked_fill_": lambda t: t.masked_fill_(t > 0, -1.0),
    "index_add_": lambda t: t.index_add_(0, torch.tensor([0, 2, 0], device=t.device), torch.ones(3, t.shape[1], device=t.device)),
    "index_fill_": lambda t: t.index_fill_(1, torch.tensor([1, 3], device=t.device), 9.0),
    "scatter_": lambda t: t.scatter_(1, torch.tensor([[0], [1], [2], [3]], device=t.device), 4.0),
    "setitem_slice": lambda t: t.__setitem__((slice(None), slice(1, 3)), 8.0),
    "setitem_tensor": lambda t: t.__setitem__(0, torch.arange(t.shape[1], dtype=t.dtype, device=t.device)),
    "copy_self_t": lambda t: t.copy_(t.t().contiguous().t()),
    "addmm_": lambda t: t.addmm_(torch.ones(t.shape[0], 3, device=t.device), torch.ones(3, t.shape[1], device=t.device)),
    "transpose_": lambda t: t.transpose_(0, 1),
    "unsqueeze_": lambda t: t.unsqueeze_(0),
    "t_then_add_": lambda t: t.t().add_(1),
}


@pytest.mark.parametrize("name", INPLACE)
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_inplace_ops(name, layout):
    fn = INPLACE[name]
    base = make((4, 4))
    cpu = base if layout == "contiguous" else base.t()
    foo_base = base.foo()
    foo = foo_base if layout == "contiguous" else foo_base.t()
    data_ptr = foo.data_ptr()
    ret_cpu = fn(cpu)
    ret_foo = fn(foo)
    if isinstance(ret_cpu, torch.Tensor):
        assert (ret_foo is foo) == (ret_cpu is cpu)
    assert foo.data_ptr() == data_ptr  # in place: no new storage
    assert_matches(foo, cpu, exact=False)
    assert_matches(foo_base, base, exact=False)


def test_inplace_dtype_error_matches_cpu():
    x = torch.arange(6)
    same_outcome(lambda t: t.add_(0.5), x)  # Long result can't hold Float: RuntimeError, input intact


def test_inplace_on_expanded_is_rejected_like_cpu():
    x = torch.arange(3.0)
    same_outcome(lambda t: t.expand(4, 3).add_(1), x)


# ---- out= --------------------------------------------------------------------------------------------

OUT_OPS = {
    "add": (lambda a, b, out: torch.add(a, b, out=out), (4, 5)),
    "mul": (lambda a, b, out: torch.mul(a, b, out=out), (4, 5)),
    "mm": (lambda a, b, out: torch.mm(a, b.t(), out=out), (4, 4)),
    "sum_dim": (lambda a, b, out: torch.sum(a, 1, out=out), (4,)),
    "cat": (lambda a, b, out: torch.cat([a, b], out=out), (8, 5)),
    "exp": (lambda a, b, out: torch.exp(a, out=out), (4, 5)),
    "where": (lambda a, b, out: torch.where(a > 0, a, b, out=out), (4, 5)),
    "cumsum": (lambda a, b, out: torch.cumsum(a, 0, out=out), (4, 5)),
}


@pytest.mark.parametrize("name", OUT_OPS)
@pytest.mark.parametrize("out_shape", ["right", "wrong_nonempty", "empty"])
def test_out_variants(name, out_shape):
    fn, shape = OUT_OPS[name]
    a, b = make((4, 5), seed=1), make((4, 5), seed=2)
    out_size = {"right": shape, "wrong_nonempty": (3,), "empty": (0,)}[out_shape]
    results = {}
    for device in ("cpu", "foo"):
        out = torch.empty(out_size, device=device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ret = fn(a.to(device), b.to(device), out)
        resize_warnings = [w for w in caught if "resized" in str(w.message)]
        assert ret is out
        results[device] = (out, len(resize_warnings), [type(w.message) for w in resize_warnings])
    out_foo, n_foo, types_foo = results["foo"]
    out_cpu, n_cpu, types_cpu = results["cpu"]
    assert_matches(out_foo, out_cpu, exact=False)
    assert n_foo == n_cpu and types_foo == types_cpu
    if out_shape == "wrong_nonempty":
        assert n_cpu == 1  # the oracle does warn


def test_out_right_size_keeps_storage():
    a = torch.randn(4, 5, device="foo")
    out = torch.empty(4, 5, device="foo")
    ptr = out.data_ptr()
    torch.add(a, a, out=out)
    assert out.data_ptr() == ptr
    assert_matches(out, a.cpu() * 2, exact=False)


def test_out_non_contiguous_writes_through():
    a, b = make((4, 5)), make((4, 5), seed=3)
    base_cpu = torch.zeros(5, 4)
    base_foo = base_cpu.foo()
    torch.add(a, b, out=base_cpu.t())
    torch.add(a.foo(), b.foo(), out=base_foo.t())
    assert_matches(base_foo, base_cpu)


def test_out_multiple_outputs():
    x = make((4, 6))
    for device in ("cpu", "foo"):
        vals, idx = torch.empty(0, device=device), torch.empty(0, dtype=torch.long, device=device)
        r = torch.max(x.to(device), 1, out=(vals, idx))
        assert r[0] is vals and r[1] is idx
        sv, si = torch.empty(2, device=device), torch.empty(2, dtype=torch.long, device=device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.sort(x.to(device), dim=0, out=(sv, si))
        if device == "cpu":
            expected = (vals, idx, sv, si)
        else:
            for got, exp in zip((vals, idx, sv, si), expected):
                assert_matches(got, exp)


def test_out_dtype_mismatch_raises_like_cpu():
    a = make((3, 3))
    same_outcome(lambda x, out: torch.add(x, x, out=out), a, torch.empty(3, 3, dtype=torch.long))
    # an integer result may be written to a float out
    same_outcome(lambda x, out: torch.add(x, x, out=out), torch.arange(9).view(3, 3), torch.empty(3, 3))


def test_out_on_wrong_device_raises():
    a = torch.randn(3, device="foo")
    with pytest.raises(RuntimeError):
        torch.add(a, a, out=torch.empty(3))
    with pytest.raises(RuntimeError):
        torch.add(a, a, out=torch.empty(3, device="foo:1"))
    with pytest.raises(RuntimeError):
        torch.add(a.cpu(), a.cpu(), out=torch.empty(3, device="foo"))


# ---- resize_, set_ -----------------------------------------------------------------------------------

def test_resize_grow_and_shrink():
    x = torch.arange(6.0)
    y = x.foo()
    r = y.resize_(2, 5)
    assert r is y and y.shape == (2, 5) and y.stride() == (5, 1)
    assert torch.equal(y.flatten()[:6].cpu(), x)  # leading data kept, as on CPU
    assert y.untyped_storage().nbytes() >= 40
    y.resize_(2, 2)
    assert_matches(y, torch.arange(4.0).view(2, 2))
    y.resize_(0)
    assert y.numel() == 0 and y.shape == (0,)


def test_resize_shared_storage_stays_shared():
    for device in ("cpu", "foo"):
        a = torch.arange(4.0, device=device)
        b = a[:]
        a.resize_(1000)
        a[0] = 42.0
        a[999] = 7.0
        assert b[0].item() == 42.0
        assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        assert a.untyped_storage().nbytes() == b.untyped_storage().nbytes() >= 4000


def test_resize_memory_format_and_resize_as():
    for memory_format in (torch.channels_last, torch.contiguous_format):
        c = torch.empty(0).resize_(2, 3, 4, 5, memory_format=memory_format)
        f = torch.empty(0, device="foo").resize_(2, 3, 4, 5, memory_format=memory_format)
        assert f.stride() == c.stride()
    f = torch.empty(3, device="foo").resize_as_(torch.empty(4, 2))
    assert f.shape == (4, 2) and f.device == FOO0


def test_set_storage():
    for device in ("cpu", "foo"):
        t = torch.arange(10.0, device=device)
        s = torch.empty(0, device=device)
        r = s.set_(t.untyped_storage(), 2, (2, 2), (1, 2))
        assert r is s
        assert s.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
        s.fill_(-1)
        if device == "cpu":
            expected_s, expected_t = s.clone(), t.clone()
        else:
            assert_matches(s, expected_s)
            assert_matches(t, expected_t)


def test_set_tensor_and_empty():
    t = torch.arange(12.0, device="foo").view(3, 4).t()
    s = torch.empty(5, device="foo")
    s.set_(t)
    assert s.shape == t.shape and s.stride() == t.stride() and s.storage_offset() == t.storage_offset()
    assert s.data_ptr() == t.data_ptr()
    assert torch.equal(s.cpu(), t.cpu())
    s.set_()
    assert s.numel() == 0 and s.device == FOO0
    assert t.cpu().sum().item() == 66.0


def test_set_grows_storage_like_cpu():
    for device in ("cpu", "foo"):
        st = torch.arange(4.0, device=device).untyped_storage()
        s = torch.empty(0, device=device).set_(st, 0, (10,), (1,))
        assert s.shape == (10,)
        assert s.untyped_storage().nbytes() >= 40
        assert s[:4].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_set_rejects_other_device_storage():
    with pytest.raises(RuntimeError, match="foo"):
        torch.empty(0, device="foo").set_(torch.arange(4.0).untyped_storage())
    with pytest.raises(RuntimeError, match="foo"):
        torch.empty(0, device="foo").set_(torch.arange(4.0, device="foo:1").untyped_storage())


# ---- item, tolist, printing --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_item_and_tolist(dtype):
    x = make((2, 3), dtype)
    y = x.foo()
    assert y.tolist() == x.tolist()
    assert y[1, 2].item() == x[1, 2].item()
    assert type(y[0, 0].item()) is type(x[0, 0].item())


def _strip_device(s):
    return re.sub(r",\s*device='foo:\d'", "", s)


@pytest.mark.parametrize(
    "cpu",
    [torch.arange(3, dtype=torch.int32), torch.tensor(1.5), make((2, 3)), make((40, 40)),
     torch.tensor([True, False]), make((3,), torch.complex64), torch.empty(0), make((2, 2), torch.float16),
     torch.tensor([float("nan"), float("inf"), 1e-8, 1e10])],
    ids=["int32", "scalar", "small", "summarized", "bool", "complex", "empty", "half", "special"],
)
def test_printing_matches_cpu(cpu):
    foo = cpu.to("foo:1")
    text = repr(foo)
    assert "device='foo:1'" in text and "privateuseone" not in text.lower()
    assert _strip_device(text) == repr(cpu)
    assert str(foo) == text


def test_printing_grad_fn_and_format():
    w = torch.tensor([1.0, 2.0], device="foo", requires_grad=True)
    y = w * 2
    assert "grad_fn=<MulBackward0>" in repr(y) and "device='foo:0'" in repr(y)
    assert "requires_grad=True" in repr(w)
    assert f"{torch.tensor(3.14159, device='foo'):.2f}" == f"{torch.tensor(3.14159):.2f}"
    assert float(torch.tensor(2.5, device="foo")) == 2.5
    assert int(torch.tensor(7, device="foo")) == 7
    assert bool(torch.tensor(True, device="foo")) is True


# ---- autograd ----------------------------------------------------------------------------------------

def _mlp():
    return nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 16), nn.Tanh(), nn.Linear(16, 3))


@pytest.mark.parametrize("device", ["foo:0", "foo:1"])
def test_mlp_backward_matches_cpu(device):
    cpu_model = _mlp()
    foo_model = copy.deepcopy(cpu_model).to(device)
    x = make((8, 10), seed=5)
    target = torch.tensor([0, 1, 2, 1, 0, 2, 2, 1])
    xc = x.clone().requires_grad_()
    xf = x.to(device).requires_grad_()
    loss_cpu = F.cross_entropy(cpu_model(xc), target)
    loss_foo = F.cross_entropy(foo_model(xf), target.to(device))
    loss_cpu.backward()
    loss_foo.backward()
    assert loss_foo.device == torch.device(device)
    torch.testing.assert_close(loss_foo.cpu(), loss_cpu)
    for (name, pc), (_, pf) in zip(cpu_model.named_parameters(), foo_model.named_parameters()):
        assert pf.grad is not None and pf.grad.device == torch.device(device), name
        torch.testing.assert_close(pf.grad.cpu(), pc.grad, msg=name)
    torch.testing.assert_close(xf.grad.cpu(), xc.grad)
    # one optimiser step keeps them equal
    for model in (cpu_model, foo_model):
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9).step()
    for pc, pf in zip(cpu_model.parameters(), foo_model.parameters()):
        torch.testing.assert_close(pf.detach().cpu(), pc.detach())


def test_requires_grad_on_foo_leaves():
    w = torch.randn(5, device="foo", requires_grad=True)
    assert w.is_leaf and w.requires_grad and w.grad is None and w.grad_fn is None
    (w * w).sum().backward()
    assert w.grad.device == FOO0
    torch.testing.assert_close(w.grad.cpu(), 2 * w.detach().cpu())
    # a leaf made by moving then requires_grad_()
    v = torch.randn(5).foo().requires_grad_()
    assert v.is_leaf
    # moving a CPU leaf to foo is differentiable: the gradient flows back to CPU
    c = torch.randn(5, requires_grad=True)
    f = c.foo()
    assert not f.is_leaf and f.grad_fn is not None
    (f * 3).sum().backward()
    assert c.grad.device == torch.device("cpu")
    torch.testing.assert_close(c.grad, torch.full((5,), 3.0))


def test_backward_across_foo_devices():
    x0 = torch.randn(4, device="foo:0", requires_grad=True)
    y = x0.to("foo:1") * torch.arange(4.0, device="foo:1")
    y.sum().backward()
    assert x0.grad.device == FOO0
    torch.testing.assert_close(x0.grad.cpu(), torch.arange(4.0))


def test_no_grad():
    w = torch.randn(3, device="foo", requires_grad=True)
    with torch.no_grad():
        y = w * 2
        assert not y.requires_grad and y.grad_fn is None
        w.add_(1)  # in-place update of a leaf, as an optimiser does
        with torch.enable_grad():
            z = w * 2
            assert z.requires_grad
    assert w.is_leaf and w.requires_grad
    with torch.inference_mode():
        i = w * 2
    assert i.is_inference() and not i.requires_grad


def test_autograd_grad_of_view_and_inplace():
    def f(t):
        t = t.clone()
        t[:, 1].mul_(3)
        return (t.t().sin() ** 2).sum()

    xc = make((3, 4)).requires_grad_()
    xf = xc.detach().foo().requires_grad_()
    (gc,) = torch.autograd.grad(f(xc), xc)
    (gf,) = torch.autograd.grad(f(xf), xf)
    assert_matches(gf, gc, exact=False)


# ---- mixed devices, numpy, errors --------------------------------------------------------------------

def _devices_in_message(excinfo, *devices):
    msg = str(excinfo.value)
    for d in devices:
        assert d in msg, msg
    assert "privateuseone" not in msg.lower()


@pytest.mark.parametrize(
    "fn",
    [lambda f, c: f + c, lambda f, c: c + f, lambda f, c: torch.mm(f, c), lambda f, c: f.add_(c),
     lambda f, c: c.add_(f), lambda f, c: torch.cat([f, c]), lambda f, c: torch.where(f > 0, f, c)],
    ids=["add", "radd", "mm", "foo_inplace", "cpu_inplace", "cat", "where"],
)
def test_mixed_foo_and_cpu_raises(fn):
    f = torch.ones(3, 3, device="foo")
    c = torch.ones(3, 3)
    with pytest.raises(RuntimeError) as excinfo:
        fn(f, c)
    _devices_in_message(excinfo, "foo:0", "cpu")
    assert torch.equal(f.cpu(), torch.ones(3, 3)) and torch.equal(c, torch.ones(3, 3))


@pytest.mark.parametrize(
    "fn",
    [lambda a, b: a + b, lambda a, b: torch.mm(a, b), lambda a, b: a.add_(b),
     lambda a, b: torch.stack([a, b])],
    ids=["add", "mm", "inplace", "stack"],
)
def test_mixed_foo_devices_raises(fn):
    a = torch.ones(3, 3, device="foo:0")
    b = torch.ones(3, 3, device="foo:1")
    with pytest.raises(RuntimeError) as excinfo:
        fn(a, b)
    _devices_in_message(excinfo, "foo:0", "foo:1")


@pytest.mark.parametrize(
    "fn",
    [lambda a, b: a.div_(b), lambda a, b: torch._foreach_div_([a], [b])],
    ids=["div_", "foreach_div_"],
)
def test_an_output_that_cannot_hold_the_result_dtype_is_reported_before_the_devices(fn):
    # CUDA's TensorIterator checks an output's dtype beside its device, before the inputs' devices: an integer
    # tensor divided in place by one on another device raises the dtype error (PyTorch's test_foreach expects it).
    a = torch.arange(4, device="foo:0")
    b = torch.ones(4, dtype=torch.int64, device="foo:1")
    with pytest.raises(RuntimeError, match="result type .*can't be cast to the desired output type"):
        fn(a, b)
    assert torch.equal(a.cpu(), torch.arange(4))
    with pytest.raises(RuntimeError) as excinfo:  # the same call with a float output: the devices
        fn(a.float(), b)
    _devices_in_message(excinfo, "foo:0", "foo:1")
    with pytest.raises(RuntimeError) as excinfo:  # an operator that compares devices first, as CUDA's mm
        torch.mm(torch.ones(2, 3, device="foo:0"), torch.ones(4, 5, device="foo:1"))
    _devices_in_message(excinfo, "foo:0", "foo:1")


def test_indices_on_another_foo_device_raise():
    x1 = torch.arange(12.0, device="foo:1").view(3, 4)
    with pytest.raises(RuntimeError, match="foo:1"):
        x1[torch.tensor([0], device="foo:0")]
    with pytest.raises(RuntimeError) as excinfo:
        x1[torch.tensor([0])] = torch.ones(4, device="foo:0")
    _devices_in_message(excinfo, "foo:0", "foo:1")
    with pytest.raises(RuntimeError) as excinfo:  # a CPU condition is not a scalar
        torch.where(torch.tensor([True, False, True]).view(3, 1), x1, x1)
    _devices_in_message(excinfo, "foo:1", "cpu")
    assert torch.equal(x1.cpu(), torch.arange(12.0).view(3, 4))


def test_zero_dim_cpu_tensor_is_a_scalar():
    # As on CUDA, a 0-dim CPU tensor may be mixed with device tensors.
    x = make((3, 4))
    s = torch.tensor(2.5)
    for fn in (lambda t: t + s, lambda t: s * t, lambda t: torch.mul(t, s), lambda t: t.add_(s),
               lambda t: t / s, lambda t: t == s, lambda t: torch.pow(t, s), lambda t: torch.maximum(t, s),
               lambda t: t.masked_fill(t > 0, torch.tensor(0.0))):
        same_outcome(fn, x, exact=False)
    y = x.to("foo:1") + s
    assert y.device == FOO1
    # but a 0-dim foo tensor does not make a CPU tensor a scalar (CUDA raises too)
    with pytest.raises(RuntimeError):
        torch.tensor(1.0, device="foo") + torch.ones(3)


def test_numpy_raises_type_error():
    y = torch.ones(3, device="foo")
    with pytest.raises(TypeError, match="foo"):
        y.numpy()
    with pytest.raises(TypeError):
        np.asarray(y)
    assert np.array_equal(y.cpu().numpy(), np.ones(3, dtype=np.float32))
    arr = np.arange(6, dtype=np.float64).reshape(2, 3)
    assert_matches(torch.from_numpy(arr).foo(), torch.from_numpy(arr))


FAILING = {
    "mm_shapes": lambda a, b: torch.mm(a, b),
    "mm_shapes_out": lambda a, b: torch.mm(a, b, out=b),
    "add_broadcast": lambda a, b: a.add_(b[:2, :2]),
    "matmul_3d": lambda a, b: torch.matmul(a.view(2, 3, 2), b.view(3, 2, 3)),
    "index_oob": lambda a, b: a[torch.tensor([10])],
    "cat_dims": lambda a, b: torch.cat([a, b.view(-1)]),
    "gather_oob": lambda a, b: a.gather(1, torch.full((3, 3), 9, device=a.device)),
}
VALUE_ERRORS = {"gather_oob"}


@pytest.mark.parametrize("name", FAILING)
def test_failed_op_leaves_inputs_intact(name):
    fn = FAILING[name]
    a, b = make((3, 4), seed=1), make((3, 6), seed=2)
    with pytest.raises(Exception) as cpu_exc:  # the oracle fails ...
        fn(a.clone(), b.clone())
    fa, fb = a.foo(), b.foo()
    ptr_a, ptr_b = fa.data_ptr(), fb.data_ptr()
    with pytest.raises((type(cpu_exc.value), RuntimeError)):  # ... and so does foo (CUDA reports index errors as RuntimeError)
        fn(fa, fb)
        # An index out of range in a queued kernel is raised by the next synchronization, as a CUDA
        # device-side assert is; every other error at the call.
        if name in VALUE_ERRORS:
            torch.foo.synchronize()
    torch.foo.synchronize()  # no error is left pending
    assert_matches(fa, a)
    assert_matches(fb, b)
    assert fa.data_ptr() == ptr_a and fb.data_ptr() == ptr_b
    assert_matches(fa + fb[:, :4], a + b[:, :4])  # and foo keeps working


# ---- indexing ----------------------------------------------------------------------------------------

INDEXING = {
    "cpu_long": lambda t: t[torch.tensor([0, 2, 2])],
    "cpu_long_neg": lambda t: t[torch.tensor([-1, 0])],
    "cpu_long_cols": lambda t: t[:, torch.tensor([3, 1])],
    "cpu_long_pair": lambda t: t[torch.tensor([0, 1]), torch.tensor([2, 3])],
    "cpu_long_2d": lambda t: t[torch.tensor([[0, 1], [2, 2]])],
    "cpu_zero_dim": lambda t: t[torch.tensor(1)],
    "foo_long": lambda t: t[torch.tensor([0, 2], device=t.device)],
    "list": lambda t: t[[0, 2]],
    "cpu_bool_mask": lambda t: t[torch.tensor([True, False, True])],
    "foo_bool_mask": lambda t: t[t > 0],
    "cpu_bool_mask_2d": lambda t: t[torch.tensor([[True, False, True, False]] * 3)],
    "ellipsis_none": lambda t: t[..., None, 1],
    "masked_select": lambda t: t.masked_select(t > 0),
    "index_select": lambda t: t.index_select(1, torch.tensor([0, 3], device=t.device)),
    "gather": lambda t: t.gather(1, torch.tensor([[0, 1], [1, 2], [3, 0]], device=t.device)),
    "take": lambda t: t.take(torch.tensor([0, 5, 11], device=t.device)),
}


@pytest.mark.parametrize("name", INDEXING)
def test_indexing(name):
    fn = INDEXING[name]
    x = make((3, 4))
    expected = fn(x)
    got = fn(x.foo())
    assert_matches(got, expected)


SETITEM = {
    "cpu_long_scalar": lambda t: t.__setitem__(torch.tensor([0, 2]), 5.0),
    "cpu_long_tensor_value": lambda t: t.__setitem__(torch.tensor([1]), torch.arange(4.0, device=t.device)),
    "cpu_bool_mask": lambda t: t.__setitem__(torch.tensor([False, True, True]), -2.0),
    "foo_bool_mask": lambda t: t.__setitem__(t > 0, 0.0),
    "index_put_accumulate": lambda t: t.index_put_((torch.tensor([0, 0, 2]),), torch.ones(3, 4, device=t.device), accumulate=True),
    "pair": lambda t: t.__setitem__((torch.tensor([0, 1]), torch.tensor([3, 3])), 7.0),
    "masked_scatter": lambda t: t.masked_scatter_(t < 0, torch.arange(12.0, device=t.device)),
}


@pytest.mark.parametrize("name", SETITEM)
def test_index_assignment(name):
    fn = SETITEM[name]
    x = make((3, 4))
    y = x.foo()
    fn(x)
    fn(y)
    assert_matches(y, x)


def test_nonzero_and_friends():
    x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -1.0]])
    y = x.foo()
    assert_matches(torch.nonzero(y), torch.nonzero(x))
    assert_matches(y.nonzero(), x.nonzero())
    for got, exp in zip(torch.nonzero(y, as_tuple=True), torch.nonzero(x, as_tuple=True)):
        assert_matches(got, exp)
    for got, exp in zip(torch.where(y != 0), torch.where(x != 0)):
        assert_matches(got, exp)
    assert_matches(torch.argwhere(y), torch.argwhere(x))
    assert_matches(torch.nonzero(torch.zeros(3, device="foo")), torch.nonzero(torch.zeros(3)))
    assert torch.count_nonzero(y).item() == 3


# ---- device addresses --------------------------------------------------------------------------------

def _mapping_permissions(address):
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            lo, hi = (int(v, 16) for v in fields[0].split("-"))
            if lo <= address < hi:
                return fields[1]
    return None


@pytest.mark.parametrize("device", ["foo:0", "foo:1"])
def test_data_ptr_is_a_device_address(device):
    t = torch.randn(1000, device=device)
    perms = _mapping_permissions(t.data_ptr())
    # A GPU pointer is not host memory: the host cannot read or write it.
    assert perms is None or ("r" not in perms and "w" not in perms), perms
    c = torch.randn(1000)
    assert "r" in _mapping_permissions(c.data_ptr())
    assert ctypes.c_float.from_address(c.data_ptr()).value == c[0].item()  # the oracle: host memory is readable


def test_data_ptr_offsets_like_cpu():
    base = torch.randn(6, 8, device="foo")
    for view in (lambda t: t[2], lambda t: t[:, 3:], lambda t: t.t()[1], lambda t: t.view(-1)[13:]):
        cpu = torch.empty(6, 8)
        assert view(base).data_ptr() - base.data_ptr() == view(cpu).data_ptr() - cpu.data_ptr()
    assert base.untyped_storage().data_ptr() == base.data_ptr()
    assert torch.empty(0, device="foo").data_ptr() == torch.empty(0).data_ptr() == 0


# ---- factories, memory formats, misc -----------------------------------------------------------------

FACTORIES = {
    "zeros": lambda d: torch.zeros(2, 3, device=d),
    "ones_int": lambda d: torch.ones(4, dtype=torch.int16, device=d),
    "full_int_infers_long": lambda d: torch.full((2, 2), 7, device=d),
    "arange": lambda d: torch.arange(1, 10, 2, device=d),
    "arange_float": lambda d: torch.arange(0, 1, 0.1, device=d),
    "linspace": lambda d: torch.linspace(-1, 1, 7, device=d),
    "logspace": lambda d: torch.logspace(0, 2, 5, device=d),
    "eye": lambda d: torch.eye(3, 4, device=d),
    "tensor": lambda d: torch.tensor([[1, 2], [3, 4]], device=d),
    "tensor_float": lambda d: torch.tensor([1.5, -2.0], dtype=torch.float64, device=d),
    "as_tensor": lambda d: torch.as_tensor([1.0, 2.0], device=d),
    "zeros_like": lambda d: torch.zeros_like(torch.empty(2, 3, device=d)),
    "full_like": lambda d: torch.full_like(torch.empty(2, 3, device=d, dtype=torch.int32), 4),
    "empty_strided_shape": lambda d: torch.empty_strided((2, 3), (1, 2), device=d).fill_(1),
    "tril_indices": lambda d: torch.tril_indices(3, 3, device=d),
}


@pytest.mark.parametrize("name", FACTORIES)
def test_factories(name):
    fn = FACTORIES[name]
    assert_matches(fn("foo"), fn("cpu"))
    assert_matches(fn("foo:1"), fn("cpu"), device=FOO1)
    with torch.foo.device(1):
        assert fn("foo").device == FOO1


def test_like_factories_keep_device_and_strides():
    x = torch.empty(2, 3, 4, 5, device="foo:1").to(memory_format=torch.channels_last)
    c = torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last)
    for fn in (torch.empty_like, torch.zeros_like, torch.ones_like, torch.rand_like):
        y = fn(x)
        assert y.device == FOO1 and y.stride() == fn(c).stride()


def test_clone_contiguous_and_memory_format():
    x = make((2, 3, 4, 5))
    same_outcome(lambda t: t.transpose(1, 2).clone(), x)
    same_outcome(lambda t: t.transpose(1, 2).contiguous(), x)
    same_outcome(lambda t: t.to(memory_format=torch.channels_last), x)
    same_outcome(lambda t: t.to(memory_format=torch.channels_last).contiguous(), x)
    same_outcome(lambda t: t.contiguous(memory_format=torch.channels_last) + 1, x)
    y = x.foo().t() if x.dim() == 2 else x.foo().transpose(0, 3)
    assert not y.is_contiguous() and y.contiguous().is_contiguous()


NONCONTIG_OPS = {
    "matmul_t": lambda a: a.t() @ a[:, ::2],
    "softmax_t": lambda a: a.t().softmax(dim=0),
    "sum_sliced": lambda a: a[:, 1::2].sum(dim=0),
    "sort_t": lambda a: a.t().sort(dim=1).values,
    "cumsum_expanded": lambda a: a[:1].expand(4, 8).cumsum(0),
    "layer_norm_t": lambda a: F.layer_norm(a.t(), (6,)),
    "max_pool": lambda a: F.max_pool2d(a.view(1, 1, 6, 8), 2),
}


@pytest.mark.parametrize("name", NONCONTIG_OPS)
def test_ops_on_non_contiguous_inputs(name):
    same_outcome(NONCONTIG_OPS[name], make((6, 8)), exact=False)


def test_ops_follow_input_device():
    x = torch.randn(4, 4, device="foo:1")
    assert (x @ x).device == FOO1
    assert x.sum().device == FOO1
    assert torch.nonzero(x).device == FOO1
    assert x[torch.tensor([1])].device == FOO1
    assert torch.zeros_like(x).device == FOO1


@pytest.mark.parametrize("cls", [nn.LSTM, nn.GRU], ids=["LSTM", "GRU"])
def test_recurrent_layers_match_cpu(cls):
    cpu = cls(3, 5)
    foo = cls(3, 5)
    foo.load_state_dict(cpu.state_dict())
    foo.foo()
    x = make((4, 2, 3))
    out_cpu, _ = cpu(x)
    out_foo, _ = foo(x.foo())
    assert_matches(out_foo, out_cpu, exact=False)


def test_rnn_tanh_matches_cpu():
    cpu = nn.RNN(3, 5)
    foo = nn.RNN(3, 5)
    foo.load_state_dict(cpu.state_dict())
    foo.foo()
    x = make((4, 2, 3))
    assert_matches(foo(x.foo())[0], cpu(x)[0], exact=False)


CONVOLUTIONS = {
    "conv1d": lambda x, d: F.conv1d(x.view(2, 3, 8), torch.linspace(-1, 1, 30, device=d).view(5, 3, 2)),
    "conv2d": lambda x, d: F.conv2d(x.view(1, 3, 4, 4), torch.linspace(-1, 1, 54, device=d).view(2, 3, 3, 3), padding=1),
    "conv2d_non_contiguous": lambda x, d: F.conv2d(x.view(1, 3, 4, 4).transpose(2, 3),
                                                   torch.linspace(-1, 1, 54, device=d).view(2, 3, 3, 3)),
    "conv_transpose2d": lambda x, d: F.conv_transpose2d(x.view(1, 3, 4, 4), torch.linspace(-1, 1, 54, device=d).view(3, 2, 3, 3)),
}


@pytest.mark.parametrize("name", CONVOLUTIONS)
def test_convolutions_match_cpu(name):
    fn = CONVOLUTIONS[name]
    x = make((48,))
    assert_matches(fn(x.foo(), "foo"), fn(x, "cpu"), exact=False)


def test_conv_module_backward_matches_cpu():
    cpu = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(16, 2))
    foo = copy.deepcopy(cpu).foo()
    x = make((2, 3, 4, 4))
    cpu(x).sum().backward()
    foo(x.foo()).sum().backward()
    for pc, pf in zip(cpu.parameters(), foo.parameters()):
        torch.testing.assert_close(pf.grad.cpu(), pc.grad)


# Lazy conjugate/negative views: reading one crashed the whole interpreter, so they run in a child process.
_CONJ_SCRIPT = """
import torch
a_cpu = torch.tensor([1 + 2j, 3 - 1j, -0.5 + 0.25j])
a = a_cpu.foo()
checks = {
    "conj_is_view": lambda: a.conj().is_conj(),
    "conj_cpu": lambda: torch.equal(a.conj().cpu(), a_cpu.conj()),
    "conj_mul": lambda: torch.equal((a.conj() * 2).cpu(), a_cpu.conj() * 2),
    "conj_resolve": lambda: torch.equal(a.conj().resolve_conj().cpu(), a_cpu.conj().resolve_conj()),
    "conj_to_foo1": lambda: torch.equal(a.conj().to("foo:1").cpu(), a_cpu.conj()),
    "neg_view_imag": lambda: torch.equal(a.conj().imag.cpu(), a_cpu.conj().imag),
    "neg_view_real": lambda: torch.equal(torch.arange(3.0, device="foo")._neg_view().cpu(), -torch.arange(3.0)),
    "matmul_conj_t": lambda: torch.allclose((a.view(3, 1) @ a.view(1, 3).conj()).cpu(), a_cpu.view(3, 1) @ a_cpu.view(1, 3).conj()),
    "vdot": lambda: torch.allclose(torch.vdot(a, a).cpu(), torch.vdot(a_cpu, a_cpu)),
}
for name, check in checks.items():
    print(name, check(), flush=True)
"""


def test_conj_and_neg_views():
    env = {k: v for k, v in os.environ.items() if k not in ("FOO_DEVICE_COUNT", "FOO_DEVICE_MEMORY_MB")}
    proc = subprocess.run([sys.executable, "-c", _CONJ_SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, f"returncode {proc.returncode}; got as far as:\n{proc.stdout}{proc.stderr[-2000:]}"
    results = dict(line.split() for line in proc.stdout.splitlines())
    assert results and all(v == "True" for v in results.values()), results


def test_adam_foreach_matches_cpu():
    # Optimisers use the foreach kernels on accelerator devices (foo), the per-tensor loop on CPU.
    cpu = _mlp()
    foo = copy.deepcopy(cpu).foo()
    opt_cpu = torch.optim.Adam(cpu.parameters(), lr=0.05)
    opt_foo = torch.optim.Adam(foo.parameters(), lr=0.05)
    x = make((6, 10), seed=9)
    for _ in range(3):
        for model, opt, inp in ((cpu, opt_cpu, x), (foo, opt_foo, x.foo())):
            opt.zero_grad()
            model(inp).pow(2).mean().backward()
            opt.step()
    for pc, pf in zip(cpu.parameters(), foo.parameters()):
        assert pf.device == FOO0
        torch.testing.assert_close(pf.detach().cpu(), pc.detach())


def test_ops_in_another_thread():
    import threading

    results = []

    def worker():
        t = torch.arange(4.0, device="foo:1") * 2
        results.append((torch.foo.current_device(), t.device, t.cpu().tolist()))

    torch.foo.set_device(1)
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert results == [(0, FOO1, [0.0, 2.0, 4.0, 6.0])]


def test_storage_level_access():
    x = torch.arange(4.0, device="foo")
    s = x.untyped_storage()
    assert s.device == FOO0 and s.nbytes() == 16
    assert s.tolist() == torch.arange(4.0).untyped_storage().tolist()
    assert x.untyped_storage().cpu().tolist() == torch.arange(4.0).untyped_storage().tolist()
    s.fill_(0)
    assert x.cpu().tolist() == [0.0] * 4
    s.copy_(torch.ones(4).untyped_storage())
    assert x.cpu().tolist() == [1.0] * 4
    c = copy.deepcopy(x)
    assert c.device == FOO0 and c.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert torch.equal(c.cpu(), x.cpu())


def test_ops_with_generic_composites_run_cpu_kernels():
    # PrivateUse1 would get these operators' generic composite kernels; foo routes them to CPU's
    # kernels, so results are CPU's bit for bit (no OpInfo exercises them).
    parts = [torch.randn(3, 4) for _ in range(3)]
    assert torch.equal(torch._stack([p.to("foo") for p in parts], 1).cpu(), torch._stack(parts, 1))
    out_cpu, out_foo = torch.empty(0, 4), torch.empty(0, 4, device="foo")
    torch._stack(parts, 0, out=out_cpu)
    torch._stack([p.to("foo") for p in parts], 0, out=out_foo)
    assert torch.equal(out_foo.cpu(), out_cpu)
    mask = torch.randn(3, 4, 5) > 0
    for reduce in (torch.all, torch.any):
        expected = reduce(mask, (0, 2), out=torch.empty(0, dtype=torch.bool))
        actual = reduce(mask.to("foo"), (0, 2), out=torch.empty(0, dtype=torch.bool, device="foo"))
        assert torch.equal(actual.cpu(), expected)
    half = torch.randn(4, 5, dtype=torch.half)
    assert torch.equal(torch.ops.aten.linalg__powsum(half.to("foo"), 2.0, [1]).cpu(),
                       torch.ops.aten.linalg__powsum(half, 2.0, [1]))


COMPOSITE_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional")


def test_every_operator_with_a_cpu_kernel_runs_it_on_foo():
    # With no foo kernel, the dispatcher gives foo an operator's composite kernel ahead of the fallback:
    # other rounding than CPU's (silu_backward), warnings twice (a structured op's meta function runs for
    # the functional and the out= call). Listed from the dispatcher, so a new torch cannot reopen the gap.
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    with_both = [
        name for name in torch._C._dispatch_get_all_op_names()
        if name.startswith("aten::") and has(name, "CPU") and any(has(name, key) for key in COMPOSITE_KEYS)
    ]
    assert len(with_both) > 300  # the listing sees PyTorch's operators
    assert [name for name in with_both if not has(name, "PrivateUse1")] == []


@pytest.mark.parametrize("op", ["silu_backward", "mish_backward"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_activation_backwards_equal_cpu_bitwise(op, dtype):
    grad, x = make((257,), dtype, seed=1), make((257,), dtype, seed=2)
    kernel = getattr(torch.ops.aten, op)
    assert torch.equal(kernel(grad.to("foo"), x.to("foo")).cpu(), kernel(grad, x))


def test_swiglu_gradients_equal_cpu_bitwise():
    x, w = make((8, 16), torch.bfloat16, seed=3), make((16, 32), torch.bfloat16, seed=4)
    grads = {}
    for device in ("cpu", "foo"):
        xd = x.to(device, copy=True).requires_grad_()
        h = xd @ w.to(device)
        (F.silu(h[:, :16]) * h[:, 16:]).sum().backward()
        grads[device] = xd.grad.cpu()
    assert torch.equal(grads["foo"], grads["cpu"])


def test_composites_that_call_cpu_only_dispatch_stubs_run_on_foo():
    # kaiser_window's composite calls a DispatchStub that has kernels for CPU and CUDA only.
    for kwargs in ({}, {"periodic": False}, {"periodic": True, "beta": 5.0}):
        expected = torch.kaiser_window(8, **kwargs)
        assert torch.equal(torch.kaiser_window(8, device="foo", **kwargs).cpu(), expected)


def test_warnings_reach_the_user_as_on_cpu():
    counts = {}
    for device in ("cpu", "foo"):
        mask = torch.zeros(10, dtype=torch.uint8, device=device)
        y = torch.ones(10, 10, device=device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y.index_put_((mask,), y[mask], accumulate=True)
        counts[device] = [str(w.message) for w in caught]
    assert len(counts["cpu"]) == 2 and counts["foo"] == counts["cpu"]


@pytest.mark.parametrize("context", ["inference_mode", "no_grad"])
def test_transformer_encoder_fast_path_with_padding_mask_equals_cpu(context):
    # In eval mode PyTorch's fast path packs the padded batch into a nested tensor on foo.
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2).eval()
    x = make((3, 5, 16), seed=5)
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 4 + [True]])
    guard = torch.inference_mode if context == "inference_mode" else torch.no_grad
    with guard(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors' prototype warning
        expected = encoder(x, src_key_padding_mask=mask)
        actual = copy.deepcopy(encoder).foo()(x.foo(), src_key_padding_mask=mask.foo())
    assert actual.device == FOO0
    assert torch.equal(actual.cpu(), expected)


def test_nested_tensors_on_foo_map_back_to_cpu_values():
    x = make((2, 4, 3), seed=6)
    keep = torch.tensor([[True] * 4, [True, True, False, False]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = torch._nested_tensor_from_mask(x, keep).to_padded_tensor(0.0)
        nested = torch._nested_tensor_from_mask(x.foo(), keep.foo())
        assert nested.is_nested and nested.device == FOO0
        assert torch.equal(nested.to_padded_tensor(0.0).cpu(), expected)
