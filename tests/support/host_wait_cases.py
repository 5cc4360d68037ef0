"""Operations that do or do not make the host wait for the device, written once for any device type.

Each case is ``setup(device) -> call``: ``setup`` makes the inputs (it may wait for the device), ``call``
is the operation under test, run once the stream is busy. ``tools/measure_cuda_host_waits.py`` runs them on
a CUDA GPU, and ``host_waits_on_cuda.json`` beside this file records which ones made the host wait there:
the oracle of ``tests/test_host_waits.py``, which runs them on foo. Plain PyTorch only: no foo import.
"""
import contextlib

import torch
import torch.nn.functional as F

N = 64


@contextlib.contextmanager
def sync_debug_mode(device_type, mode):
    """``torch.<device_type>.set_sync_debug_mode(mode)`` inside the block, the default after it."""
    module = getattr(torch, device_type)
    module.set_sync_debug_mode(mode)
    try:
        yield
    finally:
        module.set_sync_debug_mode("default")


@contextlib.contextmanager
def filling_uninitialized_memory():
    """``torch.use_deterministic_algorithms(True)`` with ``fill_uninitialized_memory`` inside the block,
    PyTorch's defaults after it."""
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)
        torch.utils.deterministic.fill_uninitialized_memory = True


def uninitialized_memory_fills(device, dtype):
    """What the allocating calls hold (inside ``filling_uninitialized_memory``), as text: three elements each,
    for ``resize_`` one of an existing tensor then two it adds."""
    made = {
        "empty": torch.empty(3, dtype=dtype, device=device),
        "empty_strided": torch.empty_strided((3,), (2,), dtype=dtype, device=device),
        "empty_like": torch.empty_like(torch.zeros(3, dtype=dtype, device=device)),
        "new_empty": torch.zeros(1, dtype=dtype, device=device).new_empty(3),
        "resize_": torch.zeros(1, dtype=dtype, device=device).resize_(3),
    }
    return {name: [repr(v) for v in t.cpu().tolist()] for name, t in made.items()}


def _randn(device, *shape, **kwargs):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0), **kwargs).to(device)


def _indices(device, n=8, high=N):
    return torch.randint(high, (n,), generator=torch.Generator().manual_seed(1)).to(device)


def _mask(device, n=N):
    return (torch.arange(n) % 3 == 0).to(device)


def _spd(device, n=8):
    a = torch.randn(n, n, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    return (a @ a.T + n * torch.eye(n, dtype=torch.float64)).to(device)


def _mlp(device, dropout):
    torch.manual_seed(0)
    layers = [torch.nn.Linear(32, 64), torch.nn.ReLU()]
    if dropout:
        layers.append(torch.nn.Dropout(0.1))
    layers.append(torch.nn.Linear(64, 10))
    model = torch.nn.Sequential(*layers).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    x, target = _randn(device, 16, 32), _indices(device, 16, 10)

    def step():
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), target).backward()
        optimizer.step()

    return step


def _mlp_sgd_new_batch_size(device):
    """A training step (linear, ReLU, cross-entropy, SGD) on a batch size never seen before at every call:
    every operator of forward and backward sees a new shape (a last smaller batch, bucketed lengths)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, target = _randn(device, 4 * N, 32), _indices(device, 4 * N, 10)
    sizes = iter(range(N, 4 * N))

    def step():
        b = next(sizes)
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x[:b]), target[:b]).backward()
        optimizer.step()

    return step


def _attention_growing_cache(device):
    """Attention of one query over a key/value cache one entry longer at every call (decoding)."""
    q, k, v = _randn(device, 1, 16), _randn(device, 4 * N, 16), _randn(device, 4 * N, 16)
    lengths = iter(range(N, 4 * N))

    def call():
        n = next(lengths)
        return torch.softmax(q @ k[:n].T, dim=-1) @ v[:n]

    return call


def _new_shape_of(device, make, *shape):
    """``make(x)`` with ``x`` one row longer at every call (its first dimension new)."""
    x, lengths = _randn(device, 4 * N, *shape), iter(range(2, 4 * N))
    return lambda: make(x[: next(lengths)])


def _new_index_every_call(device, make):
    """``make(i)`` with an index tensor ``i`` one entry longer at every call."""
    i, lengths = _indices(device, 4 * N), iter(range(2, 4 * N))
    return lambda: make(i[: next(lengths)])


def _clip_grad_norm(device):
    model = torch.nn.Linear(32, 32).to(device)
    model(_randn(device, 4, 32)).sum().backward()
    return lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)


def _grad_scaler(device, step):
    """unscale_ then update, or step then update: a scaler's calls must come in that order."""
    model = torch.nn.Linear(8, 8).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(torch.device(device).type)
    scaler.scale(model(_randn(device, 2, 8)).sum()).backward()

    def call():
        (scaler.step if step else scaler.unscale_)(optimizer)
        scaler.update()

    return call


