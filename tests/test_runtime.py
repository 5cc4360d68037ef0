"""The simulated driver's own tests (tests/runtime/runtime_tests.cpp), at its C-like API with no PyTorch.

The runtime sources and the test program are compiled into one executable; every C++ test runs in its
own process, since the runtime reads FOO_DEVICE_COUNT, FOO_DEVICE_MEMORY_MB and FOO_LAUNCH_BLOCKING
once."""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "tests", "runtime", "runtime_tests.cpp")
RUNTIME = os.path.join(ROOT, "csrc", "runtime")
TESTS = re.findall(r"^RUNTIME_TEST\((\w+)\)", open(SOURCE).read(), re.MULTILINE)
ENV = {"FOO_DEVICE_COUNT": "2", "FOO_DEVICE_MEMORY_MB": "64", "FOO_LAUNCH_BLOCKING": "0"}
OVERRIDES = {"launch_blocking_runs_kernels_inline": {"FOO_LAUNCH_BLOCKING": "1"}}


@pytest.fixture(scope="module")
def runtime_tests(tmp_path_factory):
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    binary = str(tmp_path_factory.mktemp("runtime") / "runtime_tests")
    sources = [SOURCE] + sorted(os.path.join(RUNTIME, f) for f in os.listdir(RUNTIME) if f.endswith(".cpp"))
    build = subprocess.run([compiler, "-std=c++17", "-O1", "-pthread", "-I", os.path.join(ROOT, "csrc"), *sources,
                            "-o", binary], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    listed = subprocess.run([binary, "--list"], capture_output=True, text=True, check=True).stdout.split()
    assert sorted(listed) == sorted(TESTS)
    return binary


@pytest.mark.parametrize("name", TESTS)
def test_runtime(runtime_tests, name):
    env = {**os.environ, **ENV, **OVERRIDES.get(name, {})}
    result = subprocess.run([runtime_tests, name], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
