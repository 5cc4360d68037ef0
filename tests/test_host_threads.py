"""Several host threads using foo at once, as Python threads, autograd's device thread and a DataLoader's
pinning thread do: each workload's results equal CPU's, and the process survives.

The oracle is CPU: each thread's workload runs again on CPU, one after the other, and must give the same
values. The workloads run in fresh interpreters (a crash there fails one test, not the suite), all started
together, which also loads the cores as a busy CI machine would. Each is sized to fail reliably without the
runtime's fix for host threads giving back one stream's finished launches at once (a segmentation fault
in 3 runs of 3 before it)."""
import pytest

# Runs `workload(index, device)` in `threads` threads on foo, then each index again on CPU, and compares:
# exactly, unless foo's kernels round differently from CPU's (its fused recurrent cells, as CUDA's).
PRELUDE = """
import threading
import torch
import foo_backend  # noqa: F401

def seeded(module, seed):
    # The global seed is shared by the threads: parameters come from a generator of the thread's own.
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return module

def on_threads(workload, threads, exact=True):
    results, errors = [None] * threads, []
    def run(index):
        try:
            results[index] = workload(index, "foo")
        except BaseException as error:  # reported by the main thread
            errors.append(error)
    workers = [threading.Thread(target=run, args=(index,)) for index in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]
    torch.foo.synchronize()
    for index in range(threads):
        expected = workload(index, "cpu")
        for got, want in zip(results[index], expected):
            tolerance = {"rtol": 0, "atol": 0} if exact else {}
            torch.testing.assert_close(got.cpu() if isinstance(got, torch.Tensor) else got, want, **tolerance)
    print("ok")
"""

SMALL_OPERATORS = """
def small_operators(index, device, each_step=lambda step: None):
    # Small operators queued back to back, a host read now and then, tensors freed as they go.
    x = torch.arange(64, dtype=torch.float32).div(64).add(index).to(device)
    reads = []
    for step in range(2000):
        x = (x * 0.5 + 1.0).sin()
        if step % 40 == 0:
            reads.append(float(x.sum()))
        each_step(step)
    return [x, torch.tensor(reads)]
"""

SCRIPTS = {
    # Four threads on the default stream of device 0: one stream, launched on and given back by all of them.
    "small_operators_on_one_stream": (SMALL_OPERATORS + "on_threads(small_operators, 4)\n", {}),
    # Four threads on streams of their own, with events, queries and synchronizations interleaved.
    "streams_events_and_frees": (SMALL_OPERATORS + """
def with_events(index, device):
    if device == "cpu":
        return small_operators(index, device)
    stream = torch.foo.Stream()
    def events_and_syncs(step):
        if step % 7 == 0:
            event = torch.foo.Event()
            event.record()
            event.query()
            torch.foo.current_stream().wait_stream(torch.foo.default_stream())
        if step % 97 == 0:
            stream.synchronize()
    with torch.foo.stream(stream):
        return small_operators(index, device, events_and_syncs)
on_threads(with_events, 4)
""", {}),
    # Three threads each training a small model: forward, backward (on autograd's device thread), SGD, loss.item().
    "training_in_threads": ("""
def train(index, device):
    model = seeded(torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)), index).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    inputs = torch.randn(400, 16, 8, generator=torch.Generator().manual_seed(100 + index))
    losses = []
    for step in range(400):
        loss = model(inputs[step].to(device)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return [torch.tensor(losses), *model.parameters()]
on_threads(train, 3)
""", {}),
    # Recurrent layers' gradients from two threads (PyTorch's test_modules died here at random).
    "recurrent_gradients_in_threads": ("""
def recurrent(index, device):
    layers = [seeded(torch.nn.GRU(6, 8, batch_first=True), index), seeded(torch.nn.LSTM(6, 8, num_layers=2), index),
              seeded(torch.nn.MultiheadAttention(6, 2, batch_first=True), index)]
    outputs = []
    for step in range(60):
        layer = layers[step % 3].to(device)
        x = torch.randn(3, 5, 6, generator=torch.Generator().manual_seed(step)).to(device).requires_grad_()
        out = layer(x, x, x)[0] if isinstance(layer, torch.nn.MultiheadAttention) else layer(x)[0]
        (grad,) = torch.autograd.grad(out.sum(), x)
        outputs.append(grad)
        layers[step % 3] = layer.cpu()
    return outputs
on_threads(recurrent, 2, exact=False)
""", {}),
    # A DataLoader's pinning thread copies batches into pinned memory while the training thread moves them
    # to foo with non_blocking copies; a second thread trains beside it.
    "pinned_dataloader_while_training": ("""
def train_from_loader(index, device):
    data = torch.utils.data.TensorDataset(torch.randn(4096, 8, generator=torch.Generator().manual_seed(index)))
    loader = torch.utils.data.DataLoader(data, batch_size=8, pin_memory=device == "foo")
    model = seeded(torch.nn.Linear(8, 1), index).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step, (batch,) in enumerate(loader):
        if device == "foo":
            assert batch.is_pinned()
        loss = model(batch.to(device, non_blocking=True)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 8 == 0:
            losses.append(loss.item())
    return [torch.tensor(losses), *model.parameters()]
on_threads(train_from_loader, 3)
""", {}),
}


SCRIPTS = {name: (PRELUDE + code, env) for name, (code, env) in SCRIPTS.items()}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_host_threads(subprocesses, name):
    assert subprocesses.check(name).strip().endswith("ok")
