"""Train a small MLP on the foo device, and check it learns exactly what the same run learns on CPU.

The data is scikit-learn's bundled 8x8 handwritten digits (1797 images, no download). The same
training runs twice, from the same initial weights and over the same minibatches: once on CPU and
once on foo. The model has dropout: each run seeds only its own device's generator, and foo draws
CPU's random numbers for the same seed. Both runs must produce the same loss curve (within float32
tolerance; in practice bit for bit).

Run:  python examples/train.py             (or: make demo)
      python examples/train.py --compile   (both runs torch.compile'd: Inductor's kernels on foo)
The two loss curves are drawn in loss_curves.png (--plot PATH to choose the file): open it in any image viewer.
"""
import argparse
import copy
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm

import foo_backend  # noqa: F401  (registers the "foo" device; plain `import torch` does too, via autoload)

EPOCHS, BATCH_SIZE, LR, SEED = 20, 64, 0.05, 0

# ---- Data: 64 pixel features scaled to [0, 1], 10 classes; a fixed 80/20 train/test split ---------
digits = load_digits()
X = torch.tensor(digits.data, dtype=torch.float32) / 16.0
y = torch.tensor(digits.target, dtype=torch.int64)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=SEED, stratify=y)
train_set = TensorDataset(X_train, y_train)


def train(model: nn.Module, device: torch.device) -> tuple[list[float], float]:
    """Trains `model` (already on `device`); returns the per-step loss curve and the test accuracy.
    (Speed is measured properly, interleaved with CPU, by benchmarks/ops.py.)"""
    # Dropout draws from the generator of the model's device, and only from it.
    if device.type == "foo":
        torch.foo.manual_seed(SEED)
    else:
        torch.default_generator.manual_seed(SEED)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    # A CPU generator with a fixed seed shuffles the data, so both runs see identical minibatches.
    loader = DataLoader(train_set, batch_size=BATCH_SIZE, shuffle=True,
                        generator=torch.Generator().manual_seed(SEED))
    losses = []  # kept on the device; one transfer at the end instead of a sync per step
    model.train()
    bar = tqdm(range(EPOCHS), desc=f"train on {device}", unit="epoch")
    for _ in bar:
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            loss = F.cross_entropy(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        bar.set_postfix(loss=f"{losses[-1].item():.4f}")  # .item() waits for the device
    # Test accuracy, computed on the device.
    model.eval()
    with torch.no_grad():
        predictions = model(X_test.to(device)).argmax(dim=1)
        accuracy = (predictions == y_test.to(device)).float().mean().item()
    return torch.stack(losses).cpu().tolist(), accuracy


def plot_curves(foo_losses: list[float], cpu_losses: list[float], path: str, mode: str) -> None:
    """Both loss curves in one PNG: foo's drawn over CPU's (they coincide when foo is right)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(cpu_losses, label="CPU", linewidth=4, alpha=0.4, color="tab:blue")
    ax.plot(foo_losses, label="foo", linewidth=1, color="tab:orange")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy loss")
    ax.set_yscale("log")
    ax.set_title(f"demo MLP on 8x8 digits ({mode}): foo and CPU, same seed")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> int:
    parser = argparse.ArgumentParser(description="Train the demo MLP on foo and on CPU; compare the runs.")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model on both devices")
    parser.add_argument("--plot", default="loss_curves.png", help="where to draw the loss curves (a PNG)")
    args = parser.parse_args()
    foo = torch.device("foo")
    print(f"device: {torch.foo.get_device_name()} ({torch.foo.device_count()} foo devices), torch {torch.__version__}")
    print(f"data:   {len(X_train)} train / {len(X_test)} test digits, 64 features, 10 classes")

    # One set of initial weights, made on CPU with a fixed seed; the foo run gets an exact copy.
    torch.default_generator.manual_seed(SEED)  # the CPU generator that initialises the weights
    cpu_model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 128), nn.ReLU(),
                              nn.Linear(128, 10))
    foo_model = copy.deepcopy(cpu_model).to(foo)
    if args.compile:  # forward and backward become Inductor kernels (foo's run on foo's streams)
        cpu_model, foo_model = torch.compile(cpu_model), torch.compile(foo_model)

    start = time.perf_counter()
    cpu_losses, cpu_acc = train(cpu_model, torch.device("cpu"))
    foo_losses, foo_acc = train(foo_model, foo)

    print(f"test accuracy:  foo {foo_acc:.2%}   cpu {cpu_acc:.2%}")
    print(f"final loss:     foo {foo_losses[-1]:.6f}   cpu {cpu_losses[-1]:.6f}   "
          f"({len(foo_losses)} steps each, both runs in {time.perf_counter() - start:.1f} s)")

    # The two loss curves must agree to float32 precision (rtol 1e-5), step by step.
    foo_curve, cpu_curve = torch.tensor(foo_losses), torch.tensor(cpu_losses)
    max_diff = (foo_curve - cpu_curve).abs().max().item()
    print(f"loss curves:    max |foo - cpu| = {max_diff:.3e} over {len(foo_losses)} steps")
    print(f"foo memory:     {torch.foo.memory_allocated() / 2**20:.2f} MiB allocated, "
          f"{torch.foo.max_memory_allocated() / 2**20:.2f} MiB peak, "
          f"{torch.foo.memory_reserved() / 2**20:.2f} MiB reserved")
    plot_curves(foo_losses, cpu_losses, args.plot, "compiled" if args.compile else "eager")
    print(f"plot:           {args.plot}")
    if not torch.allclose(foo_curve, cpu_curve, rtol=1e-5, atol=1e-6):
        print("FAIL: training on foo diverged from the same training on CPU", file=sys.stderr)
        return 1
    print("OK: the loss curve on foo matches the one on CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
