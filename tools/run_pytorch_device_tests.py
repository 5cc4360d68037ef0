"""Runs PyTorch's own device-generic test files on foo and on CPU and lists every test that fails on foo only.

PyTorch's test files that call ``instantiate_device_type_tests`` create a PRIVATEUSE1 class for foo beside the CPU
class: the same test body, the device type as argument. A test that passes on CPU and fails on foo is a foo defect
unless ``tools/pytorch_device_tests_expected.txt`` names it with a one-line reason. The files are not part of the
PyTorch wheel: this script downloads them for the installed torch version (tag ``v<version>``) into a cache, or
reads them from ``--tests-dir`` (a checkout's ``test/`` folder, or copies of the files) on a machine without
access to GitHub. A copy from another PyTorch version may not import on this one: the script then says the file
did not run (not even on CPU); adapt the copy's imports to the installed torch (the tests themselves unchanged).

    python tools/run_pytorch_device_tests.py                       # every file below, downloaded
    python tools/run_pytorch_device_tests.py --tests-dir ~/pytorch/test test_view_ops

PyTorch's DTensor tests (``distributed/tensor/...``) run differently: their test base takes the accelerator when
one is loaded, so foo's run is the whole file with foo autoloaded (``FOO_DEVICE_COUNT=8``, so the 8-rank
classes stay on foo) and CPU's the same file with autoload off (gloo on CPU tensors). Their base refuses a
backend name it does not know (``fccl``); ``tools/pytorch_tests_harness/sitecustomize.py`` lets it through.

PyTorch's Inductor tests (``inductor/test_torchinductor``) build one class per device from a template
(``CommonTemplate``): CPU's run is its class ``CpuTests`` with foo not loaded, foo's the same template for foo,
``FooTests`` of ``tools/pytorch_tests_harness/inductor_foo_tests.py`` (as the file builds CUDA's: eager against
compiled on the device, then again in half precision), with one compile thread.

``inductor/test_torchinductor:cpp_wrapper`` runs the same template once more with Inductor's C++ wrapper, on both
devices (``tools/pytorch_tests_harness/inductor_cpp_wrapper_tests.py``: the two classes above, the C++ wrapper on),
as PyTorch's test_cpu_cpp_wrapper.py and test_gpu_cpp_wrapper.py do for its devices. PyTorch's AOTInductor tests
(``inductor/test_aot_inductor``, with the three files it imports beside it) build their classes from a template
too: CPU's is the file's ``AOTInductorTestABICompatibleCpu``, foo's the same template for foo
(``tools/pytorch_tests_harness/aot_inductor_foo_tests.py``: export, package, load and run on foo, against eager on
foo). With ``--cpu-where-foo-fails``, a template's CPU class runs only the tests that fail on foo.

PyTorch's tests of Inductor's graph trees (``inductor/test_cudagraph_trees``) are written for CUDA alone: there
is no CPU class to compare with. ``tools/pytorch_tests_harness/cudagraph_trees_foo_tests.py`` writes the file
for foo (the device's name only) and runs it; every test that fails on foo needs its reason in the list.

Each run writes every test's outcome as it ends (``tools/pytest_outcome_log.py``) to a report in ``--out``: a
test that kills its process fails, and the run goes on without it; ``--reuse-reports`` reads the reports again,
or finishes a stopped run's. Prints one line of counts per file and the foo-only failures without a reason, and
exits non-zero if there are any, or if a listed expected failure now passes (the list must stay true). Slow: the
files run twice, once per device (about 80 minutes on two cores for the first eight files; test_modules,
test_optim and test_foreach take about 40, 10 and 55 minutes more of CPU time; the Inductor template 50, graph
trees 12; foo's classes of the Inductor template with the C++ wrapper and of the AOTInductor template about 60
and 30: a C++ library is compiled per graph); it is not part of ``make test``.
"""
import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import urllib.request
from collections import namedtuple
from pathlib import Path

import torch

DEVICE_GENERIC_FILES = ["test_binary_ufuncs", "test_reductions", "test_type_promotion", "test_tensor_creation_ops",
                        "test_indexing", "test_view_ops", "test_shape_ops", "test_nn", "test_modules", "test_optim",
                        "test_foreach"]
# Files a test file imports from beside it, downloaded with it (test_optim imports classes of test/optim/).
COMPANIONS = {"test_optim": ["optim/test_lrscheduler", "optim/test_optim", "optim/test_swa_utils"],
              "inductor/test_aot_inductor": ["inductor/test_aot_inductor_utils", "inductor/test_control_flow",
                                             "inductor/test_torchinductor"]}