def _device_module(device):
    return getattr(torch, torch.device(device).type)


def _generator_state(device):
    generator = torch.Generator(device)
    return generator.get_state


def _out_resized(device):
    x = _randn(device, N)
    return lambda: torch.add(x, x, out=torch.empty(0, device=device))


def _sdpa(device, dropout_p):
    q = _randn(device, 2, 4, 16, 8)
    return lambda: F.scaled_dot_product_attention(q, q, q, dropout_p=dropout_p)


def _pageable_to_device(device):
    host = torch.randn(N)
    return lambda: host.to(device)


def _pinned_to_device(device):
    host = torch.randn(N).pin_memory()
    return lambda: host.to(device, non_blocking=True)


def _device_to_pinned(device):
    x = _randn(device, N)
    return lambda: x.to("cpu", non_blocking=True)


def _copy_into_pinned(device):
    x, host = _randn(device, N), torch.empty(N).pin_memory()
    return lambda: host.copy_(x, non_blocking=True)


def _lstm(device):
    lstm = torch.nn.LSTM(8, 16, batch_first=True).to(device)
    x = _randn(device, 2, 5, 8)
    return lambda: lstm(x)


def _conv_backward(device):
    conv = torch.nn.Conv2d(3, 4, 3).to(device)
    x = _randn(device, 2, 3, 8, 8).requires_grad_()  # a leaf on the device: no gradient copied back to the host

    def call():
        x.grad = None  # every call alike: none accumulates into an earlier call's gradients
        conv.zero_grad(set_to_none=True)
        conv(x).sum().backward()

    return call


def _embedding_backward(device):
    weight = _randn(device, N, 4).requires_grad_()
    index = _indices(device)

    def call():
        weight.grad = None
        F.embedding(index, weight).sum().backward()

    return call


def _new_shape_every_call(device):
    """``x + 1`` on a length never seen before at every call (a growing sequence, a last smaller batch)."""
    x, lengths = _randn(device, 4 * N), iter(range(N, 4 * N))
    return lambda: x[: next(lengths)] + 1


def _sgd_with_schedule(device):
    """An SGD step whose learning rate a scheduler changes at every step."""
    model = torch.nn.Linear(8, 8).to(device)
    model(_randn(device, 4, 8)).sum().backward()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=True)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 / (step + 1))

    def step():
        optimizer.step()
        schedule.step()
    step()  # the first step makes the momentum buffers
    return step


def _transformer_layer_growing_sequence(device):
    """A transformer encoder layer (attention, layer norm, feed-forward, dropout), training, over a sequence
    one token longer at every call."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, batch_first=True).to(device)
    x, lengths = _randn(device, 2, 4 * N, 16), iter(range(N, 4 * N))
    return lambda: layer(x[:, : next(lengths)])


def _normalized_conv_growing_batch(device):
    """A convolution, batch norm and group norm, training, forward and backward, over a batch one sample
    larger at every call."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.GroupNorm(2, 8)).to(device)
    x, lengths = _randn(device, 4 * N, 3, 6, 6), iter(range(2, 4 * N))
    return lambda: _backward_anew(net, net(x[: next(lengths)]))


