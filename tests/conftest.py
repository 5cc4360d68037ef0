"""Fixtures every test module shares."""
import gc

import pytest
import torch

import foo_backend  # noqa: F401  (registers the foo device even with autoload disabled)
from support.subprocesses import Subprocesses, background


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slow: starts processes, builds or compiles for long; `make test-fast` (-m 'not slow') leaves it out")


# Files whose tests mostly start processes (worlds of ranks, torchrun, fresh interpreters), build code or
# compile graphs: `make test-fast` leaves them out, `make test` runs everything.
SLOW_FILES = {"test_aot_inductor.py", "test_client_libraries.py", "test_cpp_wrapper.py", "test_distributed.py",
              "test_distributed_training.py", "test_examples.py", "test_graph_trees.py", "test_host_threads.py",
              "test_inductor.py", "test_inductor_opinfo.py", "test_install.py", "test_lightning.py",
              "test_random_programs.py"}


def _uses_background_scripts(module):
    """Whether the module's SCRIPTS run through the `subprocesses` fixture below (not a fixture of its own)."""
    return hasattr(module, "SCRIPTS") and "subprocesses" not in vars(module)


def pytest_collection_modifyitems(items):
    for item in items:
        # A test that runs scripts in fresh interpreters (the `subprocesses` fixture) waits for their start-up.
        if item.path.name in SLOW_FILES or "subprocesses" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    # The modules that read background scripts run last, so their scripts run meanwhile (stable: each
    # module's tests keep their order).
    items.sort(key=lambda item: _uses_background_scripts(item.module))


def _scripts_of(module):
    """The module's scripts (registered with `background` on first use), run by its SCRIPTS_RUNNER if it
    names one; those named in its FRESH_SCRIPTS are not forked (support/forkserver.py)."""
    if module.__name__ not in background.groups:
        runner = getattr(module, "SCRIPTS_RUNNER", Subprocesses)
        background.register(module.__name__, runner(module.SCRIPTS, fresh=getattr(module, "FRESH_SCRIPTS", ())))
    return background.groups[module.__name__]


def pytest_collection_finish(session):
    """Starts the background scripts of the modules that have a selected test reading them."""
    # The test modules and PyTorch's OpInfo database, made at collection, live for the whole session: a full
    # garbage collection (torch.foo.graph runs one at each capture, as torch.cuda.graph does) need not walk
    # their millions of objects each time.
    gc.freeze()
    for item in session.items:
        if _uses_background_scripts(item.module) and "subprocesses" in item.fixturenames:
            _scripts_of(item.module)
    background.start()


def pytest_sessionfinish(session):
    background.close()


@pytest.fixture(autouse=True)
def restore_current_device():
    """Tests may change the current foo device; the next test starts on the one it had."""
    previous = torch.foo.current_device()
    yield
    torch.foo.set_device(previous)


@pytest.fixture(scope="module")
def subprocesses(request):
    """The module's SCRIPTS ({name: (code, env)}) in fresh interpreters (tests/support/subprocesses.py)."""
    group = _scripts_of(request.module)  # registered at collection, unless no selected test needed it then
    yield group
    group.close()
