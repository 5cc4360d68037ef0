"""foo's caching allocator and the memory API of ``torch.foo`` / ``torch.accelerator`` (CONTRACT: "torch.foo"
memory). The oracle is ``torch.cuda``'s documented semantics: ``memory_allocated`` counts bytes occupied by
tensors, ``memory_reserved`` bytes held by the caching allocator, freed blocks are cached and reused,
``empty_cache`` returns unused cached memory to the device, ``mem_get_info`` reports the device's (free, total),
and exceeding device memory raises ``torch.OutOfMemoryError`` leaving the allocator usable.

In-process tests measure deltas (other test modules may hold foo memory); exact absolute numbers and
out-of-memory conditions are checked in fresh interpreters with a small device memory."""
import gc
import inspect
import json
import os
import threading

import pytest
import torch

import foo_backend

from support.host_wait_cases import filling_uninitialized_memory, sync_debug_mode, uninitialized_memory_fills
from support.subprocesses import labelled

MiB = 1 << 20




SCRIPTS = {
    # Absolute accounting in a process where nothing else holds foo memory.
    "exact_accounting": (
        """
        import gc, torch
        torch.foo.init()
        assert torch.foo.memory_allocated(0) == 0 and torch.foo.memory_allocated(1) == 0
        assert torch.foo.memory_reserved(0) == 0 and torch.foo.memory_reserved(1) == 0
        free, total = torch.foo.mem_get_info(0)
        assert free == total, (free, total)

        # A mix of allocations, ops, views, out=, resizes, indexing and autograd on both devices.
        a = torch.randn(64, 64).foo()
        b = torch.randn(64, 64, device="foo:1")
        c = a @ a.t() + 1
        d = b[::2].clone()
        e = torch.empty(3, device="foo")
        torch.mul(a, 2, out=e)
        f = torch.arange(10.0, device="foo:1")
        f.resize_(1000)
        g = a[torch.tensor([0, 3])]
        h = a[a > 0]
        w = torch.randn(64, 8, device="foo", requires_grad=True)
        loss = (torch.relu(a @ w) ** 2).sum()
        loss.backward()
        big = torch.empty(12 * 2**20, dtype=torch.uint8, device="foo:1")
        assert torch.foo.memory_allocated(0) > 0 and torch.foo.memory_allocated(1) > 12 * 2**20
        assert torch.foo.mem_get_info(1)[0] == total - torch.foo.memory_reserved(1)

        del a, b, c, d, e, f, g, h, w, loss, big
        gc.collect()
        print("allocated", torch.foo.memory_allocated(0), torch.foo.memory_allocated(1))
        print("cached", int(torch.foo.memory_reserved(0) > 0), int(torch.foo.memory_reserved(1) > 0))
        torch.foo.empty_cache()
        print("reserved", torch.foo.memory_reserved(0), torch.foo.memory_reserved(1))
        print("free", int(torch.foo.mem_get_info(0)[0] == total), int(torch.foo.mem_get_info(1)[0] == total))
        """,
        {},
    ),
    # Out of memory, with 64 MiB of device memory: a plain allocation and one inside an operator on foo:0,
    # the retry after releasing the cache on foo:1 (whose statistics are untouched by foo:0's OOMs), the
    # per-process memory fraction on foo:2.
    "oom": (
        """
        import torch
        MiB = 2**20
        print("total", torch.foo.get_device_properties(0).total_memory == 64 * MiB)
        keep = torch.ones(1000, device="foo")
        allocated = torch.foo.memory_allocated()
        try:
            torch.empty(100 * MiB, dtype=torch.uint8, device="foo")
            print("OOM none")
        except torch.OutOfMemoryError as e:
            print("OOM", isinstance(e, RuntimeError), str(e).replace(chr(10), " "))
        print("num_ooms", torch.foo.memory_stats()["num_ooms"])
        print("allocated_unchanged", torch.foo.memory_allocated() == allocated)
        # The allocator is still usable, the surviving tensor intact.
        after = torch.full((1000,), 2.0, device="foo")
        print("usable", (after + keep).sum().item(), keep.sum().item())
        del after

        x = torch.ones(24 * MiB // 4, device="foo")  # 24 MiB
        before = torch.foo.memory_allocated()
        try:
            torch.cat([x, x, x])  # needs 72 MiB: fails inside the kernel
            print("OP_OOM none")
        except torch.OutOfMemoryError as e:
            print("OP_OOM", "foo" in str(e))
        print("op_intact", x.sum().item() == x.numel(), torch.foo.memory_allocated() == before)
        y = x + 1
        print("op_usable", y[0].item(), y.numel() == x.numel())

        a = torch.empty(40 * MiB, dtype=torch.uint8, device="foo:1")
        del a  # cached, not returned to the device
        print("cached", torch.foo.memory_reserved(1) >= 40 * MiB)
        b = torch.empty(50 * MiB, dtype=torch.uint8, device="foo:1")  # fits only once the cache is released
        stats = torch.foo.memory_stats(1)
        print("retry", stats["num_alloc_retries"] >= 1, stats["num_ooms"], torch.foo.memory_reserved(1) < 64 * MiB)
        del b
        torch.foo.empty_cache()

        torch.foo.set_per_process_memory_fraction(0.25, 2)  # 16 MiB of foo:2's 64
        small = torch.ones(1000, device="foo:2")
        try:
            torch.empty(20 * MiB, dtype=torch.uint8, device="foo:2")
            print("FRACTION_OOM none")
        except torch.OutOfMemoryError as e:
            print("FRACTION_OOM", "foo" in str(e))
        # the limit is per device
        other = torch.empty(20 * MiB, dtype=torch.uint8, device="foo:1")
        print("other_device", other.numel() == 20 * MiB, torch.foo.memory_stats(1)["num_ooms"])
        torch.foo.set_per_process_memory_fraction(1.0, 2)
        big = torch.empty(20 * MiB, dtype=torch.uint8, device="foo:2")
        print("restored", big.numel() == 20 * MiB, small.sum().item())
        """,
        {"FOO_DEVICE_MEMORY_MB": 64, "FOO_DEVICE_COUNT": 3},
    ),
    # PYTORCH_ALLOC_CONF, read through PyTorch's AcceleratorAllocatorConfig.
    "alloc_conf_split": (
        """
        import torch
        MiB = 2**20
        x = torch.empty(30 * MiB, dtype=torch.uint8, device="foo")
        s = torch.foo.memory_stats()
        print("max_split_size", s["max_split_size"] == 20 * MiB)
        print("oversize", s["oversize_allocations.current"], s["oversize_segments.current"])
        del x
        small = torch.empty(5 * MiB, dtype=torch.uint8, device="foo")
        print("small_request_new_segment", torch.foo.memory_stats()["segment.all.current"])
        near = torch.empty(29 * MiB, dtype=torch.uint8, device="foo")
        print("near_request_reuses", torch.foo.memory_stats()["segment.all.current"])
        del near
        print("oversize_after_free", torch.foo.memory_stats()["oversize_allocations.current"])
        """,
        {"PYTORCH_ALLOC_CONF": "max_split_size_mb:20"},
    ),
    "alloc_conf_default": (
        """
        import torch
        MiB = 2**20
        x = torch.empty(30 * MiB, dtype=torch.uint8, device="foo")
        print("oversize", torch.foo.memory_stats()["oversize_allocations.current"])
        del x
        small = torch.empty(5 * MiB, dtype=torch.uint8, device="foo")
        print("small_request_splits", torch.foo.memory_stats()["segment.all.current"])
        odd = torch.empty(1153434, dtype=torch.uint8, device="foo:1")
        print("rounded", torch.foo.memory_allocated(1))
        """,
        {},
    ),
    "alloc_conf_roundup": (
        """
        import torch
        odd = torch.empty(1153434, dtype=torch.uint8, device="foo")  # 1.1 MiB
        print("rounded", torch.foo.memory_allocated())
        """,
        {"PYTORCH_ALLOC_CONF": "roundup_power2_divisions:4"},
    ),
    "alloc_conf_gc": (
        """
        import os, torch
        MiB = 2**20
        torch.foo.set_per_process_memory_fraction(0.5)  # 32 MiB of 64
        x = torch.empty(12 * MiB, dtype=torch.uint8, device="foo")
        del x  # its segment stays cached
        y = torch.empty(14 * MiB, dtype=torch.uint8, device="foo")  # a new segment
        s = torch.foo.memory_stats()
        print("reserved", s["reserved_bytes.all.current"] // MiB, "released", s["num_device_free"])
        """,
        {"PYTORCH_ALLOC_CONF": "garbage_collection_threshold:0.5", "FOO_DEVICE_MEMORY_MB": 64},
    ),
    "alloc_conf_no_gc": (
        """
        import torch
        MiB = 2**20
        torch.foo.set_per_process_memory_fraction(0.5)
        x = torch.empty(12 * MiB, dtype=torch.uint8, device="foo")
        del x
        y = torch.empty(14 * MiB, dtype=torch.uint8, device="foo")
        s = torch.foo.memory_stats()
        print("reserved", s["reserved_bytes.all.current"] // MiB, "released", s["num_device_free"])
        """,
        {"FOO_DEVICE_MEMORY_MB": 64},
    ),
    "alloc_conf_expandable": (
        """
        import warnings, torch
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.ones(3, device="foo")
            torch.ones(300, device="foo")
        print("warnings", [str(w.message).split(";")[0] for w in caught])
        print("works", torch.ones(3, device="foo").sum().item())
        """,
        {"PYTORCH_ALLOC_CONF": "expandable_segments:True"},
    ),
    # The history of an out-of-memory error, with 64 MiB of device memory.
    "oom_history": (
        """
        import torch
        torch.foo.memory._record_memory_history(stacks="python")
        try:
            torch.empty(100 * 2**20, dtype=torch.uint8, device="foo")
        except torch.OutOfMemoryError as e:
            print("message", str(e).replace(chr(10), " "))
        oom = [e for e in torch.foo.memory._snapshot()["device_traces"][0] if e["action"] == "oom"]
        free, total = torch.foo.mem_get_info(0)
        print("oom", len(oom), oom[0]["size"] == 100 * 2**20, oom[0]["device_free"] == free)
        """,
        {"FOO_DEVICE_MEMORY_MB": 64},
    ),
}