def _backward_anew(module, output):
    """``output``'s backward into gradients made anew (not added to those of an earlier call)."""
    module.zero_grad(set_to_none=True)
    output.sum().backward()


def _embedding_bag_growing_batch(device):
    """An embedding bag's mean, forward and backward, over a batch one bag larger at every call."""
    torch.manual_seed(0)
    bags = torch.nn.EmbeddingBag(N, 8, mode="mean").to(device)
    indices, lengths = _indices(device, 4 * N * 3).view(-1, 3), iter(range(2, 4 * N))
    return lambda: _backward_anew(bags, bags(indices[: next(lengths)]))


def _fork_rng(device):
    device_type = torch.device(device).type

    def call():
        with torch.random.fork_rng(devices=[0], device_type=device_type):
            pass

    return call


def _pack_padded_sequence(device):
    x, lengths = _randn(device, 3, 5, 2), torch.tensor([2, 5, 3])
    return lambda: torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)


def _clip_grad_norm_checked(device):
    model = torch.nn.Linear(8, 8).to(device)
    model(_randn(device, 2, 8)).sum().backward()
    return lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)


def _setitem(index_of, value_of):
    def setup(device):
        x, index, value = _randn(device, N), index_of(device), value_of(device)

        def call():
            x[index] = value

        return call

    return setup


def _on(device, make):
    """``make(x)`` on a 1-D float input."""
    x = _randn(device, N)
    return lambda: make(x)


