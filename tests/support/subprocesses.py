"""Fresh Python interpreters for tests that need one: environment variables read once at start-up,
lazy initialisation, process-level behaviour."""
import os
import subprocess
import sys
import tempfile
import textwrap

# Variables a test sets explicitly; a child never inherits them from the test run.
_FOO_ENV = ("FOO_DEVICE_COUNT", "FOO_DEVICE_MEMORY_MB", "TORCH_DEVICE_BACKEND_AUTOLOAD")

class Subprocesses:
    """Fresh interpreters for the checks that need one (environment variables read once, lazy
    initialisation). All of a module's scripts start together, on first use, and run concurrently so the
    suite stays fast; ``self[name]`` waits for one and returns its CompletedProcess."""

    def __init__(self, scripts):
        self.scripts = scripts  # name -> (code, {env var: value})
        self.procs = {}
        self.results = {}

    def _start(self):
        base = {k: v for k, v in os.environ.items() if k not in _FOO_ENV}
        for name, (code, env) in self.scripts.items():
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, env={**base, **{k: str(v) for k, v in env.items()}}, cwd=tempfile.gettempdir(),
            )

    def __getitem__(self, name):
        if not self.procs:
            self._start()
        if name not in self.results:
            proc = self.procs[name]
            out, err = proc.communicate(timeout=180)
            self.results[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        return self.results[name]

    def check(self, name):
        """The stdout of script ``name``, which must have exited successfully."""
        proc = self[name]
        assert proc.returncode == 0, f"{name} failed ({proc.returncode}):\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        return proc.stdout

    def close(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.communicate()


def labelled(out):
    """{label: the rest of its line}, from a script's output."""
    return {line.partition(" ")[0]: line.partition(" ")[2] for line in out.splitlines() if line.strip()}
