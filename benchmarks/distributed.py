"""foo vs CPU for torch.distributed: collectives and a DDP training step across 2 processes.

foo's c10d backend ("fccl") runs gloo on the device memory itself, so a collective on foo tensors should
cost what the same gloo collective costs on CPU tensors: the ratio measures fccl's overhead (stream
ordering, launch, kernel views). Both sides run in the same 2-process group (fccl forwards CPU tensors
to gloo), interleaved: each round times a block of every case on CPU and on foo, back to back,
alternating which goes first, and the table reports the median of the per-round ratios. Every foo
block ends with ``torch.foo.synchronize()``. Iteration counts are fixed, so both ranks issue the same
collectives in the same order.

    python benchmarks/distributed.py [--rounds N]

Targets: all_reduce foo/CPU <= 1.05 (no copy), DDP step <= 1.1. Reports, does not gate.
"""
import argparse
import socket
import statistics
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import foo_backend  # noqa: F401  (registers foo and fccl even with autoload disabled)


def make_mlp():
    torch.default_generator.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def cases(rank):
    """name -> (target, iterations per block, make(device) -> a function running one iteration)."""
    def all_reduce(numel):
        def make(device):
            x = torch.ones(numel, device=device)
            return lambda: dist.all_reduce(x)
        return make

    def ddp_step(device):
        model = DDP(make_mlp().to(device), device_ids=[device.index] if device.type == "foo" else None)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        generator = torch.Generator().manual_seed(rank)
        x = torch.randn(64, 784, generator=generator).to(device)
        y = torch.randint(0, 10, (64,), generator=generator).to(device)

        def step():
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
        return step

    return {
        "all_reduce 1 MB": (1.05, 50, all_reduce(256 * 1024)),
        "all_reduce 64 MB": (1.05, 3, all_reduce(16 * 1024 * 1024)),
        "DDP step, MLP 784-256-256-10, batch 64": (1.1, 10, ddp_step),
    }


def run(rank, world_size, port, rounds, results):
    dist.init_process_group("fccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=120))
    torch.foo.set_device(rank)
    foo, cpu = torch.device("foo", rank), torch.device("cpu")
    table = []
    for name, (target, iterations, make) in cases(rank).items():
        fns = {cpu: make(cpu), foo: make(foo)}
        for fn in fns.values():  # warm-up: first calls learn signatures, DDP builds its buckets
            fn()
        torch.foo.synchronize()
        times = {cpu: [], foo: []}
        ratios = []
        for r in range(rounds):
            for device in ((cpu, foo) if r % 2 == 0 else (foo, cpu)):
                dist.barrier()
                start = time.perf_counter()
                for _ in range(iterations):
                    fns[device]()
                torch.foo.synchronize()
                times[device].append((time.perf_counter() - start) / iterations)
            ratios.append(times[foo][-1] / times[cpu][-1])
        table.append((name, statistics.median(times[cpu]), statistics.median(times[foo]),
                      statistics.median(ratios), target))
    if rank == 0:
        results.extend(table)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.Manager() as manager:
        results = manager.list()
        mp.spawn(run, args=(2, port, args.rounds, results), nprocs=2)
        print(f"torch {torch.__version__}, 2 processes, gloo over loopback, {args.rounds} interleaved rounds")
        print(f"{'case':42} {'CPU':>10} {'foo':>10} {'foo/CPU':>8}  target")
        for name, cpu_time, foo_time, ratio, target in results:
            print(f"{name:42} {cpu_time * 1e3:8.3f}ms {foo_time * 1e3:8.3f}ms {ratio:8.2f}  <= {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
