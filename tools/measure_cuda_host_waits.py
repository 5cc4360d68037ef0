"""Measures, on a CUDA GPU, which cases of ``tests/support/host_wait_cases.py`` make the host wait for the
device, and writes ``tests/support/host_waits_on_cuda.json``: the oracle of ``tests/test_host_waits.py``.

A case waited when the stream, kept busy by ``torch.cuda._sleep`` for longer than the call took on the
host, is idle once the call returns. Each case is called twice: its first call, then a later one (CUDA loads
a kernel on its first use). ``--fill`` also records what ``torch.empty`` and resizes hold under
``torch.utils.deterministic.fill_uninitialized_memory``. Run: ``python tools/measure_cuda_host_waits.py``.
"""
import argparse
import json
import math
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "support"))
from host_wait_cases import (  # noqa: E402
    CASES, UNMEASURED_CASES, filling_uninitialized_memory, sync_debug_mode, uninitialized_memory_fills)


def _cycles_per_second():
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)  # loads the sleep kernel
    start.record()
    torch.cuda._sleep(100_000_000)
    end.record()
    end.synchronize()
    return 100_000_000 / (start.elapsed_time(end) / 1000)


def _waited(call, cycles_per_second):
    """True when ``call`` made the host wait; retries with a longer sleep while the answer is unclear."""
    for seconds in (0.2, 1.0, 5.0):
        torch.cuda.synchronize()
        torch.cuda._sleep(int(seconds * cycles_per_second))
        began = time.perf_counter()
        call()
        host = time.perf_counter() - began
        idle = torch.cuda.current_stream().query()
        torch.cuda.synchronize()
        if not idle:
            return False
        if host < 0.5 * seconds:
            raise RuntimeError(f"the stream went idle {host:.3f} s into a {seconds} s sleep")
        if host < 0.95 * seconds or host > 1.5 * seconds:
            continue  # the call itself took about as long as the sleep: unclear, sleep longer
        return True
    return True


def _warned_by_sync_debug_mode(call):
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught, sync_debug_mode("cuda", "warn"):
        warnings.simplefilter("always")
        call()
    torch.cuda.synchronize()
    return [str(w.message) for w in caught if "synchroniz" in str(w.message)]


def _fill_values():
    with filling_uninitialized_memory():
        return {str(dtype): uninitialized_memory_fills("cuda", dtype)
                for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.float64,
                              torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "support",
                                                      "host_waits_on_cuda.json"))
    parser.add_argument("--fill", action="store_true")
    args = parser.parse_args()
    cycles_per_second = _cycles_per_second()
    results = {}
    for name, setup in {**CASES, **UNMEASURED_CASES}.items():
        try:
            call = setup("cuda")
            first = _waited(call, cycles_per_second)
            later = _waited(call, cycles_per_second)
            warned = _warned_by_sync_debug_mode(call)
            results[name] = {"first": first, "later": later, "sync_debug_warning": warned[:1]}
        except Exception as error:  # recorded, not hidden: a case CUDA cannot run
            results[name] = {"error": f"{type(error).__name__}: {error}"}
        print(name, results[name], flush=True)
    report = {"torch": torch.__version__, "cuda": torch.version.cuda,
              "device": torch.cuda.get_device_name(), "cases": results}
    if args.fill:
        try:
            report["fill_uninitialized_memory"] = _fill_values()
        except Exception as error:
            report["fill_uninitialized_memory"] = f"{type(error).__name__}: {error}"
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
