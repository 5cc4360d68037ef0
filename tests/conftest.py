"""Fixtures every test module shares."""
import pytest
import torch

import foo_backend  # noqa: F401  (registers the foo device even with autoload disabled)
from support.subprocesses import Subprocesses


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: starts processes, builds or compiles for long; `make test-fast` (-m 'not slow') leaves it out")


# Files whose tests mostly start processes (worlds of ranks, torchrun, fresh interpreters), build code or
# compile graphs: `make test-fast` leaves them out, `make test` runs everything.
SLOW_FILES = {"test_client_libraries.py", "test_distributed.py", "test_distributed_training.py", "test_examples.py",
              "test_host_threads.py", "test_inductor.py", "test_inductor_opinfo.py", "test_install.py",
              "test_lightning.py", "test_random_programs.py"}


def pytest_collection_modifyitems(items):
    for item in items:
        # A test that runs scripts in fresh interpreters (the `subprocesses` fixture) waits for their start-up.
        if item.path.name in SLOW_FILES or "subprocesses" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


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