CASES = {
    # Factories: CUDA fills them with a kernel, the host does not wait.
    "arange": lambda d: lambda: torch.arange(N, device=d),
    "arange_float_step": lambda d: lambda: torch.arange(0.0, 1.0, 0.125, device=d),
    "linspace": lambda d: lambda: torch.linspace(0, 1, N, device=d),
    "eye": lambda d: lambda: torch.eye(8, device=d),
    "zeros": lambda d: lambda: torch.zeros(N, device=d),
    "full": lambda d: lambda: torch.full((N,), 2.0, device=d),
    "empty": lambda d: lambda: torch.empty(N, device=d),
    "tril_indices": lambda d: lambda: torch.tril_indices(8, 8, device=d),
    "tensor_from_list": lambda d: lambda: torch.tensor([1.0, 2.0, 3.0], device=d),
    # Random operators.
    "randn": lambda d: lambda: torch.randn(N, device=d),
    "rand": lambda d: lambda: torch.rand(N, device=d),
    "randint": lambda d: lambda: torch.randint(10, (N,), device=d),
    "randperm": lambda d: lambda: torch.randperm(N, device=d),
    "normal_": lambda d: _on(d, lambda x: x.normal_()),
    "uniform_": lambda d: _on(d, lambda x: x.uniform_()),
    "bernoulli": lambda d: _on(d, lambda x: torch.bernoulli(x.sigmoid())),
    "exponential_": lambda d: _on(d, lambda x: x.exponential_()),
    "multinomial": lambda d: _on(d, lambda x: torch.multinomial(x.softmax(0), 4)),
    "multinomial_replacement": lambda d: _on(d, lambda x: torch.multinomial(x.softmax(0), 4, True)),
    "dropout": lambda d: _on(d, lambda x: F.dropout(x, 0.5)),
    "randn_like": lambda d: _on(d, torch.randn_like),
    "rrelu_training": lambda d: _on(d, lambda x: F.rrelu(x, training=True)),
    "manual_seed": lambda d: lambda: torch.manual_seed(0),
    "device_manual_seed": lambda d: lambda: _device_module(d).manual_seed(0),
    "device_get_rng_state": lambda d: lambda: _device_module(d).get_rng_state(),
    "generator_get_state": _generator_state,
    "sdpa": lambda d: _sdpa(d, 0.0),
    "sdpa_dropout": lambda d: _sdpa(d, 0.5),
    # Resizes.
    "out_resized": _out_resized,
    "resize_": lambda d: _on(d, lambda x: x.resize_(2 * N)),
    "empty_out_same_size": lambda d: _on(d, lambda x: torch.mul(x, 2, out=torch.empty(N, device=d))),
    # Indexing with integer tensors.
    "index_read": lambda d: (lambda x, i: lambda: x[i])(_randn(d, N), _indices(d)),
    "index_read_dim1": lambda d: (lambda x, i: lambda: x[:, i])(_randn(d, 4, N), _indices(d)),
    "index_write_tensor": _setitem(_indices, lambda d: _randn(d, 8)),
    "index_write_number": _setitem(_indices, lambda d: 1.0),
    "index_put_": lambda d: (lambda x, i, v: lambda: x.index_put_((i,), v))(_randn(d, N), _indices(d), _randn(d, 8)),
    "index_put_accumulate": lambda d: (lambda x, i, v: lambda: x.index_put_((i,), v, accumulate=True))(
        _randn(d, N), _indices(d), _randn(d, 8)),
    "index_select": lambda d: (lambda x, i: lambda: x.index_select(0, i))(_randn(d, N), _indices(d)),
    "gather": lambda d: (lambda x, i: lambda: x.gather(0, i))(_randn(d, N), _indices(d)),
    "take": lambda d: (lambda x, i: lambda: x.take(i))(_randn(d, N), _indices(d)),
    "scatter_add_": lambda d: (lambda x, i, v: lambda: x.scatter_add_(0, i, v))(
        _randn(d, N), _indices(d), _randn(d, 8)),
    "scatter_reduce_": lambda d: (lambda x, i, v: lambda: x.scatter_reduce_(0, i, v, "amax"))(
        _randn(d, N), _indices(d), _randn(d, 8)),
    "index_add_": lambda d: (lambda x, i, v: lambda: x.index_add_(0, i, v))(_randn(d, N), _indices(d), _randn(d, 8)),
    "index_copy_": lambda d: (lambda x, i, v: lambda: x.index_copy_(0, i, v))(
        _randn(d, N), torch.arange(8, device=d), _randn(d, 8)),
    "index_fill_": lambda d: (lambda x, i: lambda: x.index_fill_(0, i, 0.0))(_randn(d, N), _indices(d)),
    "embedding": lambda d: (lambda w, i: lambda: F.embedding(i, w))(_randn(d, N, 4), _indices(d)),
    "embedding_bag": lambda d: (lambda w, i: lambda: F.embedding_bag(i.view(2, 4), w))(_randn(d, N, 4), _indices(d)),
    "one_hot_num_classes": lambda d: (lambda i: lambda: F.one_hot(i, N))(_indices(d)),
    "one_hot": lambda d: (lambda i: lambda: F.one_hot(i))(_indices(d)),
    "index_read_host_indices": lambda d: (lambda x, i: lambda: x[i])(_randn(d, N), _indices("cpu")),
    "element_write_number": _setitem(lambda d: 3, lambda d: 1.0),
    "slice_write_number": _setitem(lambda d: slice(2, 9), lambda d: 1.0),
    "fill_host_tensor": lambda d: _on(d, lambda x: x.fill_(torch.tensor(2.0))),
    "copy_host_scalar_tensor": lambda d: _on(d, lambda x: x.copy_(torch.tensor(2.0))),
    "embedding_backward": _embedding_backward,
    # Boolean masks.
    "mask_write_number": _setitem(_mask, lambda d: 0.0),
    "mask_write_tensor": _setitem(_mask, lambda d: torch.zeros((), device=d)),
    "mask_read": lambda d: (lambda x, m: lambda: x[m])(_randn(d, N), _mask(d)),
    "masked_fill_": lambda d: (lambda x, m: lambda: x.masked_fill_(m, 0.0))(_randn(d, N), _mask(d)),
    "masked_fill_device_value": lambda d: (lambda x, m, v: lambda: x.masked_fill_(m, v))(
        _randn(d, N), _mask(d), torch.zeros((), device=d)),
    "masked_select": lambda d: (lambda x, m: lambda: x.masked_select(m))(_randn(d, N), _mask(d)),
    "masked_scatter_": lambda d: (lambda x, m, v: lambda: x.masked_scatter_(m, v))(
        _randn(d, N), _mask(d), _randn(d, N)),
    "where_three": lambda d: (lambda x, m: lambda: torch.where(m, x, 0.0))(_randn(d, N), _mask(d)),
    # Value-dependent shapes and host reads.
    "nonzero": lambda d: _on(d, lambda x: (x > 0).nonzero()),
    "nonzero_static": lambda d: _on(d, lambda x: torch.nonzero_static(x > 0, size=N)),
    "where_one": lambda d: _on(d, lambda x: torch.where(x > 0)),
    "unique": lambda d: (lambda i: lambda: torch.unique(i))(_indices(d)),
    "unique_consecutive": lambda d: (lambda i: lambda: torch.unique_consecutive(i))(_indices(d)),
    "bincount": lambda d: (lambda i: lambda: torch.bincount(i))(_indices(d)),
    "bincount_minlength": lambda d: (lambda i: lambda: torch.bincount(i, minlength=N))(_indices(d)),
    "histc": lambda d: _on(d, lambda x: torch.histc(x, 10, -3, 3)),
    "histc_no_range": lambda d: _on(d, lambda x: torch.histc(x, 10)),
    "repeat_interleave_tensor": lambda d: (lambda x, r: lambda: x.repeat_interleave(r))(
        _randn(d, 4), torch.tensor([1, 2, 3, 4]).to(d)),
    "repeat_interleave_tensor_output_size": lambda d: (lambda x, r: lambda: x.repeat_interleave(r, output_size=10))(
        _randn(d, 4), torch.tensor([1, 2, 3, 4]).to(d)),
    "repeat_interleave_int": lambda d: _on(d, lambda x: x.repeat_interleave(2)),
    "repr": lambda d: _on(d, repr),
    "distribution_validate_args": lambda d: _on(
        d, lambda x: torch.distributions.Normal(x, x.exp(), validate_args=True)),
    "item": lambda d: _on(d, lambda x: x.sum().item()),
    "tolist": lambda d: _on(d, lambda x: x.tolist()),
    "bool": lambda d: _on(d, lambda x: bool(x.sum() > 0)),
    "cpu": lambda d: _on(d, lambda x: x.cpu()),
    "pageable_to_device": _pageable_to_device,
    "pinned_to_device_non_blocking": _pinned_to_device,
    "device_to_pinned_non_blocking": _device_to_pinned,
    "copy_into_pinned_non_blocking": _copy_into_pinned,
    "equal": lambda d: _on(d, lambda x: torch.equal(x, x + 0)),  # not x itself: equal(x, x) reads nothing
    "allclose": lambda d: _on(d, lambda x: torch.allclose(x, x + 0)),
    "isclose": lambda d: _on(d, lambda x: torch.isclose(x, x)),
    "any": lambda d: _on(d, lambda x: (x > 0).any()),
    "count_nonzero": lambda d: _on(d, torch.count_nonzero),
    # Operators with fixed output shapes.
    "add": lambda d: _on(d, lambda x: x + 1),
    "add_new_shape_every_call": _new_shape_every_call,
    "attention_growing_cache": _attention_growing_cache,
    "layer_norm_new_shape_every_call": lambda d: _new_shape_of(d, lambda x: F.layer_norm(x, (8,)), 8),
    "conv_new_batch_size_every_call": lambda d: (lambda conv: _new_shape_of(d, conv, 3, 8, 8))(
        torch.nn.Conv2d(3, 4, 3).to(d)),
    "add_empty": lambda d: (lambda x: lambda: x + 1)(_randn(d, 0, 8)),
    "logsumexp": lambda d: _on(d, lambda x: torch.logsumexp(x, 0)),
    "set_default_dtype": lambda d: lambda: torch.set_default_dtype(torch.float32),
    "fork_rng": _fork_rng,
    "pack_padded_sequence": _pack_padded_sequence,
    "sum": lambda d: _on(d, torch.sum),
    "sort": lambda d: _on(d, torch.sort),
    "topk": lambda d: _on(d, lambda x: torch.topk(x, 4)),
    "kthvalue": lambda d: _on(d, lambda x: torch.kthvalue(x, 4)),
    "median": lambda d: _on(d, torch.median),
    "cumsum": lambda d: _on(d, lambda x: torch.cumsum(x, 0)),
    "cat": lambda d: _on(d, lambda x: torch.cat([x, x])),
    "searchsorted": lambda d: _on(d, lambda x: torch.searchsorted(x.sort().values, x)),
    "clamp_tensor": lambda d: _on(d, lambda x: torch.clamp(x, min=x.mean())),
    "softmax": lambda d: _on(d, lambda x: x.softmax(0)),
    "matmul": lambda d: (lambda a: lambda: a @ a)(_randn(d, 16, 16)),
    "cross_entropy": lambda d: (lambda x, t: lambda: F.cross_entropy(x, t))(_randn(d, 8, 10), _indices(d, 8, 10)),
    "nll_loss_ignore_index": lambda d: (lambda x, t: lambda: F.nll_loss(x, t, ignore_index=0))(
        _randn(d, 8, 10), _indices(d, 8, 10)),
    "conv_forward": lambda d: (lambda conv, x: lambda: conv(x))(torch.nn.Conv2d(3, 4, 3).to(d), _randn(d, 2, 3, 8, 8)),
    "conv_backward": _conv_backward,
    "lstm": _lstm,
    "layer_norm": lambda d: (lambda x: lambda: F.layer_norm(x, (8,)))(_randn(d, 4, 8)),
    "max_pool2d_indices": lambda d: (lambda x: lambda: F.max_pool2d(x, 2, return_indices=True))(_randn(d, 1, 2, 8, 8)),
    "interpolate": lambda d: (lambda x: lambda: F.interpolate(x, scale_factor=2.0))(_randn(d, 1, 2, 4, 4)),
    "fft": lambda d: _on(d, torch.fft.rfft),
    # Linear algebra: CUDA checks some results on the host.
    "linalg_inv": lambda d: (lambda a: lambda: torch.linalg.inv(a))(_spd(d)),
    "linalg_inv_ex": lambda d: (lambda a: lambda: torch.linalg.inv_ex(a))(_spd(d)),
    "linalg_cholesky": lambda d: (lambda a: lambda: torch.linalg.cholesky(a))(_spd(d)),
    "linalg_cholesky_ex": lambda d: (lambda a: lambda: torch.linalg.cholesky_ex(a))(_spd(d)),
    "linalg_solve": lambda d: (lambda a: lambda: torch.linalg.solve(a, a))(_spd(d)),
    "linalg_solve_ex": lambda d: (lambda a: lambda: torch.linalg.solve_ex(a, a))(_spd(d)),
    "linalg_eigh": lambda d: (lambda a: lambda: torch.linalg.eigh(a))(_spd(d)),
    "linalg_eigvalsh": lambda d: (lambda a: lambda: torch.linalg.eigvalsh(a))(_spd(d)),
    "linalg_eig": lambda d: (lambda a: lambda: torch.linalg.eig(a))(_spd(d)),
    "linalg_svd": lambda d: (lambda a: lambda: torch.linalg.svd(a))(_spd(d)),
    "linalg_svdvals": lambda d: (lambda a: lambda: torch.linalg.svdvals(a))(_spd(d)),
    "linalg_qr": lambda d: (lambda a: lambda: torch.linalg.qr(a))(_spd(d)),
    "linalg_lu_factor": lambda d: (lambda a: lambda: torch.linalg.lu_factor(a))(_spd(d)),
    "linalg_lu_factor_ex": lambda d: (lambda a: lambda: torch.linalg.lu_factor_ex(a))(_spd(d)),
    "linalg_lu": lambda d: (lambda a: lambda: torch.linalg.lu(a))(_spd(d)),
    "linalg_det": lambda d: (lambda a: lambda: torch.linalg.det(a))(_spd(d)),
    "linalg_slogdet": lambda d: (lambda a: lambda: torch.linalg.slogdet(a))(_spd(d)),
    "linalg_lstsq": lambda d: (lambda a: lambda: torch.linalg.lstsq(a, a))(_spd(d)),
    "linalg_pinv": lambda d: (lambda a: lambda: torch.linalg.pinv(a))(_spd(d)),
    "linalg_matrix_rank": lambda d: (lambda a: lambda: torch.linalg.matrix_rank(a))(_spd(d)),
    "linalg_matrix_norm": lambda d: (lambda a: lambda: torch.linalg.matrix_norm(a))(_spd(d)),
    "linalg_matrix_exp": lambda d: (lambda a: lambda: torch.linalg.matrix_exp(a))(_spd(d)),
    "linalg_solve_triangular": lambda d: (lambda a: lambda: torch.linalg.solve_triangular(a, a, upper=True))(_spd(d)),
    "cholesky_solve": lambda d: (lambda a: lambda: torch.cholesky_solve(a, a))(_spd(d)),
    "cholesky_inverse": lambda d: (lambda a: lambda: torch.cholesky_inverse(a))(_spd(d)),
    "logdet": lambda d: (lambda a: lambda: torch.logdet(a))(_spd(d)),
    # Training.
    "mlp_step": lambda d: _mlp(d, dropout=False),
    "mlp_step_dropout": lambda d: _mlp(d, dropout=True),
    "mlp_sgd_step_new_batch_size": _mlp_sgd_new_batch_size,
    "clip_grad_norm_": _clip_grad_norm,
    "clip_grad_norm_error_if_nonfinite": _clip_grad_norm_checked,
    "grad_scaler_unscale_update": lambda d: _grad_scaler(d, step=False),
    "grad_scaler_step_update": lambda d: _grad_scaler(d, step=True),
}

