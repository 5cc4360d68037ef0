"""Lets PyTorch 2.13's DTensor test base initialise foo's process group; used by run_pytorch_device_tests.py only.

``DTensorTestBase.init_pg`` accepts a fixed list of backend names (nccl, gloo, xccl, hccl, ...) and raises
"Backend fccl not supported!" for the default backend of any PrivateUse1 device. Python imports this module at
start-up in every process of a test (the test runner and the ranks it spawns) when this folder is on PYTHONPATH;
it patches the test base when, and only if, a process imports it, and imports nothing itself.
"""
import importlib.abc
import importlib.machinery
import sys

_TEST_BASE_MODULE = "torch.testing._internal.distributed._tensor.common_dtensor"


def _accept_foo_backend(common_dtensor):
    import torch.distributed as dist

    original_init_pg = common_dtensor.DTensorTestBase.init_pg

    def init_pg(self, eager_init, backend=None):
        backend = backend or self.backend
        if backend != "fccl":
            return original_init_pg(self, eager_init, backend)
        # What init_pg does for gloo, the backend fccl is built on.
        dist.init_process_group(backend=backend, world_size=self.world_size, rank=self.rank,
                                init_method=f"file://{self.file_name}")

    common_dtensor.DTensorTestBase.init_pg = init_pg


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TEST_BASE_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _accept_foo_backend(module)

        spec.loader.exec_module = exec_and_patch
        return spec


sys.meta_path.insert(0, _PatchOnImport())
