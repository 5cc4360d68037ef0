"""Train the demo's digit classifier with DistributedDataParallel on foo, one process per foo device, and
check that it learns what the same training learns in one process.

Every process takes its share of each minibatch; DDP averages the gradients across processes (over
gloo, on the foo device memory itself, through foo_backend's c10d backend "fccl"), so the model
follows the single-process run on the whole minibatch up to float rounding. Rank 0 runs that
single-process reference at the end and compares the loss curves and the weights.

Run (one machine, two processes):
    torchrun --nproc-per-node 2 examples/ddp_train.py
Two "nodes" (here two launches on one machine; on real machines, their address instead of localhost):
    torchrun --nnodes 2 --node-rank 0 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint localhost:29400 examples/ddp_train.py
    torchrun --nnodes 2 --node-rank 1 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint localhost:29400 examples/ddp_train.py
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

EPOCHS, BATCH_SIZE, LR, SEED = 4, 64, 0.05, 0


def make_model():
    torch.default_generator.manual_seed(SEED)  # the same initial weights in every process
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))


def minibatches(train_set):
    """The same shuffled minibatches in every process (a CPU generator with a fixed seed)."""
    return DataLoader(train_set, batch_size=BATCH_SIZE, shuffle=True, drop_last=True,
                      generator=torch.Generator().manual_seed(SEED))


def train(model, train_set, device, rank=0, world_size=1):
    """Trains `model`; each process uses its `rank`-th share of every minibatch. Returns the loss of
    every step (of this process's share) on the device."""
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    share = BATCH_SIZE // world_size
    losses = []
    for _ in range(EPOCHS):
        for xb, yb in minibatches(train_set):
            xb = xb[rank * share:(rank + 1) * share].to(device)
            yb = yb[rank * share:(rank + 1) * share].to(device)
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()  # DDP all-reduces the gradients here, bucket by bucket, while backward runs
            optimizer.step()
            losses.append(loss.detach())
    return torch.stack(losses)


def main() -> int:
    dist.init_process_group()  # torchrun's environment; foo's backend is the default for foo tensors
    rank, world_size = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("foo", local_rank % torch.foo.device_count())
    torch.foo.set_device(device)

    digits = load_digits()
    X = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=SEED, stratify=y)
    train_set = TensorDataset(X_train, y_train)

    model = DDP(make_model().to(device), device_ids=[device.index])
    losses = train(model, train_set, device, rank, world_size)
    # The loss of the whole minibatch is the mean of the processes' losses (equal shares).
    dist.all_reduce(losses, op=dist.ReduceOp.AVG)
    with torch.no_grad():
        accuracy = (model(X_test.to(device)).argmax(dim=1) == y_test.to(device)).float().mean().item()
    print(f"rank {rank}/{world_size} on {device}: {len(losses)} steps, final loss {losses[-1].item():.6f}, "
          f"test accuracy {accuracy:.2%}", flush=True)

    status = 0
    if rank == 0:
        reference = make_model().to(device)
        reference_losses = train(reference, train_set, device)
        curve_diff = (losses - reference_losses).abs().max().item()
        weight_diff = max((p - q).abs().max().item() for p, q in zip(model.module.parameters(), reference.parameters()))
        print(f"against one process: max |loss difference| {curve_diff:.2e}, max |weight difference| {weight_diff:.2e}")
        same = torch.allclose(losses, reference_losses, rtol=1e-4, atol=1e-5) and weight_diff < 1e-4
        print("OK: DDP on foo trains as one process does" if same else "FAIL: DDP on foo diverged from one process")
        status = 0 if same else 1
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
