"""foo's automatic mixed precision: CUDA's autocast op lists, the autocast state API, GradScaler, training loops.

The op-by-op oracle is PyTorch's own table for CUDA autocast (``AutocastTestLists``, used by test_cuda.py):
each op must produce the dtype CUDA's policy gives and exactly the values of the same op run outside autocast on
inputs cast by hand (on foo, and again on CPU).
"""
import collections
import functools
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.testing._internal.autocast_test_lists import AutocastTestLists
from torch.utils._python_dispatch import TorchDispatchMode

FAST_DTYPES = [torch.float16, torch.bfloat16]
FAST_IDS = ["fp16", "bf16"]

# list name -> (module searched for the op, dtype the op should run in: "fast" (the autocast dtype) or float32)
LIST_KINDS = {
    "torch_fp16": (torch, "fast"),
    "nn_fp16": (torch._C._nn, "fast"),
    "linalg_fp16": (torch._C._linalg, "fast"),
    "methods_fp16": (None, "fast"),
    "torch_fp32": (torch, torch.float32),
    "nn_fp32": (torch._C._nn, torch.float32),
    "methods_fp32": (None, torch.float32),
    "torch_need_autocast_promote": (torch, torch.float32),
    "torch_expect_builtin_promote": (torch, torch.float32),
    "methods_expect_builtin_promote": (None, torch.float32),
}

# Entries of CUDA's list that do not apply to foo. Nothing else is skipped.
NOT_APPLICABLE = {
    "cudnn_convolution": "cuDNN-only kernel (aten::cudnn_convolution has no CPU/foo implementation); "
                         "test_cuda skips it on ROCm and test_xpu skips it too",
    "cudnn_convolution_transpose": "cuDNN-only kernel (no CPU/foo implementation); skipped on ROCm/XPU too",
}


# On accelerators lstm_cell/gru_cell run the fused _thnn_fused_*_cell kernels (foo's: csrc/RecurrentCells.cpp, as on
# CUDA); CPU composes them differently, so in low precision foo and CPU agree only to rounding.
FUSED_CELLS = {"lstm_cell", "gru_cell"}


def _build_lists(device):
    with torch.random.fork_rng(range(torch.foo.device_count()), device_type="foo"):  # RNG states kept
        torch.manual_seed(0)
        return AutocastTestLists(torch.device(device))


@functools.cache
def _foo_lists():
    return _build_lists("foo")


def _entry(list_name, idx):
    """(op, args, kwargs, out_type) of one entry of the list, normalised."""
    raw = getattr(_foo_lists(), list_name)[idx]
    op, args, kwargs, out_type = raw[0], raw[1], {}, None
    if list_name.endswith("expect_builtin_promote"):
        out_type = raw[2]
    elif op == "einsum":
        # The table spells it ("einsum", equation, operands): 2-D operands for a 4-D equation, and test_cuda
        # reads the operands as its ROCm skip flag, so CUDA never runs it. Keep the equation, give it 4-D views.
        args = (raw[1],) + tuple(t.reshape(2, 2, 4, 4) for t in raw[2])
    elif len(raw) == 3 and isinstance(raw[2], dict):
        kwargs = raw[2]
    return op, args, kwargs, out_type


def _params():
    cpu_lists = _build_lists("cpu")  # only for the names: the test builds its own on foo
    params = []
    for list_name in LIST_KINDS:
        entries = getattr(cpu_lists, list_name)
        counts = collections.Counter(e[0] for e in entries)
        seen = collections.Counter()
        for idx, e in enumerate(entries):
            name = e[0] if counts[e[0]] == 1 else f"{e[0]}{seen[e[0]]}"
            seen[e[0]] += 1
            for dtype, dtype_id in zip(FAST_DTYPES, FAST_IDS):
                marks = [pytest.mark.skip(reason=NOT_APPLICABLE[e[0]])] if e[0] in NOT_APPLICABLE else []
                params.append(pytest.param(list_name, idx, dtype, marks=marks, id=f"{list_name}-{name}-{dtype_id}"))
    return params


def _map(val, fn):
    if isinstance(val, torch.Tensor):
        return fn(val)
    if isinstance(val, (list, tuple)):
        return type(val)(_map(v, fn) for v in val)
    return val


def _cast(val, dtype):
    return _map(val, lambda t: t.to(dtype) if t.is_floating_point() else t)