# ---- absolute accounting, in a fresh process ---------------------------------------------------------

def test_all_memory_freed_after_deleting_tensors(subprocesses):
    out = labelled(subprocesses.check("exact_accounting"))
    assert out["allocated"] == "0 0"
    assert out["cached"] == "1 1"  # freed blocks stay cached, as on CUDA


def test_empty_cache_returns_everything(subprocesses):
    out = labelled(subprocesses.check("exact_accounting"))
    assert out["reserved"] == "0 0"
    assert out["free"] == "1 1"


# ---- out of memory -----------------------------------------------------------------------------------

def test_oom_raises_and_allocator_stays_usable(subprocesses):
    out = labelled(subprocesses.check("oom"))
    assert out["total"] == "True"
    assert out["OOM"].startswith("True "), out["OOM"]  # an OutOfMemoryError, which is a RuntimeError
    assert "foo" in out["OOM"] and "privateuseone" not in out["OOM"].lower()
    assert "Tried to allocate 100.00 MiB" in out["OOM"]  # CUDA's wording
    assert out["num_ooms"] == "1"
    assert out["allocated_unchanged"] == "True"
    assert out["usable"] == "3000.0 1000.0"


def test_oom_is_in_the_memory_history_and_its_message_points_at_the_tools(subprocesses):
    out = labelled(subprocesses.check("oom_history"))
    assert out["oom"] == "1 True True"
    assert "torch.foo.memory_summary()" in out["message"] and "_record_memory_history" in out["message"]


def test_alloc_conf_max_split_size(subprocesses):
    """max_split_size_mb: blocks of that size or more are never split, and serve only requests of nearly
    their size (max_non_split_rounding_mb, 20 MiB by default); the oversize statistics count them."""
    out = labelled(subprocesses.check("alloc_conf_split"))
    assert out["max_split_size"] == "True"
    assert out["oversize"] == "1 1"
    assert out["small_request_new_segment"] == "2"  # the cached 30 MiB block is not split for 5 MiB
    assert out["near_request_reuses"] == "2"  # 29 MiB takes it whole
    assert out["oversize_after_free"] == "0"
    default = labelled(subprocesses.check("alloc_conf_default"))
    assert default["oversize"] == "0" and default["small_request_splits"] == "1"


