"""foo_backend.ops (rms_norm, add_gelu_, sgd_step_) on foo and on CPU, against PyTorch's own functions."""
import pytest
import torch
import torch.nn.functional as F
from torch.testing._internal.optests import OpCheckError

from foo_backend import ops

DEVICES = ["cpu", "foo"]
# Tests move CPU inputs with .to(device, copy=True): for device "cpu" a plain .to() would return the input itself.
FLOAT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
# rms_norm accumulates in float/double and rounds once; F.rms_norm rounds twice in half types: <= ~1 ulp apart.
RMS_TOL = {
    torch.float32: dict(rtol=2e-6, atol=1e-6),
    torch.float64: dict(rtol=1e-13, atol=1e-13),
    torch.float16: dict(rtol=2e-3, atol=1e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2),
}
EXACT = dict(rtol=0, atol=0)


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _randn(*shape, dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=_gen(seed), dtype=torch.float64).to(dtype)


def _ref_rms_norm(x, w, eps=1e-6):
    return F.rms_norm(x, (x.shape[-1],), w, eps)


# ---------------------------------------------------------------------------------------------------
# rms_norm


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(5, 16), (2, 3, 33), (130, 7), (4,), (0, 8), (3, 0)], ids=str)
def test_rms_norm_matches_functional(device, dtype, shape):
    x = _randn(*shape, dtype=dtype) * 3
    w = _randn(shape[-1], dtype=dtype, seed=1)
    y = ops.rms_norm(x.to(device, copy=True), w.to(device, copy=True), 1e-5)
    assert y.device.type == device and y.dtype == dtype and y.shape == x.shape and y.is_contiguous()
    torch.testing.assert_close(y.cpu(), _ref_rms_norm(x, w, 1e-5), **RMS_TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_non_contiguous_input_and_default_eps(device):
    base = _randn(12, 10)
    x = base.t()  # (10, 12), non-contiguous
    w = _randn(12, seed=1)
    y = ops.rms_norm(x.to(device, copy=True), w.to(device, copy=True))
    assert not x.to(device, copy=True).is_contiguous()
    torch.testing.assert_close(y.cpu(), _ref_rms_norm(x, w, 1e-6), **RMS_TOL[torch.float32])
    # eps matters: a row of zeros normalises to 0 / sqrt(eps).
    z = ops.rms_norm(torch.zeros(1, 3, device=device), torch.ones(3, device=device), 0.25)
    torch.testing.assert_close(z.cpu(), torch.zeros(1, 3), **EXACT)


@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_gradients_match_functional(device):
    x0, w0, g = _randn(6, 20) * 2, _randn(20, seed=1), _randn(6, 20, seed=2)
    x, w = x0.to(device, copy=True).requires_grad_(), w0.to(device, copy=True).requires_grad_()
    ops.rms_norm(x, w, 1e-5).backward(g.to(device, copy=True))
    xr, wr = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    _ref_rms_norm(xr, wr, 1e-5).backward(g)
    assert x.grad.device.type == device and w.grad.device.type == device
    torch.testing.assert_close(x.grad.cpu(), xr.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad.cpu(), wr.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_gradcheck_float64(device):
    x = _randn(3, 5, dtype=torch.float64).to(device, copy=True).requires_grad_()
    w = _randn(5, dtype=torch.float64, seed=1).to(device, copy=True).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: ops.rms_norm(a, b, 1e-3), (x, w))


def test_rms_norm_backward_foo_equals_cpu_bitwise():
    x0, w0, g = _randn(9, 31) * 2, _randn(31, seed=1), _randn(9, 31, seed=2)
    grads = {}
    for device in DEVICES:
        x, w = x0.to(device, copy=True).requires_grad_(), w0.to(device, copy=True).requires_grad_()
        ops.rms_norm(x, w).backward(g.to(device, copy=True))
        grads[device] = (x.grad.cpu(), w.grad.cpu())
    for a, b in zip(grads["foo"], grads["cpu"]):
        torch.testing.assert_close(a, b, **EXACT)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_rms_norm_foo_equals_cpu_bitwise(dtype):
    x, w = _randn(200, 65, dtype=dtype) * 4, _randn(65, dtype=dtype, seed=1)
    torch.testing.assert_close(ops.rms_norm(x.to("foo"), w.to("foo")).cpu(), ops.rms_norm(x, w), **EXACT)


@pytest.mark.parametrize("device", DEVICES)
def test_rms_norm_double_backward_is_an_error_or_correct(device):
    # rms_norm_backward has no autograd formula: a second derivative must raise, not come out silently wrong.
    x0, w0 = _randn(2, 3, dtype=torch.float64), _randn(3, dtype=torch.float64, seed=1)
    x, w = x0.to(device, copy=True).requires_grad_(), w0.to(device, copy=True).requires_grad_()
    xr, wr = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    gxr, = torch.autograd.grad((_ref_rms_norm(xr, wr) ** 2).sum(), xr, create_graph=True)
    ggr, = torch.autograd.grad(gxr.sum(), xr)
    try:
        gx, = torch.autograd.grad((ops.rms_norm(x, w) ** 2).sum(), x, create_graph=True)
        gg, = torch.autograd.grad(gx.sum(), x)
    except RuntimeError:
        return
    torch.testing.assert_close(gg.cpu(), ggr)


# ---------------------------------------------------------------------------------------------------
# add_gelu_


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("other_shape", [(7, 33), (33,), (1, 33), (7, 1), ()], ids=str)
def test_add_gelu_matches_functional(device, dtype, other_shape):
    x, o = _randn(7, 33, dtype=dtype) * 2, _randn(*other_shape, dtype=dtype, seed=1)
    xd, od = x.to(device, copy=True), o.to(device, copy=True)
    ptr, o_before = xd.data_ptr(), od.cpu()
    out = ops.add_gelu_(xd, od)
    assert out is xd and xd.data_ptr() == ptr and xd.device.type == device
    tol = dict(rtol=1.6e-2, atol=1e-2) if dtype == torch.bfloat16 else {}
    torch.testing.assert_close(xd.cpu(), F.gelu(x + o), **tol)
    torch.testing.assert_close(od.cpu(), o_before, **EXACT)  # other is not written


@pytest.mark.parametrize("device", DEVICES)
def test_add_gelu_non_contiguous_self(device):
    base = _randn(8, 12) * 2
    bias = _randn(4, seed=1)
    based = base.to(device, copy=True)
    view = based[::2, 1:9:2].t()  # (4, 4), strided and transposed
    assert not view.is_contiguous()
    out = ops.add_gelu_(view, bias.to(device, copy=True))
    assert out is view
    expected = base.clone()
    expected[::2, 1:9:2] = F.gelu(base[::2, 1:9:2].t() + bias).t()
    torch.testing.assert_close(based.cpu(), expected)  # written through the view, nothing else touched
    untouched = torch.ones_like(base, dtype=torch.bool)
    untouched[::2, 1:9:2] = False
    torch.testing.assert_close(based.cpu()[untouched], base[untouched], **EXACT)


def test_add_gelu_foo_equals_cpu_bitwise():
    x, o = _randn(64, 100) * 3, _randn(100, seed=1)  # > 4096 elements: the parallel path
    a, b = x.to("foo"), x.clone()
    ops.add_gelu_(a, o.to("foo"))
    ops.add_gelu_(b, o)
    torch.testing.assert_close(a.cpu(), b, **EXACT)
    torch.testing.assert_close(b, F.gelu(x + o))


def test_add_gelu_foo_self_with_cpu_scalar_other():
    # As on CUDA, a 0-dim CPU tensor may be mixed with device tensors.
    x = _randn(3, 4)
    xd = x.to("foo")
    ops.add_gelu_(xd, torch.tensor(0.5))
    assert xd.device.type == "foo"
    torch.testing.assert_close(xd.cpu(), F.gelu(x + 0.5))


# ---------------------------------------------------------------------------------------------------
# sgd_step_

SHAPES = [(5, 7), (11,), (2, 3, 4)]


def _run_sgd(device, momentum, weight_decay, lr=0.1, steps=5, dtype=torch.float32):
    params = [_randn(*s, dtype=dtype, seed=i).to(device, copy=True) for i, s in enumerate(SHAPES)]
    bufs = [torch.zeros_like(p) for p in params] if momentum else []
    for step in range(steps):
        grads = [_randn(*s, dtype=dtype, seed=100 * step + i).to(device, copy=True) for i, s in enumerate(SHAPES)]
        ops.sgd_step_(params, grads, bufs, lr, momentum, weight_decay)
    return [p.cpu() for p in params], [b.cpu() for b in bufs]


def _run_torch_sgd(momentum, weight_decay, lr=0.1, steps=5, dtype=torch.float32):
    params = [_randn(*s, dtype=dtype, seed=i).requires_grad_() for i, s in enumerate(SHAPES)]
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay, foreach=False)
    for step in range(steps):
        for i, (p, s) in enumerate(zip(params, SHAPES)):
            p.grad = _randn(*s, dtype=dtype, seed=100 * step + i)
        opt.step()
    bufs = [opt.state[p]["momentum_buffer"] for p in params] if momentum else []
    return [p.detach() for p in params], bufs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("momentum,weight_decay", [(0.0, 0.0), (0.0, 0.01), (0.9, 0.0), (0.9, 0.01)])