def _same(a, b, where):
    """Exact equality of op results (tensors bitwise, same dtype; tuples element-wise; other values ==)."""
    assert type(a) is type(b), f"{where}: {type(a)} vs {type(b)}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype, f"{where}: dtype {a.dtype} vs {b.dtype}"
        assert torch.equal(a.cpu(), b.cpu()), f"{where}: values differ"
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for x, y in zip(a, b):
            _same(x, y, where)
    else:
        assert a == b, f"{where}: {a} vs {b}"


def _dtypes(out):
    if isinstance(out, torch.Tensor):
        return [out.dtype]
    if isinstance(out, (list, tuple)):
        return [d for o in out for d in _dtypes(o)]
    return []


def _flat(out):
    return [out] if isinstance(out, torch.Tensor) else [t for o in out for t in _flat(o)]


def _call(module, op, args, kwargs):
    if module is not None and hasattr(module, op):
        return getattr(module, op)(*args, **kwargs)
    return getattr(args[0], op)(*args[1:], **kwargs)


@pytest.mark.filterwarnings("ignore:torch.chain_matmul is deprecated", "ignore:Using torch.cross without")
@pytest.mark.parametrize("list_name, idx, fast_dtype", _params())
def test_autocast_op_matches_cuda_policy(list_name, idx, fast_dtype):
    module, run_as = LIST_KINDS[list_name]
    run_as = fast_dtype if run_as == "fast" else run_as
    op, args, kwargs, out_type = _entry(list_name, idx)
    out_type = out_type or run_as
    if fast_dtype == torch.bfloat16:
        # The table's low-precision inputs are float16 (CUDA runs these lists under float16 autocast); under bfloat16
        # autocast the low-precision inputs are bfloat16. (float16 mixed in is CUDA's error: see the test below.)
        args = _map(args, lambda t: t.to(torch.bfloat16) if t.dtype == torch.float16 else t)

    assert not torch.is_autocast_enabled("foo")
    with torch.autocast("foo", dtype=fast_dtype):
        assert torch.is_autocast_enabled("foo") and torch.get_autocast_dtype("foo") == fast_dtype
        outputs = {}
        if module is not None and hasattr(module, op):
            outputs["function"] = getattr(module, op)(*args, **kwargs)
        if hasattr(torch.Tensor, op):
            outputs["method"] = getattr(args[0], op)(*args[1:], **kwargs)
        assert outputs, f"{op} is neither on {module} nor on Tensor"
        for variant, out in outputs.items():
            for d in _dtypes(out):
                assert d == out_type, f"autocast {variant} {op} produced {d}, expected {out_type}"
        if len(outputs) == 2:
            _same(outputs["function"], outputs["method"], f"{op}: function vs method")
        result = outputs.get("function", outputs.get("method"))
        assert _dtypes(result) or isinstance(result, bool)

        # Control: autocast off, the inputs cast by hand to the dtype the policy runs the op in.
        with torch.autocast("foo", enabled=False):
            assert not torch.is_autocast_enabled("foo")
            control = _call(module, op, _cast(args, run_as), kwargs)
        _same(result, control, f"{op}: autocast result vs hand-cast control on foo")
        assert torch.is_autocast_enabled("foo")
    assert not torch.is_autocast_enabled("foo")

    # Independent of foo: the same hand-cast op on CPU.
    cpu_control = _call(module, op, _cast(_map(args, lambda t: t.cpu()), run_as), kwargs)
    if op in FUSED_CELLS:
        # Not bitwise: foo must be as close to the float32 answer as CPU's low-precision composition is.
        assert _dtypes(result) == _dtypes(cpu_control)
        exact = _call(module, op, _map(args, lambda t: t.cpu()), kwargs)
        for got, cpu_got, ref in zip(*(_flat(o) for o in (result, cpu_control, exact))):
            foo_err = (got.cpu().double() - ref.double()).abs().max().item()
            cpu_err = (cpu_got.double() - ref.double()).abs().max().item()
            assert foo_err <= max(2 * cpu_err, torch.finfo(run_as).eps), f"{op}: error {foo_err} vs CPU's {cpu_err}"
    else:
        _same(result, cpu_control, f"{op}: foo autocast result vs CPU hand-cast control")


