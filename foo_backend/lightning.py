"""PyTorch Lightning on foo: ``Trainer(accelerator="foo", devices=N, strategy=..., precision=...)``.

Importing foo_backend (which ``import torch`` does) arranges for Lightning's accelerator registry to hold
``"foo"`` as soon as Lightning is imported, through Lightning's own ``AcceleratorRegistry.register``:
nothing of Lightning is modified, and nothing is imported until the program imports Lightning itself.

Lightning 2.6 decides three things from the accelerator's *name*, knowing only "cuda", "gpu" and "mps":
a single-device run gets a CPU ``SingleDeviceStrategy``, ``precision="16-mixed"``/``"bf16-mixed"`` build
their autocast and GradScaler for "cuda", and DDP creates a ``torch.cuda.Stream`` around its model. The
accelerator's ``setup(trainer)`` hook, which Lightning calls before the model moves, sets the trainer's
strategy and precision plugin to foo instead, as they are set up for "cuda": the root device, autocast
on "foo" with a foo GradScaler for "16-mixed", and DDP built without a CUDA stream.
"""
import functools
import importlib.abc
import sys
from typing import Any

import torch

from ._utils import _check_device_index

# Lightning's two distributions, each with its own registry and classes.
_ACCELERATOR_MODULES = ("pytorch_lightning.accelerators", "lightning.pytorch.accelerators")


def _parse_devices(devices: Any) -> list[int]:
    """Lightning's ``devices`` argument as foo device indices: a count (``-1``: all), a list of indices,
    or a string of either ("2", "0,1", "-1")."""
    count = torch.foo.device_count()
    if isinstance(devices, str):
        devices = devices.strip()
        devices = [int(d) for d in devices.split(",") if d.strip()] if "," in devices else int(devices)
    if isinstance(devices, int):
        if devices == -1:
            devices = count
        if devices < 0 or devices > count:
            raise ValueError(f"devices={devices}: there are {count} foo devices")
        return list(range(devices))
    indices = [int(d) for d in devices]
    for index in indices:
        _check_device_index(index)
    return indices


def _setup_ddp_model(strategy: Any, model: torch.nn.Module) -> torch.nn.Module:
    """Lightning's ``DDPStrategy._setup_model`` without the ``torch.cuda.Stream`` it builds DDP under. On the
    current stream: built under a side stream, DDP's gradient accumulators would belong to that stream,
    and every backward would warn that their stream is not the gradients' one."""
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(model, device_ids=strategy.determine_ddp_device_ids(), **strategy._ddp_kwargs)


def _set_up_for_foo(package: str, trainer: Any) -> None:
    """What Lightning sets up for an accelerator it knows by name, set up for foo (see the module's doc)."""
    strategies = sys.modules[f"{package}.strategies"]
    precision = sys.modules[f"{package}.plugins.precision"]
    strategy = trainer.strategy
    if isinstance(strategy, strategies.SingleDeviceStrategy) and strategy.root_device.type != "foo":
        # The device this accelerator's get_parallel_devices gave (Lightning's attribute: the tests break if it goes).
        device = trainer._accelerator_connector._parallel_devices[0]
        strategy._root_device = device
        torch.foo.set_device(device)
    plugin = strategy.precision_plugin
    if isinstance(plugin, precision.MixedPrecision) and plugin.device != "foo":
        plugin.device = "foo"
        if plugin.scaler is not None:  # "16-mixed": CUDA's scaler disabled itself, CUDA being absent
            plugin.scaler = torch.amp.GradScaler("foo")
    if isinstance(strategy, strategies.DDPStrategy):
        strategy._setup_model = functools.partial(_setup_ddp_model, strategy)


def _accelerator_class(accelerators: Any) -> type:
    """FooAccelerator for the Lightning package whose ``accelerators`` module this is."""
    package = accelerators.__name__.rsplit(".", 1)[0]

    class FooAccelerator(accelerators.Accelerator):
        """Lightning's accelerator for foo devices: ``Trainer(accelerator="foo")``."""

        def setup_device(self, device: torch.device) -> None:
            if device.type == "foo":  # a single-device run is moved to foo by setup()
                torch.foo.set_device(device)

        def setup(self, trainer: Any) -> None:
            _set_up_for_foo(package, trainer)

        def teardown(self) -> None:
            pass

        def get_device_stats(self, device: Any) -> dict[str, Any]:
            return torch.foo.memory_stats(device)

        @staticmethod
        def parse_devices(devices: Any) -> list[int]:
            return _parse_devices(devices)

        @staticmethod
        def get_parallel_devices(devices: list[int]) -> list[torch.device]:
            return [torch.device("foo", index) for index in devices]

        @staticmethod
        def auto_device_count() -> int:
            return torch.foo.device_count()

        @staticmethod
        def is_available() -> bool:
            return torch.foo.device_count() > 0

        @staticmethod
        def name() -> str:
            return "foo"

    FooAccelerator.__module__ = __name__
    return FooAccelerator


def _register(accelerators: Any) -> None:
    if "foo" not in accelerators.AcceleratorRegistry:
        accelerators.AcceleratorRegistry.register("foo", _accelerator_class(accelerators),
                                                  description="foo_backend's simulated accelerator")


class _RegisterOnImport(importlib.abc.MetaPathFinder):
    """Registers foo with a Lightning accelerator registry once its module has run."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _ACCELERATOR_MODULES:
            return None
        for finder in sys.meta_path:  # whichever finder would have found it (an editable install's, say)
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        run_module = spec.loader.exec_module

        def run_and_register(module):
            run_module(module)
            _register(module)

        spec.loader.exec_module = run_and_register
        return spec


def _install() -> None:
    for name in _ACCELERATOR_MODULES:
        if name in sys.modules:  # Lightning came first
            _register(sys.modules[name])
    if not any(isinstance(finder, _RegisterOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterOnImport())
