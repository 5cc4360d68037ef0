"""Sparse tensors on foo (COO and the compressed layouts CSR/CSC/BSR/BSC) run CPU's sparse kernels on sparse
kernel views: every result is compared with CPU's on the same data. Data are made on CPU (fixed seeds) and
moved to foo, so no test depends on foo's random numbers."""
import io

import pytest
import torch

import foo_backend  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore:Sparse (CSR|invariant)")

COMPRESSED = [torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc]


def _dense(shape=(4, 6), seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    d = torch.randn(shape, generator=g).to(dtype)
    return d * (torch.rand(shape, generator=g) < 0.4)


def _coo(seed=0, shape=(4, 6), nnz=9):
    """An uncoalesced COO tensor (duplicate indices) on CPU."""
    g = torch.Generator().manual_seed(seed)
    indices = torch.stack([torch.randint(0, n, (nnz,), generator=g) for n in shape])
    return torch.sparse_coo_tensor(indices, torch.randn(nnz, generator=g), shape)


def _to_layout(d, layout):
    if layout == torch.sparse_coo:
        return d.to_sparse()
    blocksize = (2, 2) if layout in (torch.sparse_bsr, torch.sparse_bsc) else None
    return d.to_sparse(layout=layout, blocksize=blocksize)


def _components(s):
    if s.layout == torch.sparse_coo:
        return [s._indices(), s._values()]
    if s.layout in (torch.sparse_csr, torch.sparse_bsr):
        return [s.crow_indices(), s.col_indices(), s.values()]
    return [s.ccol_indices(), s.row_indices(), s.values()]


def assert_same(foo, cpu, device="foo:0"):
    """foo's result equals CPU's: layout, shape, dtype, components (as stored: uncoalesced stays so) and flags."""
    if not cpu.layout == torch.strided:
        assert foo.layout == cpu.layout
        assert str(foo.device) == device
        assert foo.shape == cpu.shape and foo.dtype == cpu.dtype
        if cpu.layout == torch.sparse_coo:
            assert foo.is_coalesced() == cpu.is_coalesced()
            assert (foo.sparse_dim(), foo.dense_dim()) == (cpu.sparse_dim(), cpu.dense_dim())
        for f, c in zip(_components(foo), _components(cpu), strict=True):
            assert str(f.device) == device
            torch.testing.assert_close(f.cpu(), c)
    else:
        assert str(foo.device) == device
        torch.testing.assert_close(foo.cpu(), cpu)


def _one_line_about_foo(excinfo):
    msg = str(excinfo.value)
    assert "foo" in msg and "\n" not in msg.strip(), msg
    for leaked in ("privateuseone", "sparsefoo", "sparsecsrfoo"):
        assert leaked not in msg.lower(), msg
    assert "PrivateUse1" not in msg, msg


# ---- creation, layouts, moves ---------------------------------------------------------------------------


def test_sparse_coo_tensor_on_foo_equals_cpu():
    i = [[0, 1, 1], [2, 0, 2]]
    v = [3.0, 4.0, 5.0]
    cpu = torch.sparse_coo_tensor(i, v, (2, 3))
    assert_same(torch.sparse_coo_tensor(i, v, (2, 3), device="foo"), cpu)
    assert_same(torch.sparse_coo_tensor(torch.tensor(i).foo(), torch.tensor(v).foo(), (2, 3)), cpu)
    assert_same(torch.sparse_coo_tensor(torch.tensor(i).foo(), torch.tensor(v).foo()), torch.sparse_coo_tensor(i, v))
    assert_same(torch.sparse_coo_tensor(i, v, (2, 3), device="foo", is_coalesced=True),
                torch.sparse_coo_tensor(i, v, (2, 3), is_coalesced=True))
    assert_same(torch.sparse_coo_tensor(size=(2, 3), device="foo"), torch.sparse_coo_tensor(size=(2, 3)))
    assert "SparsePrivateUse1" in str(torch._C._dispatch_keys(cpu.foo()))


def test_components_are_the_tensors_passed_in_without_a_copy():
    indices, values = torch.tensor([[0, 1], [2, 0]]).foo(), torch.tensor([1.0, 2.0]).foo()
    s = torch.sparse_coo_tensor(indices, values, (2, 3))
    assert s._values().data_ptr() == values.data_ptr()
    assert s._indices().data_ptr() == indices.data_ptr()
    values.mul_(10)  # shares memory, as on CPU
    assert torch.equal(s.to_dense().cpu(), torch.tensor([[0.0, 0, 10], [20, 0, 0]]))


@pytest.mark.parametrize("layout", [torch.sparse_coo] + COMPRESSED, ids=str)
def test_to_sparse_and_to_dense_equal_cpu(layout):
    for dtype in (torch.float32, torch.float64, torch.int64, torch.bool):
        d = _dense(dtype=dtype)
        foo_sparse, cpu_sparse = _to_layout(d.foo(), layout), _to_layout(d, layout)
        assert_same(foo_sparse, cpu_sparse)
        assert_same(foo_sparse.to_dense(), cpu_sparse.to_dense())


def test_sparse_to_other_sparse_layouts_equal_cpu():
    s = _dense().to_sparse()
    assert_same(s.foo().to_sparse_csr(), s.to_sparse_csr())
    assert_same(s.foo().to_sparse_csr().to_sparse_csc(), s.to_sparse_csr().to_sparse_csc())
    assert_same(s.foo().to_sparse_csr().to_sparse(), s.to_sparse_csr().to_sparse())


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr], ids=str)
def test_zeros_and_empty_with_sparse_layout(layout):
    assert_same(torch.zeros((3, 4), layout=layout, device="foo"), torch.zeros((3, 4), layout=layout))
    e = torch.empty((3, 4), layout=layout, device="foo")
    assert e.layout == layout and e.shape == (3, 4) and str(e.device) == "foo:0"