def test_op_lists_cover_the_cuda_table():
    """The parametrisation above reaches every entry of every list (and the banned list below)."""
    lists = _build_lists("cpu")
    names = {n for n in vars(lists) if isinstance(getattr(lists, n), list)}
    assert names == set(LIST_KINDS) | {"banned"}
    assert sum(len(getattr(lists, n)) for n in LIST_KINDS) * 2 == len(_params())


@pytest.mark.parametrize("fast_dtype", FAST_DTYPES, ids=FAST_IDS)
def test_banned_ops_raise_under_autocast(fast_dtype):
    for op, args, module in _foo_lists().banned:
        assert getattr(module, op)(*args).dtype == torch.float32  # fine outside autocast
        with torch.autocast("foo", dtype=fast_dtype), pytest.raises(RuntimeError, match="unsafe to autocast"):
            getattr(module, op)(*args)
    x, y = torch.rand(4, 4, device="foo"), torch.rand(4, 4, device="foo")
    with torch.autocast("foo", dtype=fast_dtype):
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            torch.nn.BCELoss()(x, y)
        assert F.binary_cross_entropy_with_logits(x, y).dtype == torch.float32  # the safe spelling


def test_promote_mixing_float16_into_bfloat16_autocast_is_an_error_as_on_cuda():
    a16 = torch.randn(8, device="foo", dtype=torch.float16)
    b32 = torch.randn(8, device="foo")
    with torch.autocast("foo", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="Unexpected floating ScalarType in at::autocast::prioritize"):
            torch.dot(a16, b32)
        assert torch.dot(b32, a16).dtype == torch.float32  # float32 first: promoted to float32


def test_autocast_ignores_double_and_integer_inputs():
    d = torch.randn(8, 8, device="foo", dtype=torch.float64)
    i = torch.randint(0, 5, (8, 8), device="foo", dtype=torch.int32)
    h = torch.randn(8, 8, device="foo", dtype=torch.float16)
    with torch.autocast("foo"):
        assert torch.mm(d, d).dtype == torch.float64  # lower_precision_fp leaves double alone
        with pytest.raises(RuntimeError):
            torch.mm(d, h)
        assert torch.pow(d, 2.0).dtype == torch.float64  # fp32 policy
        assert torch.sum(i).dtype == torch.int64  # fp32_set_opt_dtype
        assert torch.norm(d).dtype == torch.float64  # different redispatch signature
        assert torch.equal(torch.mm(d, d), d.mm(d)) and torch.mm(d, d).dtype == torch.float64


# ---------------------------------------------------------------------------------------------- state API


def test_default_autocast_dtype_and_enabled_state():
    assert torch.get_autocast_dtype("foo") == torch.float16
    a = torch.randn(8, 8, device="foo")
    assert not torch.is_autocast_enabled("foo")
    with torch.autocast("foo"):  # dtype omitted: get_autocast_dtype("foo")
        assert torch.is_autocast_enabled("foo")
        assert torch.mm(a, a).dtype == torch.float16
    assert not torch.is_autocast_enabled("foo")
    assert torch.mm(a, a).dtype == torch.float32
    torch.set_autocast_dtype("foo", torch.bfloat16)
    try:
        with torch.autocast("foo"):
            assert torch.mm(a, a).dtype == torch.bfloat16
    finally:
        torch.set_autocast_dtype("foo", torch.float16)
    assert torch.get_autocast_dtype("foo") == torch.float16


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_unsupported_dtype_warns_and_disables_autocast(dtype):
    a = torch.randn(8, 8, device="foo")
    with pytest.warns(UserWarning, match="In foo autocast, but the target dtype is not supported. Disabling autocast"):
        ctx = torch.autocast("foo", dtype=dtype)
    with ctx:
        assert not torch.is_autocast_enabled("foo")
        assert torch.mm(a, a).dtype == torch.float32
    assert torch.get_autocast_dtype("foo") == torch.float16  # restored on exit


def test_supported_dtype_api():
    assert torch.foo.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.foo.is_bf16_supported() is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # supported dtypes must not warn
        for dtype in FAST_DTYPES:
            with torch.autocast("foo", dtype=dtype):
                assert torch.get_autocast_dtype("foo") == dtype


