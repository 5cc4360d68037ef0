"""Pinned host memory and host<->foo copies (CONTRACT: "Host memory, copies, serialization"). Where the
contract is silent, ``torch.cuda``'s documented semantics are the oracle: ``torch.cuda.host_memory_stats`` keys,
``torch.accelerator.empty_host_cache`` being a no-op before initialisation, the caching host allocator's
power-of-two blocks."""
import gc

import pytest
import torch

import foo_backend  # noqa: F401
from support.subprocesses import labelled

# Each script prints "label values..." lines; see labelled().
SCRIPTS = {
    "uninitialised": (
        """
        import torch
        stats = torch.foo.host_memory_stats()
        print("stats_before", len(stats) > 0, sum(stats.values()), torch.foo.is_initialized())
        torch.accelerator.empty_host_cache()  # no-op before initialisation, as for CUDA
        print("after_empty_host_cache", torch.foo.is_initialized())
        torch.foo.reset_peak_host_memory_stats()
        torch.foo.reset_accumulated_host_memory_stats()
        print("after_resets", torch.foo.is_initialized())
        """,
        {},
    ),
    # DataLoader workers fork/spawn from here, never from the test runner.
    "dataloader": (
        """
        import torch
        from torch.utils.data import DataLoader, Dataset, TensorDataset

        class Squares(Dataset):  # a fork worker inherits it; a spawn worker could not import it
            def __len__(self):
                return 10
            def __getitem__(self, i):
                return {"x": torch.full((2, 3), float(i * i)), "i": i}

        def describe(batches):
            return [(b["x"].is_pinned(), b["i"].is_pinned(), b["x"][:, 0, 0].tolist(), b["i"].tolist())
                    for b in batches]

        xs = torch.arange(24.0).reshape(8, 3)
        ys = torch.arange(8) * 10
        def describe_tensor_dataset(batches):
            return [(x.is_pinned(), y.is_pinned(), x.tolist(), y.tolist()) for x, y in batches]

        expected_squares = [(True, True, [float(i * i) for i in range(s, min(s + 4, 10))], list(range(s, min(s + 4, 10))))
                            for s in range(0, 10, 4)]
        expected_td = [(True, True, xs[s:s + 3].tolist(), ys[s:s + 3].tolist()) for s in range(0, 8, 3)]

        torch.ones(1, device="foo")  # the parent has initialised foo before its workers start
        dl = DataLoader(Squares(), batch_size=4, pin_memory=True, num_workers=2, multiprocessing_context="fork")
        got = describe(dl)
        print("fork_squares", got == expected_squares, got)
        dl = DataLoader(TensorDataset(xs, ys), batch_size=3, pin_memory=True, num_workers=2,
                        multiprocessing_context="fork")
        got = describe_tensor_dataset(dl)
        print("fork_tensor_dataset", got == expected_td, got)
        dl = DataLoader(TensorDataset(xs, ys), batch_size=3, pin_memory=True, num_workers=2,
                        multiprocessing_context="spawn")
        got = describe_tensor_dataset(dl)
        print("spawn_tensor_dataset", got == expected_td, got)
        dl = DataLoader(TensorDataset(xs, ys), batch_size=3, pin_memory=False, num_workers=0)
        print("unpinned", [x.is_pinned() for x, _ in dl])
        # A pinned batch goes to foo asynchronously and arrives intact.
        x, y = next(iter(DataLoader(TensorDataset(xs, ys), batch_size=8, pin_memory=True)))
        on_foo = x.to("foo:1", non_blocking=True)
        torch.foo.synchronize()
        print("batch_to_foo", x.is_pinned(), on_foo.device, torch.equal(on_foo.cpu(), xs))
        """,
        {},
    ),
}


@pytest.fixture(scope="module", autouse=True)
def collect_garbage():
    gc.collect()  # pinned tensors other modules left in reference cycles


@pytest.fixture(autouse=True)
def foo_initialised():
    # As CUDA: empty_host_cache acts only once the device is initialised through a foo tensor.
    torch.ones(1, device="foo")
    torch.foo.synchronize()
    torch.accelerator.empty_host_cache()