def test_sgd_step_matches_torch_optim_sgd(device, momentum, weight_decay):
    params, bufs = _run_sgd(device, momentum, weight_decay)
    ref_params, ref_bufs = _run_torch_sgd(momentum, weight_decay)
    assert len(bufs) == len(ref_bufs)
    for a, b in zip(params + bufs, ref_params + ref_bufs):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_sgd_step_float64_matches_torch_optim_sgd():
    params, bufs = _run_sgd("foo", 0.9, 0.01, dtype=torch.float64)
    ref_params, ref_bufs = _run_torch_sgd(0.9, 0.01, dtype=torch.float64)
    for a, b in zip(params + bufs, ref_params + ref_bufs):
        torch.testing.assert_close(a, b, rtol=1e-14, atol=1e-14)


@pytest.mark.parametrize("momentum,weight_decay", [(0.0, 0.0), (0.9, 0.01)])
def test_sgd_step_foo_equals_cpu_bitwise(momentum, weight_decay):
    foo_params, foo_bufs = _run_sgd("foo", momentum, weight_decay)
    cpu_params, cpu_bufs = _run_sgd("cpu", momentum, weight_decay)
    for a, b in zip(foo_params + foo_bufs, cpu_params + cpu_bufs):
        torch.testing.assert_close(a, b, **EXACT)