DISTRIBUTED_FILES = ["distributed/tensor/test_dtensor", "distributed/tensor/test_redistribute"]
# Exhaustive sweeps over every placement of a (2, 2, 2) mesh: minutes each with 8 ranks on two cores.
INDUCTOR_FILES = ["inductor/test_torchinductor", "inductor/test_torchinductor:cpp_wrapper",
                  "inductor/test_aot_inductor"]
# Files written for CUDA alone, run for foo by their harness (no CPU class: every failure on foo is foo's).
FOO_ONLY_FILES = {"inductor/test_cudagraph_trees": "cudagraph_trees_foo_tests.py"}
# 100 products of 4096x4096 matrices, run several times: tens of minutes of matrix multiplication on two cores.
FOO_ONLY_DESELECTED = ["test_warmup_stream_sync"]
DISTRIBUTED_DESELECTED = ["test_multi_dim_mesh", "test_ordered_distribute_all_combination",
                          "test_ordered_redistribute_with_partial"]
HARNESS = Path(__file__).with_name("pytorch_tests_harness")
OUTCOME_LOG_PLUGIN = Path(__file__).with_name("pytest_outcome_log.py")
END_OF_RUN = json.dumps({"event": "end of run"}) + "\n"  # the last line of a report whose run ended
EXPECTED = Path(__file__).with_name("pytorch_device_tests_expected.txt")
DEVICE_CLASS_SUFFIX = {"foo": "PRIVATEUSE1", "cpu": "CPU"}
# Files that build one test class per device from a template: the harness that builds foo's class, the two
# classes, whether CPU's class is the harness's too (else the file's own), and the classes' device-neutral name.
TemplateRun = namedtuple("TemplateRun", "harness foo_class cpu_class cpu_in_harness neutral_class")
TEMPLATE_RUNS = {
    "inductor/test_torchinductor": TemplateRun("inductor_foo_tests.py", "FooTests", "CpuTests", False,
                                               "CommonTemplate"),
    "inductor/test_torchinductor:cpp_wrapper": TemplateRun("inductor_cpp_wrapper_tests.py", "FooCppWrapperTests",
                                                           "CpuCppWrapperTests", True, "CppWrapperTemplate"),
    "inductor/test_aot_inductor": TemplateRun("aot_inductor_foo_tests.py", "AOTInductorTestABICompatibleFoo",
                                              "AOTInductorTestABICompatibleCpu", False, "AOTInductorTestsTemplate"),
}
TEMPLATE_NEUTRAL_CLASS = {cls: run.neutral_class for run in TEMPLATE_RUNS.values()
                          for cls in (run.foo_class, run.cpu_class)}


def torch_tag():
    return "v" + torch.__version__.split("+")[0]


def download(name, cache):
    """The file ``test/<name>.py`` of the installed torch's release tag, kept in ``cache``."""
    path = cache / f"{name}.py"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        url = f"https://raw.githubusercontent.com/pytorch/pytorch/{torch_tag()}/test/{name}.py"
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                text = response.read()
        except OSError as error:
            sys.exit(f"cannot download {url} ({error}); pass --tests-dir with PyTorch's test/ folder")
        path.write_bytes(text)
    return path