def test_alloc_conf_roundup_power2_divisions(subprocesses):
    # 1.1 MiB lies between 1 and 2 MiB: 4 divisions round it up to 1.25 MiB; by default to a multiple of 512.
    assert labelled(subprocesses.check("alloc_conf_roundup"))["rounded"] == str(5 * 2**18)
    assert labelled(subprocesses.check("alloc_conf_default"))["rounded"] == str((1153434 + 511) // 512 * 512)


def test_alloc_conf_garbage_collection_threshold(subprocesses):
    """Under a memory fraction, a segment that takes reserved memory past the threshold's share of the limit
    first returns the cached free segments to the device."""
    assert labelled(subprocesses.check("alloc_conf_gc"))["reserved"] == "14 released 1"
    assert labelled(subprocesses.check("alloc_conf_no_gc"))["reserved"] == "26 released 0"


def test_alloc_conf_expandable_segments_is_refused_with_a_warning(subprocesses):
    out = labelled(subprocesses.check("alloc_conf_expandable"))
    assert out["warnings"] == "['foo: expandable_segments is not supported (the foo runtime cannot grow a segment)']"
    assert out["works"] == "3.0"


def test_allocator_settings_change_at_run_time():
    torch.ones(1, device="foo")
    try:
        torch.foo.memory._set_allocator_settings("max_split_size_mb:40")
        assert torch.foo.memory_stats()["max_split_size"] == 40 * MiB
        x = torch.empty(45 * MiB, dtype=torch.uint8, device="foo")
        assert torch.foo.memory_stats()["oversize_allocations.current"] == 1
        del x
    finally:
        torch.foo.memory._set_allocator_settings("")  # PyTorch's defaults again
    assert torch.foo.memory_stats()["max_split_size"] == -1  # unlimited, as CUDA reports it


def test_oom_inside_an_operator(subprocesses):
    out = labelled(subprocesses.check("oom"))
    assert out["OP_OOM"] == "True"
    assert out["op_intact"] == "True True"
    assert out["op_usable"] == "2.0 True"


def test_allocation_retries_after_freeing_cache(subprocesses):
    # As CUDA's allocator: when the device is full, cached blocks are released and the allocation retried.
    out = labelled(subprocesses.check("oom"))
    assert out["cached"] == "True"
    assert out["retry"] == "True 0 True"


def test_per_process_memory_fraction_limits_allocations(subprocesses):
    out = labelled(subprocesses.check("oom"))
    assert out["FRACTION_OOM"] == "True"
    assert out["other_device"] == "True 0"
    assert out["restored"] == "True 1000.0"


def test_set_per_process_memory_fraction_type_check():
    with pytest.raises(TypeError):
        torch.foo.set_per_process_memory_fraction(1)


def test_set_per_process_memory_fraction_range_is_value_error():
    with pytest.raises(ValueError, match="0~1"):
        torch.foo.set_per_process_memory_fraction(1.5)


def test_set_per_process_memory_fraction_range_rejected():
    for bad in (1.5, -0.1):
        with pytest.raises((ValueError, RuntimeError), match="fraction"):
            torch.foo.set_per_process_memory_fraction(bad)
    # the limit stays as it was: allocation still works
    assert torch.ones(10, device="foo").sum().item() == 10


# ---- statistics --------------------------------------------------------------------------------------

REQUIRED_KEYS = [
    f"{stat}.{pool}.{metric}"
    for stat in ("allocation", "segment", "active", "allocated_bytes", "reserved_bytes", "active_bytes",
                 "inactive_split", "inactive_split_bytes", "requested_bytes")
    for pool in ("all", "small_pool", "large_pool")
    for metric in ("current", "peak", "allocated", "freed")
] + ["num_alloc_retries", "num_ooms"]


@pytest.mark.parametrize("device", [0, 1])
def test_memory_stats_keys_and_consistency(device):
    keep = torch.empty(1000, device=f"foo:{device}")
    stats = torch.foo.memory_stats(device)
    missing = [k for k in REQUIRED_KEYS if k not in stats]
    assert not missing, missing
    assert all(isinstance(v, int) for v in stats.values())
    assert all(v >= 0 for k, v in stats.items() if k != "max_split_size")
    assert stats["max_split_size"] == -1  # unlimited (PYTORCH_ALLOC_CONF unset), as CUDA reports it
    assert stats["allocated_bytes.all.current"] == torch.foo.memory_allocated(device)
    assert stats["reserved_bytes.all.current"] == torch.foo.memory_reserved(device)
    assert stats["allocated_bytes.all.peak"] == torch.foo.max_memory_allocated(device)
    assert stats["reserved_bytes.all.peak"] == torch.foo.max_memory_reserved(device)
    for stat in ("allocation", "segment", "allocated_bytes", "reserved_bytes"):
        assert stats[f"{stat}.all.current"] == stats[f"{stat}.small_pool.current"] + stats[f"{stat}.large_pool.current"]
        assert stats[f"{stat}.all.current"] <= stats[f"{stat}.all.peak"]
        assert stats[f"{stat}.all.current"] == stats[f"{stat}.all.allocated"] - stats[f"{stat}.all.freed"]
    assert stats["segment.all.current"] >= 1
    assert stats["reserved_bytes.all.current"] >= stats["allocated_bytes.all.current"] >= 4000
    del keep


def test_memory_stats_device_arguments():
    torch.empty(10, device="foo:1")
    assert torch.foo.memory_stats("foo:1") == torch.foo.memory_stats(1) == torch.foo.memory_stats(torch.device("foo", 1))
    with torch.foo.device(1):
        assert torch.foo.memory_stats() == torch.foo.memory_stats(1)
    with pytest.raises(RuntimeError, match="0 to 1"):
        torch.foo.memory_stats(2)
    with pytest.raises(ValueError):
        torch.foo.memory_allocated("cpu")


def test_allocation_and_free_accounting():
    base_alloc = torch.foo.memory_allocated(0)
    base_req = torch.foo.memory_stats(0)["requested_bytes.all.current"]
    base_count = torch.foo.memory_stats(0)["allocation.all.current"]
    t = torch.empty(1000, dtype=torch.float32, device="foo:0")
    delta = torch.foo.memory_allocated(0) - base_alloc
    # CUDA's allocator rounds every block up to a multiple of 512 bytes
    assert 4000 <= delta < 4000 + 512 and delta % 512 == 0, delta
    stats = torch.foo.memory_stats(0)
    assert stats["requested_bytes.all.current"] - base_req == 4000
    assert stats["allocation.all.current"] - base_count == 1
    assert torch.foo.memory_reserved(0) >= torch.foo.memory_allocated(0)
    del t
    assert torch.foo.memory_allocated(0) == base_alloc
    assert torch.foo.memory_stats(0)["requested_bytes.all.current"] == base_req


def test_views_do_not_allocate():
    x = torch.randn(64, 64, device="foo")
    base = torch.foo.memory_allocated()
    views = [x.t(), x[::2], x.view(-1), x.unsqueeze(0), x.narrow(1, 3, 10), x.diagonal(), x.unfold(0, 4, 4)]
    assert torch.foo.memory_allocated() == base
    del views


def test_zero_size_allocation_is_free():
    base = torch.foo.memory_allocated()
    t = torch.empty(0, 5, device="foo")
    assert torch.foo.memory_allocated() == base
    assert t.data_ptr() == 0
    assert (t + 1).shape == (0, 5) and torch.foo.memory_allocated() == base


def test_op_results_live_on_the_input_device_not_the_current_one():
    x = torch.randn(1000, device="foo:0")
    torch.foo.set_device(1)
    a0, a1 = torch.foo.memory_allocated(0), torch.foo.memory_allocated(1)
    y = x * 2
    assert y.device == torch.device("foo", 0)
    assert torch.foo.memory_allocated(0) - a0 >= 4000
    assert torch.foo.memory_allocated(1) == a1
    z = torch.zeros(1000, device="foo")  # a factory without an index: the current device
    assert z.device == torch.device("foo", 1) and torch.foo.memory_allocated(1) - a1 >= 4000
    del y, z


def test_op_results_and_resize_are_accounted():
    x = torch.randn(256, device="foo")
    base = torch.foo.memory_allocated()
    y = x * 2  # the result lives on the device
    assert torch.foo.memory_allocated() - base >= 1024
    z = torch.empty(0, device="foo")
    before = torch.foo.memory_allocated()
    z.resize_(10_000)
    assert torch.foo.memory_allocated() - before >= 40_000
    del y, z
    assert torch.foo.memory_allocated() == base


def test_no_leak_across_ops_and_autograd():
    gc.collect()  # earlier tests' garbage must not be freed during this one
    base = [torch.foo.memory_allocated(d) for d in range(2)]
    for _ in range(3):
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).foo()
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        x = torch.randn(8, 16, device="foo")
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        a = torch.randn(10, 10, device="foo")
        out = torch.empty(0, device="foo")
        torch.matmul(a, a, out=out)
        a[torch.tensor([1, 2])] = 0.0
        m = a[a > 0]
        s = torch.sort(a, dim=1)
        b = a.to("foo:1").t().contiguous()
        del model, opt, x, loss, a, out, m, s, b
    gc.collect()
    assert [torch.foo.memory_allocated(d) for d in range(2)] == base