def test_foo_amp_autocast_context_manager_and_decorator():
    a = torch.randn(8, 8, device="foo")
    assert issubclass(torch.foo.amp.autocast, torch.amp.autocast)
    with torch.foo.amp.autocast():
        assert torch.is_autocast_enabled("foo") and not torch.is_autocast_enabled("cpu")
        assert torch.mm(a, a).dtype == torch.float16
    with torch.foo.amp.autocast(dtype=torch.bfloat16):
        assert torch.mm(a, a).dtype == torch.bfloat16
    with torch.foo.amp.autocast(enabled=False):
        assert torch.mm(a, a).dtype == torch.float32

    @torch.foo.amp.autocast(dtype=torch.bfloat16)
    def decorated(x):
        return torch.mm(x, x), torch.is_autocast_enabled("foo")

    out, enabled = decorated(a)
    assert enabled and out.dtype == torch.bfloat16
    assert not torch.is_autocast_enabled("foo")
    assert torch.equal(out.cpu(), torch.mm(a.bfloat16(), a.bfloat16()).cpu())


def test_nested_autocast_disable_and_dtype_change():
    a = torch.randn(8, 8, device="foo")
    with torch.autocast("foo"):
        e16 = torch.mm(a, a)
        with torch.autocast("foo", enabled=False):
            assert not torch.is_autocast_enabled("foo")
            f32 = torch.mm(a, e16.float())
            assert f32.dtype == torch.float32
        assert torch.is_autocast_enabled("foo")
        with torch.autocast("foo", dtype=torch.bfloat16):
            assert torch.mm(a, a).dtype == torch.bfloat16
        assert torch.get_autocast_dtype("foo") == torch.float16
        g16 = torch.mm(a, f32)
        assert e16.dtype == g16.dtype == torch.float16
    assert not torch.is_autocast_enabled("foo")


class _CastCounter(TorchDispatchMode):
    """Counts the casts (aten._to_copy) of one tensor that reach the backend."""

    def __init__(self, source):
        super().__init__()
        self.ptr, self.casts = source.data_ptr(), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default and args[0].data_ptr() == self.ptr:
            self.casts += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("cache_enabled", [True, False], ids=["cache", "nocache"])
def test_weight_cast_cache(cache_enabled):
    w = torch.randn(8, 8, device="foo", requires_grad=True)  # a leaf weight: eligible for the cache
    x = torch.randn(8, 8, device="foo")
    with _CastCounter(w) as counter, torch.autocast("foo", cache_enabled=cache_enabled):
        y1 = torch.mm(x, w)
        y2 = torch.mm(x + 1, w)
        y3 = F.linear(x, w)
    assert counter.casts == (1 if cache_enabled else 3)
    expected = [torch.mm(x.half(), w.half()), torch.mm((x + 1).half(), w.half()), F.linear(x.half(), w.half())]
    for got, exp in zip((y1, y2, y3), expected):
        assert got.dtype == torch.float16 and torch.equal(got.cpu(), exp.detach().cpu())
    (y1.float().sum() + y2.float().sum() + y3.float().sum()).backward()
    assert w.grad is not None and w.grad.dtype == torch.float32 and torch.isfinite(w.grad).all()
    # The cache is dropped on leaving the outermost region: a new region casts again.
    with _CastCounter(w) as counter, torch.autocast("foo", cache_enabled=cache_enabled):
        torch.mm(x, w)
    assert counter.casts == 1


def test_foo_autocast_does_not_touch_cpu_and_cpu_autocast_does_not_touch_foo():
    a_foo = torch.randn(8, 8, device="foo")
    a_cpu = torch.randn(8, 8)
    with torch.autocast("foo"):
        assert not torch.is_autocast_enabled("cpu")
        assert torch.mm(a_foo, a_foo).dtype == torch.float16
        assert torch.mm(a_cpu, a_cpu).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not torch.is_autocast_enabled("foo")
        assert torch.mm(a_cpu, a_cpu).dtype == torch.bfloat16
        assert torch.mm(a_foo, a_foo).dtype == torch.float32
        with torch.autocast("foo", dtype=torch.float16):  # both on: each device keeps its own dtype
            assert torch.mm(a_cpu, a_cpu).dtype == torch.bfloat16
            assert torch.mm(a_foo, a_foo).dtype == torch.float16


