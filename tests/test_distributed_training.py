"""Training on foo with what users run on top of torch.distributed: DDP, FSDP2 (with and without mixed
precision), DeviceMesh (1-D and 2-D), DTensor and tensor parallelism, functional collectives and
torch.distributed.checkpoint, each checked against the same training in one process (within float
tolerance, bitwise where the arithmetic is the same).

The rank code is tests/support/distributed_training_ranks.py. Each world below is one torchrun launch of it
(``torchrun --standalone --nproc-per-node N distributed_training_ranks.py GROUP...``) that runs its groups of
checks in sequence in one process group and prints one line per check from rank 0 ("<check> ok" or the
failure); each test asserts on its line. The worlds run in the background (tests/support/subprocesses.py)."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from support.distributed_training_ranks import CHECKS
from support.subprocesses import Subprocesses, labelled

RANKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "support", "distributed_training_ranks.py")

# Whatever happens, a world is stopped this long after the start (its ranks also stop themselves).
WORLD_DEADLINE_S = 300


def world(groups, nproc, env=None):
    code = f"""
        from torch.distributed.run import main
        main(["--standalone", "--nproc-per-node", "{nproc}", {RANKS!r}, *{groups!r}])
    """
    return textwrap.dedent(code), env or {}


# Each world runs groups of checks (CHECKS) one after the other in one process group: a world costs a
# process per rank. {world: (its groups, ranks, environment)}
WORLDS = {
    # DDP; FSDP2, 1-D DeviceMesh, DTensor, tensor parallelism, functional collectives; checkpoints
    "two_ranks": (["ddp", "fsdp", "checkpoint"], 2, {}),
    "four_ranks": (["mesh_2d"], 4, {"FOO_DEVICE_COUNT": 4}),  # a 2x2 mesh, one foo device per rank
}
SCRIPTS = {name: world(groups, nproc, env) for name, (groups, nproc, env) in WORLDS.items()}
WORLD_OF_GROUP = {group: name for name, (groups, _, _) in WORLDS.items() for group in groups}


class Worlds(Subprocesses):
    """Subprocesses for torchrun launches: each launch in its own process group, stopped with its ranks
    (SIGTERM: torchrun stops its workers) at the deadline or at the end of the module; their temporary
    files (checkpoints, torchrun's log directories) go to the module's temporary folder."""

    deadline_s = WORLD_DEADLINE_S
    forks = False  # torchrun's own process group, stopped as one

    def _popen(self, code, env, stdout, stderr):
        return subprocess.Popen([sys.executable, "-c", code], stdout=stdout, stderr=stderr, text=True,
                                env={**env, "TMPDIR": self.tmp}, cwd=self.tmp, start_new_session=True)

    @staticmethod
    def _stop(proc):
        for sig, grace in ((signal.SIGTERM, 20), (signal.SIGKILL, None)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=grace)
                return
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue


SCRIPTS_RUNNER = Worlds  # conftest.py's `subprocesses` fixture runs SCRIPTS with it


@pytest.fixture(scope="module")
def worlds(subprocesses):
    return subprocesses


def outcome(worlds, group, check):
    name = WORLD_OF_GROUP[group]
    proc = worlds[name]
    out = labelled(proc.stdout)
    assert check in out, (f"world {name} printed no line for {check} (exit {proc.returncode}):\n"
                          f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-8000:]}")
    return out[check]


@pytest.mark.parametrize("group,check", [(group, fn.__name__) for group, fns in CHECKS.items() for fn in fns],
                         ids=[f"{group}-{fn.__name__}" for group, fns in CHECKS.items() for fn in fns])
def test_check(worlds, group, check):
    """One check of distributed_training_ranks.py (its docstring says what it compares)."""
    assert outcome(worlds, group, check) == "ok"


def test_ddp_runtime_stats_without_timer_warning(worlds):
    """No rank of the DDP world warns that DDP's time stats are only collected for CPU and CUDA: foo
    registers a c10d Timer for its device type."""
    assert outcome(worlds, "ddp", "ddp_runtime_stats") == "ok"
    assert "Time stats are currently only collected" not in worlds[WORLD_OF_GROUP["ddp"]].stderr


@pytest.mark.parametrize("name", SCRIPTS)
def test_world_exits_cleanly(worlds, name):
    """Every rank of the world returns from destroy_process_group and exits with status 0."""
    proc = worlds[name]
    assert proc.returncode == 0, f"world {name} exited with {proc.returncode}:\nstderr:\n{proc.stderr[-8000:]}"
