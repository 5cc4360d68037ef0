"""What profiling costs: the chain of 20 small ops, profiled against not profiled, on foo and on CPU.

foo is profiled with its device timeline (``ProfilerActivity.CPU`` and ``PrivateUse1``: every kernel and its
launch recorded), CPU with ``ProfilerActivity.CPU``. Each round times a block of calls without the profiler
and a block inside an active profiler, back to back (alternating which goes first); the ratios are medians
of the per-round ratios. Starting and stopping the profiler is not timed. (Whether foo costs anything when
*not* profiling shows in ``ops.py``: its rows are unchanged.)

    python benchmarks/profiler.py [--rounds N]
"""
import argparse
import os
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

import foo_backend  # noqa: F401  (registers the foo device even with autoload disabled)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ops import chain20  # noqa: E402

CALLS_PER_BLOCK = 200


def block(x: torch.Tensor) -> float:
    """Seconds per call of chain20, over one block (synchronized at its end on foo)."""
    start = time.perf_counter()
    for _ in range(CALLS_PER_BLOCK):
        chain20(x)
    if x.device.type == "foo":
        torch.foo.synchronize()
    return (time.perf_counter() - start) / CALLS_PER_BLOCK


def profiled_block(x: torch.Tensor, activities) -> float:
    with profile(activities=activities):
        return block(x)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    cases = {
        "foo": (torch.randn(100, device="foo"), [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]),
        "CPU": (torch.randn(100), [ProfilerActivity.CPU]),
    }
    ratios = {name: [] for name in cases}
    times = {name: ([], []) for name in cases}
    for name, (x, activities) in cases.items():  # warm up: signatures learnt, profiler initialised
        block(x)
        profiled_block(x, activities)
    for r in range(args.rounds):
        for name, (x, activities) in cases.items():
            runs = [lambda: block(x), lambda: profiled_block(x, activities)]
            plain, profiled = [run() for run in (runs if r % 2 == 0 else runs[::-1])][:: 1 if r % 2 == 0 else -1]
            times[name][0].append(plain)
            times[name][1].append(profiled)
            ratios[name].append(profiled / plain)
    print(f"chain of 20 ops, 100 elements, {CALLS_PER_BLOCK} calls per block, {args.rounds} rounds")
    print("device | not profiled | profiled | profiled/not (IQR)")
    for name in cases:
        q1, _, q3 = statistics.quantiles(ratios[name], n=4)
        print(f"{name:6} | {statistics.median(times[name][0]) * 1e6:9.1f} us | "
              f"{statistics.median(times[name][1]) * 1e6:7.1f} us | {statistics.median(ratios[name]):.2f} "
              f"({q1:.2f}-{q3:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
