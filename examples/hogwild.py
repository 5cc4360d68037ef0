"""Hogwild training on foo: several processes train one model whose parameters they share.

As PyTorch's mnist_hogwild example does on CUDA: ``torch.multiprocessing`` hands the model to each spawned
process, whose foo parameters then alias the parent's memory (foo shares device memory between processes as
CUDA IPC does). Each process runs its own optimizer on its own shard of the data and updates the shared
parameters in place, without locks; the parent, which trained nothing, evaluates the trained model.

    python examples/hogwild.py [--processes 2] [--epochs 4]
"""
import argparse

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

import foo_backend  # noqa: F401  (registers the foo device even with autoload disabled)


def make_data(samples=2048, features=16, classes=4):
    """A separable classification task: labels of a random linear map."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(samples, features, generator=generator)
    y = (x @ torch.randn(features, classes, generator=generator)).argmax(dim=1)
    return x, y


class Net(torch.nn.Module):
    def __init__(self, features=16, classes=4):
        super().__init__()
        self.fc1 = torch.nn.Linear(features, 64)
        self.fc2 = torch.nn.Linear(64, classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def train(rank, processes, model, x, y, epochs, batch_size):
    """One Hogwild worker: SGD on every `processes`-th sample, written into the shared parameters."""
    torch.manual_seed(rank)
    device = next(model.parameters()).device
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
    x, y = x[rank::processes].to(device), y[rank::processes].to(device)
    for _ in range(epochs):
        for batch in torch.randperm(len(x), device=device).split(batch_size):
            optimizer.zero_grad()
            F.cross_entropy(model(x[batch]), y[batch]).backward()
            optimizer.step()
    torch.foo.synchronize()  # the updates are in the shared memory before the parent reads it


def evaluate(model, x, y):
    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model(x.to(device))
        loss = F.cross_entropy(logits, y.to(device)).item()
        accuracy = (logits.argmax(dim=1).cpu() == y).float().mean().item()
    return loss, accuracy


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    x, y = make_data()
    torch.manual_seed(0)
    model = Net().to("foo")
    model.share_memory()  # a no-op for foo tensors, as for CUDA's: they are shared when a process receives them
    initial = [p.detach().cpu().clone() for p in model.parameters()]
    loss, accuracy = evaluate(model, x, y)
    print(f"before: loss {loss:.3f}, accuracy {accuracy:.2f}")

    context = mp.get_context("spawn")  # a child forked after foo was initialised cannot use it (as with CUDA)
    workers = [context.Process(target=train, args=(rank, args.processes, model, x, y, args.epochs, args.batch_size))
               for rank in range(args.processes)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert all(worker.exitcode == 0 for worker in workers), [worker.exitcode for worker in workers]

    trained_loss, trained_accuracy = evaluate(model, x, y)
    print(f"after {args.processes} processes x {args.epochs} epochs: loss {trained_loss:.3f}, "
          f"accuracy {trained_accuracy:.2f}")
    changed = all(not torch.equal(p.detach().cpu(), q) for p, q in zip(model.parameters(), initial))
    assert changed, "the parent's parameters did not change: the workers' updates were not shared"
    assert trained_loss < loss / 2 and trained_accuracy > 0.8, (trained_loss, trained_accuracy)
    print("OK: the processes trained the shared foo model")


if __name__ == "__main__":
    main()
