"""A pytest plugin (``-p pytest_outcome_log``, this folder on ``PYTHONPATH``) that appends every test's start and
outcome to the file named by ``FOO_TEST_OUTCOME_LOG`` as each becomes known, one JSON object a line.

``tools/run_pytorch_device_tests.py`` reads it instead of a report written at the end: a test that kills its
process (a C++ kernel's check throwing inside an OpenMP region aborts, on CPU as on foo) leaves the outcomes of
the tests before it and its own start, and the run goes on without it.
"""
import json
import os


def _write(record):
    with open(os.environ["FOO_TEST_OUTCOME_LOG"], "a") as log:
        log.write(json.dumps(record) + "\n")


def pytest_runtest_logstart(nodeid, location):
    _write({"test": nodeid, "event": "start"})


def pytest_runtest_logreport(report):
    outcome = report.outcome
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if report.skipped else "passed"
    if report.skipped and isinstance(report.longrepr, tuple):
        message = report.longrepr[2]  # the reason
    else:  # the exception, as pytest's one-line summary has it, else the whole report
        message = getattr(getattr(report.longrepr, "reprcrash", None), "message", None) or report.longreprtext
    _write({"test": report.nodeid, "event": report.when, "outcome": outcome, "message": message[-20000:]})