def test_peak_stats_and_reset():
    torch.foo.reset_peak_memory_stats()
    base_peak = torch.foo.max_memory_allocated()
    assert base_peak == torch.foo.memory_allocated()
    big = torch.empty(3 * MiB, dtype=torch.uint8, device="foo")
    del big
    assert torch.foo.max_memory_allocated() >= base_peak + 3 * MiB
    assert torch.foo.max_memory_reserved() >= torch.foo.memory_reserved()
    torch.foo.reset_peak_memory_stats()
    assert torch.foo.max_memory_allocated() == torch.foo.memory_allocated()
    assert torch.foo.max_memory_reserved() == torch.foo.memory_reserved()


def test_reset_peak_is_per_device():
    keep = torch.empty(4 * MiB, dtype=torch.uint8, device="foo:1")
    del keep
    peak1 = torch.foo.max_memory_allocated(1)
    torch.foo.reset_peak_memory_stats(0)
    assert torch.foo.max_memory_allocated(1) == peak1 > torch.foo.memory_allocated(1)


def test_reset_accumulated_memory_stats():
    torch.empty(100, device="foo")
    assert torch.foo.memory_stats()["allocation.all.allocated"] > 0
    torch.foo.reset_accumulated_memory_stats()
    stats = torch.foo.memory_stats()
    assert stats["allocation.all.allocated"] == 0 and stats["allocation.all.freed"] == 0
    assert stats["allocated_bytes.all.allocated"] == 0 and stats["num_ooms"] == 0
    assert stats["allocated_bytes.all.current"] == torch.foo.memory_allocated()  # current values kept


# ---- caching -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("nbytes", [1000, 300_000, 3 * MiB, 12 * MiB])
def test_freed_block_is_reused(nbytes):
    t = torch.empty(nbytes, dtype=torch.uint8, device="foo")
    del t
    reserved = torch.foo.memory_reserved()
    device_allocs = torch.foo.memory_stats()["num_device_alloc"]
    segments = torch.foo.memory_stats()["segment.all.allocated"]
    t = torch.empty(nbytes, dtype=torch.uint8, device="foo")
    assert torch.foo.memory_reserved() == reserved
    assert torch.foo.memory_stats()["num_device_alloc"] == device_allocs
    assert torch.foo.memory_stats()["segment.all.allocated"] == segments
    del t


def test_alloc_free_loop_stays_bounded():
    sizes = [7, 1000, 100_000, MiB, 3 * MiB, 12 * MiB]
    warm = [torch.empty(s, dtype=torch.uint8, device="foo") for s in sizes]
    del warm
    base_alloc = torch.foo.memory_allocated()
    base_reserved = torch.foo.memory_reserved()
    torch.foo.reset_peak_memory_stats()
    live = []
    for i in range(10_000):
        live.append(torch.empty(sizes[i % len(sizes)], dtype=torch.uint8, device="foo"))
        if len(live) > 3:
            live.pop(0)
    live.clear()
    assert torch.foo.memory_allocated() == base_alloc
    # At most 3 live tensors (< 17 MiB) at a time, all sizes already cached: reserved memory must stay bounded.
    growth = torch.foo.max_memory_reserved() - base_reserved
    assert growth <= 40 * MiB, growth
    assert torch.foo.memory_reserved() - base_reserved <= 40 * MiB


def test_empty_cache_releases_reserved_memory():
    keep = torch.arange(1000.0, device="foo")
    t = torch.empty(12 * MiB, dtype=torch.uint8, device="foo")
    del t
    reserved = torch.foo.memory_reserved()
    free_before = torch.foo.mem_get_info()[0]
    allocated = torch.foo.memory_allocated()
    torch.foo.empty_cache()
    assert torch.foo.memory_reserved() <= reserved - 12 * MiB
    assert torch.foo.mem_get_info()[0] - free_before == reserved - torch.foo.memory_reserved()
    assert torch.foo.memory_allocated() == allocated  # live tensors untouched
    assert torch.equal(keep.cpu(), torch.arange(1000.0))


def test_empty_cache_releases_every_device():
    # As torch.cuda.empty_cache: unoccupied cached memory of all devices goes back.
    for device in ("foo:0", "foo:1"):
        t = torch.empty(12 * MiB, dtype=torch.uint8, device=device)
        del t
    reserved = [torch.foo.memory_reserved(d) for d in range(2)]
    torch.foo.empty_cache()
    for d in range(2):
        assert torch.foo.memory_reserved(d) <= reserved[d] - 12 * MiB


def test_mem_get_info_tracks_reserved_memory():
    for device in range(torch.foo.device_count()):
        free, total = torch.foo.mem_get_info(device)
        assert total == torch.foo.get_device_properties(device).total_memory
        assert 0 <= free <= total
    torch.foo.empty_cache()
    free0, _ = torch.foo.mem_get_info(1)
    reserved0 = torch.foo.memory_reserved(1)
    t = torch.empty(24 * MiB, dtype=torch.uint8, device="foo:1")
    free1, _ = torch.foo.mem_get_info(1)
    assert torch.foo.memory_reserved(1) - reserved0 >= 24 * MiB
    # free device memory drops by what the caching allocator reserved, as cudaMemGetInfo reports it
    assert free0 - free1 == torch.foo.memory_reserved(1) - reserved0
    assert torch.foo.mem_get_info("foo:1") == torch.foo.mem_get_info(1)
    with torch.foo.device(1):
        assert torch.foo.mem_get_info() == torch.foo.mem_get_info(1)
    del t