@pytest.mark.parametrize("layout", [torch.sparse_coo] + COMPRESSED, ids=str)
def test_moves_between_cpu_foo0_and_foo1(layout):
    cpu = _to_layout(_dense(), layout)
    on0 = cpu.to("foo")
    assert_same(on0, cpu)
    on1 = on0.to("foo:1")  # foo:0 stays current
    assert torch.foo.current_device() == 0
    assert_same(on1, cpu, device="foo:1")
    assert_same(on1.to("foo:0"), cpu)
    back = on1.cpu()
    assert back.layout == layout and back.device.type == "cpu"
    assert torch.equal(back.to_dense(), cpu.to_dense())


def test_uncoalesced_coo_moves_as_it_is():
    cpu = _coo()
    assert not cpu.is_coalesced()
    assert_same(cpu.foo(), cpu)
    back = cpu.foo().to("foo:1").cpu()
    assert not back.is_coalesced() and torch.equal(back._indices(), cpu._indices())


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr], ids=str)
def test_copy_between_devices(layout):
    src = _to_layout(_dense(seed=1), layout)
    for dst_device, src_value in (("foo:0", src), ("foo:1", src.foo()), ("foo:0", src.to("foo:1"))):
        dst = _to_layout(torch.zeros(4, 6), layout) if layout == torch.sparse_coo else src.clone().mul_(0)
        dst = dst.to(dst_device)
        assert dst.copy_(src_value) is dst
        assert_same(dst, src, device=dst_device)
    cpu_dst = src.clone().mul_(0) if layout != torch.sparse_coo else torch.zeros(4, 6).to_sparse()
    cpu_dst.copy_(src.foo())
    assert torch.equal(cpu_dst.to_dense(), src.to_dense())


def test_module_to_moves_sparse_buffers():
    m = torch.nn.Module()
    m.register_buffer("s", _coo())
    m.to("foo")
    assert_same(m.s, _coo())
    m.cpu()
    assert m.s.device.type == "cpu" and torch.equal(m.s.to_dense(), _coo().to_dense())


def test_module_to_moves_sparse_parameters():
    m = torch.nn.Module()
    m.coo = torch.nn.Parameter(_coo())
    m.csr = torch.nn.Parameter(_dense().to_sparse_csr())
    m.to("foo")
    assert isinstance(m.coo, torch.nn.Parameter) and isinstance(m.csr, torch.nn.Parameter)
    assert_same(m.coo.detach(), _coo())
    assert_same(m.csr.detach(), _dense().to_sparse_csr())
    m.cpu()
    assert torch.equal(m.coo.detach().to_dense(), _coo().to_dense())
    assert torch.equal(m.csr.detach().to_dense(), _dense())


def test_repr_names_the_device():
    assert "device='foo:0'" in repr(_coo().foo())
    assert "device='foo:1'" in repr(_dense().to_sparse_csr().to("foo:1"))


# ---- operators ------------------------------------------------------------------------------------------


