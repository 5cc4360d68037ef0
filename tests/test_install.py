"""Installing and loading foo_backend (CONTRACT: "Install and load", and "The device": device memory that host
code cannot dereference). Every check runs in a fresh interpreter: loading happens once per process."""
import importlib.metadata
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import foo_backend
import foo_backend._build_info

ROOT = Path(__file__).resolve().parents[1]

BUILT_VERSION = foo_backend._build_info.TORCH_VERSION
REBUILD_HINT = "pip install --no-build-isolation"




NO_AUTOLOAD = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}

# Makes foo_backend believe it was built against another torch, before anything imports it.
_FAKE_BUILD = """
import sys, types
fake = types.ModuleType("foo_backend._build_info")
fake.TORCH_VERSION = "1.99.0+fake"
sys.modules["foo_backend._build_info"] = fake
"""

# The same script eight times: each run is one chance for a shutdown race to abort it.
EXITS_AFTER_BACKWARD = [f"exit_after_backward_{i}" for i in range(8)]
# Scripts about importing itself run in fresh interpreters (the others fork from one: tests/support/forkserver.py).
FRESH_SCRIPTS = {"autoload_then_deref", "import_foo_backend_first", "mismatch_through_autoload"}
SCRIPTS = {
    **dict.fromkeys(EXITS_AFTER_BACKWARD, (
        "import torch\n"
        "x = torch.randn(4, 3, device='foo', requires_grad=True)\n"
        "y = torch.randn(4, 3, device='foo:1', requires_grad=True)\n"
        "(x * 2).sum().backward(); (y * 3).sum().backward()\n", {})),
    # A plain ``import torch`` (autoload), then a foo data pointer dereferenced from host code: it is a device
    # address, so the access faults as with a GPU pointer. Host (CPU tensor) pointers are fine.
    "autoload_then_deref": (
        """
        import ctypes
        import sys
        import torch
        print(torch.ones(1).foo().device)
        print("foo_backend" in sys.modules, torch.foo is sys.modules["foo_backend"])
        print(torch.tensor([1.0, 2.0], device="foo:1").sum().item())
        c = torch.full((4,), 3.5)
        t = torch.ones(4, device="foo")
        print(ctypes.c_float.from_address(c.data_ptr()).value, flush=True)
        ctypes.c_float.from_address(c.data_ptr()).value = 5.0
        print(c[0].item(), t.sum().item(), flush=True)
        print("created", flush=True)
        print(ctypes.c_float.from_address(t.data_ptr()).value, flush=True)
        """,
        {},
    ),
    "autoload_disabled": (
        """
        import sys
        import torch
        print(hasattr(torch, "foo"), "foo_backend" in sys.modules, hasattr(torch.Tensor, "foo"))
        try:
            torch.device("foo")
            print("device ok")
        except RuntimeError:
            print("device refused")
        import foo_backend
        print(hasattr(torch, "foo"), torch.foo is foo_backend)
        print(torch.ones(1).foo().device, torch.ones(1).foo().is_foo)
        """,
        NO_AUTOLOAD,
    ),
    "import_foo_backend_first": (
        """
        import foo_backend
        import torch
        print(torch.foo is foo_backend, torch.foo.device_count())
        x = torch.arange(3.0).foo(1)
        print(x.device, (x * 2).cpu().tolist())
        foo_backend._register()  # idempotent
        print(torch.foo is foo_backend)
        """,
        {},
    ),
    # Each way the native extension can fail to load, one after another in one process: a failed import
    # leaves nothing behind, so every attempt is a fresh ``import foo_backend``.
    "load_failures": (
        """
        import sys, types
        import torch

        def attempt(label):
            try:
                import foo_backend
                print(label, "imported")
            except ImportError as e:
                print(label, "ImportError:", str(e).replace(chr(10), " "))
            print(label, "registered", hasattr(torch, "foo"))

        sys.modules["foo_backend._build_info"] = None  # as if setup.py never generated it
        attempt("not_built")
        fake = types.ModuleType("foo_backend._build_info")
        fake.TORCH_VERSION = "1.99.0+fake"
        sys.modules["foo_backend._build_info"] = fake  # built against another torch
        attempt("build_differs")
        del sys.modules["foo_backend._build_info"]
        real_version = torch.__version__
        torch.__version__ = ".".join(real_version.split(".")[:2]) + ".99+fake"  # another torch of the release
        attempt("running_differs")
        torch.__version__ = "2.99.0+fake"  # a release foo does not support
        attempt("running_unsupported")
        torch.__version__ = real_version
        sys.modules["foo_backend._C"] = None  # the shared object cannot be loaded
        attempt("extension_fails")
        del sys.modules["foo_backend._C"]
        attempt("recovered")
        print("works", torch.ones(2).foo().device)
        """,
        NO_AUTOLOAD,
    ),
    "mismatch_through_autoload": (
        _FAKE_BUILD + """
import torch
print("imported torch")
""",
        {},
    ),
    "write_foo1_pointer": (
        """
        import ctypes
        import torch
        t = torch.ones(4, device="foo:1")
        print("created", flush=True)
        ctypes.c_float.from_address(t.data_ptr()).value = 5.0
        print("wrote", flush=True)
        """,
        {},
    ),
}


# ---- autoload ----------------------------------------------------------------------------------------

