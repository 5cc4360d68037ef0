"""The simulated driver's own tests (tests/runtime/), at its C-like API with no PyTorch.

The runtime sources and the test program (tests/runtime/*.cpp: one file per area of the API, each registering
its tests with RUNTIME_TEST, and main.cpp) are compiled into one executable; every C++ test runs in its
own process, since the runtime reads FOO_DEVICE_COUNT, FOO_DEVICE_MEMORY_MB and FOO_LAUNCH_BLOCKING
once. The runtime knows no torch, so it is also built and tested under ThreadSanitizer and under
AddressSanitizer with UndefinedBehaviorSanitizer (`make test-sanitizers` runs those two builds alone): a
data race, a use after free, a leak or undefined behaviour fails the test that caused it, even where the
test's own checks still hold."""
import json
import os

import pytest

from support.runtime_builds import BUILDS, TESTS, build, compiler, run

SANITIZED = sorted(kind for kind in BUILDS if kind != "plain")

# The sanitizer builds are slow: each is built and run in a background script (`make test-fast` runs the
# plain build only), which prints one JSON line per test: [name, exit status, the end of its stderr].
SCRIPTS = {
    kind: (f"""
        import json, os, sys
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        from support.runtime_builds import TESTS, build, run
        os.makedirs({kind!r})  # the two builds run at once: each in a folder of its own
        binary = build({kind!r}, os.path.abspath({kind!r}))
        for name in TESTS:
            result = run(binary, {kind!r}, name)
            print(json.dumps([name, result.returncode, result.stderr[-8000:]]), flush=True)
        """, {})
    for kind in SANITIZED
}


@pytest.fixture(scope="module")
def plain_build(tmp_path_factory):
    if compiler() is None:
        pytest.skip("no C++ compiler")
    return build("plain", str(tmp_path_factory.mktemp("runtime")))


@pytest.mark.parametrize("name", TESTS)
def test_runtime(plain_build, name):
    result = run(plain_build, "plain", name)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def sanitized_results(subprocesses):
    """{build: {test name: (exit status, stderr)}}, or {build: the script's failure} if it did not finish."""
    if compiler() is None:
        pytest.skip("no C++ compiler")
    results = {}
    for kind in SANITIZED:
        proc = subprocesses[kind]
        if proc.returncode != 0:
            results[kind] = f"the {kind} script failed ({proc.returncode}):\n{proc.stderr[-8000:]}"
        else:
            lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("[")]
            results[kind] = {name: (status, err) for name, status, err in lines}
    return results


@pytest.mark.parametrize("kind", SANITIZED)
@pytest.mark.parametrize("name", TESTS)
def test_runtime_sanitized(sanitized_results, kind, name):
    results = sanitized_results[kind]
    assert not isinstance(results, str), results
    status, stderr = results[name]
    assert status == 0, stderr