def test_coalesce_equals_cpu():
    cpu = _coo()
    foo = cpu.foo()
    assert_same(foo.coalesce(), cpu.coalesce())
    assert foo.coalesce().is_coalesced() and not foo.is_coalesced()
    assert_same(foo.coalesce().indices(), cpu.coalesce().indices())
    assert_same(foo.coalesce().values(), cpu.coalesce().values())
    assert foo._nnz() == cpu._nnz() and foo.coalesce()._nnz() == cpu.coalesce()._nnz()


ELEMENTWISE = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2.5),
    "mul_scalar": lambda a, b: a * 3,
    "div_scalar": lambda a, b: a / 4,
    "neg": lambda a, b: -a,
    "abs": lambda a, b: a.abs(),
    "sin": lambda a, b: a.sin(),
    "sqrt_abs": lambda a, b: a.abs().sqrt(),
    "pow": lambda a, b: a.pow(2),
    "relu": lambda a, b: torch.relu(a) if a.layout == torch.sparse_coo else a.relu(),
    "nan_to_num": lambda a, b: a.nan_to_num(),
    "clone": lambda a, b: a.clone(),
    "transpose": lambda a, b: a.t(),
}


@pytest.mark.parametrize("name", list(ELEMENTWISE))
@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr], ids=str)
def test_elementwise_equals_cpu(name, layout):
    fn = ELEMENTWISE[name]
    a, b = _to_layout(_dense(seed=2), layout), _to_layout(_dense(seed=3), layout)
    try:
        expected = fn(a, b)
    except (RuntimeError, NotImplementedError) as e:
        with pytest.raises(type(e)):
            fn(a.foo(), b.foo())
        return
    assert_same(fn(a.foo(), b.foo()), expected)
    assert_same(fn(a.foo(), b.foo()), expected)  # a second call: same signature


# (coo, dense, csr) -> result; CPU's and foo's must be equal (or both raise the same type of error).
STRUCTURAL = {
    "index_select": lambda c, d, s: c.index_select(1, torch.tensor([0, 2, 2], device=c.device)),
    "select": lambda c, d, s: c.select(0, 1),
    "narrow_copy": lambda c, d, s: c.narrow_copy(1, 1, 3),
    "permute": lambda c, d, s: c.permute(1, 0),
    "unsqueeze": lambda c, d, s: c.unsqueeze(0),
    "cat": lambda c, d, s: torch.cat([c, c], 1),
    "stack": lambda c, d, s: torch.stack([c, c]),
    "bmm": lambda c, d, s: torch.bmm(torch.stack([c, c]), torch.ones(2, 6, 2, device=c.device)),
    "sparse_mask": lambda c, d, s: d.sparse_mask(c.coalesce()),
    "sparse_times_dense": lambda c, d, s: c * d,
    "hybrid": lambda c, d, s: d.to_sparse(1) + d.to_sparse(1),
    "double": lambda c, d, s: c.double(),
    "zeros_like": lambda c, d, s: torch.zeros_like(c),
    "log_softmax": lambda c, d, s: torch.sparse.log_softmax(c, 0),
    "values_of_uncoalesced": lambda c, d, s: c.values(),
    "sparse_resize_": lambda c, d, s: c.clone().sparse_resize_((5, 7), 2, 0),
    "sparse_resize_and_clear_": lambda c, d, s: c.clone().sparse_resize_and_clear_((5, 7), 2, 0),
    "resize_as_": lambda c, d, s: torch.zeros(1, 1, device=c.device).to_sparse().resize_as_(c),
    "csr_constructor": lambda c, d, s: torch.sparse_csr_tensor(s.crow_indices(), s.col_indices(), s.values(), s.shape),
    "csr_constructor_device": lambda c, d, s: torch.sparse_csr_tensor([0, 1, 2], [0, 1], [1.0, 2.0], device=c.device),
    "csr_to_float64": lambda c, d, s: s.to(torch.float64),
    "csr_transpose": lambda c, d, s: s.t(),
    "csr_addmm": lambda c, d, s: torch.addmm(torch.ones(4, 4, device=c.device), s, d.t().contiguous()),
}


@pytest.mark.parametrize("name", list(STRUCTURAL))
def test_structural_operators_equal_cpu(name):
    fn = STRUCTURAL[name]
    c, d = _coo(seed=28), _dense(seed=29)
    args = (c, d, d.to_sparse_csr())
    try:
        expected = fn(*args)
    except RuntimeError as e:
        with pytest.raises(type(e)):
            fn(*(a.foo() for a in args))
        return
    assert_same(fn(*(a.foo() for a in args)), expected)


