"""The foo device and the device part of ``torch.foo`` (CONTRACT: "The device", "torch.foo" devices,
``torch.accelerator``). Where the contract is silent, ``torch.cuda``'s documented semantics are the oracle."""
import os

import pytest
import torch

import foo_backend
from support.subprocesses import labelled





# Each script prints "label values..." lines; see labelled().
SCRIPTS = {
    "three_devices": (
        """
        import torch
        print("init_before", torch.foo.is_initialized())
        torch.foo.init()
        print("init_after", torch.foo.is_initialized())
        torch.foo.init()  # idempotent
        print("allocated", torch.foo.memory_allocated())
        print("count", torch.foo.device_count(), torch.accelerator.device_count())
        t = torch.ones(2, device="foo:2")
        print("last_device", t.device, t.cpu().tolist() == [1.0, 1.0])
        try:
            torch.empty(1, device="foo:3")
        except RuntimeError as e:
            print("ERR", e)
        """,
        {"FOO_DEVICE_COUNT": 3},
    ),
    "one_device_96mb": (
        """
        import torch
        stats = torch.foo.memory_stats()
        allocated = torch.foo.memory_allocated()
        reserved = torch.foo.memory_reserved()
        print("uninitialised_queries", len(stats), allocated, reserved, torch.foo.is_initialized())
        print("count", torch.foo.device_count())
        print("memory", torch.foo.get_device_properties(0).total_memory, torch.foo.mem_get_info(0)[1])
        try:
            torch.foo.set_device(1)
        except RuntimeError as e:
            print("ERR", e)
        try:
            torch.foo.get_rng_state(1)  # checked in Python
        except RuntimeError as e:
            print("ERR_PYTHON", e)
        """,
        {"FOO_DEVICE_COUNT": 1, "FOO_DEVICE_MEMORY_MB": 96},
    ),
    "default_env": (
        """
        import torch
        print("count", torch.foo.device_count(), torch.foo.is_available(), torch.accelerator.device_count())
        print("init_after_count", torch.foo.is_initialized())
        print("accelerator", torch.accelerator.is_available(), torch.accelerator.current_accelerator())
        torch.foo.empty_cache()
        print("init_after_empty_cache", torch.foo.is_initialized())
        t = torch.ones(1, device="foo")
        print("init_after_tensor", torch.foo.is_initialized())
        """,
        {},
    ),
}


def assert_invalid_index_error(excinfo, index, count=None):
    count = torch.foo.device_count() if count is None else count
    msg = str(excinfo.value)
    assert f"foo:{index}" in msg
    assert f"0 to {count - 1}" in msg, msg
    assert "privateuseone" not in msg.lower()


# ---- torch.device and naming ------------------------------------------------------------------------

def test_device_objects():
    d = torch.device("foo")
    assert d.type == "foo" and d.index is None
    d1 = torch.device("foo:1")
    assert d1.type == "foo" and d1.index == 1
    assert d1 == torch.device("foo", 1)
    assert str(d1) == "foo:1"
    assert repr(d1) == "device(type='foo', index=1)"
    assert torch._C._get_privateuse1_backend_name() == "foo"
    assert torch.get_device_module("foo") is torch.foo
    assert torch.foo is foo_backend


def test_tensor_device_and_repr_say_foo():
    t = torch.arange(3, device="foo:1")
    assert t.device == torch.device("foo", 1)
    assert t.device.type == "foo"
    assert "device='foo:1'" in repr(t)
    assert "privateuseone" not in repr(t).lower()
    assert "privateuseone" not in str(t.device).lower()
    assert "privateuseone" not in repr(t.untyped_storage()).lower()