def test_entry_point_declared():
    eps = importlib.metadata.entry_points(group="torch.backends")
    foo = [ep for ep in eps if ep.name == "foo"]
    assert len(foo) == 1
    assert foo[0].value == "foo_backend._autoload:register"


def test_plain_import_torch_autoloads_foo(subprocesses):
    lines = subprocesses["autoload_then_deref"].stdout.splitlines()
    assert lines[0] == "foo:0"
    assert lines[1] == "True True"
    assert lines[2] == "3.0"


def test_autoload_can_be_disabled(subprocesses):
    lines = subprocesses.check("autoload_disabled").splitlines()
    assert lines[0] == "False False False"
    assert lines[1] == "device refused"
    assert lines[2] == "True True"  # import foo_backend registers everything
    assert lines[3] == "foo:0 True"


def test_import_foo_backend_before_torch(subprocesses):
    lines = subprocesses.check("import_foo_backend_first").splitlines()
    assert lines == ["True 2", "foo:1 [0.0, 2.0, 4.0]", "True"]


def test_register_is_idempotent_in_process():
    foo_backend._register()
    assert torch.foo is foo_backend
    assert torch.ones(1).foo().is_foo


# ---- version mismatch and other load failures -------------------------------------------------------

def _attempts(out):
    """label -> list of its output lines (without the label)."""
    result = {}
    for line in out.splitlines():
        label, _, rest = line.partition(" ")
        result.setdefault(label, []).append(rest)
    return result


def _import_error(attempt):
    errors = [line for line in attempt if line.startswith("ImportError:")]
    assert errors, f"no ImportError: {attempt}"
    return errors[0]


def test_running_torch_differs_from_build(subprocesses):
    attempt = _attempts(subprocesses.check("load_failures"))["running_differs"]
    msg = _import_error(attempt)
    assert ".99+fake" in msg  # the running torch
    assert BUILT_VERSION in msg  # the torch foo_backend was built against
    assert REBUILD_HINT in msg
    assert "registered False" in attempt  # nothing half-registered


def test_an_unsupported_torch_is_refused_naming_the_supported_releases(subprocesses):
    attempt = _attempts(subprocesses.check("load_failures"))["running_unsupported"]
    msg = _import_error(attempt)
    assert "2.99.0+fake" in msg and "supports torch 2.13 and 2.14" in msg
    assert "registered False" in attempt


def test_setup_refuses_an_unsupported_torch_before_building():
    """setup.py names the supported releases and stops before it writes or compiles anything."""
    script = ("import sys, runpy, torch; torch.__version__ = '2.99.0+fake'; sys.argv = ['setup.py', 'build_ext']; "
              "runpy.run_path('setup.py', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert proc.returncode != 0
    assert "foo_backend supports torch 2.13 and 2.14, not torch 2.99.0+fake" in proc.stderr


def test_build_differs_from_running_torch(subprocesses):
    attempt = _attempts(subprocesses.check("load_failures"))["build_differs"]
    msg = _import_error(attempt)
    assert "1.99.0+fake" in msg and torch.__version__ in msg
    assert REBUILD_HINT in msg
    assert "registered False" in attempt


def test_mismatch_reported_through_autoload(subprocesses):
    proc = subprocesses["mismatch_through_autoload"]
    assert proc.returncode != 0 and "imported torch" not in proc.stdout
    assert "ImportError" in proc.stderr
    assert "1.99.0+fake" in proc.stderr and torch.__version__ in proc.stderr
    assert REBUILD_HINT in proc.stderr
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in proc.stderr  # torch's own hint to get out of it
    assert "undefined symbol" not in proc.stderr


def test_extension_not_built(subprocesses):
    msg = _import_error(_attempts(subprocesses.check("load_failures"))["not_built"])
    assert "not built" in msg and REBUILD_HINT in msg


def test_extension_fails_to_load(subprocesses):
    attempt = _attempts(subprocesses.check("load_failures"))["extension_fails"]
    msg = _import_error(attempt)
    assert torch.__version__ in msg and REBUILD_HINT in msg
    assert "registered False" in attempt


def test_import_succeeds_once_the_problem_is_gone(subprocesses):
    attempts = _attempts(subprocesses.check("load_failures"))
    assert attempts["recovered"] == ["imported", "registered True"]
    assert attempts["works"] == ["foo:0"]


# ---- device pointers ---------------------------------------------------------------------------------

def test_dereferencing_a_cpu_pointer_works(subprocesses):
    lines = subprocesses["autoload_then_deref"].stdout.splitlines()
    assert lines[3:5] == ["3.5", "5.0 4.0"]


@pytest.mark.parametrize("script", ["autoload_then_deref", "write_foo1_pointer"])
def test_dereferencing_a_foo_pointer_faults(subprocesses, script):
    proc = subprocesses[script]
    lines = proc.stdout.splitlines()
    assert "created" in lines and lines[-1] == "created", proc.stdout + proc.stderr  # died right at the access
    assert proc.returncode == -signal.SIGSEGV, (proc.returncode, proc.stderr)


def test_process_exits_cleanly_right_after_backward_on_foo(subprocesses):
    # The autograd engine runs foo backward passes on per-device threads; a script that ends right
    # after backward() must still exit 0 (PyTorch's shutdown race would otherwise abort it: exit 134).
    results = [(subprocesses[name].returncode, subprocesses[name].stderr) for name in EXITS_AFTER_BACKWARD]
    assert all(code == 0 for code, _ in results), results