def test_per_device_stats_are_independent():
    base0 = torch.foo.memory_stats(0)
    alloc1 = torch.foo.memory_allocated(1)
    t = torch.empty(5 * MiB, dtype=torch.uint8, device="foo:1")
    y = t.float()  # an op on foo:1 allocates on foo:1
    assert torch.foo.memory_allocated(1) - alloc1 >= 25 * MiB
    after0 = torch.foo.memory_stats(0)
    for key in ("allocated_bytes.all.current", "reserved_bytes.all.current", "allocation.all.allocated"):
        assert after0[key] == base0[key], key
    with torch.foo.device(1):
        assert torch.foo.memory_allocated() == torch.foo.memory_allocated(1)
    del t, y
    assert torch.foo.memory_allocated(1) == alloc1


# ---- torch.accelerator -------------------------------------------------------------------------------

def test_accelerator_memory_matches_torch_foo():
    keep = torch.empty(2 * MiB, dtype=torch.uint8, device="foo:1")
    for device in range(torch.foo.device_count()):
        assert torch.accelerator.memory_allocated(device) == torch.foo.memory_allocated(device)
        assert torch.accelerator.max_memory_allocated(device) == torch.foo.max_memory_allocated(device)
        assert torch.accelerator.memory_reserved(device) == torch.foo.memory_reserved(device)
        assert torch.accelerator.max_memory_reserved(device) == torch.foo.max_memory_reserved(device)
        assert dict(torch.accelerator.memory_stats(device)) == dict(torch.foo.memory_stats(device))
        assert tuple(torch.accelerator.get_memory_info(device)) == torch.foo.mem_get_info(device)
    assert torch.accelerator.memory_allocated() == torch.foo.memory_allocated()
    del keep


def test_accelerator_reset_and_empty_cache():
    t = torch.empty(12 * MiB, dtype=torch.uint8, device="foo")
    del t
    reserved = torch.foo.memory_reserved()
    torch.accelerator.empty_cache()
    assert torch.foo.memory_reserved() <= reserved - 12 * MiB
    torch.accelerator.reset_peak_memory_stats()
    assert torch.foo.max_memory_allocated() == torch.foo.memory_allocated()


def _summary_row(summary, label):
    """The cells of the row named `label` (Cur Usage, Peak Usage, Tot Alloc, Tot Freed)."""
    row = next(line for line in summary.splitlines() if line.startswith(f"| {label:<21} |"))
    return [cell.strip() for cell in row.strip("|").split("|")[1:]]


def test_memory_summary_is_cudas_table_of_foos_statistics():
    torch.foo.empty_cache()
    torch.foo.reset_peak_memory_stats()
    before = torch.foo.memory_stats()
    x = torch.empty(1024 * 1024, device="foo")  # 4 MiB, from the large pool
    summary = torch.foo.memory_summary()
    stats = torch.foo.memory_stats()
    lines = summary.splitlines()
    assert all(len(line) == 77 and line[0] == line[-1] == "|" for line in lines)
    assert "PyTorch foo memory summary, device ID 0" in lines[1]
    assert f"foo OOMs: {stats['num_ooms']} " in lines[3] and "fooMalloc retries:" in lines[3]
    current = stats["allocated_bytes.large_pool.current"]
    assert current - before.get("allocated_bytes.large_pool.current", 0) == 4 * 1024 * 1024
    cells = _summary_row(summary, "      from large pool")  # the first pool row: allocated memory's
    unit = 1024 ** 2 if stats["allocated_bytes.all.current"] >= 768 * 1024 ** 2 else 1024
    assert cells[0] == f"{current // unit} {'MiB' if unit > 1024 else 'KiB'}"
    assert _summary_row(summary, "Allocations")[0] == str(stats["allocation.all.current"])
    assert _summary_row(summary, "foo reserved segments")[0] == str(stats["segment.all.current"])
    del x


def test_memory_summary_device_and_abbreviated():
    torch.ones(4, device="foo:1")
    summary = torch.foo.memory_summary(torch.device("foo:1"), abbreviated=True)
    assert "device ID 1" in summary.splitlines()[1]
    assert "from large pool" not in summary and "Allocated memory" in summary
    assert torch.foo.memory_summary(1) == torch.foo.memory_summary("foo:1")
    with pytest.raises((RuntimeError, ValueError), match="foo"):
        torch.foo.memory_summary("foo:9")


# ---- memory history and snapshots, as torch.cuda.memory's -----------------------------------------------

@pytest.fixture
def history():
    """Records memory history for one test, then stops and forgets it."""
    torch.foo.memory._record_memory_history(clear_history=True)
    yield
    torch.foo.memory._record_memory_history(None, clear_history=True)


def allocate_here(nbytes, device="foo"):
    return torch.empty(nbytes, dtype=torch.uint8, device=device)


def python_frames(frames):
    return [(f["name"], f["filename"]) for f in frames if f["filename"].endswith(".py")]


def test_snapshot_segments_account_for_the_allocators_statistics():
    keep = [torch.ones(1000, device="foo"), torch.empty(3 * MiB, dtype=torch.uint8, device="foo"),
            torch.ones(10, device="foo:1")]
    gc.collect()
    segments = torch.foo.memory_snapshot()
    for device in (0, 1):
        stats = torch.foo.memory_stats(device)
        own = [s for s in segments if s["device"] == device]
        assert sum(s["total_size"] for s in own) == stats["reserved_bytes.all.current"]
        assert sum(s["allocated_size"] for s in own) == stats["allocated_bytes.all.current"]
        assert len(own) == stats["segment.all.current"]
        blocks = [b for s in own for b in s["blocks"]]
        assert sum(b["state"] == "active_allocated" for b in blocks) == stats["allocation.all.current"]
        for s in own:
            assert sum(b["size"] for b in s["blocks"]) == s["total_size"]
            assert s["blocks"][0]["address"] == s["address"]  # blocks tile their segment in address order
            for b, after in zip(s["blocks"], s["blocks"][1:]):
                assert b["address"] + b["size"] == after["address"]
            assert s["segment_type"] == ("large" if s["total_size"] > MiB * 2 else "small")
    addresses = {b["address"] for s in segments for b in s["blocks"] if b["state"] == "active_allocated"}
    assert all(t.untyped_storage().data_ptr() in addresses for t in keep)


def test_torch_accelerator_snapshot_is_foos(history):
    x = allocate_here(3 * MiB)
    address = x.untyped_storage().data_ptr()
    for snapshot in (torch.accelerator.memory._snapshot(), torch.accelerator.memory._snapshot(augment_with_fx_traces=True)):
        block = next(b for s in snapshot["segments"] for b in s["blocks"] if b["address"] == address)
        assert block["state"] == "active_allocated" and block["requested_size"] == 3 * MiB
        assert ("allocate_here", __file__) in python_frames(block["frames"])
    assert torch.accelerator.memory._snapshot()["segments"] == torch.foo.memory._snapshot()["segments"]