def test_errors_say_foo_not_privateuseone():
    x = torch.ones(2, 2, device="foo:0")
    failing = [
        lambda: x + torch.ones(2, 2),  # mixed devices with CPU
        lambda: x + torch.ones(2, 2, device="foo:1"),  # mixed foo devices
        lambda: torch.empty(1, device="foo:5"),  # invalid index
        lambda: torch.foo.set_device(7),
        lambda: x.numpy(),
        lambda: torch.mm(x, torch.ones(3, 3, device="foo")),  # bad shapes
    ]
    for fn in failing:
        with pytest.raises((RuntimeError, TypeError, ValueError)) as excinfo:
            fn()
        msg = str(excinfo.value).lower()
        assert "privateuseone" not in msg, msg
        assert "privateuse1" not in msg, msg


# ---- device count, availability, initialisation -----------------------------------------------------

def test_device_count_default_is_two(subprocesses):
    assert labelled(subprocesses.check("default_env"))["count"] == "2 True 2"


def test_device_count_from_env(subprocesses):
    out = labelled(subprocesses.check("three_devices"))
    assert out["count"] == "3 3"
    assert out["last_device"] == "foo:2 True"
    assert "foo:3" in out["ERR"] and "0 to 2" in out["ERR"]


def test_single_device_error_names_range(subprocesses):
    out = labelled(subprocesses.check("one_device_96mb"))
    assert out["count"] == "1"
    assert "foo:1" in out["ERR"] and "0 to 0" in out["ERR"] and "1 device" in out["ERR"]
    assert out["ERR_PYTHON"] == out["ERR"]


def test_lazy_initialisation(subprocesses):
    # As torch.cuda: querying the count and availability does not initialise; creating a tensor does.
    out = labelled(subprocesses.check("default_env"))
    assert out["init_after_count"] == "False"
    assert out["accelerator"] == "True foo"
    assert out["init_after_empty_cache"] == "False"
    assert out["init_after_tensor"] == "True"


def test_memory_queries_do_not_initialise(subprocesses):
    # As torch.cuda.memory_stats & co: before initialisation they report nothing and initialise nothing.
    assert labelled(subprocesses.check("one_device_96mb"))["uninitialised_queries"] == "0 0 0 False"


def test_init_initialises(subprocesses):
    out = labelled(subprocesses.check("three_devices"))
    assert out["init_before"] == "False"
    assert out["init_after"] == "True"
    assert out["allocated"] == "0"


def test_is_initialized_in_this_process():
    torch.ones(1, device="foo")
    assert torch.foo.is_initialized()


# ---- current device ---------------------------------------------------------------------------------

def test_current_and_set_device():
    torch.foo.set_device(0)
    assert torch.foo.current_device() == 0
    torch.foo.set_device(1)
    assert torch.foo.current_device() == 1
    assert torch.empty(2, device="foo").device == torch.device("foo", 1)
    assert torch.ones(2).foo().device == torch.device("foo", 1)
    assert (torch.ones(2, device="foo:0") + 1).device == torch.device("foo", 0)  # ops follow their inputs
    torch.foo.set_device("foo:0")
    assert torch.foo.current_device() == 0
    torch.foo.set_device(torch.device("foo", 1))
    assert torch.foo.current_device() == 1
    torch.foo.set_device(-1)  # negative index: no-op, as torch.cuda.set_device
    assert torch.foo.current_device() == 1


def test_set_device_rejects_other_device_types():
    with pytest.raises(ValueError, match="foo"):
        torch.foo.set_device("cpu")


@pytest.mark.parametrize("index", [2, 5, 100])
def test_set_device_invalid_index(index):
    with pytest.raises(RuntimeError) as excinfo:
        torch.foo.set_device(index)
    assert_invalid_index_error(excinfo, index)
    assert torch.foo.current_device() == 0


def test_invalid_index_tensor_creation():
    with pytest.raises(RuntimeError) as excinfo:
        torch.empty(1, device="foo:5")
    assert_invalid_index_error(excinfo, 5)
    with pytest.raises(RuntimeError) as excinfo:
        torch.ones(3).to("foo:5")
    assert_invalid_index_error(excinfo, 5)
    with pytest.raises(RuntimeError) as excinfo:
        torch.ones(3).foo(2)
    assert_invalid_index_error(excinfo, 2)


