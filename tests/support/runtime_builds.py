"""Builds of the runtime's C API tests (tests/runtime/) and one test's run, for tests/test_runtime.py: in
its process (the plain build) and in background scripts (the sanitizer builds)."""
import concurrent.futures
import os
import re
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


def compiler():
    return shutil.which("g++") or shutil.which("c++")


def build(kind, build_dir):
    """The test program of build `kind`, compiled in `build_dir`; raises AssertionError with the
    compiler's output if it does not build or does not list TESTS."""
    flags, options = BUILDS[kind]
    binary = os.path.join(build_dir, f"runtime_tests_{kind}")
    # The test files compile as one translation unit (each alone would parse the standard headers again, three
    # times the compile time), the runtime's sources one object each as in the extension; in parallel, then linked.
    tests_unit = os.path.join(build_dir, "runtime_tests.cpp")
    with open(tests_unit, "w") as f:
        f.write("".join(f'#include "{source}"\n' for source in SOURCES))
    sources = [tests_unit] + sorted(os.path.join(RUNTIME, f) for f in os.listdir(RUNTIME) if f.endswith(".cpp"))
    command = [compiler(), "-std=c++17", *flags, "-pthread"]
    objects = [os.path.join(build_dir, f"{index:02d}_{os.path.basename(source)}.o") for index, source in enumerate(sources)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        builds = list(pool.map(lambda source, obj: subprocess.run(
            [*command, "-I", os.path.join(ROOT, "csrc"), "-c", source, "-o", obj], capture_output=True, text=True),
            sources, objects))
    for result in builds:
        assert result.returncode == 0, result.stderr
    link = subprocess.run([*command, *objects, "-o", binary], capture_output=True, text=True)
    assert link.returncode == 0, link.stderr
    listed = subprocess.run([binary, "--list"], capture_output=True, text=True, check=True,
                            env={**os.environ, **options}).stdout.split()
    assert sorted(listed) == sorted(TESTS), listed
    return binary


def run(binary, kind, name):
    """Test `name` of a build, in a process of its own (the runtime reads its variables once)."""
    env = {**os.environ, **ENV, **BUILDS[kind][1], **OVERRIDES.get(name, {})}
    return subprocess.run([binary, name], capture_output=True, text=True, env=env, timeout=300)