def stats():
    return torch.foo.host_memory_stats()


# ---- pinning ----------------------------------------------------------------------------------------

def test_pin_memory_gives_pinned_copy():
    src = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    pinned = src.pin_memory()
    assert pinned.is_pinned()
    assert not src.is_pinned()
    assert pinned.device == torch.device("cpu")
    assert pinned.dtype == src.dtype and pinned.shape == src.shape and pinned.stride() == src.stride()
    assert torch.equal(pinned, src)
    assert pinned.data_ptr() != src.data_ptr()
    src.fill_(-1)  # a copy, not an alias
    assert torch.equal(pinned, torch.arange(24, dtype=torch.float64).reshape(4, 6))


def test_pin_memory_of_pinned_returns_it():
    pinned = torch.arange(5).pin_memory()
    again = pinned.pin_memory()
    assert again.is_pinned() and again.data_ptr() == pinned.data_ptr()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8,
                                   torch.bool, torch.complex64])
def test_pin_memory_dtypes(dtype):
    src = torch.arange(10).to(dtype)
    pinned = src.pin_memory()
    assert pinned.is_pinned() and pinned.dtype == dtype
    assert torch.equal(pinned, src)


def test_views_of_pinned_memory_are_pinned():
    pinned = torch.arange(20.0).reshape(4, 5).pin_memory()
    for view in (pinned[1:], pinned[:, 2], pinned.t(), pinned.view(20)[7:], pinned[2, 3], pinned.unsqueeze(0)):
        assert view.is_pinned()
    assert not pinned.clone().is_pinned()
    assert not pinned.contiguous().t().contiguous().is_pinned()


def test_non_contiguous_source_pins():
    src = torch.arange(30.0).reshape(5, 6).t()[1:, ::2]
    pinned = src.pin_memory()
    assert pinned.is_pinned()
    assert torch.equal(pinned, src)


def test_factories_with_pin_memory():
    e = torch.empty(3, 4, pin_memory=True)
    z = torch.zeros(5, dtype=torch.int32, pin_memory=True)
    f = torch.full((2, 2), 3.5, pin_memory=True)
    s = torch.empty_strided((2, 3), (1, 2), pin_memory=True)
    for t in (e, z, f, s):
        assert t.is_pinned() and t.device.type == "cpu"
    assert torch.equal(z, torch.zeros(5, dtype=torch.int32))
    assert torch.equal(f, torch.full((2, 2), 3.5))
    assert s.stride() == (1, 2)
    assert not torch.empty(3).is_pinned()


def test_foo_tensor_is_not_pinned():
    assert not torch.ones(3, device="foo").is_pinned()
    assert not torch.ones(3, device="foo").cpu().is_pinned()


# ---- statistics and caching -------------------------------------------------------------------------

HOST_STAT_KEYS = [
    f"{stat}.{kind}"
    for stat in ("allocations", "allocated_bytes", "active_requests", "active_bytes")
    for kind in ("current", "peak", "allocated", "freed")
] + ["num_host_alloc", "num_host_free"]


def test_host_memory_stats_keys():
    s = stats()
    for key in HOST_STAT_KEYS:
        assert key in s, key
        assert isinstance(s[key], int) and s[key] >= 0
    nested = torch.foo.host_memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["current"] == s["allocated_bytes.current"]
    assert nested["allocations"]["peak"] == s["allocations.peak"]
    assert nested["num_host_alloc"] == s["num_host_alloc"]


def test_stats_count_a_pinned_block_with_power_of_two_rounding():
    before = stats()
    pinned = torch.empty(1000, dtype=torch.uint8, pin_memory=True)  # rounds to 1024
    during = stats()
    assert during["allocated_bytes.current"] - before["allocated_bytes.current"] == 1024
    assert during["active_bytes.current"] - before["active_bytes.current"] == 1024
    assert during["allocations.current"] - before["allocations.current"] == 1
    assert during["active_requests.current"] - before["active_requests.current"] == 1
    assert during["num_host_alloc"] - before["num_host_alloc"] == 1
    assert during["allocated_bytes.peak"] >= during["allocated_bytes.current"]
    del pinned
    after = stats()
    # Freed, the block stays cached: no longer active, still allocated.
    assert after["active_bytes.current"] == before["active_bytes.current"]
    assert after["active_requests.current"] == before["active_requests.current"]
    assert after["allocated_bytes.current"] == during["allocated_bytes.current"]
    assert after["num_host_free"] == before["num_host_free"]