def test_an_invalid_index_gets_one_error_in_python_and_cpp():
    # torch.foo's Python checks (foo_backend._utils._check_device_index) raise the C++ side's error, word for word.
    from foo_backend import lightning

    n = torch.foo.device_count()
    with pytest.raises(RuntimeError) as from_cpp:
        torch.foo.set_device(n)
    state = torch.foo.get_rng_state()
    checked_in_python = [lambda: torch.foo.current_stream(n), lambda: torch.foo.Stream(n),
                         lambda: torch.foo.get_rng_state(n), lambda: torch.foo.set_rng_state(state, n),
                         lambda: lightning._parse_devices([0, n])]
    for fn in checked_in_python:
        with pytest.raises(RuntimeError) as excinfo:
            fn()
        assert str(excinfo.value) == str(from_cpp.value)
    with pytest.raises(RuntimeError) as excinfo:
        torch.foo.get_rng_state(-1)
    assert_invalid_index_error(excinfo, -1)


def test_device_context_manager():
    assert torch.foo.current_device() == 0
    with torch.foo.device(1):
        assert torch.foo.current_device() == 1
        assert torch.zeros(1, device="foo").device.index == 1
        with torch.foo.device(0):
            assert torch.foo.current_device() == 0
        assert torch.foo.current_device() == 1
    assert torch.foo.current_device() == 0
    with torch.foo.device("foo:1"):
        assert torch.foo.current_device() == 1
    with torch.foo.device(torch.device("foo", 1)):
        assert torch.foo.current_device() == 1
    assert torch.foo.current_device() == 0


def test_device_context_manager_none_is_noop():
    torch.foo.set_device(1)
    with torch.foo.device(None):
        assert torch.foo.current_device() == 1
    with torch.foo.device(-1):
        assert torch.foo.current_device() == 1
    assert torch.foo.current_device() == 1


def test_device_context_manager_restores_on_exception():
    with pytest.raises(KeyError):
        with torch.foo.device(1):
            raise KeyError("boom")
    assert torch.foo.current_device() == 0


def test_device_context_manager_invalid_index():
    with pytest.raises(RuntimeError) as excinfo:
        with torch.foo.device(3):
            pass
    assert_invalid_index_error(excinfo, 3)
    assert torch.foo.current_device() == 0


def test_device_of():
    t1 = torch.ones(1, device="foo:1")
    with torch.foo.device_of(t1):
        assert torch.foo.current_device() == 1
    assert torch.foo.current_device() == 0
    with torch.foo.device_of(t1.untyped_storage()):
        assert torch.foo.current_device() == 1
    torch.foo.set_device(1)
    with torch.foo.device_of(torch.ones(1, device="foo:0")):
        assert torch.foo.current_device() == 0
    assert torch.foo.current_device() == 1
    with torch.foo.device_of(torch.ones(1)):  # a CPU tensor: no change, as torch.cuda.device_of
        assert torch.foo.current_device() == 1


def test_current_device_is_per_thread():
    # As CUDA: the current device is thread-local; a new thread starts on device 0.
    import threading

    torch.foo.set_device(1)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(torch.foo.current_device()))
    thread.start()
    thread.join()
    assert seen == [0]
    assert torch.foo.current_device() == 1


# ---- synchronize, properties ------------------------------------------------------------------------

def test_synchronize():
    x = torch.arange(6.0, device="foo:1") * 2
    assert torch.foo.synchronize() is None
    torch.foo.synchronize(1)
    torch.foo.synchronize("foo:1")
    torch.foo.synchronize(torch.device("foo", 0))
    assert x.cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    with pytest.raises(RuntimeError) as excinfo:
        torch.foo.synchronize(4)
    assert_invalid_index_error(excinfo, 4)
    with pytest.raises(ValueError):
        torch.foo.synchronize("cpu")


def _expected_total_memory():
    mb = os.environ.get("FOO_DEVICE_MEMORY_MB")
    if mb:
        return int(mb) << 20
    page = os.sysconf("SC_PAGESIZE")
    quarter = os.sysconf("SC_PHYS_PAGES") * page // 4
    return (quarter + page - 1) // page * page


