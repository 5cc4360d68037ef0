"""Profile a few training steps on foo with torch.profiler, as you would on a GPU.

The demo's model (examples/train.py: an MLP with dropout, on scikit-learn's 8x8 digits) trains for a few steps under
torch.profiler with foo's device timeline (ProfilerActivity.PrivateUse1): the table shows, per operator,
its time on the host and the time its kernels took on the device; the trace shows the kernels and copies
on one row per foo stream, each joined by an arrow to the launch that queued it. The allocator's memory
history over the same steps is written as PyTorch's memory timeline.

Run:  python examples/profile_training.py [--out DIR]
(Not examples/profile.py: a file of that name would stand in for the standard library's `profile`, which
torch imports, in every program of this folder.)
Open: DIR/trace.json in https://ui.perfetto.dev or chrome://tracing (both load local files);
      DIR/memory.html in a browser (PyTorch's memory viewer: allocations over time, with their stacks), or
      DIR/memory.pickle in https://pytorch.org/memory_viz.
"""
import argparse
import os

import torch
import torch.nn as nn
from sklearn.datasets import load_digits
import torch.nn.functional as F
from torch.cuda import _memory_viz
from torch.profiler import ProfilerActivity, profile, record_function, schedule

import foo_backend  # noqa: F401  (registers the "foo" device; plain `import torch` does too, via autoload)

STEPS, BATCH_SIZE = 6, 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="profile", help="folder for trace.json (default: ./profile)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(0)
    torch.foo.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 128), nn.ReLU(),
                          nn.Linear(128, 10)).foo()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    digits = load_digits()
    images = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    labels = torch.tensor(digits.target)
    batches = [(images[i:i + BATCH_SIZE], labels[i:i + BATCH_SIZE]) for i in range(0, STEPS * BATCH_SIZE, BATCH_SIZE)]

    torch.foo.memory._record_memory_history(max_entries=100000)
    # Skip the first step (foo learns each operator's signature on its first call, synchronously), warm
    # up on the second, record the next three: as for CUDA.
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
                 schedule=schedule(wait=1, warmup=1, active=3, repeat=1)) as prof:
        for x, y in batches:
            with record_function("train_step"):
                x, y = x.to("foo", non_blocking=True), y.to("foo", non_blocking=True)
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            torch.foo.synchronize()
            prof.step()

    snapshot = torch.foo.memory._snapshot()
    torch.foo.memory._record_memory_history(None)

    print(prof.key_averages().table(sort_by="device_time_total", row_limit=15))
    trace = os.path.join(args.out, "trace.json")
    prof.export_chrome_trace(trace)
    print(f"trace: {trace}  (open it in https://ui.perfetto.dev or chrome://tracing)")
    torch.foo.memory._dump_snapshot(os.path.join(args.out, "memory.pickle"))
    timeline = os.path.join(args.out, "memory.html")
    with open(timeline, "w") as f:
        f.write(_memory_viz.trace_plot(snapshot))
    print(f"memory timeline: {timeline}  (open it in a browser)")
    print(torch.foo.memory_summary(abbreviated=True))


if __name__ == "__main__":
    main()