def test_the_accelerator_snapshot_patch_is_still_needed():
    # The "accelerator_snapshot" patch (foo_backend._patches): PyTorch 2.13's function knows XPU and otherwise asks
    # CUDA. A release that routes other accelerators itself fails here: drop the patch (or add the release) then.
    assert foo_backend._patches.applied("accelerator_snapshot")
    source = inspect.getsource(foo_backend._patches.upstream("accelerator_snapshot"))
    assert '"xpu"' in source and "torch.cuda.memory._snapshot(" in source and "privateuse1" not in source.lower()


def test_memory_history_records_actions_with_the_stacks_that_caused_them(history):
    x = allocate_here(5 * MiB)
    address = x.untyped_storage().data_ptr()
    snapshot = torch.foo.memory._snapshot()
    block = next(b for s in snapshot["segments"] for b in s["blocks"] if b["address"] == address)
    assert block["state"] == "active_allocated" and block["requested_size"] == 5 * MiB
    assert ("allocate_here", __file__) in python_frames(block["frames"])
    assert any("::" in f["name"] for f in block["frames"])  # stacks="all": C++ frames too
    del x
    trace = torch.foo.memory._snapshot()["device_traces"][0]
    actions = [(e["action"], e["addr"], e["size"]) for e in trace if e.get("addr") == address]
    assert actions[-3:] == [("alloc", address, 5 * MiB), ("free_requested", address, 5 * MiB),
                            ("free_completed", address, 5 * MiB)]
    alloc = next(e for e in reversed(trace) if e["action"] == "alloc" and e["addr"] == address)
    assert ("allocate_here", __file__) in python_frames(alloc["frames"])
    assert trace[-1]["action"] == "snapshot" and [e["time_us"] for e in trace] == sorted(e["time_us"] for e in trace)
    assert all(e["stream"] == 0 for e in trace)


def test_memory_history_options():
    try:
        torch.foo.memory._record_memory_history("state", stacks="python", clear_history=True)
        x = allocate_here(1000)
        snapshot = torch.foo.memory._snapshot()
        assert all(trace == [] for trace in snapshot["device_traces"])  # "state": no history
        block = next(b for s in snapshot["segments"] for b in s["blocks"]
                     if b["address"] == x.untyped_storage().data_ptr())
        assert python_frames(block["frames"]) and all(f["filename"].endswith(".py") or "<" in f["filename"]
                                                      for f in block["frames"])  # Python frames only
        torch.foo.memory._record_memory_history("all", context=None, max_entries=3, clear_history=True)
        for _ in range(5):
            allocate_here(1000)
        trace = torch.foo.memory._snapshot()["device_traces"][0]
        assert len(trace) == 3 and trace[-1]["action"] == "snapshot"  # the newest 3 of 11 actions
        assert all(e["frames"] == [] for e in trace)
        torch.foo.memory._record_memory_history(None)  # stops; what was recorded stays
        allocate_here(1000)
        assert len(torch.foo.memory._snapshot()["device_traces"][0]) == 3
        torch.foo.memory._record_memory_history(True, clear_history=True)  # CUDA's older, boolean form
        allocate_here(1000)
        assert "alloc" in [e["action"] for e in torch.foo.memory._snapshot()["device_traces"][0]]
        torch.foo.memory._record_memory_history(False)
        before = len(torch.foo.memory._snapshot()["device_traces"][0])
        allocate_here(1000)
        assert len(torch.foo.memory._snapshot()["device_traces"][0]) == before  # nothing recorded once off
        with pytest.raises(RuntimeError, match="foo: _record_memory_history: context must be"):
            torch.foo.memory._record_memory_history(context="everything")
    finally:
        torch.foo.memory._record_memory_history(None, clear_history=True)


def test_snapshot_shows_a_free_still_pending_on_another_stream(history):
    side = torch.foo.Stream()
    x = torch.ones(1000, device="foo")
    x + 1  # learn the signature: the next call is queued, not run at once
    with torch.foo._hold_stream(side):
        with torch.foo.stream(side):
            x + 1
        x.record_stream(side)
        address = x.untyped_storage().data_ptr()
        del x
        states = {b["address"]: b["state"] for s in torch.foo.memory_snapshot() for b in s["blocks"]}
        assert states[address] == "active_pending_free"
    torch.foo.synchronize()
    torch.ones(1, device="foo")  # the allocator notices the side stream is done
    states = {b["address"]: b["state"] for s in torch.foo.memory_snapshot() for b in s["blocks"]}
    assert states[address] == "inactive"
    actions = [e["action"] for e in torch.foo.memory._snapshot()["device_traces"][0] if e.get("addr") == address]
    assert actions[-2:] == ["free_requested", "free_completed"]


def test_pytorchs_memory_visualiser_renders_foo_snapshots(history, tmp_path):
    import base64
    import pickle

    from torch.cuda import _memory_viz

    x = allocate_here(3 * MiB)
    y = allocate_here(100)
    del y
    path = tmp_path / "snapshot.pickle"
    torch.foo.memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    # The text summaries account for every byte (they assert it themselves).
    summary = _memory_viz.segsum(snapshot)
    reserved = sum(s["total_size"] for s in snapshot["segments"])
    assert f"segments: {len(snapshot['segments'])}" in summary and "total_reserved" in summary
    assert reserved == torch.foo.memory_reserved(0) + torch.foo.memory_reserved(1)
    assert "Device 0" in _memory_viz.trace(snapshot)
    # The HTML pages embed the snapshot (pickled, base64) for the viewer's JavaScript.
    marker = '[{"name": "snapshot.pickle", "base64": "'
    for page in (_memory_viz.trace_plot(snapshot), _memory_viz.segment_plot(snapshot)):
        encoded = page[page.index(marker) + len(marker):].split('"', 1)[0]
        assert pickle.loads(base64.b64decode(encoded)) == snapshot
    del x


def test_deterministic_mode_fills_uninitialized_memory_as_cuda():
    with open(os.path.join(os.path.dirname(__file__), "support", "host_waits_on_cuda.json")) as f:
        on_cuda = json.load(f)["fill_uninitialized_memory"]
    with filling_uninitialized_memory():
        for name, expected in on_cuda.items():
            dtype = getattr(torch, name.removeprefix("torch."))
            assert uninitialized_memory_fills("foo", dtype) == expected, dtype
            with sync_debug_mode("foo", "error"):  # the fills are queued kernels, as CUDA's
                torch.empty(5, dtype=dtype, device="foo")
                torch.zeros(2, dtype=dtype, device="foo").resize_(7)