def run_file(path, device, out_dir, reuse=False, variant="", only=None):
    """Runs one test file's class for ``device`` under pytest; returns {test id: (outcome, first line of the
    error)}, the ids device-neutral. With ``reuse``, reads the report of an earlier run, or finishes it if that
    run was stopped. ``variant`` names a second way of running a template file (``test_torchinductor:cpp_wrapper``);
    ``only`` (a template file's) the names of the only tests of the class to run."""
    report = out_dir / f"{path.stem}{'.' + variant if variant else ''}.{device}.jsonl"
    distributed = "distributed" in path.parts
    if reuse and report.exists() and report.read_text().endswith(END_OF_RUN):
        return read_report(report, path.name, device, distributed)
    target = path
    written_for_cuda = next((h for f, h in FOO_ONLY_FILES.items() if path.as_posix().endswith(f + ".py")), None)
    template = TEMPLATE_RUNS.get(f"{path.parent.name}/{path.stem}" + (f":{variant}" if variant else ""))
    if written_for_cuda:
        if device != "foo":
            return {}
        env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="1", PYTORCH_INDUCTOR_TESTS_DIR=str(path.parent))
        target = HARNESS / written_for_cuda
        select = " and ".join(["CudaGraphTreeTests"] + [f"not {name}" for name in FOO_ONLY_DESELECTED])
    elif template:
        env = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="1", PYTORCH_INDUCTOR_TESTS_DIR=str(path.parent))
        if device == "foo" or template.cpu_in_harness:
            target = HARNESS / template.harness
        if device != "foo":
            env.update(TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        select = template.foo_class if device == "foo" else template.cpu_class
    elif distributed:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(HARNESS), os.environ.get("PYTHONPATH")])))
        if device == "foo":
            env.update(FOO_DEVICE_COUNT="8")
        else:
            env.update(TORCH_DEVICE_BACKEND_AUTOLOAD="0")
        select = " and ".join(f"not {name}" for name in DISTRIBUTED_DESELECTED)
    else:
        env = dict(os.environ, PYTORCH_TESTING_DEVICE_ONLY_FOR=device)
        # Only the file's device-generic class for this device (the others run on CPU whatever the device).
        select = DEVICE_CLASS_SUFFIX[device]
    env.update(FOO_TEST_OUTCOME_LOG=str(report),
               PYTHONPATH=os.pathsep.join(filter(None, [str(OUTCOME_LOG_PLUGIN.parent), env.get("PYTHONPATH")])))
    selection = [str(target), "-k", select] if only is None else [f"{target}::{select}::{name}" for name in only]
    if reuse and report.exists():  # a stopped run: its tests that did not end run again
        unfinished = {test for test, outcome in test_outcomes(report).items() if outcome is None}
        report.write_text("".join(line for line in report.read_text().splitlines(keepends=True)
                                  if json.loads(line).get("test") not in unfinished))
    else:
        report.unlink(missing_ok=True)
    while only != []:
        done = test_outcomes(report)
        # A test that killed the process has no outcome: it failed, and the run goes on without the tests done.
        finished = subprocess.run([sys.executable, "-m", "pytest", *selection, "-q", "-p", "no:cacheprovider",
                                   "-p", OUTCOME_LOG_PLUGIN.stem, *(f"--deselect={t}" for t in done)],
                                  cwd=path.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        died = [test for test, outcome in test_outcomes(report).items() if outcome is None]
        if not died:
            break
        with report.open("a") as log:
            for test in died:
                log.write(json.dumps({"test": test, "event": "teardown", "outcome": "failed",
                                      "message": f"Error: the test's process died (exit status {finished.returncode})"})
                          + "\n")
    with report.open("a") as log:
        log.write(END_OF_RUN)
    return read_report(report, path.name, device, distributed)


def test_outcomes(log):
    """{pytest node id: (outcome, message)} from a log of ``tools/pytest_outcome_log.py``; None for a test that
    started and did not end. A test's outcome is its first failed phase's, else its first skipped one's, else
    its call's."""
    records = {}
    if log.exists():
        for line in log.read_text().splitlines():
            record = json.loads(line)
            if "test" in record:
                records.setdefault(record["test"], []).append(record)
    outcomes = {}
    for test, events in records.items():
        if not any(event["event"] == "teardown" for event in events):
            outcomes[test] = None
            continue
        reports = [event for event in events if event["event"] != "start"]
        decisive = (next((r for r in reports if r["outcome"] == "failed"), None)
                    or next((r for r in reports if r["outcome"] in ("skipped", "xfailed")), None)
                    or next((r for r in reports if r["event"] == "call"), reports[-1]))
        outcomes[test] = (decisive["outcome"], decisive["message"])
    return outcomes


def read_report(report, file, device, distributed):
    """{test id: (outcome, error)}: a distributed test's id names no device (it ran on the one loaded)."""
    outcomes = {}
    for nodeid, (outcome, message) in test_outcomes(report).items():
        classname, name = nodeid.split("::")[-2:]
        test = f"{file}::{classname}::{name}" if distributed else neutral_id(file, classname, name, device)
        outcomes[test] = (outcome, error_line(message) if outcome == "failed" else "")
    return outcomes


def error_line(message):
    """The exception of a failure: a multi-process test reports "Process N exited ..." first, the error later."""
    lines = [line for line in message.strip().splitlines() if line.strip()]
    errors = [line for line in lines if not line.startswith(" ") and ("Error" in line or "Exception" in line)
              and "exited with error code" not in line]
    return (errors[-1] if errors else lines[0] if lines else "")[:200]


def neutral_id(file, classname, name, device):
    """``file::Class::test_name`` with the device written as ``{device}``, so foo's and CPU's ids match (the
    Inductor template's classes are both ``CommonTemplate``)."""
    if classname in TEMPLATE_NEUTRAL_CLASS:  # a template's test names end with the device
        return f"{file}::{TEMPLATE_NEUTRAL_CLASS[classname]}::{re.sub(rf'_{device}$', '_{device}', name)}"
    cls = classname
    suffix = DEVICE_CLASS_SUFFIX[device]
    if cls.endswith(suffix):
        cls = cls[: -len(suffix)] + "{device}"
    name = re.sub(rf"_{device}(?=_|$)", "_{device}", name, count=1)
    return f"{file}::{cls}::{name}"


def load_expected():
    """[(pattern, reason)] from the expected-failure list: ``pattern  # reason`` per line."""
    expected = []
    for number, line in enumerate(EXPECTED.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        pattern, _, reason = line.partition("  # ")
        if not reason.strip():
            sys.exit(f"{EXPECTED.name}:{number}: every expected failure needs a reason after '  # '")
        expected.append((pattern.strip(), reason.strip()))
    return expected


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*",
                        default=DEVICE_GENERIC_FILES + DISTRIBUTED_FILES + INDUCTOR_FILES + list(FOO_ONLY_FILES),
                        help="test files below test/, without .py (default: all)")
    parser.add_argument("--tests-dir", type=Path, help="PyTorch's test/ folder (default: download)")
    parser.add_argument("--out", type=Path, default=Path("build/pytorch-device-tests"), help="reports go here")
    parser.add_argument("--reuse-reports", action="store_true",
                        help="read the reports an earlier run left in --out instead of running a file again "
                             "(a stopped run's report: finish it)")
    parser.add_argument("--cpu-where-foo-fails", action="store_true",
                        help="a template file's CPU class runs only the tests that fail on foo: enough to find the "
                             "foo-only failures, in a fraction of the time (the CPU counts are then of those tests)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    expected = load_expected()
    unexplained, now_passing, not_run = [], [], []
    print(f"torch {torch.__version__}; files from {args.tests_dir or 'GitHub ' + torch_tag()}")
    for name in args.files:
        cache = Path.home() / ".cache" / "foo_backend" / torch_tag()
        file, _, variant = name.partition(":")
        if not args.tests_dir:
            for companion in COMPANIONS.get(file, []):
                download(companion, cache)
        path = (args.tests_dir / f"{file}.py") if args.tests_dir else download(file, cache)
        foo = run_file(path.resolve(), "foo", args.out.resolve(), args.reuse_reports, variant)
        only = None
        if args.cpu_where_foo_fails and name in TEMPLATE_RUNS:
            only = [test.rsplit("::", 1)[1].replace("{device}", "cpu")
                    for test, (outcome, _) in foo.items() if outcome == "failed"]
        cpu = run_file(path.resolve(), "cpu", args.out.resolve(), args.reuse_reports, variant, only)
        reference = foo if name in FOO_ONLY_FILES or only is not None else cpu
        if not any(outcome == "passed" for outcome, _ in reference.values()):
            not_run.append(f"{name}: {next(iter(reference.values()), ('', 'no report'))[1]}")
        foo_only = sorted(t for t, (outcome, _) in foo.items()
                          if outcome == "failed" and (name in FOO_ONLY_FILES or cpu.get(t, ("",))[0] == "passed"))
        for test in foo_only:
            if not any(fnmatch.fnmatchcase(test, p) for p, _ in expected):
                unexplained.append(f"{test}: {foo[test][1]}")
        for test, (outcome, _) in foo.items():
            if outcome == "passed" and any(fnmatch.fnmatchcase(test, p) for p, _ in expected):
                now_passing.append(test)
        count = lambda outcomes, outcome: sum(1 for o, _ in outcomes.values() if o == outcome)  # noqa: E731
        print(f"{name}: foo {count(foo, 'passed')} passed, {count(foo, 'failed')} failed, "
              f"{count(foo, 'skipped')} skipped; cpu {count(cpu, 'passed')} passed, {count(cpu, 'failed')} failed; "
              f"foo-only failures {len(foo_only)}", flush=True)
    for test in unexplained:
        print(f"UNEXPLAINED foo-only failure: {test}")
    for test in now_passing:
        print(f"PASSES NOW, remove from {EXPECTED.name}: {test}")
    for file in not_run:
        print(f"DID NOT RUN (not even on CPU; a copy for another torch version?): {file}")
    return 1 if unexplained or now_passing or not_run else 0


if __name__ == "__main__":
    sys.exit(main())