@pytest.mark.parametrize("device", DEVICES)
def test_sgd_step_without_momentum_ignores_buffers(device):
    p, g = _randn(4).to(device, copy=True), _randn(4, seed=1).to(device, copy=True)
    buf = torch.full((4,), 7.0, device=device)
    expected = p.cpu() - 0.5 * g.cpu()
    ops.sgd_step_([p], [g], [buf], 0.5)
    torch.testing.assert_close(p.cpu(), expected)
    torch.testing.assert_close(buf.cpu(), torch.full((4,), 7.0), **EXACT)


# ---------------------------------------------------------------------------------------------------
# opcheck (schema, fake tensor, autograd registration, aot dispatch) on foo and CPU

_OPCHECK_UTILS_FOO_GRAD = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")


def _opcheck_cases(device):
    x, w = _randn(4, 8).to(device, copy=True), _randn(8, seed=1).to(device, copy=True)
    ps = [_randn(3, 2, seed=2).to(device, copy=True), _randn(5, seed=3).to(device, copy=True)]
    gs = [torch.ones_like(p) for p in ps]
    return {
        "rms_norm": (torch.ops.foo.rms_norm.default, (x, w, 1e-6)),
        "rms_norm_requires_grad": (torch.ops.foo.rms_norm.default,
                                   (x.clone().requires_grad_(), w.clone().requires_grad_(), 1e-6)),
        "rms_norm_backward": (torch.ops.foo.rms_norm_backward.default, (torch.ones_like(x), x, w, 1e-6)),
        "add_gelu_": (torch.ops.foo.add_gelu_.default, (x.clone(), w)),
        "sgd_step_momentum": (torch.ops.foo.sgd_step_.default,
                              (ps, gs, [torch.zeros_like(p) for p in ps], 0.1, 0.9, 0.01)),
        "sgd_step_plain": (torch.ops.foo.sgd_step_.default, (ps, gs, [], 0.1, 0.0, 0.0)),
    }


@pytest.mark.parametrize("case", list(_opcheck_cases("cpu")))
@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device, case):
    op, args = _opcheck_cases(device)[case]
    if device == "foo" and case == "rms_norm_requires_grad":
        # opcheck's test_autograd_registration is NYI for device types other than cpu/cuda/xpu (see
        # tests/test_custom_ops.py); check what it would check directly: an autograd kernel for foo.
        torch.library.opcheck(op, args, test_utils=_OPCHECK_UTILS_FOO_GRAD)
        assert torch._C._dispatch_has_kernel_for_dispatch_key("foo::rms_norm", "Autograd")
        with pytest.raises(OpCheckError, match="NYI devices other than CPU/CUDA/XPU"):
            torch.library.opcheck(op, args, test_utils="test_autograd_registration")
    else:
        torch.library.opcheck(op, args)


# ---------------------------------------------------------------------------------------------------
# torch.compile(backend="aot_eager", fullgraph=True) on foo