def test_in_place_operators_on_sparse_tensors():
    a, b = _coo(seed=4), _coo(seed=5)
    fa, fb = a.foo(), b.foo()
    assert fa.add_(fb) is fa
    assert_same(fa, a.add_(b))
    assert fa.mul_(2) is fa
    assert_same(fa, a.mul_(2))
    fa.zero_()
    assert_same(fa, a.zero_())
    c, d = _dense(seed=6).to_sparse_csr(), _dense(seed=7).to_sparse_csr()
    fc = c.foo()
    assert fc.mul_(3) is fc
    assert_same(fc, c.mul_(3))
    fc.add_(d.foo())
    assert_same(fc, c.add_(d))


def test_dense_plus_sparse_in_place_equals_cpu():
    dense, sparse = _dense(seed=8), _coo(seed=9)
    f = dense.foo()
    for _ in range(2):  # the second call is queued
        f.add_(sparse.foo(), alpha=0.5)
        dense.add_(sparse, alpha=0.5)
    assert_same(f, dense)
    assert_same(torch.add(dense.foo(), sparse.foo()), torch.add(dense, sparse))


def test_reductions_equal_cpu():
    cpu = _coo(seed=10)
    foo = cpu.foo()
    assert_same(torch.sparse.sum(foo), torch.sparse.sum(cpu))
    assert_same(torch.sparse.sum(foo, dim=1), torch.sparse.sum(cpu, dim=1))
    assert_same(torch.sparse.sum(foo, dim=0), torch.sparse.sum(cpu, dim=0))
    assert_same(foo.sum(), cpu.sum())
    csr = _dense(seed=11).to_sparse_csr()
    assert_same(csr.foo().sum(), csr.sum())
    assert_same(torch.sparse.softmax(foo, dim=1), torch.sparse.softmax(cpu, dim=1))


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr], ids=str)
def test_sparse_matmul_equals_cpu(layout):
    a = _to_layout(_dense(seed=12), layout)
    b, bias = _dense((6, 3), seed=13) + 1, torch.randn(4, 3, generator=torch.Generator().manual_seed(14))
    for _ in range(2):  # the second call is queued
        assert_same(torch.sparse.mm(a.foo(), b.foo()), torch.sparse.mm(a, b))
        assert_same(a.foo() @ b.foo(), a @ b)
        assert_same(torch.mm(a.foo(), b.foo()), torch.mm(a, b))
        assert_same(torch.sparse.addmm(bias.foo(), a.foo(), b.foo(), beta=0.5, alpha=2.0),
                    torch.sparse.addmm(bias, a, b, beta=0.5, alpha=2.0))
        assert_same(torch.mv(a.foo(), b[:, 0].foo()), torch.mv(a, b[:, 0]))
    sparse_b = _to_layout(_dense((6, 3), seed=15), layout)
    assert_same(torch.sparse.mm(a.foo(), sparse_b.foo()), torch.sparse.mm(a, sparse_b))


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
def test_sparse_mm_reduce_and_its_gradients_equal_cpu(reduce):
    a = _dense(seed=16).to_sparse_csr()
    b = _dense((6, 3), seed=17) + 1
    cot = torch.randn(4, 3, generator=torch.Generator().manual_seed(18))

    def run(device, sparse_grad, dense_grad):
        sa = a.detach().to(device).requires_grad_(sparse_grad)
        db = b.detach().to(device).requires_grad_(dense_grad)
        out = torch.sparse.mm(sa, db, reduce)
        return out, torch.autograd.grad(out, [t for t in (sa, db) if t.requires_grad], cot.to(device))

    # CPU's kernel keeps what the backward needs (amax/amin: the argmax) only for inputs that require grad.
    for sparse_grad, dense_grad in ((True, True), (False, True), (True, False)):
        c_out, c_grads = run("cpu", sparse_grad, dense_grad)
        f_out, f_grads = run("foo", sparse_grad, dense_grad)
        assert_same(f_out, c_out)
        for f, c in zip(f_grads, c_grads, strict=True):
            assert_same(f, c)