def test_custom_fwd_bwd_on_foo():
    class MyMM(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="foo", cast_inputs=torch.float32)
        def forward(ctx, a, b):
            seen.append((a.dtype, b.dtype, torch.is_autocast_enabled("foo")))
            ctx.save_for_backward(a, b)
            return a.mm(b)

        @staticmethod
        @torch.amp.custom_bwd(device_type="foo")
        def backward(ctx, grad):
            assert not torch.is_autocast_enabled("foo")
            a, b = ctx.saved_tensors
            return grad.mm(b.t()), a.t().mm(grad)

    seen = []
    x = torch.randn(4, 4, device="foo", dtype=torch.float16, requires_grad=True)
    y = torch.randn(4, 4, device="foo", requires_grad=True)
    with torch.autocast("foo"):
        out = MyMM.apply(x, y)
        assert out.dtype == torch.float32
    assert seen == [(torch.float32, torch.float32, False)]  # inputs cast, autocast off inside
    out.sum().backward()
    assert x.grad.dtype == torch.float16 and y.grad.dtype == torch.float32
    torch.testing.assert_close(x.grad.float(), torch.ones(4, 4, device="foo") @ y.detach().t(), rtol=1e-3, atol=1e-3)
    assert MyMM.apply(x, x).dtype == torch.float16  # outside autocast custom_fwd is a no-op
    assert seen[-1] == (torch.float16, torch.float16, False)


# ---------------------------------------------------------------------------------------------- backward


@pytest.mark.parametrize("fast_dtype", FAST_DTYPES, ids=FAST_IDS)
def test_backward_through_autocast_matmul(fast_dtype):
    torch.manual_seed(0)
    x_cpu, w_cpu = torch.randn(6, 5), torch.randn(5, 4)
    x = x_cpu.to("foo").requires_grad_()
    w = w_cpu.to("foo").requires_grad_()
    with torch.autocast("foo", dtype=fast_dtype):
        y = x @ w
        assert y.dtype == fast_dtype
        loss = (y.float() ** 2).sum()
    loss.backward()
    assert x.grad.dtype == w.grad.dtype == torch.float32
    # Oracle: the same graph with the casts written out, on CPU.
    xc, wc = x_cpu.clone().requires_grad_(), w_cpu.clone().requires_grad_()
    yc = xc.to(fast_dtype) @ wc.to(fast_dtype)
    (yc.float() ** 2).sum().backward()
    assert torch.equal(x.grad.cpu(), xc.grad) and torch.equal(w.grad.cpu(), wc.grad)


# ---------------------------------------------------------------------------------------------- GradScaler kernels


def _grads(device):
    g = torch.Generator().manual_seed(5)
    base = [torch.randn(7, generator=g) * 1e3, torch.randn(3, 4, generator=g).half(), torch.randn(2, 9, generator=g),
            torch.randn(9, 2, generator=g).t()]  # the last one non-contiguous
    return [t.to(device) for t in base]


UNSCALE_CASES = {
    "finite": lambda gs: None,
    "inf": lambda gs: gs[1].view(-1)[5].fill_(float("inf")),
    "neg_inf": lambda gs: gs[0].view(-1)[0].fill_(float("-inf")),
    "nan": lambda gs: gs[2].view(-1)[17].fill_(float("nan")),
    # Only the incoming values are checked: an fp16 value that overflows when multiplied is not reported.
    "overflow_by_unscale_not_flagged": lambda gs: gs[1].view(-1)[0].fill_(60000.0),
}


@pytest.mark.parametrize("case", sorted(UNSCALE_CASES))
def test_foreach_non_finite_check_and_unscale_matches_cpu(case):
    results = {}
    for device in ("cpu", "foo"):
        grads = _grads(device)
        UNSCALE_CASES[case](grads)
        found_inf = torch.zeros(1, device=device)
        inv_scale = torch.full((1,), 16.0 if case.startswith("overflow") else 2.0**-10, device=device)
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        results[device] = (grads, found_inf)
    (g_cpu, fi_cpu), (g_foo, fi_foo) = results["cpu"], results["foo"]
    assert fi_foo.device.type == "foo" and torch.equal(fi_foo.cpu(), fi_cpu)
    assert fi_cpu.item() == (1.0 if case in ("inf", "neg_inf", "nan") else 0.0)
    for a, b in zip(g_foo, g_cpu):
        assert a.device.type == "foo"
        torch.testing.assert_close(a.cpu(), b, rtol=0, atol=0, equal_nan=True)  # bitwise, same dtype
    if case == "finite":  # the CPU reference itself: a plain multiply by inv_scale
        for got, orig in zip(g_cpu, _grads("cpu")):
            assert torch.equal(got, orig * 2.0**-10)
    if case.startswith("overflow"):
        assert g_cpu[1].view(-1)[0].item() == float("inf")


