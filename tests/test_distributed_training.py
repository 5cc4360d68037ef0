"""Training on foo with what users run on top of torch.distributed: DDP, FSDP2 (with and without mixed
precision), DeviceMesh (1-D and 2-D), DTensor and tensor parallelism, functional collectives and
torch.distributed.checkpoint, each checked against the same training in one process (within float
tolerance, bitwise where the arithmetic is the same).

The rank code is tests/support/distributed_training_ranks.py. Each world below is one torchrun launch of it
(``torchrun --standalone --nproc-per-node N distributed_training_ranks.py WORLD``) that runs its checks in
sequence in one process group and prints one line per check from rank 0 ("<check> ok" or the failure);
each test asserts on its line. All worlds start together at the first test and run concurrently."""
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from support.distributed_training_ranks import CHECKS
from support.subprocesses import _FOO_ENV, Subprocesses, labelled

RANKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support", "distributed_training_ranks.py")

# Whatever happens, a world is stopped this long after the start (its ranks also stop themselves).
WORLD_DEADLINE_S = 200


def world(name, nproc, env=None):
    code = f"""
        from torch.distributed.run import main
        main(["--standalone", "--nproc-per-node", "{nproc}", {RANKS!r}, {name!r}])
    """
    return textwrap.dedent(code), env or {}


SCRIPTS = {
    "ddp": world("ddp", 2),
    "fsdp": world("fsdp", 2),  # FSDP2, 1-D DeviceMesh, DTensor, tensor parallelism, functional collectives
    "checkpoint": world("checkpoint", 2),
    "mesh_2d": world("mesh_2d", 4, {"FOO_DEVICE_COUNT": 4}),  # a 2x2 mesh, one foo device per rank
}


class Worlds(Subprocesses):
    """Subprocesses for torchrun launches: each launch in its own process group, stopped with its ranks
    (SIGTERM: torchrun stops its workers) at the deadline or at the end of the module."""

    def _start(self):
        self.started = time.monotonic()
        base = {k: v for k, v in os.environ.items() if k not in _FOO_ENV}
        for name, (code, env) in self.scripts.items():
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env={**base, **{k: str(v) for k, v in env.items()}}, cwd=tempfile.gettempdir(),
                start_new_session=True,
            )

    def __getitem__(self, name):
        if not self.procs:
            self._start()
        if name not in self.results:
            proc = self.procs[name]
            try:
                out, err = proc.communicate(timeout=max(1.0, self.started + WORLD_DEADLINE_S - time.monotonic()))
            except subprocess.TimeoutExpired:
                out, err = self._stop(proc)
                err += f"\n[test_distributed_training: world {name!r} stopped after {WORLD_DEADLINE_S} s]"
            self.results[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        return self.results[name]

    @staticmethod
    def _stop(proc):
        for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, None)):
            if proc.poll() is not None:
                break
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                return proc.communicate(timeout=grace)
            except subprocess.TimeoutExpired:
                continue
        return proc.communicate()

    def close(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                self._stop(proc)
            else:
                proc.communicate()


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    # Their temporary files (checkpoints, torchrun's log directories) go to pytest's temporary directory.
    tmp = str(tmp_path_factory.mktemp("distributed_training"))
    procs = Worlds({name: (code, {**env, "TMPDIR": tmp}) for name, (code, env) in SCRIPTS.items()})
    yield procs
    procs.close()


def outcome(worlds, name, check):
    proc = worlds[name]
    out = labelled(proc.stdout)
    assert check in out, (f"world {name} printed no line for {check} (exit {proc.returncode}):\n"
                          f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-8000:]}")
    return out[check]


@pytest.mark.parametrize("name,check", [(name, fn.__name__) for name, fns in CHECKS.items() for fn in fns],
                         ids=[f"{name}-{fn.__name__}" for name, fns in CHECKS.items() for fn in fns])
def test_check(worlds, name, check):
    """One check of distributed_training_ranks.py (its docstring says what it compares)."""
    assert outcome(worlds, name, check) == "ok"


def test_ddp_runtime_stats_without_timer_warning(worlds):
    """No rank of the DDP world warns that DDP's time stats are only collected for CPU and CUDA: foo
    registers a c10d Timer for its device type."""
    assert outcome(worlds, "ddp", "ddp_runtime_stats") == "ok"
    assert "Time stats are currently only collected" not in worlds["ddp"].stderr


@pytest.mark.parametrize("name", SCRIPTS)
def test_world_exits_cleanly(worlds, name):
    """Every rank of the world returns from destroy_process_group and exits with status 0."""
    proc = worlds[name]
    assert proc.returncode == 0, f"world {name} exited with {proc.returncode}:\nstderr:\n{proc.stderr[-8000:]}"
