"""PyTorch Lightning on foo (foo_backend/lightning.py): ``Trainer(accelerator="foo", ...)`` trains on foo
with CPU's results, bit for bit.

Oracles: Lightning's own CPU runs (one device, and DDP over gloo across two processes), and for
``precision="16-mixed"``, which Lightning turns into bf16 on CPU, PyTorch's AMP recipe written by hand on
CPU (autocast to float16 and a GradScaler)."""
import os

import pytest
import torch

pl = pytest.importorskip("pytorch_lightning")

MODEL = """
import torch
import pytorch_lightning as pl

def network():
    generator = torch.Generator().manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return net

class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = network()
        self.seen = set()  # (device type, dtype of the network's output) of each step

    def training_step(self, batch, index):
        x, y = batch
        out = self.net(x)
        self.seen.add((x.device.type, out.dtype))
        return torch.nn.functional.mse_loss(out.float(), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

def loader():
    generator = torch.Generator().manual_seed(1)
    data = torch.utils.data.TensorDataset(torch.randn(64, 8, generator=generator), torch.randn(64, 1, generator=generator))
    return torch.utils.data.DataLoader(data, batch_size=8)

def fit(accelerator, devices=1, strategy="auto", precision="32-true"):
    model = Regression()
    trainer = pl.Trainer(accelerator=accelerator, devices=devices, strategy=strategy, precision=precision, max_epochs=2,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, loader())
    return model, trainer
"""
exec(MODEL)  # network, Regression, loader, fit for the tests in this process


# Fresh interpreters (tests/support/subprocesses.py), which load foo through torch's autoload only.
FRESH_SCRIPTS = {"registered_on_import", "loading_foo_imports_no_lightning"}  # about importing: fresh interpreters
SCRIPTS = {
    "registered_on_import": (MODEL + """
import sys
print("foo_backend" in sys.modules, "foo" in pl.accelerators.AcceleratorRegistry)
""", {}),
    "loading_foo_imports_no_lightning": (MODEL + """
import sys
for name in [n for n in sys.modules if "lightning" in n]:
    del sys.modules[name]
import foo_backend
print(any("lightning" in n for n in sys.modules))
""", {}),
    # Lightning's DDP launches the script again for rank 1: each run is a script file of its own, in a
    # the script's folder (printed first), then each run's outcome.
    "ddp": ("""
import os, subprocess, sys
work = os.getcwd()
script = os.path.join(work, "ddp.py")
with open(script, "w") as f:
    f.write(%r)
runs = {device: subprocess.Popen([sys.executable, script, device, os.path.join(work, device + ".pt")], cwd=work,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for device in ("foo", "cpu")}
print(work)
for device, proc in runs.items():
    out, err = proc.communicate(timeout=250)
    print(device, proc.returncode, out.split("\\n")[-2] if proc.returncode == 0 else err[-3000:].replace("\\n", " | "))
""" % (MODEL + """
import sys
model, trainer = fit(sys.argv[1], devices=2, strategy="ddp")
if trainer.global_rank == 0:
    torch.save({name: p.cpu() for name, p in model.named_parameters()}, sys.argv[2])
    print(torch.distributed.get_backend(), trainer.strategy.root_device, sorted(model.seen))
"""), {}),
}


def test_foo_is_registered_when_lightning_is_imported(subprocesses):
    assert subprocesses.check("registered_on_import").split() == ["True", "True"]
    # Loading foo does not import Lightning.
    assert subprocesses.check("loading_foo_imports_no_lightning").split() == ["False"]


@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed"])
def test_one_device_trains_on_foo_as_on_cpu(precision):
    on_cpu, _ = fit("cpu", precision=precision)
    on_foo, trainer = fit("foo", precision=precision)
    assert trainer.strategy.root_device == torch.device("foo", 0)
    dtype = torch.float32 if precision == "32-true" else torch.bfloat16
    assert on_foo.seen == {("foo", dtype)} and on_cpu.seen == {("cpu", dtype)}
    for got, want in zip(on_foo.parameters(), on_cpu.parameters()):  # Lightning's teardown moved them to CPU
        assert torch.equal(got.cpu(), want)


def test_16_mixed_autocasts_on_foo_and_scales_its_gradients():
    on_foo, trainer = fit("foo", devices=[1], precision="16-mixed")
    scaler = trainer.strategy.precision_plugin.scaler
    assert trainer.strategy.root_device == torch.device("foo", 1) and on_foo.seen == {("foo", torch.float16)}
    assert scaler.is_enabled() and scaler._device == "foo"
    # PyTorch's AMP recipe by hand, on CPU.
    net = network()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    reference = torch.amp.GradScaler("cpu")
    for _ in range(2):
        for x, y in loader():
            with torch.autocast("cpu", dtype=torch.float16):
                loss = torch.nn.functional.mse_loss(net(x).float(), y)
            optimizer.zero_grad()
            reference.scale(loss).backward()
            reference.step(optimizer)
            reference.update()
    assert scaler.get_scale() == reference.get_scale()
    for got, want in zip(on_foo.parameters(), net.parameters()):
        assert torch.equal(got.cpu(), want)


def test_ddp_on_two_foo_devices_trains_as_cpu_ddp(subprocesses):
    work, *runs = subprocesses.check("ddp").splitlines()
    outputs = {device: (code, line) for device, code, line in (run.split(" ", 2) for run in runs)}
    assert outputs["foo"] == ("0", "fccl foo:0 [('foo', torch.float32)]")
    assert outputs["cpu"] == ("0", "gloo cpu [('cpu', torch.float32)]")
    on_foo, on_cpu = torch.load(os.path.join(work, "foo.pt")), torch.load(os.path.join(work, "cpu.pt"))
    assert on_foo.keys() == on_cpu.keys()
    for name in on_foo:
        assert torch.equal(on_foo[name], on_cpu[name]), name