def test_amp_update_scale_matches_cpu():
    pattern = [0, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1]
    states = {}
    for device in ("cpu", "foo"):
        scale = torch.full((1,), 2.0**16, device=device)
        tracker = torch.zeros(1, dtype=torch.int32, device=device)
        history = []
        for found in pattern:
            found_inf = torch.full((1,), float(found), device=device)
            out = torch._amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 3)
            assert out is scale or out.data_ptr() == scale.data_ptr()
            history.append((scale.item(), tracker.item()))
        states[device] = history
    assert states["foo"] == states["cpu"]
    # And the CPU reference does what GradScaler documents: backoff on inf, growth after 3 clean steps.
    assert states["cpu"][:4] == [(2.0**16, 1), (2.0**16, 2), (2.0**17, 0), (2.0**16, 0)]


# ---------------------------------------------------------------------------------------------- GradScaler end to end


def _model(device="foo"):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to(device)


def _batch(device="foo"):
    g = torch.Generator().manual_seed(1)
    return torch.randn(16, 4, generator=g).to(device), torch.randn(16, 2, generator=g).to(device)


def _scaled_backward(model, scaler, x, y):
    with torch.autocast("foo"):
        loss = F.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    return loss


def _snapshot(model, opt):
    """Copies of the parameters and of the optimizer state, per parameter index."""
    params = [p.detach().cpu().clone() for p in model.parameters()]
    state = {i: {n: (v.cpu().clone() if torch.is_tensor(v) else v) for n, v in opt.state[p].items()}
             for i, p in enumerate(model.parameters())}
    return params, state


def _state_equal(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].keys() == b[k].keys()
        for n in a[k]:
            assert torch.equal(torch.as_tensor(a[k][n]), torch.as_tensor(b[k][n])), (k, n)


@pytest.mark.parametrize("device", ["foo:0", "foo:1"])
@pytest.mark.parametrize("bad", [float("inf"), float("nan")], ids=["inf", "nan"])
def test_gradscaler_skips_step_with_non_finite_grad_and_backs_off(bad, device):
    model = _model(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("foo", init_scale=2.0**12, growth_interval=1000)
    x, y = _batch(device)
    # A clean step first, so the optimizer has state that a skipped step must leave alone.
    _scaled_backward(model, scaler, x, y)
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 2.0**12
    params0, state0 = _snapshot(model, opt)
    assert state0[0]["step"] == 1

    opt.zero_grad()
    _scaled_backward(model, scaler, x, y)
    model[0].weight.grad[1, 2] = bad
    assert scaler.step(opt) is None  # skipped: step() returns None instead of optimizer.step()'s value
    found = sum(v.item() for v in scaler._found_inf_per_device(opt).values())
    assert found == 1.0
    scaler.update()
    params1, state1 = _snapshot(model, opt)
    for a, b in zip(params1, params0):
        assert torch.equal(a, b)
    _state_equal(state1, state0)
    assert scaler.get_scale() == 2.0**11
    assert scaler._scale.device == torch.device(device) and scaler._growth_tracker.item() == 0

    # The next clean step is taken again.
    opt.zero_grad()
    _scaled_backward(model, scaler, x, y)
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 2.0**11
    assert not torch.equal(next(model.parameters()).detach().cpu(), params0[0])
    assert opt.state[next(model.parameters())]["step"] == 2


def test_gradscaler_grows_after_growth_interval():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.foo.amp.GradScaler(init_scale=2.0**8, growth_factor=2.0, growth_interval=3)
    assert isinstance(scaler, torch.amp.GradScaler) and scaler._device == "foo"
    x, y = _batch()
    scales = []
    for _ in range(7):
        opt.zero_grad()
        _scaled_backward(model, scaler, x, y)
        scaler.step(opt)
        scaler.update()
        scales.append((scaler.get_scale(), scaler._get_growth_tracker()))
    assert scales == [(256.0, 1), (256.0, 2), (512.0, 0), (512.0, 1), (512.0, 2), (1024.0, 0), (1024.0, 1)]


def test_gradscaler_unscale_then_clip_grad_norm():
    model = _model()
    x, y = _batch()
    # Reference gradients: the same autocast forward without scaling.
    with torch.autocast("foo"):
        F.mse_loss(model(x), y).backward()
    ref = [p.grad.detach().clone() for p in model.parameters()]
    model.zero_grad()

    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("foo", init_scale=2.0**10)
    _scaled_backward(model, scaler, x, y)
    assert not torch.allclose(model[0].weight.grad, ref[0])  # still scaled
    scaler.unscale_(opt)
    for p, r in zip(model.parameters(), ref):
        torch.testing.assert_close(p.grad, r)
    true_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(r) for r in ref]))
    max_norm = true_norm.item() / 4
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    torch.testing.assert_close(total, true_norm)
    clipped = [p.grad.detach().clone() for p in model.parameters()]
    clipped_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(c) for c in clipped]))
    torch.testing.assert_close(clipped_norm.item(), max_norm, rtol=1e-4, atol=0)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)  # must not unscale a second time
    scaler.update()
    for p, b, c in zip(model.parameters(), before, clipped):
        torch.testing.assert_close(p.detach(), b - 0.1 * c)