def test_an_injected_out_of_memory_error_is_the_allocators_own():
    kept = torch.ones(4, device="foo")
    ooms = torch.foo.memory_stats()["num_ooms"]
    torch.foo.faults.fail_allocation(after=2)
    first, second = torch.empty(8, device="foo"), torch.empty(8, device="foo")
    with pytest.raises(torch.OutOfMemoryError, match=r"foo out of memory\..*injected by torch\.foo\.faults"):
        torch.empty(8, device="foo")
    assert torch.foo.memory_stats()["num_ooms"] == ooms + 1
    # Once: the allocator goes on, and what it held is intact.
    assert torch.equal((kept + torch.ones(4, device="foo")).cpu(), torch.full((4,), 2.0))
    torch.foo.faults.fail_allocation()
    torch.foo.faults.fail_allocation(None)  # disarmed
    torch.empty(8, device="foo")
    del first, second


def test_an_injected_failure_is_of_one_device():
    torch.foo.faults.fail_allocation(device=1)
    assert torch.equal((torch.ones(3, device="foo:0") * 2).cpu(), torch.full((3,), 2.0))
    with pytest.raises(torch.OutOfMemoryError, match="foo:1"):
        torch.ones(3, device="foo:1")
    assert torch.equal(torch.ones(3, device="foo:1").cpu(), torch.ones(3))
    with pytest.raises(ValueError, match="non-negative"):
        torch.foo.faults.fail_allocation(after=-1)


def test_recovery_code_finds_a_batch_size_that_fits():
    # accelerate's find_executable_batch_size makes the batch smaller after an out-of-memory error; the first
    # two tries fail here as they would on a GPU too small for them.
    accelerate_utils = pytest.importorskip("accelerate.utils")
    tried = []

    @accelerate_utils.find_executable_batch_size(starting_batch_size=64)
    def train(batch_size):
        tried.append(batch_size)
        if len(tried) <= 2:
            torch.foo.faults.fail_allocation()
        x = torch.randn(batch_size, 8, device="foo")
        return (x @ torch.ones(8, 2, device="foo")).shape

    shape = train()
    assert len(tried) == 3 and tried[0] == 64 and tried[0] > tried[1] > tried[2]
    assert shape == (tried[2], 2)


# ---- MemPool and use_mem_pool (torch.cuda.MemPool's semantics) --------------------------------------

def _pool_addresses(pool_id):
    return {block["address"] for segment in torch.foo.memory_snapshot(pool_id) for block in segment["blocks"]}


def test_allocations_inside_use_mem_pool_come_from_the_pool():
    pool = torch.foo.MemPool()
    assert pool.use_count() == 1 and pool.allocator is None
    outside_before = torch.ones(1000, device="foo")
    with torch.foo.use_mem_pool(pool):
        assert pool.use_count() == 2
        inside = torch.arange(1000.0, device="foo")
        big = torch.ones(3_000_000, device="foo")  # a large block: its own segment, in the pool too
    assert pool.use_count() == 1
    outside_after = torch.ones(1000, device="foo")
    owned = _pool_addresses(pool.id)
    assert inside.data_ptr() in owned and big.data_ptr() in owned
    assert outside_before.data_ptr() not in owned and outside_after.data_ptr() not in owned
    assert {tuple(s["segment_pool_id"]) for s in pool.snapshot()} == {pool.id}
    assert inside.sum().item() == sum(range(1000))


def test_a_pools_freed_blocks_serve_only_the_pool():
    pool = torch.foo.MemPool()
    with torch.foo.use_mem_pool(pool):
        first = torch.empty(4096, device="foo")
    address = first.data_ptr()
    del first
    outside = torch.empty(4096, device="foo")
    assert outside.data_ptr() != address  # the pool's free block is not handed out elsewhere
    with torch.foo.use_mem_pool(pool):
        again = torch.empty(4096, device="foo")
    assert again.data_ptr() == address  # but the pool's next allocation reuses it


def test_use_mem_pool_routes_only_the_calling_thread():
    pool = torch.foo.MemPool()
    other = []
    with torch.foo.use_mem_pool(pool):
        thread = threading.Thread(target=lambda: other.append(torch.ones(1000, device="foo")))
        thread.start()
        thread.join()
        mine = torch.ones(1000, device="foo")
    owned = _pool_addresses(pool.id)
    assert mine.data_ptr() in owned and other[0].data_ptr() not in owned


def test_nested_use_mem_pool_routes_to_the_innermost_pool():
    outer, inner = torch.foo.MemPool(), torch.foo.MemPool()
    with torch.foo.use_mem_pool(outer):
        a = torch.ones(100, device="foo")
        with torch.foo.use_mem_pool(inner):
            b = torch.ones(100, device="foo")
        c = torch.ones(100, device="foo")
    assert {a.data_ptr(), c.data_ptr()} <= _pool_addresses(outer.id)
    assert b.data_ptr() in _pool_addresses(inner.id)


def test_a_graph_captured_with_a_mem_pool_shares_it():
    pool = torch.foo.MemPool()
    static = torch.ones(256, device="foo")
    (static * 2).sum()  # warm up the operators outside the capture
    graph = torch.foo.FooGraph()
    with torch.foo.graph(graph, pool=pool.id):
        out = static * 2
    assert graph.pool() == pool.id and pool.use_count() == 2
    assert out.data_ptr() in _pool_addresses(pool.id)
    graph.replay()
    assert out.sum().item() == 512.0
    del graph
    assert pool.use_count() == 1


def test_a_pools_memory_goes_back_to_the_device_when_the_pool_and_its_tensors_are_gone_and_the_cache_emptied():
    torch.foo.synchronize()
    torch.foo.empty_cache()
    reserved = torch.foo.memory_reserved()
    pool = torch.foo.MemPool()
    pool_id = pool.id
    with torch.foo.use_mem_pool(pool):
        survivor = torch.ones(3_000_000, device="foo")
    del pool  # its tensor keeps its memory
    assert torch.foo.memory_reserved() > reserved and survivor.sum().item() == 3_000_000
    del survivor
    # As CUDA's: the pool is freeable, its segment cached until the cache is emptied (after the device's work).
    assert [block["state"] for segment in torch.foo.memory_snapshot(pool_id) for block in segment["blocks"]] == \
        ["inactive"]
    torch.foo.empty_cache()
    assert torch.foo.memory_snapshot(pool_id) == []
    assert torch.foo.memory_reserved() == reserved


def test_mem_pool_arguments_foo_does_not_support():
    with pytest.raises(NotImplementedError, match="pluggable allocators"):
        torch.foo.MemPool(allocator=object())
    with pytest.raises(NotImplementedError, match="use_on_oom and no_split"):
        torch.foo.MemPool(use_on_oom=True)