def test_sparse_mm_reduce_queued_with_and_without_grad():
    # The argmax output of amax exists only while an input requires grad: a call learnt with grad must
    # not be queued as a call without, and the other way round.
    a, b = _dense(seed=30).to_sparse_csr(), _dense((6, 3), seed=31) + 1
    fa = a.foo()
    fb = b.foo().requires_grad_()
    for grad_enabled in (True, False, True, False):
        with torch.set_grad_enabled(grad_enabled):
            out, argmax = torch.ops.aten._sparse_mm_reduce_impl(fa, fb, "amax")
            expected_out, expected_argmax = torch.ops.aten._sparse_mm_reduce_impl(a, b.requires_grad_(), "amax")
        assert_same(out.detach(), expected_out.detach())
        assert_same(argmax, expected_argmax)
    torch.foo.synchronize()


def test_sampled_addmm_equals_cpu():
    mask = _dense(seed=19).to_sparse_csr()
    m1, m2 = torch.randn(4, 5), torch.randn(5, 6)
    expected = torch.sparse.sampled_addmm(mask, m1, m2, beta=0.5, alpha=2.0)
    assert_same(torch.sparse.sampled_addmm(mask.foo(), m1.foo(), m2.foo(), beta=0.5, alpha=2.0), expected)
    out = mask.foo().clone()
    assert torch.sparse.sampled_addmm(mask.foo(), m1.foo(), m2.foo(), beta=0.5, alpha=2.0, out=out) is out
    assert_same(out, expected)


def test_gradient_of_sparse_times_dense_equals_cpu():
    a, b = _coo(seed=20), torch.randn(6, 2, generator=torch.Generator().manual_seed(21))

    def grads(device):
        sa, db = a.detach().to(device).requires_grad_(), b.detach().to(device).requires_grad_()
        (torch.sparse.mm(sa, db) ** 2).sum().backward()
        return sa.grad, db.grad

    (cga, cgb), (fga, fgb) = grads("cpu"), grads("foo")
    assert_same(fga, cga)
    assert_same(fgb, cgb)


# ---- sparse gradients and optimizers ---------------------------------------------------------------------


def _make_module(kind):
    torch.manual_seed(0)
    if kind == "Embedding":
        return torch.nn.Embedding(12, 4, sparse=True)
    return torch.nn.EmbeddingBag(12, 4, mode="mean", sparse=True)


@pytest.mark.parametrize("kind", ["Embedding", "EmbeddingBag"])
def test_embedding_sparse_gradient_equals_cpu(kind):
    idx = torch.tensor([[1, 2, 2, 5], [3, 1, 11, 0]])
    grads = {}
    for device in ("cpu", "foo"):
        m = _make_module(kind).to(device)
        (m(idx.to(device)) ** 2).sum().backward()
        grads[device] = m.weight.grad
    assert grads["foo"].layout == torch.sparse_coo
    assert_same(grads["foo"], grads["cpu"])


def test_embedding_sparse_gradient_on_foo1():
    idx = torch.tensor([0, 3, 3])
    m = _make_module("Embedding")
    m(idx).sum().backward()
    expected_grad = m.weight.grad
    m1 = _make_module("Embedding").to("foo:1")
    m1(idx.to("foo:1")).sum().backward()
    assert_same(m1.weight.grad, expected_grad, device="foo:1")


@pytest.mark.parametrize("kind", ["Embedding", "EmbeddingBag"])
@pytest.mark.parametrize("optimizer", ["SGD", "SparseAdam", "Adagrad"])
def test_sparse_embedding_training_equals_cpu(optimizer, kind):
    batches = [torch.tensor([[1, 2, 2, 5], [3, 1, 11, 0]]), torch.tensor([[7, 7, 1, 4], [0, 2, 9, 9]])]

    def train(device):
        m = _make_module(kind).to(device)
        opt = getattr(torch.optim, optimizer)(m.parameters(), lr=0.1)
        for step in range(3):
            opt.zero_grad()
            for idx in batches:  # two backward passes accumulate into one sparse gradient
                (m(idx.to(device)) ** 2).sum().backward()
            opt.step()
        return m.weight.detach(), opt.state_dict()["state"]

    (c_weight, c_state), (f_weight, f_state) = train("cpu"), train("foo")
    assert_same(f_weight, c_weight)
    assert c_state.keys() == f_state.keys()
    for param, param_state in c_state.items():
        for key, value in param_state.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                assert_same(f_state[param][key], value)


# ---- serialization ---------------------------------------------------------------------------------------


def _round_trip(t, **load_kwargs):
    buf = io.BytesIO()
    torch.save(t, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr, torch.sparse_bsc], ids=str)
