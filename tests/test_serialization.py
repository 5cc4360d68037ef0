"""torch.save / torch.load of foo tensors, storages, modules and state dicts (CONTRACT: "Host memory, copies,
serialization"). The oracle is the same round trip on CPU, and ``torch.cuda``'s behaviour for device indices
and map_location."""
import io
import pytest
import torch

import foo_backend  # noqa: F401
from support.subprocesses import Subprocesses

# A checkpoint written by this process (foo:1 tensors), loaded by fresh interpreters; FOO_CKPT names it.
SCRIPTS = {
    "one_device": (
        """
        import os, torch
        path = os.environ["FOO_CKPT"]
        try:
            torch.load(path)
            print("ERR none")
        except RuntimeError as e:
            print("ERR", " ".join(str(e).split()))
        ck = torch.load(path, map_location="foo:0")
        print("mapped", ck["x"].device, ck["x"].cpu().tolist(), ck["v"].cpu().tolist(), ck["y"].device)
        ck = torch.load(path, map_location={"foo:1": "foo:0"})
        print("mapped_dict", ck["x"].device, ck["y"].device, ck["x"].cpu().tolist())
        ck = torch.load(path, map_location="cpu")
        print("mapped_cpu", ck["x"].device, ck["x"].tolist())
        """,
        {"FOO_DEVICE_COUNT": 1},
    ),
    "unregistered": (
        """
        import os, sys, torch
        path = os.environ["FOO_CKPT"]
        print("registered", "foo_backend" in sys.modules, hasattr(torch, "foo"))
        try:
            torch.load(path)
            print("ERR none")
        except RuntimeError as e:
            print("ERR", " ".join(str(e).split()))
        ck = torch.load(path, map_location="cpu")
        print("mapped_cpu", ck["x"].device, ck["x"].tolist(), ck["v"].tolist(), ck["y"].tolist())
        """,
        {"TORCH_DEVICE_BACKEND_AUTOLOAD": 0},
    ),
}

X = torch.arange(12.0).reshape(3, 4)