def test_freed_block_is_reused():
    first = torch.empty(3000, dtype=torch.uint8, pin_memory=True)  # 4096-byte block
    ptr = first.data_ptr()
    del first
    allocs = stats()["num_host_alloc"]
    second = torch.empty(700, dtype=torch.float32, pin_memory=True)  # 2800 bytes: the same 4096-byte class
    assert second.data_ptr() == ptr
    assert stats()["num_host_alloc"] == allocs
    third = torch.empty(700, dtype=torch.float32, pin_memory=True)  # the cached block is taken: a new one
    assert third.data_ptr() != ptr
    assert stats()["num_host_alloc"] == allocs + 1


def test_block_used_by_async_copy_is_reused_after_sync():
    pinned = torch.arange(512.0).pin_memory()  # 2048 bytes
    ptr = pinned.data_ptr()
    on_foo = pinned.to("foo", non_blocking=True)
    del pinned
    torch.foo.synchronize()
    allocs = stats()["num_host_alloc"]
    again = torch.empty(2048, dtype=torch.uint8, pin_memory=True)
    assert again.data_ptr() == ptr
    assert stats()["num_host_alloc"] == allocs
    assert torch.equal(on_foo.cpu(), torch.arange(512.0))


def test_empty_host_cache_frees_cached_blocks():
    keep = torch.empty(100, dtype=torch.uint8, pin_memory=True)
    drop = torch.empty(5000, dtype=torch.uint8, pin_memory=True)  # 8192-byte block
    del drop
    before = stats()
    torch.accelerator.empty_host_cache()
    after = stats()
    assert before["allocated_bytes.current"] - after["allocated_bytes.current"] == 8192
    assert after["num_host_free"] - before["num_host_free"] == 1
    assert after["allocations.current"] == before["allocations.current"] - 1
    assert after["active_bytes.current"] == before["active_bytes.current"]
    assert keep.is_pinned()
    keep.fill_(9)
    assert keep.sum().item() == 900


def test_reset_peak_host_memory_stats():
    big = torch.empty(1 << 16, dtype=torch.uint8, pin_memory=True)
    del big
    torch.accelerator.empty_host_cache()
    s = stats()
    assert s["allocated_bytes.peak"] >= s["allocated_bytes.current"] + (1 << 16)
    torch.foo.reset_peak_host_memory_stats()
    s = stats()
    for stat in ("allocations", "allocated_bytes", "active_requests", "active_bytes"):
        assert s[f"{stat}.peak"] == s[f"{stat}.current"], stat


def test_reset_accumulated_host_memory_stats():
    x = torch.empty(100, pin_memory=True)
    del x
    torch.accelerator.empty_host_cache()
    s = stats()
    assert s["allocated_bytes.allocated"] > 0 and s["allocated_bytes.freed"] > 0
    torch.foo.reset_accumulated_host_memory_stats()
    s = stats()
    for stat in ("allocations", "allocated_bytes", "active_requests", "active_bytes"):
        assert s[f"{stat}.allocated"] == 0 and s[f"{stat}.freed"] == 0, stat
    torch.empty(10, pin_memory=True)
    assert stats()["allocations.allocated"] >= 1


def test_stats_before_initialisation_and_empty_host_cache_noop(subprocesses):
    out = labelled(subprocesses.check("uninitialised"))
    assert out["stats_before"] == "True 0 False"
    assert out["after_empty_host_cache"] == "False"
    assert out["after_resets"] == "False"