@pytest.fixture
def dynamo_reset():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _compiled(fn):
    return torch.compile(fn, backend="aot_eager", fullgraph=True)


def test_compile_rms_norm_forward_and_backward(dynamo_reset):
    def f(x, w):
        return ops.rms_norm(x * 2, w, 1e-5).sin()

    x0, w0 = _randn(4, 8).to("foo"), _randn(8, seed=1).to("foo")
    results = []
    for fn in (f, _compiled(f)):
        x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
        y = fn(x, w)
        y.sum().backward()
        results.append((y.detach().cpu(), x.grad.cpu(), w.grad.cpu()))
    assert results[1][0].numel() and torch.device("foo", 0) == y.device
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **EXACT)


def test_compile_add_gelu_(dynamo_reset):
    def f(x, o):
        ops.add_gelu_(x, o)
        return x * 2

    x, o = _randn(5, 6).to("foo"), _randn(6, seed=1).to("foo")
    x_eager, x_compiled = x.clone(), x.clone()
    y_eager = f(x_eager, o)
    y_compiled = _compiled(f)(x_compiled, o)
    assert y_compiled.device == x.device
    torch.testing.assert_close(y_compiled.cpu(), y_eager.cpu(), **EXACT)
    torch.testing.assert_close(x_compiled.cpu(), x_eager.cpu(), **EXACT)  # the mutation reaches the input
    assert not torch.equal(x_compiled.cpu(), x.cpu())


def test_compile_sgd_step_(dynamo_reset):
    def f(params, grads, bufs):
        ops.sgd_step_(params, grads, bufs, 0.1, 0.9, 0.01)

    params = [_randn(3, 4, seed=i).to("foo") for i in range(2)]
    grads = [_randn(3, 4, seed=10 + i).to("foo") for i in range(2)]
    bufs = [_randn(3, 4, seed=20 + i).to("foo") for i in range(2)]
    eager = ([p.clone() for p in params], [b.clone() for b in bufs])
    compiled = ([p.clone() for p in params], [b.clone() for b in bufs])
    f(eager[0], grads, eager[1])
    cf = _compiled(f)
    cf(compiled[0], grads, compiled[1])
    for a, b in zip(compiled[0] + compiled[1], eager[0] + eager[1]):
        torch.testing.assert_close(a.cpu(), b.cpu(), **EXACT)
    assert not torch.equal(compiled[0][0].cpu(), params[0].cpu())


# ---------------------------------------------------------------------------------------------------
# errors: clear messages, identical on CPU and foo, inputs left intact


def _error_cases(device):
    x = _randn(3, 4).to(device, copy=True)
    p = _randn(4).to(device, copy=True)
    return {
        "rms_norm weight too short": (lambda: ops.rms_norm(x, _randn(3).to(device, copy=True)), [x],
                                      r"foo::rms_norm: weight must have shape \[4\] \(the last dimension of input\), "
                                      r"got \[3\]"),
        "rms_norm 2-d weight": (lambda: ops.rms_norm(x, _randn(1, 4).to(device, copy=True)), [x],
                                r"weight must have shape \[4\]"),
        "rms_norm dtype mismatch": (lambda: ops.rms_norm(x, _randn(4, dtype=torch.float64).to(device, copy=True)), [x],
                                    "input and weight must have the same floating dtype, got Float and Double"),
        "rms_norm integer input": (lambda: ops.rms_norm(torch.ones(2, 4, dtype=torch.int64, device=device),
                                                        torch.ones(4, dtype=torch.int64, device=device)), [],
                                   "must have the same floating dtype, got Long and Long"),
        "rms_norm 0-dim input": (lambda: ops.rms_norm(torch.tensor(1.0, device=device), p), [p],
                                 "input must have at least one dimension"),
        "add_gelu_ no broadcast": (lambda: ops.add_gelu_(x, _randn(3).to(device, copy=True)), [x],
                                   r"other of shape \[3\] does not broadcast to self of shape \[3, 4\]"),
        "add_gelu_ other larger": (lambda: ops.add_gelu_(p, _randn(3, 4).to(device, copy=True)), [p],
                                   "does not broadcast to self"),
        "add_gelu_ dtype mismatch": (lambda: ops.add_gelu_(x, _randn(4, dtype=torch.float64).to(device, copy=True)), [x],
                                     "self and other must have the same floating dtype, got Float and Double"),
        "sgd_step_ fewer grads": (lambda: ops.sgd_step_([p, x], [p], [], 0.1), [p, x],
                                  "got 2 params but 1 grads"),
        "sgd_step_ missing buffers": (lambda: ops.sgd_step_([p], [p.clone()], [], 0.1, momentum=0.9), [p],
                                      "got 1 params but 0 momentum buffers"),
        "sgd_step_ grad shape": (lambda: ops.sgd_step_([p, x], [torch.ones_like(p), torch.ones(4, 3, device=device)],
                                                       [], 0.1), [p, x],
                                 "param 1, its grad and its momentum buffer must be contiguous, of one shape"),
        "sgd_step_ non-contiguous param": (lambda: ops.sgd_step_([x.t()], [torch.ones(4, 3, device=device)], [], 0.1),
                                           [x], "param 0, its grad and its momentum buffer must be contiguous"),
        "sgd_step_ integer param": (lambda: ops.sgd_step_([torch.ones(2, dtype=torch.int32, device=device)],
                                                          [torch.ones(2, dtype=torch.int32, device=device)], [], 0.1),
                                    [], "param 0 must be floating point, got Int"),
    }