# Calls that CUDA queues as any kernel launch (new shapes: its kernels size their outputs on the host; a new
# learning rate: numbers are kernel arguments), not yet measured on a GPU. tools/measure_cuda_host_waits.py
# measures them with CASES; once measured, they move into CASES.
UNMEASURED_CASES = {
    "embedding_new_batch_every_call": lambda d: (lambda weight: _new_index_every_call(
        d, lambda i: F.embedding(i, weight)))(_randn(d, N, 8)),
    "index_select_new_length_every_call": lambda d: (lambda x: _new_index_every_call(
        d, lambda i: x.index_select(0, i)))(_randn(d, N, 8)),
    "cat_new_length_every_call": lambda d: _new_shape_of(d, lambda x: torch.cat([x, x]), 8),
    "where_new_shape_every_call": lambda d: _new_shape_of(d, lambda x: torch.where(x > 0, x, 0.0), 8),
    "masked_fill_new_shape_every_call": lambda d: _new_shape_of(d, lambda x: x.masked_fill(x > 0, 1.0), 8),
    "arange_new_length_every_call": lambda d: (lambda lengths: lambda: torch.arange(next(lengths), device=d))(
        iter(range(N, 4 * N))),
    "zeros_new_shape_every_call": lambda d: (lambda lengths: lambda: torch.zeros(next(lengths), 8, device=d))(
        iter(range(N, 4 * N))),
    "dropout_new_shape_every_call": lambda d: _new_shape_of(d, lambda x: F.dropout(x, 0.1, training=True), 8),
    "transformer_layer_growing_sequence": _transformer_layer_growing_sequence,
    "sgd_lr_schedule_step": _sgd_with_schedule,
    "normalized_conv_growing_batch": _normalized_conv_growing_batch,
    "embedding_bag_growing_batch": _embedding_bag_growing_batch,
}