def labelled(out):
    """{label: the rest of its line}, from a script's output."""
    return {line.partition(" ")[0]: line.partition(" ")[2] for line in out.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def subprocesses(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "foo1.pt"
    x = X.to("foo:1")
    torch.save({"x": x, "v": x[1], "y": torch.tensor([7, 8], device="foo:0")}, path)
    scripts = {name: (code, {**env, "FOO_CKPT": str(path)}) for name, (code, env) in SCRIPTS.items()}
    procs = Subprocesses(scripts)
    procs.start_all()  # overlap with the in-process tests
    yield procs
    procs.close()


@pytest.fixture(scope="module", autouse=True)
def start_subprocesses(subprocesses):
    pass


def round_trip(obj, **load_kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


# ---- tensors and views ------------------------------------------------------------------------------

@pytest.mark.parametrize("device", ["foo:0", "foo:1"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int8, torch.uint8, torch.bool, torch.complex64])
def test_tensor_round_trip(device, dtype):
    src = (torch.arange(-6, 18).reshape(4, 6) % 5).to(dtype)
    loaded = round_trip(src.to(device))
    assert loaded.device == torch.device(device)
    assert loaded.dtype == dtype and loaded.shape == src.shape and loaded.stride() == src.stride()
    assert torch.equal(loaded.cpu(), src)


def test_tensor_round_trip_file(tmp_path):
    src = torch.randn(5, 7, generator=torch.Generator().manual_seed(0))
    path = tmp_path / "t.pt"
    torch.save(src.to("foo:1"), path)
    loaded = torch.load(path)
    assert loaded.device == torch.device("foo:1")
    assert torch.equal(loaded.cpu(), src)


def test_non_contiguous_and_zero_size_tensors():
    src = torch.arange(30.0).reshape(5, 6)
    foo = src.to("foo:1")
    loaded = round_trip({"t": foo.t(), "s": foo[1:, ::2], "empty": torch.empty(0, 3, device="foo:0"),
                         "scalar": torch.tensor(3.5, device="foo:1")})
    assert loaded["t"].device == torch.device("foo:1") and loaded["t"].stride() == (1, 6)
    assert torch.equal(loaded["t"].cpu(), src.t())
    assert torch.equal(loaded["s"].cpu(), src[1:, ::2])
    assert loaded["empty"].shape == (0, 3) and loaded["empty"].device == torch.device("foo:0")
    assert loaded["scalar"].dim() == 0 and loaded["scalar"].item() == 3.5


def test_views_keep_sharing_storage():
    base = X.to("foo:1")
    loaded = round_trip({"base": base, "row": base[1], "col": base[:, 2], "flat": base.view(12)[5:]})
    assert all(t.device == torch.device("foo:1") for t in loaded.values())
    ptr = loaded["base"].untyped_storage().data_ptr()
    assert all(t.untyped_storage().data_ptr() == ptr for t in loaded.values())
    assert loaded["row"].storage_offset() == 4 and loaded["flat"].storage_offset() == 5
    assert torch.equal(loaded["col"].cpu(), X[:, 2])
    loaded["base"][1, 2] = 100.0  # still aliased after loading, as on CPU
    assert loaded["row"].cpu().tolist() == [4.0, 5.0, 100.0, 7.0]
    assert loaded["col"].cpu().tolist() == [2.0, 100.0, 10.0]
    assert loaded["flat"][1].item() == 100.0


def test_tensors_on_both_devices_keep_indices():
    loaded = round_trip([torch.ones(2, device="foo:0"), torch.full((2,), 2.0, device="foo:1"), torch.ones(1)])
    assert [str(t.device) for t in loaded] == ["foo:0", "foo:1", "cpu"]
    assert loaded[1].cpu().tolist() == [2.0, 2.0]


def test_requires_grad_kept():
    leaf = torch.ones(3, device="foo:1", requires_grad=True)
    loaded = round_trip(leaf)
    assert loaded.requires_grad and loaded.is_leaf and loaded.device == torch.device("foo:1")


# ---- storages ---------------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")  # loading a storage gives one, as on CPU
def test_untyped_storage_round_trip_matches_cpu():
    cpu_storage = X.untyped_storage()
    foo_storage = X.to("foo:1").untyped_storage()
    cpu_loaded = round_trip(cpu_storage)
    loaded = round_trip(foo_storage)
    mapped = round_trip(foo_storage, map_location="foo:0")
    on_cpu = round_trip(foo_storage, map_location="cpu")
    assert type(loaded) is type(cpu_loaded)
    assert loaded.device == torch.device("foo:1")
    assert mapped.device == torch.device("foo:0")
    assert on_cpu.device == torch.device("cpu")
    assert loaded.nbytes() == cpu_storage.nbytes() == 48
    for s in (loaded, mapped, on_cpu):
        assert bytes(s.cpu().untyped()) == bytes(cpu_storage)


# ---- modules and state dicts ------------------------------------------------------------------------

def make_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))


def test_state_dict_round_trip():
    cpu_model = make_model()
    model = make_model().to("foo:1")
    state = round_trip(model.state_dict())
    assert list(state) == list(cpu_model.state_dict())
    for name, ref in cpu_model.state_dict().items():
        assert state[name].device == torch.device("foo:1"), name
        assert torch.equal(state[name].cpu(), ref), name
    fresh = make_model(seed=1).to("foo:1")
    fresh.load_state_dict(state)
    inp = torch.randn(5, 4, generator=torch.Generator().manual_seed(2))
    fresh.eval()
    cpu_model.eval()
    out = fresh(inp.to("foo:1"))
    assert out.device == torch.device("foo:1")
    assert torch.allclose(out.detach().cpu(), cpu_model(inp).detach(), rtol=1.3e-6, atol=1e-5)


def test_whole_module_round_trip():
    cpu_model = make_model()
    model = make_model().to("foo:1")
    loaded = round_trip(model, weights_only=False)
    assert type(loaded) is torch.nn.Sequential
    for (name, p), (_, ref) in zip(loaded.named_parameters(), cpu_model.named_parameters()):
        assert isinstance(p, torch.nn.Parameter) and p.requires_grad, name
        assert p.device == torch.device("foo:1"), name
        assert torch.equal(p.detach().cpu(), ref.detach()), name
    assert loaded[1].running_mean.device == torch.device("foo:1")


# ---- map_location -----------------------------------------------------------------------------------

def checkpoint():
    x = X.to("foo:1")
    return {"x": x, "v": x[2], "y": torch.tensor([7, 8], device="foo:0"), "c": torch.ones(2)}


@pytest.mark.parametrize(
    "map_location, devices",
    [
        # devices of x (foo:1), y (foo:0) and c (cpu) after loading; a device maps every storage, a dict only
        # the locations it names
        ("cpu", ("cpu", "cpu", "cpu")),
        (torch.device("cpu"), ("cpu", "cpu", "cpu")),
        ("foo:0", ("foo:0", "foo:0", "foo:0")),
        ("foo:1", ("foo:1", "foo:1", "foo:1")),
        (torch.device("foo", 0), ("foo:0", "foo:0", "foo:0")),
        ({"foo:1": "foo:0"}, ("foo:0", "foo:0", "cpu")),
        ({"foo:0": "foo:1"}, ("foo:1", "foo:1", "cpu")),
        ({"foo:1": "cpu"}, ("cpu", "foo:0", "cpu")),
        ({"foo:0": "foo:1", "foo:1": "foo:0"}, ("foo:0", "foo:1", "cpu")),
        ({"cpu": "foo:1"}, ("foo:1", "foo:0", "foo:1")),
    ],
    ids=["str_cpu", "device_cpu", "str_foo0", "str_foo1", "device_foo0", "dict_1to0", "dict_0to1", "dict_1tocpu",
         "dict_swap",
         "dict_cputo1"],
)
def test_map_location(map_location, devices):
    loaded = round_trip(checkpoint(), map_location=map_location)
    assert (str(loaded["x"].device), str(loaded["y"].device), str(loaded["c"].device)) == devices
    assert str(loaded["v"].device) == devices[0]
    assert loaded["c"].cpu().tolist() == [1.0, 1.0]
    assert torch.equal(loaded["x"].cpu(), X)
    assert torch.equal(loaded["v"].cpu(), X[2])
    assert loaded["y"].cpu().tolist() == [7, 8]
    assert loaded["v"].untyped_storage().data_ptr() == loaded["x"].untyped_storage().data_ptr()


def test_map_location_callable():
    seen = []

    def to_cpu(storage, location):
        seen.append(location)
        return storage

    loaded = round_trip(checkpoint(), map_location=to_cpu)
    assert sorted(set(seen)) == ["cpu", "foo:0", "foo:1"]
    assert loaded["x"].device == torch.device("cpu") and torch.equal(loaded["x"], X)

    loaded = round_trip(checkpoint(), map_location=lambda storage, location: storage.foo(1))
    assert all(loaded[k].device == torch.device("foo:1") for k in ("x", "v", "y", "c"))
    assert torch.equal(loaded["x"].cpu(), X) and loaded["y"].cpu().tolist() == [7, 8]


def test_map_location_cpu_to_foo():
    loaded = round_trip({"a": torch.arange(4)}, map_location="foo:1")
    assert loaded["a"].device == torch.device("foo:1")
    assert loaded["a"].cpu().tolist() == [0, 1, 2, 3]


def test_load_state_dict_onto_other_device_with_map_location():
    model = make_model().to("foo:1")
    state = round_trip(model.state_dict(), map_location="foo:0")
    target = make_model(seed=3).to("foo:0")
    target.load_state_dict(state)
    for name, value in target.state_dict().items():
        assert value.device == torch.device("foo:0"), name
        assert torch.equal(value.cpu(), model.state_dict()[name].cpu()), name


# ---- loading where the device is missing --------------------------------------------------------------

def test_load_missing_device_index_suggests_map_location(subprocesses):
    out = labelled(subprocesses.check("one_device"))
    err = out["ERR"]
    assert "foo" in err.lower() and "device 1" in err, err
    assert "device_count() is 1" in err, err
    assert "map_location" in err, err
    assert "privateuseone" not in err.lower()
    assert out["mapped"] == "foo:0 " + str(X.tolist()) + " " + str(X[1].tolist()) + " foo:0"
    assert out["mapped_dict"] == "foo:0 foo:0 " + str(X.tolist())
    assert out["mapped_cpu"] == "cpu " + str(X.tolist())


def test_load_without_foo_registered(subprocesses):
    out = labelled(subprocesses.check("unregistered"))
    assert out["registered"] == "False False"
    assert out["ERR"] != "none" and "foo:1" in out["ERR"], out["ERR"]
    assert out["mapped_cpu"] == f"cpu {X.tolist()} {X[1].tolist()} [7, 8]"
