"""The methods generated for the foo backend (CONTRACT: "Generated methods"), checked against their CUDA
counterparts' documented behaviour: ``Tensor.cuda``, ``Tensor.is_cuda``, ``Module.cuda``, ``Storage.cuda``,
``PackedSequence.cuda``/``is_cuda``."""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence, pack_sequence, pad_packed_sequence

FOO0 = torch.device("foo", 0)
FOO1 = torch.device("foo", 1)


@pytest.fixture(autouse=True)
def quiet_typed_storage_warning():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="TypedStorage is deprecated")
        yield


# ---- Tensor.foo / Tensor.is_foo ----------------------------------------------------------------------

def test_tensor_foo_default_device_is_current():
    x = torch.arange(6.0).view(2, 3)
    y = x.foo()
    assert y.device == FOO0
    assert torch.equal(y.cpu(), x)
    torch.foo.set_device(1)
    z = x.foo()
    assert z.device == FOO1
    assert torch.equal(z.cpu(), x)


@pytest.mark.parametrize("device", [1, "foo:1", torch.device("foo", 1)], ids=["int", "str", "torch.device"])
def test_tensor_foo_device_argument(device):
    x = torch.arange(6.0)
    y = x.foo(device)
    assert y.device == FOO1
    assert torch.equal(y.cpu(), x)
    assert x.foo(device=device).device == FOO1


def test_tensor_foo_device_without_index_means_current():
    torch.foo.set_device(1)
    assert torch.ones(2).foo("foo").device == FOO1


def test_tensor_foo_returns_self_when_already_there():
    y = torch.ones(3, device="foo:1")
    assert y.foo(1) is y
    with torch.foo.device(1):
        assert y.foo() is y
    z = y.foo(0)
    assert z is not y and z.device == FOO0 and torch.equal(z.cpu(), y.cpu())


def test_tensor_foo_non_blocking_and_kwargs():
    x = torch.randn(2, 3, 4, 5)
    y = x.foo(non_blocking=True)
    assert y.device == FOO0 and torch.equal(y.cpu(), x)
    cl = x.foo(memory_format=torch.channels_last)
    assert cl.stride() == x.to(memory_format=torch.channels_last).stride()
    assert torch.equal(cl.cpu(), x)


def test_tensor_foo_keeps_dtype_and_autograd():
    x = torch.arange(5, dtype=torch.int16)
    assert x.foo().dtype == torch.int16
    leaf = torch.randn(3, requires_grad=True)
    y = leaf.foo()
    assert y.requires_grad and y.grad_fn is not None
    (y * 2).sum().backward()
    assert torch.equal(leaf.grad, torch.full((3,), 2.0))


def test_tensor_foo_rejects_other_devices():
    # As Tensor.cuda("cpu"): the generated method only moves to its own device type.
    with pytest.raises(RuntimeError, match="foo"):
        torch.ones(1).foo("cpu")
    with pytest.raises(RuntimeError, match="0 to 1"):
        torch.ones(1).foo(3)


def test_is_foo():
    x = torch.ones(2)
    assert x.is_foo is False
    y = x.foo()
    assert y.is_foo is True
    assert x.to("foo:1").is_foo is True
    assert y.cpu().is_foo is False
    assert y.is_cuda is False and y.is_cpu is False
    assert y[0].is_foo and y.t().is_foo  # views too
    assert isinstance(type(y).is_foo, property)


# ---- Module.foo --------------------------------------------------------------------------------------

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.bn = nn.BatchNorm1d(3)
        self.register_buffer("scale", torch.tensor([2.0, 3.0, 4.0]))
        self.register_buffer("none_buffer", None)

    def forward(self, x):
        return self.bn(self.lin(x)) * self.scale


def test_module_foo_moves_parameters_and_buffers():
    net = Net()
    reference = copy.deepcopy(net)
    ret = net.foo()
    assert ret is net  # in place, as Module.cuda
    for name, p in net.named_parameters():
        assert p.device == FOO0, name
        assert isinstance(p, nn.Parameter) and p.requires_grad
    for name, b in net.named_buffers():
        assert b.device == FOO0, name
    assert net.none_buffer is None
    state = {k: v.cpu() for k, v in net.state_dict().items()}
    for k, v in reference.state_dict().items():
        assert torch.equal(state[k], v), k
    x = torch.randn(5, 4)
    net.eval()
    reference.eval()
    torch.testing.assert_close(net(x.foo()).cpu(), reference(x))


@pytest.mark.parametrize("device", [1, "foo:1", torch.device("foo", 1)], ids=["int", "str", "torch.device"])
def test_module_foo_device_argument(device):
    net = Net().foo(device)
    assert all(t.device == FOO1 for t in list(net.parameters()) + list(net.buffers()))


def test_module_foo_default_is_current_device():
    torch.foo.set_device(1)
    net = Net().foo()
    assert all(t.device == FOO1 for t in net.parameters())


def test_module_foo_moves_gradients_and_trains():
    net = nn.Linear(3, 2)
    net(torch.randn(4, 3)).sum().backward()
    grads = [p.grad.clone() for p in net.parameters()]
    net.foo()
    for p, g in zip(net.parameters(), grads):
        assert p.grad is not None and p.grad.device == FOO0
        assert torch.equal(p.grad.cpu(), g)
    net.zero_grad()
    net(torch.randn(4, 3, device="foo")).sum().backward()
    assert all(p.grad.device == FOO0 for p in net.parameters())


def test_module_foo_then_cpu_round_trip():
    net = Net()
    reference = copy.deepcopy(net)
    net.foo(1).cpu()
    for (k, v), (_, r) in zip(net.state_dict().items(), reference.state_dict().items()):
        assert v.device.type == "cpu" and torch.equal(v, r), k


