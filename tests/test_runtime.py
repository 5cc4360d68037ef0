"""The simulated driver's own tests (tests/runtime/runtime_tests.cpp), at its C-like API with no PyTorch.

The runtime sources and the test program are compiled into one executable; every C++ test runs in its
own process, since the runtime reads FOO_DEVICE_COUNT, FOO_DEVICE_MEMORY_MB and FOO_LAUNCH_BLOCKING
once. The runtime knows no torch, so it is also built and tested under ThreadSanitizer and under
AddressSanitizer with UndefinedBehaviorSanitizer (`make test-sanitizers` runs those two builds alone): a
data race, a use after free, a leak or undefined behaviour fails the test that caused it, even where the
test's own checks still hold."""
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

# Build flags and run-time options of each build. The tests that check that host code faults on device
# memory expect the kernel's SIGSEGV, so the sanitizers leave that signal alone.
BUILDS = {
    "plain": (["-O1"], {}),
    "tsan": (["-O1", "-g", "-fsanitize=thread"],
             {"TSAN_OPTIONS": "halt_on_error=1 second_deadlock_stack=1 handle_segv=0"}),
    "asan": (["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"],
             {"ASAN_OPTIONS": "handle_segv=0:detect_leaks=1", "UBSAN_OPTIONS": "print_stacktrace=1"}),
}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def runtime_tests(request, tmp_path_factory):
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    flags, options = BUILDS[request.param]
    binary = str(tmp_path_factory.mktemp("runtime") / f"runtime_tests_{request.param}")
    sources = [SOURCE] + sorted(os.path.join(RUNTIME, f) for f in os.listdir(RUNTIME) if f.endswith(".cpp"))
    build = subprocess.run([compiler, "-std=c++17", *flags, "-pthread", "-I", os.path.join(ROOT, "csrc"), *sources,
                            "-o", binary], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    listed = subprocess.run([binary, "--list"], capture_output=True, text=True, check=True, env={**os.environ, **options}).stdout.split()
    assert sorted(listed) == sorted(TESTS)
    return binary, options


@pytest.mark.parametrize("name", TESTS)
def test_runtime(runtime_tests, name):
    binary, options = runtime_tests
    env = {**os.environ, **ENV, **options, **OVERRIDES.get(name, {})}
    result = subprocess.run([binary, name], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