def test_save_and_load(layout):
    cpu = _to_layout(_dense(seed=22), layout) if layout != torch.sparse_coo else _coo(seed=22)
    assert_same(_round_trip(cpu.foo()), cpu)
    assert_same(_round_trip(cpu.to("foo:1")), cpu, device="foo:1")
    assert_same(_round_trip(cpu.foo(), weights_only=True), cpu)
    assert_same(_round_trip(cpu.foo(), map_location="foo:1"), cpu, device="foo:1")
    loaded = _round_trip(cpu.foo(), map_location="cpu")
    assert loaded.device.type == "cpu" and torch.equal(loaded.to_dense(), cpu.to_dense())
    with torch.sparse.check_sparse_tensor_invariants():
        assert_same(_round_trip(cpu.foo()), cpu)


# ---- errors ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn",
    [lambda s, d: torch.sparse.mm(s.foo(), d), lambda s, d: torch.sparse.mm(s, d.foo()),
     lambda s, d: s.foo() + s.to("foo:1"), lambda s, d: torch.sparse.mm(s.foo(), d.to("foo:1")),
     lambda s, d: d.foo().add_(s), lambda s, d: s.foo().add_(s)],
    ids=["sparse_foo_dense_cpu", "sparse_cpu_dense_foo", "foo0_foo1", "foo0_dense_foo1", "dense_foo_sparse_cpu",
         "sparse_foo_sparse_cpu"],
)
def test_mixed_devices_raise_one_line_naming_foo(fn):
    s, d = _coo(seed=23), torch.randn(6, 2)
    with pytest.raises(RuntimeError) as excinfo:
        fn(s, d)
    _one_line_about_foo(excinfo)


def test_operator_without_a_cpu_kernel_for_the_layout_raises_one_line():
    s = _dense(seed=24)
    with pytest.raises(NotImplementedError):  # CPU raises the same kind of error
        s.to_sparse_csr().cumsum(0)
    with pytest.raises(NotImplementedError) as excinfo:
        s.foo().to_sparse_csr().cumsum(0)
    _one_line_about_foo(excinfo)
    with pytest.raises(NotImplementedError) as excinfo:
        torch.linalg.svd(s.foo().to_sparse())
    _one_line_about_foo(excinfo)


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr], ids=str)
def test_pinning_a_sparse_foo_tensor_raises(layout):
    s = _to_layout(_dense(seed=32), layout).foo()
    assert not s.is_pinned()
    with pytest.raises(RuntimeError) as excinfo:
        s.pin_memory()
    _one_line_about_foo(excinfo)


# ---- queued and synchronous execution -------------------------------------------------------------------


def test_sparse_times_dense_is_queued_once_warm():
    a, b = _coo(seed=25), torch.randn(6, 3)
    fa, fb = a.foo(), b.foo()
    torch.sparse.mm(fa, fb)  # first calls run synchronously and learn their outputs
    fb.mul_(1)
    torch.foo.synchronize()
    with torch.foo._hold_stream():
        fb.mul_(2)  # queued: the product below must see it
        result = torch.sparse.mm(fa, fb)  # returns while the stream is held
    assert_same(result, torch.sparse.mm(a, b * 2))


def test_construction_and_metadata_do_not_wait_for_the_stream():
    indices, values = torch.tensor([[0, 1, 1], [2, 0, 2]]).foo(), torch.tensor([1.0, 2.0, 3.0]).foo()
    values.mul_(1)  # a first call runs synchronously
    torch.foo.synchronize()
    with torch.foo._hold_stream():
        values.mul_(2)  # queued
        s = torch.sparse_coo_tensor(indices, values, (2, 3))
        assert s._nnz() == 3 and s.sparse_dim() == 2 and s.dense_dim() == 0 and not s.is_coalesced()
        assert s._values().data_ptr() == values.data_ptr()
    assert torch.equal(s.to_dense().cpu(), torch.tensor([[0.0, 0, 2], [4, 0, 6]]))


def test_value_dependent_results_follow_queued_work():
    cpu = _coo(seed=26)
    foo = cpu.foo()
    dense = _dense(seed=27).foo()
    torch.foo._sleep(10_000_000)
    foo._values().mul_(3)  # queued after the sleep
    dense.mul_(-1)
    assert_same(foo.coalesce(), (cpu * 3).coalesce())
    assert_same(dense.to_sparse(), (-_dense(seed=27)).to_sparse())
