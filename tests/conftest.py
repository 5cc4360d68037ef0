"""Fixtures every test module shares."""
import pytest
import torch

import foo_backend  # noqa: F401  (registers the foo device even with autoload disabled)
from support.subprocesses import Subprocesses


@pytest.fixture(autouse=True)
def restore_current_device():
    """Tests may change the current foo device; the next test starts on the one it had."""
    previous = torch.foo.current_device()
    yield
    torch.foo.set_device(previous)


@pytest.fixture(scope="module")
def subprocesses(request):
    """The module's SCRIPTS ({name: (code, env)}) in fresh interpreters, started together on first use."""
    procs = Subprocesses(request.module.SCRIPTS)
    yield procs
    procs.close()
