"""foo makes the host wait for a stream where CUDA does, and ``torch.foo.set_sync_debug_mode`` reports it
(CONTRACT: host waits). The oracle is CUDA itself: ``tests/support/host_waits_on_cuda.json``, measured on
an NVIDIA GPU by ``tools/measure_cuda_host_waits.py`` over the cases of ``tests/support/host_wait_cases.py``.

Whether a call waited is observed, not timed: the call runs on a thread of its own that holds the stream
(``torch.foo._hold_stream``), and either returns or reaches a host wait, which foo counts before it waits.
"""
import json
import os
import threading
import warnings

import pytest
import torch

import foo_backend
from support.host_wait_cases import CASES, UNMEASURED_CASES, sync_debug_mode

SCRIPTS = {
    # foo's own work at exit (finishing queued kernels) is not the program's: it neither warns nor raises.
    "exit_in_error_mode": ("import torch, foo_backend\n"
                           "x = torch.ones(2, device='foo', requires_grad=True)\n"
                           "(x * 2).sum().backward()\n"
                           "torch.foo.set_sync_debug_mode('error')\n"
                           "print('set')\n", {}),
}

with open(os.path.join(os.path.dirname(__file__), "support", "host_waits_on_cuda.json")) as _f:
    CUDA = json.load(_f)["cases"]

# Where foo's later calls still differ from CUDA's, and why. A case whose behaviour changes fails
# until it leaves these lists, so they only shrink.
FOO_WAITS_WHERE_CUDA_DOES_NOT = {
    "set_default_dtype": "queued CPU kernels read the process-wide default dtype: changing it drains foo first",
}
_NUMBER_ON_DEVICE = "CUDA copies the number from pageable host memory; PyTorch makes it on a foo device directly"
FOO_QUEUES_WHERE_CUDA_WAITS = {
    "index_write_number": _NUMBER_ON_DEVICE,
    "element_write_number": _NUMBER_ON_DEVICE,
    "mask_write_tensor": "CUDA fills through the mask only for a host value; foo also for a one-element foo tensor",
}


def _expected_wait(name):
    return CUDA[name]["later"] != (name in FOO_WAITS_WHERE_CUDA_DOES_NOT or name in FOO_QUEUES_WHERE_CUDA_WAITS)


def _waits(call):
    """Whether a later call of ``call`` makes the host wait for the current stream. It runs on a thread of
    its own (learnt outputs are per thread), which holds the stream; this thread watches it either
    return or reach a host wait, then releases the stream."""
    started, done, state, failure = threading.Event(), threading.Event(), {}, []

    def run():
        try:
            call()  # a first call learns its outputs' metadata
            torch.foo.synchronize()
            state["before"] = foo_backend._C._host_wait_count()
            with torch.foo._hold_stream() as release:
                state["release"] = release
                started.set()
                call()
        except BaseException as error:  # noqa: BLE001 - raised below
            failure.append(error)
        finally:
            started.set()
            done.set()

    worker = threading.Thread(target=run)
    worker.start()
    started.wait()
    while "release" in state and not done.wait(0.001) and foo_backend._C._host_wait_count() == state["before"]:
        pass
    waited = "before" in state and foo_backend._C._host_wait_count() != state["before"]
    if "release" in state:
        state["release"]()
    worker.join()
    torch.foo.synchronize()
    if failure:
        raise failure[0]
    return waited


def _warmed_case(setup):
    call = setup("foo")
    call()  # a first call learns its outputs' metadata
    torch.foo.synchronize()
    return call


def _warmed(name):
    return _warmed_case(CASES[name])


def test_the_oracle_covers_every_case():
    assert set(CUDA) == set(CASES)
    assert not set(CASES) & set(UNMEASURED_CASES)
    assert not [name for name, result in CUDA.items() if "error" in result]
    assert not [name for name in FOO_WAITS_WHERE_CUDA_DOES_NOT if CUDA[name]["later"]]
    assert all(CUDA[name]["later"] for name in FOO_QUEUES_WHERE_CUDA_WAITS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_host_waits_as_on_cuda(name):
    assert _waits(CASES[name]("foo")) == _expected_wait(name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_sync_debug_mode_error_raises_exactly_where_the_host_waits(name):
    call = _warmed(name)
    with torch.foo._hold_stream(), sync_debug_mode("foo", "error"):
        if _expected_wait(name):
            with pytest.raises(RuntimeError, match="called a synchronizing foo operation"):
                call()
        else:
            call()
    torch.foo.synchronize()  # nothing failed on the stream, and no error is left pending
    call()
    torch.foo.synchronize()


@pytest.mark.parametrize("name", sorted(UNMEASURED_CASES))
def test_calls_cuda_queues_do_not_wait(name):
    # Not measured on a GPU yet (measured, a case moves into CASES): launches that CUDA queues, as its kernels
    # size their outputs on the host and take their numbers as arguments.
    assert not _waits(UNMEASURED_CASES[name]("foo"))
    call = _warmed_case(UNMEASURED_CASES[name])
    with torch.foo._hold_stream(), sync_debug_mode("foo", "error"):
        call()
    torch.foo.synchronize()


def test_sync_debug_mode_values_as_torch_cuda():
    assert torch.foo.get_sync_debug_mode() == 0
    for value, number in (("warn", 1), ("error", 2), ("default", 0), (1, 1), (2, 2), (0, 0)):
        torch.foo.set_sync_debug_mode(value)
        assert torch.foo.get_sync_debug_mode() == number
    with pytest.raises(RuntimeError, match="invalid value of debug_mode, expected one of `default`, `warn`, `error`"):
        torch.foo.set_sync_debug_mode("loud")
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        torch.foo.set_sync_debug_mode(3)
    assert torch.foo.get_sync_debug_mode() == 0


def test_warn_mode_warns_at_host_reads_and_not_at_explicit_synchronization():
    x = torch.ones(4, device="foo")
    for _ in range(2):
        y = x + 1  # learns the outputs of these calls
        total = x.sum()
    with sync_debug_mode("foo", "warn"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert x.sum().item() == 4.0
        assert [str(w.message).split(" (Triggered")[0] for w in caught] == [
            "called a synchronizing foo operation: aten::_local_scalar_dense"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # none of these warns
            y = x + 1
            total = x.sum()
            torch.foo.synchronize()
            torch.foo.current_stream().synchronize()
            event = torch.foo.Event()
            event.record()
            event.synchronize()
            assert y.is_foo and total.is_foo


def test_error_mode_leaves_the_tensor_and_the_stream_usable():
    x = torch.arange(4.0, device="foo")
    with sync_debug_mode("foo", "error"), pytest.raises(RuntimeError, match="^called a synchronizing foo operation"):
        x.cpu()
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_program_that_exits_in_error_mode_exits_cleanly(subprocesses):
    assert subprocesses.check("exit_in_error_mode") == "set\n"
    assert "Exception ignored" not in subprocesses["exit_in_error_mode"].stderr