# ---- storages ----------------------------------------------------------------------------------------

def test_untyped_storage_foo():
    x = torch.arange(8, dtype=torch.int32)
    s = x.untyped_storage()
    assert s.is_foo is False
    fs = s.foo()
    assert isinstance(fs, torch.UntypedStorage)
    assert fs.is_foo is True
    assert fs.device == FOO0
    assert fs.nbytes() == s.nbytes()
    assert fs.cpu().tolist() == s.tolist()
    assert fs.foo() is fs  # already there
    fs1 = s.foo(1)
    assert fs1.device == FOO1 and fs1.is_foo and fs1.tolist() == s.tolist()
    assert s.foo("foo:1").device == FOO1
    moved = fs.foo(1)
    assert moved is not fs and moved.device == FOO1 and moved.tolist() == s.tolist()
    # a copy: writing the foo storage leaves the host one alone
    fs.fill_(0)
    assert x.tolist() == list(range(8))


def test_untyped_storage_foo_backs_a_tensor():
    s = torch.arange(6.0).untyped_storage().foo()
    t = torch.empty(0, device="foo").set_(s)
    assert t.device == FOO0 and t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_typed_storage_foo():
    x = torch.arange(5.0, dtype=torch.float64)
    ts = x.storage()
    assert isinstance(ts, torch.TypedStorage)
    assert ts.is_foo is False
    fts = ts.foo()
    assert isinstance(fts, torch.TypedStorage)
    assert fts.is_foo is True
    assert fts.device == FOO0
    assert fts.dtype == torch.float64
    assert fts.tolist() == ts.tolist()
    assert len(fts) == len(ts)
    assert ts.foo(1).device == FOO1
    assert torch.ones(2, device="foo").storage().is_foo is True


# ---- PackedSequence ----------------------------------------------------------------------------------

def _packed():
    seqs = [torch.arange(8.0).view(4, 2), torch.arange(6.0).view(3, 2) + 10, torch.arange(2.0).view(1, 2) - 5]
    return pack_sequence(seqs, enforce_sorted=False)


def test_packed_sequence_foo():
    packed = _packed()
    assert packed.is_foo is False
    moved = packed.foo()
    assert isinstance(moved, PackedSequence)
    assert moved.is_foo is True
    assert moved.data.device == FOO0
    assert torch.equal(moved.data.cpu(), packed.data)
    # as PackedSequence.cuda(): batch_sizes stay on the CPU, the index tensors move with the data
    assert moved.batch_sizes.device == torch.device("cpu")
    assert torch.equal(moved.batch_sizes, packed.batch_sizes)
    assert moved.sorted_indices.device == FOO0 and moved.unsorted_indices.device == FOO0
    assert torch.equal(moved.sorted_indices.cpu(), packed.sorted_indices)
    padded, lengths = pad_packed_sequence(moved, batch_first=True)
    expected, expected_lengths = pad_packed_sequence(packed, batch_first=True)
    assert padded.device == FOO0
    assert torch.equal(padded.cpu(), expected) and torch.equal(lengths, expected_lengths)
    assert moved.foo().data is moved.data  # already there: no copy


def test_packed_sequence_foo_device_argument():
    packed = pack_padded_sequence(torch.randn(3, 2, 4), torch.tensor([3, 2]))
    moved = packed.foo("foo:1")
    assert moved.is_foo and moved.data.device == FOO1
    assert torch.equal(moved.data.cpu(), packed.data)
    back = moved.cpu()
    assert back.is_foo is False and torch.equal(back.data, packed.data)


def test_packed_sequence_through_rnn():
    rnn = nn.RNN(2, 3, batch_first=False)
    reference = copy.deepcopy(rnn)
    packed = _packed()
    out, _ = rnn.foo()(packed.foo())
    expected, _ = reference(packed)
    assert out.is_foo
    torch.testing.assert_close(out.data.cpu(), expected.data)


# ---- Parameters keep their identity across devices, as with CUDA ------------------------------------

MOVES = {
    "to_foo": lambda m: m.to("foo"),
    "foo": lambda m: m.foo(),
    "foo_1": lambda m: m.foo(1),
    "foo_then_cpu": lambda m: m.foo().to("cpu"),
}


@pytest.mark.parametrize("move", sorted(MOVES))
def test_module_move_keeps_parameter_objects_and_ties(move):
    first, second = nn.Linear(3, 3), nn.Linear(3, 3)
    second.weight = first.weight  # tied, as embeddings and LM heads are
    model = nn.Sequential(first, second)
    params = list(model.parameters())
    first(torch.randn(2, 3)).sum().backward()
    grad = first.weight.grad
    MOVES[move](model)
    assert first.weight is second.weight
    assert all(a is b for a, b in zip(params, model.parameters()))
    assert first.weight.grad is grad  # the gradient object is kept too, moved with its parameter
    assert grad.device == first.weight.device


def test_an_optimizer_built_before_the_move_trains_the_moved_model():
    torch.manual_seed(0)
    cpu_model = nn.Linear(4, 2)
    foo_model = copy.deepcopy(cpu_model)
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1)
    foo_opt = torch.optim.SGD(foo_model.parameters(), lr=0.1)  # built on CPU, as accelerate's prepare() does
    foo_model.foo()
    initial = cpu_model.weight.detach().clone()
    x = torch.randn(8, 4)
    for model, opt, inputs in ((cpu_model, cpu_opt, x), (foo_model, foo_opt, x.foo())):
        for _ in range(3):
            opt.zero_grad()
            model(inputs).square().sum().backward()
            opt.step()
    assert foo_model.weight.device == FOO0
    assert not torch.equal(cpu_model.weight, initial)  # it trained
    assert torch.equal(foo_model.weight.cpu(), cpu_model.weight)
