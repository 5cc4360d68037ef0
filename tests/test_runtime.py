"""The simulated driver's own tests (tests/runtime/), at its C-like API with no PyTorch.

The runtime sources and the test program (tests/runtime/*.cpp: one file per area of the API, each registering
its tests with RUNTIME_TEST, and main.cpp) are compiled into one executable; every C++ test runs in its
own process, since the runtime reads FOO_DEVICE_COUNT, FOO_DEVICE_MEMORY_MB and FOO_LAUNCH_BLOCKING
once. The runtime knows no torch, so it is also built and tested under ThreadSanitizer and under
AddressSanitizer with UndefinedBehaviorSanitizer (`make test-sanitizers` runs those two builds alone): a
data race, a use after free, a leak or undefined behaviour fails the test that caused it, even where the
test's own checks still hold."""
import concurrent.futures
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_DIR = os.path.join(ROOT, "tests", "runtime")
SOURCES = sorted(os.path.join(TEST_DIR, f) for f in os.listdir(TEST_DIR) if f.endswith(".cpp"))
RUNTIME = os.path.join(ROOT, "csrc", "runtime")
TESTS = [name for source in SOURCES for name in re.findall(r"^RUNTIME_TEST\((\w+)\)", open(source).read(), re.MULTILINE)]
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


# The sanitizer builds are slow (`make test-fast` runs the plain build only).
@pytest.fixture(scope="module", params=[build if build == "plain" else pytest.param(build, marks=pytest.mark.slow)
                                        for build in sorted(BUILDS)])
def runtime_tests(request, tmp_path_factory):
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    flags, options = BUILDS[request.param]
    build_dir = tmp_path_factory.mktemp("runtime")
    binary = str(build_dir / f"runtime_tests_{request.param}")
    # The test files compile as one translation unit (each alone would parse the standard headers again, three
    # times the compile time), the runtime's sources one object each as in the extension; in parallel, then linked.
    tests_unit = build_dir / "runtime_tests.cpp"
    tests_unit.write_text("".join(f'#include "{source}"\n' for source in SOURCES))
    sources = [str(tests_unit)] + sorted(os.path.join(RUNTIME, f) for f in os.listdir(RUNTIME) if f.endswith(".cpp"))
    command = [compiler, "-std=c++17", *flags, "-pthread"]
    objects = [str(build_dir / f"{index:02d}_{os.path.basename(source)}.o") for index, source in enumerate(sources)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        builds = list(pool.map(lambda source, obj: subprocess.run(
            [*command, "-I", os.path.join(ROOT, "csrc"), "-c", source, "-o", obj], capture_output=True, text=True),
            sources, objects))
    for build in builds:
        assert build.returncode == 0, build.stderr
    link = subprocess.run([*command, *objects, "-o", binary], capture_output=True, text=True)
    assert link.returncode == 0, link.stderr
    listed = subprocess.run([binary, "--list"], capture_output=True, text=True, check=True, env={**os.environ, **options}).stdout.split()
    assert sorted(listed) == sorted(TESTS)
    return binary, options


@pytest.mark.parametrize("name", TESTS)
def test_runtime(runtime_tests, name):
    binary, options = runtime_tests
    env = {**os.environ, **ENV, **options, **OVERRIDES.get(name, {})}
    result = subprocess.run([binary, name], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
