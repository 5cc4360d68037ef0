"""Capture a whole training step in a foo graph, replay it, and check it learns what eager CPU learns.

A graph records every kernel a training step launches (forward with dropout, backward, and an Adam step
made with capturable=True) once; each replay re-runs those kernels with no Python and no dispatch on the
host. As with CUDA graphs: warm up on a side stream first, feed new data by copying it into the static
input tensors, and read results from the static outputs. Dropout draws new random numbers at each replay:
exactly those the same eager step would draw, so a seeded run reproduces eager training on CPU.

Run:  python examples/graph_training.py
"""
import copy
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import foo_backend  # noqa: F401  (registers the "foo" device; plain `import torch` does too, via autoload)

STEPS, BATCH, FEATURES, CLASSES = 40, 32, 20, 3


def train_step(model, optimizer, x, y):
    optimizer.zero_grad(set_to_none=False)  # gradients stay in place: a replay writes the same tensors
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def batches(seed):
    generator = torch.Generator().manual_seed(seed)
    for _ in range(STEPS):
        x = torch.randn(BATCH, FEATURES, generator=generator)
        yield x, (x[:, 0] > 0).long() + (x[:, 1] > 1).long()


def main():
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, CLASSES))
    model = copy.deepcopy(cpu_model).foo()
    cpu_optimizer = torch.optim.Adam(cpu_model.parameters(), lr=0.01)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, capturable=True)  # its step count stays on foo

    # Static inputs: the graph reads these tensors at every replay.
    static_x = torch.zeros(BATCH, FEATURES, device="foo")
    static_y = torch.zeros(BATCH, dtype=torch.long, device="foo")

    # Warm-up on a side stream (foo learns each operator's outputs; Adam creates its state), then capture.
    # The same warm-up steps run on CPU, seeded alike, so both sides start the replays from the same state.
    torch.foo.manual_seed(1)
    side = torch.foo.Stream()
    side.wait_stream(torch.foo.current_stream())
    with torch.foo.stream(side):
        for _ in range(3):
            train_step(model, optimizer, static_x, static_y)
    torch.foo.current_stream().wait_stream(side)
    torch.manual_seed(1)
    for _ in range(3):
        train_step(cpu_model, cpu_optimizer, torch.zeros(BATCH, FEATURES), torch.zeros(BATCH, dtype=torch.long))

    graph = torch.foo.FooGraph()
    with torch.foo.graph(graph):
        static_loss = train_step(model, optimizer, static_x, static_y)

    torch.foo.manual_seed(2)  # the device's generator alone: dropout on foo draws from it
    torch.manual_seed(2)      # and CPU's, for the CPU run
    losses, cpu_losses = [], []
    start = time.perf_counter()
    for x, y in batches(seed=3):
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
        losses.append(static_loss.item())
    replay_seconds = time.perf_counter() - start
    start = time.perf_counter()
    for x, y in batches(seed=3):
        cpu_losses.append(train_step(cpu_model, cpu_optimizer, x, y).item())
    cpu_seconds = time.perf_counter() - start

    print(f"one training step captured, replayed {STEPS} times; loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    print(f"{STEPS} replays on foo: {replay_seconds * 1e3:.1f} ms; {STEPS} eager steps on CPU: {cpu_seconds * 1e3:.1f} ms")
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses))
    for p, q in zip(model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.cpu(), q.detach())
    print("OK: the replayed training step on foo learns what eager training on CPU learns")


if __name__ == "__main__":
    main()
