"""A script as ``python -c CODE`` would run it, without paying for a fresh interpreter's ``import torch``.

The suite runs about a hundred scripts in fresh interpreters, and each spent about 3 s of CPU importing
torch (and, through the autoload, foo_backend) before its first line. A server process does that import
once, leaves foo uninitialised, and forks a child per script: the child is that interpreter right after its
``import torch``, with the script's working directory, output files, a ``__main__`` of its own and
``sys.argv == ["-c"]``; it runs the script and exits as ``python -c`` does (at-exit work, exit code, an
uncaught exception's traceback on stderr). Forking after ``import torch`` is what DataLoader workers and
multiprocessing's forkserver do too. A script whose subject is importing itself (``Subprocesses.fresh``), or
that sets environment variables torch, foo or Python may read when imported or initialised
(``forkable_env``), runs in a fresh interpreter; the child gets any other variables the script sets."""
import json
import os
import signal
import subprocess
import sys
import threading

SERVER = r"""
import json, os, select, sys, types
import torch  # noqa: F401  (foo_backend too, through the autoload; foo stays uninitialised)


def serve():
    # Requests are JSON lines on stdin; replies "started <id> <pid>" and "exited <pid> <code>" on stdout.
    pending = b""
    while True:
        readable, _, _ = select.select([0], [], [], 0.05)
        if readable:
            data = os.read(0, 65536)
            if not data:
                return None  # the test process is done
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    return request
                print("started", request["id"], pid, flush=True)
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            print("exited", pid, os.waitstatus_to_exitcode(status), flush=True)


request = serve()
if request is not None:
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    sys.argv = ["-c"]
    exec(compile(request["code"], "<string>", "exec"), main.__dict__)
"""


# Variables that torch, foo, their libraries or Python may read before a script's first line.
_READ_AT_START = ("TORCH", "PYTORCH", "PYTHON", "FOO_DEVICE", "FOO_LAUNCH", "FOO_SANITIZER", "OMP", "MKL", "KMP",
                  "LD_")


def forkable_env(env):
    """Whether a script setting ``env`` ({name: value, or None to unset}) may run forked."""
    return not any(name.startswith(_READ_AT_START) for name in env)


class ForkedProcess:
    """A forked script, with the part of Popen's interface that Subprocesses uses."""

    def __init__(self, server, pid, args):
        self.server, self.pid, self.args = server, pid, args
        self.returncode = None

    def poll(self):
        with self.server.changed:
            self.returncode = self.server.exit_codes.get(self.pid)
        return self.returncode

    def wait(self, timeout=None):
        with self.server.changed:
            if not self.server.changed.wait_for(lambda: self.pid in self.server.exit_codes or self.server.gone,
                                                timeout):
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = self.server.exit_codes.get(self.pid, -signal.SIGKILL)
        return self.returncode

    def kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class ForkServer:
    """The server process (started on first use, with the environment of its first script, which is the test
    process's own) and the thread that reads its replies."""

    def __init__(self, env):
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, cwd="/")
        self.changed = threading.Condition()
        self.started, self.exit_codes, self.gone = {}, {}, False
        self._next_id = 0
        self._write = threading.Lock()
        threading.Thread(target=self._read, name="fork server replies", daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            kind, first, second = line.split()
            with self.changed:
                if kind == b"started":
                    self.started[int(first)] = int(second)
                else:
                    self.exit_codes[int(first)] = int(second)
                self.changed.notify_all()
        with self.changed:
            self.gone = True
            self.changed.notify_all()

    def run(self, code, env, cwd, stdout_path, stderr_path):
        with self._write:
            request_id = self._next_id
            self._next_id += 1
            request = dict(id=request_id, code=code, env=env, cwd=cwd, stdout=stdout_path, stderr=stderr_path)
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        with self.changed:
            self.changed.wait_for(lambda: request_id in self.started or self.gone)
            if request_id not in self.started:
                raise RuntimeError("the fork server exited")
            return ForkedProcess(self, self.started[request_id], [sys.executable, "-c", code])

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


_server = None
_server_lock = threading.Lock()


def fork_server(env):
    """The suite's one server, started with ``env`` on first use."""
    global _server
    with _server_lock:
        if _server is None:
            _server = ForkServer(env)
        return _server


def close_fork_server():
    global _server
    with _server_lock:
        if _server is not None:
            _server.close()
            _server = None
