"""Fresh Python interpreters for tests that need one: environment variables read once at start-up,
lazy initialisation, process-level behaviour.

A test module lists its scripts in ``SCRIPTS`` ({name: (code, {env var: value or None to unset})}) and its
tests read their results through the ``subprocesses`` fixture. The scripts of every selected module start
in the background once the tests are collected (``background``, from conftest.py), a few at a time, while
the tests of this process run; the modules that read them run last (conftest.py orders them), so a script
has usually finished when its test asks for it, and the two cores stay busy."""
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

from support.forkserver import close_fork_server, fork_server, forkable_env

# Variables a test sets explicitly; a child never inherits them from the test run.
_FOO_ENV = ("FOO_DEVICE_COUNT", "FOO_DEVICE_MEMORY_MB", "TORCH_DEVICE_BACKEND_AUTOLOAD")


class Subprocesses:
    """One module's scripts. ``self[name]`` starts the module's scripts not yet started (they run
    concurrently), waits for ``name`` and returns its CompletedProcess."""

    # A script still running this long after its start is stopped (its test then fails).
    deadline_s = 300

    # Scripts run forked from the fork server (forkserver.py), except those named in `fresh` and those whose
    # environment variables need a fresh interpreter.
    forks = True

    def __init__(self, scripts, fresh=()):
        self.scripts = scripts
        self.fresh = set(fresh)
        self.tmp = tempfile.mkdtemp(prefix="foo_tests_")  # the scripts' working directory
        self.outputs = tempfile.mkdtemp(prefix="foo_tests_output_")
        self.procs = {}  # name -> Popen, once started
        self.started = {}  # name -> time.monotonic() at its start
        self.results = {}
        self._files = {}  # name -> (stdout, stderr) paths: files, so a script never blocks on a full pipe
        self._lock = threading.Lock()
        self._closed = False

    def start(self, name):
        """Starts script ``name`` unless it started already (from any thread)."""
        with self._lock:
            if name in self.procs or self._closed:
                return
            code, env = self.scripts[name]
            full_env = {k: v for k, v in os.environ.items() if k not in _FOO_ENV}
            for key, value in env.items():
                if value is None:
                    full_env.pop(key, None)
                else:
                    full_env[key] = str(value)
            self._files[name] = tuple(os.path.join(self.outputs, f"{name}.{stream}") for stream in ("stdout", "stderr"))
            self.started[name] = time.monotonic()
            if self.forks and forkable_env(env) and name not in self.fresh:
                server = fork_server({k: v for k, v in os.environ.items() if k not in _FOO_ENV})
                self.procs[name] = server.run(textwrap.dedent(code), full_env, self.tmp, *self._files[name])
            else:
                with open(self._files[name][0], "w") as stdout, open(self._files[name][1], "w") as stderr:
                    self.procs[name] = self._popen(textwrap.dedent(code), full_env, stdout, stderr)

    def _popen(self, code, env, stdout, stderr):
        return subprocess.Popen([sys.executable, "-c", code], stdout=stdout, stderr=stderr, text=True, env=env,
                                cwd=self.tmp)

    def start_all(self):
        for name in self.scripts:
            self.start(name)

    def running(self):
        with self._lock:
            return sum(proc.poll() is None for proc in self.procs.values())

    def __getitem__(self, name):
        if name not in self.results:
            self.start_all()  # the rest of the module's scripts run beside this one
            proc = self.procs[name]
            try:
                proc.wait(timeout=max(1.0, self.started[name] + self.deadline_s - time.monotonic()))
                note = ""
            except subprocess.TimeoutExpired:
                self._stop(proc)
                note = f"\n[support.subprocesses: script {name!r} stopped {self.deadline_s} s after its start]"
            out, err = (_read(path) for path in self._files[name])
            self.results[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err + note)
        return self.results[name]

    def check(self, name):
        """The stdout of script ``name``, which must have exited successfully."""
        proc = self[name]
        assert proc.returncode == 0, f"{name} failed ({proc.returncode}):\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        return proc.stdout

    @staticmethod
    def _stop(proc):
        proc.kill()
        proc.wait()

    def close(self):
        with self._lock:
            for proc in self.procs.values():
                if proc.poll() is None:
                    self._stop(proc)
            self._closed = True  # nothing starts after the close
        shutil.rmtree(self.tmp, ignore_errors=True)
        shutil.rmtree(self.outputs, ignore_errors=True)


def _read(path):
    """A script's output file, empty if the script never opened it."""
    if not os.path.exists(path):
        return ""
    with open(path) as f:
        return f.read()


class Background:
    """Starts the registered modules' scripts in the background, in the order their tests will need them,
    at most ``max_running`` at a time (the test process keeps a core)."""

    def __init__(self, max_running):
        self.max_running = max_running
        self.groups = {}  # module name -> Subprocesses
        self._pending = collections.deque()
        self._stopped = threading.Event()
        self._thread = None

    def register(self, module_name, group):
        self.groups[module_name] = group
        self._pending.extend((group, name) for name in group.scripts)

    def start(self):
        if self._pending:
            self._thread = threading.Thread(target=self._run, name="background scripts", daemon=True)
            self._thread.start()

    def _run(self):
        while self._pending and not self._stopped.is_set():
            if sum(group.running() for group in self.groups.values()) < self.max_running:
                group, name = self._pending.popleft()
                group.start(name)
            else:
                self._stopped.wait(0.2)

    def close(self):
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
        for group in self.groups.values():
            group.close()
        close_fork_server()


background = Background(max_running=2)


def labelled(out):
    """{label: the rest of its line}, from a script's output."""
    return {line.partition(" ")[0]: line.partition(" ")[2] for line in out.splitlines() if line.strip()}