def test_get_device_properties():
    for index in range(torch.foo.device_count()):
        props = torch.foo.get_device_properties(index)
        assert isinstance(props.name, str) and props.name
        assert isinstance(props.total_memory, int)
        assert props.total_memory == _expected_total_memory()
        assert isinstance(props.major, int) and isinstance(props.minor, int)
        assert isinstance(props.multi_processor_count, int) and props.multi_processor_count > 0
        assert props.total_memory == torch.foo.mem_get_info(index)[1]
    assert torch.foo.get_device_properties("foo:1").name == torch.foo.get_device_properties(1).name
    assert torch.foo.get_device_properties().total_memory == torch.foo.get_device_properties(0).total_memory
    assert "privateuseone" not in repr(torch.foo.get_device_properties(0)).lower()


def test_get_device_properties_invalid():
    with pytest.raises(RuntimeError) as excinfo:
        torch.foo.get_device_properties(9)
    assert_invalid_index_error(excinfo, 9)
    with pytest.raises(ValueError):
        torch.foo.get_device_properties("cpu")


def test_device_memory_from_env(subprocesses):
    assert labelled(subprocesses.check("one_device_96mb"))["memory"] == f"{96 << 20} {96 << 20}"


def test_get_device_name_and_capability():
    for index in range(torch.foo.device_count()):
        props = torch.foo.get_device_properties(index)
        assert torch.foo.get_device_name(index) == props.name
        assert torch.foo.get_device_capability(index) == (props.major, props.minor)
    name = torch.foo.get_device_name()
    assert isinstance(name, str) and name
    cap = torch.foo.get_device_capability("foo:1")
    assert isinstance(cap, tuple) and len(cap) == 2 and all(isinstance(v, int) for v in cap)
    with torch.foo.device(1):
        assert torch.foo.get_device_name() == torch.foo.get_device_name(1)


# ---- torch.accelerator ------------------------------------------------------------------------------

def test_accelerator_reports_foo():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("foo")
    assert torch.accelerator.current_accelerator().type == "foo"
    assert torch.accelerator.device_count() == torch.foo.device_count()
    assert torch.accelerator.current_device_index() == torch.foo.current_device() == 0


def test_accelerator_set_device_index():
    torch.accelerator.set_device_index(1)
    assert torch.foo.current_device() == 1
    assert torch.accelerator.current_device_index() == 1
    torch.foo.set_device(0)
    assert torch.accelerator.current_device_index() == 0
    with torch.accelerator.device_index(1):
        assert torch.foo.current_device() == 1
    assert torch.foo.current_device() == 0
    with pytest.raises(RuntimeError) as excinfo:
        torch.accelerator.set_device_index(6)
    assert_invalid_index_error(excinfo, 6)


def test_accelerator_synchronize_and_memory():
    x = torch.ones(1000, device="foo:1")
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(1)
    assert x.sum().item() == 1000.0
    for index in range(torch.foo.device_count()):
        # The autograd engine's device threads free a finished graph's tensors moments after backward
        # returns (as with CUDA): memory can only go down between the reads.
        before = torch.foo.memory_allocated(index)
        via_accelerator = torch.accelerator.memory_allocated(index)
        assert before >= via_accelerator >= torch.foo.memory_allocated(index)
    assert torch.accelerator.memory_allocated(1) >= 4000


def test_accelerator_device_capability_lists_the_dtypes_foo_allocates():
    for device in ("foo", "foo:1", 1):
        supported = torch.accelerator.get_device_capability(device)["supported_dtypes"]
        for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.complex64, torch.int64,
                      torch.bool, torch.uint8, torch.float8_e4m3fn):
            assert dtype in supported, (device, dtype)
            torch.empty(2, dtype=dtype, device="foo")  # what it lists, foo allocates
        assert not {torch.qint8, torch.quint8, torch.qint32} & supported  # quantized dtypes are not supported
    with pytest.raises(RuntimeError, match="Invalid device foo:5"):
        torch.accelerator.get_device_capability("foo:5")