@pytest.mark.parametrize("case", list(_error_cases("cpu")))
@pytest.mark.parametrize("device", DEVICES)
def test_errors(device, case):
    call, inputs, pattern = _error_cases(device)[case]
    before = [t.cpu().clone() for t in inputs]
    with pytest.raises(RuntimeError, match=pattern):
        call()
    for t, b in zip(inputs, before):
        torch.testing.assert_close(t.cpu(), b, **EXACT)


@pytest.mark.parametrize("op", ["rms_norm", "add_gelu_", "sgd_step_"])
def test_mixed_devices_error_and_inputs_intact(op):
    x, w = _randn(3, 4).to("foo"), _randn(4, seed=1)
    p = _randn(4).to("foo")
    calls = {
        "rms_norm": lambda: ops.rms_norm(x, w),
        "add_gelu_": lambda: ops.add_gelu_(x, _randn(3, 4, seed=2)),
        # The first param is valid: the failure must come before anything is written.
        "sgd_step_": lambda: ops.sgd_step_([p, w], [torch.ones_like(p), torch.ones_like(w)], [], 0.1),
    }
    before = [t.cpu().clone() for t in (x, w, p)]
    with pytest.raises(RuntimeError, match=rf"Expected all tensors to be on the same device, but found at least two "
                                           rf"devices, foo:0 and cpu! \(when checking arguments for foo::{op}\)"):
        calls[op]()
    for t, b in zip((x, w, p), before):
        torch.testing.assert_close(t.cpu(), b, **EXACT)


# ---------------------------------------------------------------------------------------------------
# autograd of the in-place ops: none. What happens with requires_grad inputs?


@pytest.mark.parametrize("device", DEVICES)
def test_add_gelu_other_requires_grad_is_not_tracked(device):
    # Like a torch.library.custom_op mutating op without register_autograd: no graph is recorded, so the
    # result does not require grad and backward through it is a clear error (not a silent zero gradient).
    w = _randn(4).to(device, copy=True).requires_grad_()
    y = _randn(3, 4, seed=1).to(device, copy=True)
    ops.add_gelu_(y, w)
    assert not y.requires_grad and y.grad_fn is None
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        y.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
def test_add_gelu_on_saved_tensor_invalidates_backward(device):
    # aten in-place ops, torch.library.custom_op(mutates_args=...) and torch.optim bump the version counter of
    # what they write, so autograd refuses to use a saved tensor that was modified. foo::add_gelu_ must too:
    # otherwise exp's backward silently uses gelu(exp(a) + o) as exp(a).
    a = _randn(4).to(device, copy=True).requires_grad_()
    b = a.exp()
    version = b._version
    ops.add_gelu_(b, _randn(4, seed=1).to(device, copy=True))
    assert b._version > version, "foo::add_gelu_ does not bump the version counter of self"
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        b.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
def test_sgd_step_on_saved_param_invalidates_backward(device):
    # The reference: torch.optim.SGD.step() between forward and backward makes backward raise.
    w = _randn(3).to(device, copy=True).requires_grad_()
    x = _randn(3, seed=1).to(device, copy=True).requires_grad_()
    loss = (w * x).sum()
    opt = torch.optim.SGD([w], lr=0.5)
    w.grad = torch.ones_like(w)
    opt.step()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()

    w = _randn(3).to(device, copy=True).requires_grad_()
    x = _randn(3, seed=1).to(device, copy=True).requires_grad_()
    loss = (w * x).sum()
    version = w._version
    with torch.no_grad():
        ops.sgd_step_([w], [torch.ones_like(w)], [], 0.5)
    assert w._version > version, "foo::sgd_step_ does not bump the version counter of params"
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