def test_caching_allocator_alloc_and_delete():
    # torch.cuda.caching_allocator_alloc/delete: memory no tensor owns, from the cache and back to it.
    torch.foo.synchronize()
    before = torch.foo.memory_allocated()
    ptr = torch.foo.caching_allocator_alloc(1000)
    assert isinstance(ptr, int) and ptr != 0
    assert torch.foo.memory_allocated() == before + 1024  # rounded to the allocator's 512-byte blocks
    torch.foo.caching_allocator_delete(ptr)
    assert torch.foo.memory_allocated() == before
    side = torch.foo.Stream()
    ptr = torch.foo.caching_allocator_alloc(4096, device="foo:0", stream=side)
    torch.foo.caching_allocator_delete(ptr)
    assert torch.foo.memory_allocated() == before


# ---- What Inductor's graph trees ask of the allocator (issue 28): CUDA's torch._C functions, for foo ----------

def test_a_pools_live_allocations_are_checked_exactly():
    pool = torch.foo.MemPool()
    with torch.foo.use_mem_pool(pool):
        a = torch.ones(100, device="foo")
        b = torch.ones(300_000, device="foo")
    outside = torch.ones(100, device="foo")
    check = foo_backend._C._check_pool_live_allocations
    assert check(0, pool.id, [a.data_ptr(), b.data_ptr()])
    assert not check(0, pool.id, [a.data_ptr()])  # b is live too
    assert not check(0, pool.id, [a.data_ptr(), b.data_ptr(), outside.data_ptr()])  # outside is not the pool's
    del b
    assert check(0, pool.id, [a.data_ptr()])
    with pytest.raises(RuntimeError, match="no memory pool"):
        check(0, (12345, 0), [])


def test_a_storage_freed_and_disowned_keeps_its_pointer_without_its_block():
    pool = torch.foo.MemPool()
    with torch.foo.use_mem_pool(pool):
        t = torch.ones(1000, device="foo")
    storage = t.untyped_storage()
    assert foo_backend._C._has_standard_deleter(storage._cdata)
    address = storage.data_ptr()
    foo_backend._C._free_and_remove_deleter_fn(storage._cdata)
    assert not foo_backend._C._has_standard_deleter(storage._cdata)
    assert storage.data_ptr() == address  # still points there, owning nothing
    assert foo_backend._C._check_pool_live_allocations(0, pool.id, [])  # the block is free again
    with torch.foo.use_mem_pool(pool):
        reused = torch.zeros(1000, device="foo")
    assert reused.data_ptr() == address
    with pytest.raises(RuntimeError, match="caching allocator owns"):
        foo_backend._C._free_and_remove_deleter_fn(storage._cdata)


def test_storage_access_errors_name_the_cause():
    t = torch.ones(4, device="foo")
    foo_backend._C._set_storage_access_error_msg(t, "overwritten by a later replay")
    with pytest.raises(RuntimeError, match="overwritten by a later replay"):
        t.data_ptr()
    u = torch.ones(4, device="foo")
    foo_backend._C._set_storage_data_ptr_access_error_msg(u.untyped_storage()._cdata, "freed by the graph tree")
    with pytest.raises(RuntimeError, match="freed by the graph tree"):
        u.add_(1)


def test_the_memory_history_flag():
    assert not foo_backend._C._is_history_enabled()
    torch.foo.memory._record_memory_history(max_entries=10)
    try:
        assert foo_backend._C._is_history_enabled()
    finally:
        torch.foo.memory._record_memory_history(enabled=None)
    assert not foo_backend._C._is_history_enabled()


def test_a_pool_restored_to_its_checkpoint_gives_live_storages_their_memory_back():
    # Graph trees' cycle (CUDA's semantics): after a recording the pool is checkpointed; replays make tensors whose
    # storages own nothing (the allocator thinks the pool free); before the next recording the checkpoint is
    # restored and the live storages own their blocks again.
    C = foo_backend._C
    pool = torch.foo.MemPool()
    with torch.foo.use_mem_pool(pool):
        a = torch.full((1000,), 1.0, device="foo")
        b = torch.full((1000,), 2.0, device="foo")
    checkpoint = C._get_checkpoint_state(0, pool.id)
    storages = [a.untyped_storage(), b.untyped_storage()]
    addresses = [s.data_ptr() for s in storages]
    for storage in storages:  # replay mode: the graph tree owns the memory, not the storages
        C._free_and_remove_deleter_fn(storage._cdata)
    assert C._check_pool_live_allocations(0, pool.id, [])
    with torch.foo.use_mem_pool(pool):
        stray = torch.foo.caching_allocator_alloc(4096)  # allocated since the checkpoint: freed by the restore
    freed = C._set_checkpoint_pool_state(0, checkpoint, [], [storages[0]._cdata])
    assert freed == [stray]
    assert C._has_standard_deleter(storages[0]._cdata) and not C._has_standard_deleter(storages[1]._cdata)
    assert C._check_pool_live_allocations(0, pool.id, addresses)  # b's block too: allocated, claimed by no storage
    assert a.cpu().eq(1.0).all() and b.cpu().eq(2.0).all()  # the memory was never handed to anything else
    torch.foo.caching_allocator_delete(addresses[1])  # what graph trees do with a block whose tensor died
    assert C._check_pool_live_allocations(0, pool.id, addresses[:1])
    del a, storages
    assert C._check_pool_live_allocations(0, pool.id, [])  # a's storage owned its block again: freed with it
    with pytest.raises(RuntimeError, match="no memory pool"):
        C._get_checkpoint_state(0, (12345, 0))


def test_a_restored_checkpoint_keeps_the_free_blocks_between_live_ones():
    C = foo_backend._C
    pool = torch.foo.MemPool()
    with torch.foo.use_mem_pool(pool):
        a, b, c = (torch.full((1000,), float(i), device="foo") for i in range(3))
    gap = b.data_ptr()
    del b  # the checkpoint has a free block between two live ones
    checkpoint = C._get_checkpoint_state(0, pool.id)
    storages = [a.untyped_storage(), c.untyped_storage()]
    for storage in storages:
        C._free_and_remove_deleter_fn(storage._cdata)
    with torch.foo.use_mem_pool(pool):
        across = torch.foo.caching_allocator_alloc(3 * 4096)  # takes the merged space of a, the gap and c
    assert across == storages[0].data_ptr()
    assert C._set_checkpoint_pool_state(0, checkpoint, [], [s._cdata for s in storages]) == [across]
    assert C._check_pool_live_allocations(0, pool.id, [s.data_ptr() for s in storages])
    with torch.foo.use_mem_pool(pool):
        refill = torch.empty(1000, device="foo")
    assert refill.data_ptr() == gap  # the gap is free again, and only the gap
    assert a.cpu().eq(0.0).all() and c.cpu().eq(2.0).all()