# ---- copies -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", ["foo:0", "foo:1"])
def test_non_blocking_pinned_to_foo(device):
    src = torch.randn(64, 33, generator=torch.Generator().manual_seed(0))
    pinned = src.pin_memory()
    on_foo = pinned.to(device, non_blocking=True)
    assert on_foo.device == torch.device(device)
    torch.foo.synchronize()
    assert torch.equal(on_foo.cpu(), src)
    dst = torch.empty(64, 33, device=device)
    dst.copy_(pinned, non_blocking=True)
    torch.foo.synchronize()
    assert torch.equal(dst.cpu(), src)


def test_non_blocking_pinned_non_contiguous_and_dtype_conversion():
    src = torch.arange(60.0).reshape(6, 10)
    pinned = src.pin_memory()
    view = pinned[1:, ::3]
    on_foo = view.to("foo", non_blocking=True)
    converted = pinned.to("foo", torch.float16, non_blocking=True)
    torch.foo.synchronize()
    assert torch.equal(on_foo.cpu(), src[1:, ::3])
    assert torch.equal(converted.cpu(), src.half())


def test_non_blocking_foo_to_pinned():
    src = torch.arange(100, dtype=torch.int64) * 3
    x = src.to("foo:1")
    dst = torch.empty(100, dtype=torch.int64, pin_memory=True)
    dst.copy_(x, non_blocking=True)  # queued on foo:1's stream, as CUDA queues it on the source's device
    torch.foo.synchronize("foo:1")
    assert torch.equal(dst, src)
    assert dst.is_pinned()


def test_non_blocking_to_cpu_gives_pinned_result():
    # As CUDA: an asynchronous device->host .to() allocates its destination in pinned memory.
    src = torch.arange(50.0)
    out = src.to("foo").to("cpu", non_blocking=True)
    torch.foo.synchronize()
    assert out.is_pinned()
    assert torch.equal(out, src)
    assert not src.to("foo").to("cpu").is_pinned()


def test_non_blocking_pageable_copies_are_safe():
    src = torch.arange(10000.0)
    pageable = src.clone()
    on_foo = pageable.to("foo", non_blocking=True)
    pageable.fill_(-1)  # overwriting the source right away must not change the copy
    del pageable
    assert torch.equal(on_foo.cpu(), src)
    dst = torch.zeros(10000)
    dst.copy_(on_foo, non_blocking=True)
    torch.foo.synchronize()
    assert torch.equal(dst, src)


def test_pinned_round_trip_through_both_devices():
    src = torch.randn(16, 16, generator=torch.Generator().manual_seed(1))
    pinned = src.pin_memory()
    a = pinned.to("foo:0", non_blocking=True)
    b = (a * 2).to("foo:1", non_blocking=True)
    back = torch.empty(16, 16, pin_memory=True)
    back.copy_(b, non_blocking=True)  # queued on foo:1, the source's device
    torch.foo.synchronize(1)
    assert torch.equal(back, src * 2)


# ---- DataLoader -------------------------------------------------------------------------------------

def test_dataloader_pin_memory_in_process():
    xs = torch.arange(20.0).reshape(10, 2)
    ys = torch.arange(10)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xs, ys), batch_size=4, pin_memory=True)
    batches = list(loader)
    assert len(batches) == 3
    for k, (x, y) in enumerate(batches):
        assert x.is_pinned() and y.is_pinned()
        assert torch.equal(x, xs[4 * k:4 * k + 4]) and torch.equal(y, ys[4 * k:4 * k + 4])


def test_dataloader_fork_workers_pin(subprocesses):
    out = labelled(subprocesses.check("dataloader"))
    assert out["fork_squares"].startswith("True"), out["fork_squares"]
    assert out["fork_tensor_dataset"].startswith("True"), out["fork_tensor_dataset"]


def test_dataloader_spawn_workers_pin(subprocesses):
    out = labelled(subprocesses.check("dataloader"))
    assert out["spawn_tensor_dataset"].startswith("True"), out["spawn_tensor_dataset"]


def test_dataloader_without_pinning_and_batch_to_foo(subprocesses):
    out = labelled(subprocesses.check("dataloader"))
    assert out["unpinned"] == "[False, False, False]"
    assert out["batch_to_foo"] == "True foo:1 True"