def test_gradscaler_state_dict_round_trip():
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("foo", init_scale=2.0**9, growth_factor=4.0, backoff_factor=0.25,
                                  growth_interval=5)
    x, y = _batch()
    for _ in range(3):
        opt.zero_grad()
        _scaled_backward(model, scaler, x, y)
        scaler.step(opt)
        scaler.update()
    sd = scaler.state_dict()
    assert sd == {"scale": 2.0**9, "growth_factor": 4.0, "backoff_factor": 0.25, "growth_interval": 5,
                  "_growth_tracker": 3}
    other = torch.amp.GradScaler("foo")
    other.load_state_dict(sd)
    assert other.state_dict() == sd
    # The loaded scaler carries on identically: two more clean steps grow the scale by growth_factor.
    for _ in range(2):
        opt.zero_grad()
        _scaled_backward(model, other, x, y)
        other.step(opt)
        other.update()
    assert other.get_scale() == 2.0**11 and other._get_growth_tracker() == 0
    assert other._scale.device.type == "foo"


# ---------------------------------------------------------------------------------------------- training loops


def _task():
    g = torch.Generator().manual_seed(123)
    x = torch.randn(256, 16, generator=g)
    w_true = torch.randn(16, 4, generator=g)
    y = torch.tanh(x @ w_true) + 0.01 * torch.randn(256, 4, generator=g)
    return x.to("foo"), y.to("foo")


@pytest.mark.parametrize("fast_dtype", FAST_DTYPES, ids=FAST_IDS)
def test_amp_training_loop_converges(fast_dtype):
    x, y = _task()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to("foo")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("foo", enabled=fast_dtype == torch.float16)
    losses = []
    for _ in range(60):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("foo", dtype=fast_dtype):
            out = model(x)
            assert out.dtype == fast_dtype
            loss = F.mse_loss(out, y)
            assert loss.dtype == torch.float32  # mse_loss is on the fp32 list
        scaler.scale(loss).backward()
        assert model[0].weight.grad.dtype == torch.float32
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0] / 5, losses[::10]  # it reaches ~1/11 in 60 steps
    assert all(p.dtype == torch.float32 and p.device.type == "foo" for p in model.parameters())


# ---------------------------------------------------------------------------------------------- losses on the fp32 list


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("loss_fn", [F.mse_loss, F.smooth_l1_loss], ids=["mse_loss", "smooth_l1_loss"])
def test_fp32_list_losses_run_like_cpu_without_warnings(loss_fn, reduction):
    # Every AMP loop with MSELoss/SmoothL1Loss calls these; PyTorch's generic composite for them resized a
    # 0-dim out= and warned on every call, so foo routes them to CPU's kernels (csrc/Fallback.cpp).
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(16, 2, generator=g).half(), torch.randn(16, 2, generator=g)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast("foo"):
            out = loss_fn(x.to("foo"), y.to("foo"), reduction=reduction)
    assert out.dtype == torch.float32
    assert torch.equal(out.cpu(), loss_fn(x.float(), y, reduction=reduction))
    assert [str(w.message) for w in caught] == []
