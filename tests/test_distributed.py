"""torch.distributed on foo: the c10d backend "fccl" (csrc/distributed/ProcessGroupFoo,
foo_backend/distributed) with 2 ranks on loopback.

One 2-rank world serves the whole module: two worker processes (tests/support/distributed_workers.py, ``serve``)
join it with ``init_process_group("fccl", init_method="tcp://...")``, take foo:<rank> as their device, and
run the functions of distributed_workers by name, both ranks the same call. Every result is checked
against an oracle independent of fccl: the values computed by hand from both ranks' inputs
(``distributed_workers.data``), and where gloo has the collective, the same collective on CPU tensors in
the same group (fccl hands CPU tensors to gloo).

The ways of starting a group, and faults (a rank that dies or stalls, mismatched collectives), each need
processes of their own: they run as fresh 2-process worlds, all started together when the module starts,
so their time overlaps the rest.

Every wait has a timeout: a hang fails its test, and no process outlives the module.
"""
import inspect
import itertools
import os
import pickle
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from multiprocessing import Pipe

import pytest
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

import support.distributed_workers as workers
import foo_backend.distributed
from foo_backend import _patches
from support.distributed_workers import IN_SPLITS, data
from support.subprocesses import _FOO_ENV

if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
WORLD = 2
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64]
FLOAT_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]

START_TIMEOUT_S = 120  # a world's processes start and join (imports, on a loaded machine)
COMMAND_TIMEOUT_S = 60  # one call on both ranks
FRESH_WORLD_TIMEOUT_S = 150  # a fresh world runs to its end (they all start together)

# Variables a child never inherits from the test run: foo's own, and those of torch.distributed's env://.
_DIST_ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
             "GROUP_RANK", "TORCHELASTIC_RUN_ID")


def _child_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in _FOO_ENV + _DIST_ENV}
    return {**env, **{k: str(v) for k, v in extra.items()}}


def _free_ports(n):
    """n distinct free ports (held together while chosen, so none is handed out twice)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _read(log):
    log.seek(0)
    return log.read()


# ---- the module's world ---------------------------------------------------------------------------

class _Broken(Exception):
    pass


class World:
    """The two worker processes and their command pipes. ``run(name, ...)`` calls
    ``distributed_workers.<name>(...)`` on both ranks and returns both results. A rank that does not
    answer in time, or dies, fails the test and takes the world down (processes killed); the next test
    starts a new one."""

    def __init__(self):
        self.procs, self.conns, self.logs = [], [], []

    def _start(self):
        [port] = _free_ports(1)
        for rank in range(WORLD):
            parent, child = Pipe()
            log = tempfile.TemporaryFile(mode="w+")
            code = (f"import sys; sys.path.insert(0, {TESTS_DIR!r}); from support import distributed_workers; "
                    f"distributed_workers.serve({child.fileno()}, {rank}, 'tcp://127.0.0.1:{port}')")
            proc = subprocess.Popen([sys.executable, "-c", code], pass_fds=[child.fileno()], stdout=log,
                                    stderr=subprocess.STDOUT, env=_child_env(), cwd=tempfile.gettempdir())
            child.close()
            self.procs.append(proc)
            self.conns.append(parent)
            self.logs.append(log)
        deadline = time.monotonic() + START_TIMEOUT_S
        for rank in range(WORLD):
            status, _ = self._receive(rank, deadline, "joining the world")
            assert status == "ready", status

    def _receive(self, rank, deadline, what):
        conn = self.conns[rank]
        try:
            if not conn.poll(max(0.0, deadline - time.monotonic())):
                raise _Broken(f"rank {rank} did not answer within its timeout ({what})")
            return pickle.loads(conn.recv_bytes())
        except (EOFError, OSError) as e:
            raise _Broken(f"rank {rank} exited ({what}): {e!r}") from None

    def run(self, name, *args, **kwargs):
        if not self.procs:
            self._start_or_fail()
        message = pickle.dumps((name, args, kwargs))
        try:
            for rank, conn in enumerate(self.conns):
                try:
                    conn.send_bytes(message)
                except OSError as e:
                    raise _Broken(f"rank {rank} exited: {e!r}") from None
            deadline = time.monotonic() + COMMAND_TIMEOUT_S
            replies = [self._receive(rank, deadline, f"{name}{args}") for rank in range(WORLD)]
        except _Broken as e:
            self._fail(str(e))
        errors = [f"--- rank {rank}:\n{payload}" for rank, (status, payload) in enumerate(replies) if status != "ok"]
        if errors:
            raise AssertionError(f"{name}{args} raised:\n" + "\n".join(errors))
        return [payload for _, payload in replies]

    def _start_or_fail(self):
        try:
            self._start()
        except _Broken as e:
            self._fail(str(e))

    def _fail(self, reason):
        logs = self._kill()
        pytest.fail(f"{reason}; the world was killed. Worker output:\n{logs}", pytrace=False)

    def _kill(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            proc.wait()
        logs = "\n".join(f"--- rank {rank} (exit {proc.returncode}):\n{_read(log)}"
                         for rank, (proc, log) in enumerate(zip(self.procs, self.logs)))
        self._forget()
        return logs

    def _forget(self):
        for conn in self.conns:
            conn.close()
        for log in self.logs:
            log.close()
        self.procs, self.conns, self.logs = [], [], []

    def close(self):
        """Ends the workers (destroy_process_group, exit); kills any that does not end in time. Returns
        what went wrong, if anything."""
        if not self.procs:
            return []
        problems = []
        for conn in self.conns:
            try:
                conn.send_bytes(pickle.dumps(None))
            except OSError:
                pass
        deadline = time.monotonic() + 60
        for rank in range(WORLD):
            try:
                status, _ = self._receive(rank, deadline, "destroy_process_group")
                if status != "closed":
                    problems.append(f"rank {rank}: {status}")
            except _Broken as e:
                problems.append(str(e))
        for rank, proc in enumerate(self.procs):
            try:
                proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                problems.append(f"rank {rank} did not exit after destroy_process_group")
        if any(proc.returncode != 0 for proc in self.procs) or problems:
            problems.append(self._kill())
        else:
            self._forget()
        return problems


@pytest.fixture(scope="module")
def world():
    w = World()
    try:
        yield w
    finally:
        problems = w.close()
    assert not problems, "the workers did not shut down cleanly:\n" + "\n".join(problems)


_counter = itertools.count()


def assert_equal(actual, expected):
    """Same values, dtype and shape (every input is a small integer: results are exact)."""
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)


def inputs(n, dtype=torch.float32, salt=0):
    return [data(rank, n, dtype, salt) for rank in range(WORLD)]


def by_hand(op, tensors):
    if op == "AVG":
        return (tensors[0] + tensors[1]) / WORLD
    return workers._reduce_by_hand(op, tensors)


# ---- collectives on foo tensors -------------------------------------------------------------------

ALL_REDUCE_CASES = [(op, dtype) for op in ["SUM", "AVG", "MIN", "MAX", "PRODUCT"] for dtype in DTYPES
                    if not (op == "AVG" and dtype == torch.int64)]  # gloo (the oracle) averages floats only


@pytest.mark.parametrize("op,dtype", ALL_REDUCE_CASES, ids=[f"{o}-{str(d)[6:]}" for o, d in ALL_REDUCE_CASES])
def test_all_reduce(world, op, dtype):
    expected = by_hand(op, inputs(6, dtype))
    for result in world.run("all_reduce", op, dtype):
        assert_equal(result["foo"], expected)
        assert_equal(result["gloo"], expected)


@pytest.mark.parametrize("factor", ["float", "tensor"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_all_reduce_premul_sum(world, factor, dtype):
    # torch.distributed._make_nccl_premul_sum: sum of the inputs, each multiplied by the factor first
    # (gloo has no PREMUL_SUM: the oracle is by hand).
    a, b = inputs(6, dtype)
    expected = a * 0.5 + b * 0.5
    for result in world.run("premul_sum", factor, dtype):
        assert_equal(result, expected)


def test_premul_sum_reads_a_factor_written_by_queued_work(world):
    a, b = inputs(6)
    for result in world.run("premul_sum_factor_written_by_queued_work"):
        assert_equal(result, (a + b) * 3)


@pytest.mark.parametrize("factor", ["float", "tensor"])
def test_reduce_scatter_tensor_premul_sum_leaves_the_input_alone(world, factor):
    a, b = inputs(8)
    expected = (a * 0.25 + b * 0.25).chunk(WORLD)
    for rank, result in enumerate(world.run("premul_sum_reduce_scatter_tensor", factor)):
        assert_equal(result["out"], expected[rank])
        assert_equal(result["input"], inputs(8)[rank])


@pytest.mark.parametrize("factor", ["float", "tensor"])
@pytest.mark.parametrize("collective", ["reduce", "all_reduce_coalesced", "reduce_scatter",
                                        "coalesced_reduce_scatter_tensor"])
def test_premul_sum_in_other_collectives(world, collective, factor):
    results = world.run("premul_sum_collectives", collective, factor)

    def half_sum(n, salt=0):
        return data(0, n, salt=salt) * 0.5 + data(1, n, salt=salt) * 0.5
    if collective == "reduce":
        assert_equal(results[1], half_sum(4))
    elif collective == "all_reduce_coalesced":
        for result in results:
            assert_equal(result, [half_sum(4), half_sum(3, salt=1)])
    elif collective == "reduce_scatter":
        for rank, result in enumerate(results):
            assert_equal(result["out"], half_sum(4, salt=rank))
            assert_equal(result["inputs"], [data(rank, 4, salt=i) for i in range(WORLD)])  # unchanged
    else:
        for rank, result in enumerate(results):
            assert_equal(result["outs"], [half_sum(4).chunk(WORLD)[rank], half_sum(2, salt=1).chunk(WORLD)[rank]])
            assert_equal(result["inputs"], [data(rank, 4), data(rank, 2, salt=1)])


@pytest.mark.parametrize("async_op", [False, True])
def test_all_reduce_async_op(world, async_op):
    expected = by_hand("SUM", inputs(6))
    for result in world.run("all_reduce", "SUM", torch.float32, async_op=async_op):
        assert_equal(result["foo"], expected)
        assert_equal(result["gloo"], expected)


@pytest.mark.parametrize("waits", [False, True])
def test_the_sanitizer_sees_collectives_on_their_communication_stream(world, waits):
    """A planted bug of tests/test_sanitizer.py's matrix: a collective's result read without work.wait()."""
    for result in world.run("sanitizer_reads_an_all_reduce_result", waits):
        if waits:
            assert result["message"] == ""
            assert_equal(result["read"], torch.full((8,), 6.0))
        else:
            assert "foo sanitizer: read after write" in result["message"]
            assert "fccl:ALLREDUCE on foo" in result["message"], result["message"]


@pytest.mark.parametrize("src", [0, 1])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_broadcast(world, src, dtype):
    for result in world.run("broadcast", src, dtype):
        assert_equal(result["foo"], data(src, 5, dtype))
        assert_equal(result["gloo"], data(src, 5, dtype))


@pytest.mark.parametrize("dst", [0, 1])
@pytest.mark.parametrize("op", ["SUM", "MAX", "PRODUCT"])
def test_reduce(world, dst, op):
    # Only the destination's tensor is defined afterwards (gloo leaves partial results on the others).
    result = world.run("reduce", dst, op)[dst]
    assert_equal(result["foo"], by_hand(op, inputs(5)))
    assert_equal(result["gloo"], by_hand(op, inputs(5)))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_gather(world, dtype):
    for result in world.run("all_gather", dtype):
        assert_equal(result["foo"], inputs(4, dtype))
        assert_equal(result["gloo"], inputs(4, dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_gather_into_tensor(world, dtype):
    for result in world.run("all_gather_into_tensor", dtype, False):
        assert_equal(result["foo"], torch.cat(inputs(4, dtype)))
        assert_equal(result["gloo"], torch.cat(inputs(4, dtype)))


def test_all_gather_into_tensor_stacked_output(world):
    # torch documents the output of shape (world_size, n), "stack form", beside the concatenation (NCCL
    # takes both; gloo only the flat one, so the oracle is by hand).
    for result in world.run("all_gather_into_tensor", torch.float32, True):
        assert_equal(result["foo"], torch.stack(inputs(4)))


def test_reduce_scatter_tensor_stacked_input(world):
    for rank, result in enumerate(world.run("reduce_scatter_tensor_stacked_input")):
        assert_equal(result, data(0, 3, salt=rank) + data(1, 3, salt=rank))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reduce_scatter(world, dtype):
    # Rank r receives the sum over ranks of their r-th input.
    for rank, result in enumerate(world.run("reduce_scatter", dtype)):
        expected = data(0, 3, dtype, salt=rank) + data(1, 3, dtype, salt=rank)
        assert_equal(result["foo"], expected)
        assert_equal(result["gloo"], expected)


@pytest.mark.parametrize("op", ["SUM", "MAX"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reduce_scatter_tensor(world, dtype, op):
    expected = by_hand(op, inputs(6, dtype)).chunk(WORLD)
    for rank, result in enumerate(world.run("reduce_scatter_tensor", dtype, op)):
        assert_equal(result["foo"], expected[rank])
        assert_equal(result["gloo"], expected[rank])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_to_all(world, dtype):
    # Rank r receives input r of every rank.
    for rank, result in enumerate(world.run("all_to_all", dtype)):
        expected = [data(src, 3, dtype, salt=rank) for src in range(WORLD)]
        assert_equal(result["foo"], expected)
        assert_equal(result["gloo"], expected)


@pytest.mark.parametrize("uneven", [False, True], ids=["even", "uneven"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_to_all_single(world, dtype, uneven):
    results = world.run("all_to_all_single", dtype, uneven)
    for rank, result in enumerate(results):
        if uneven:
            pieces = []
            for src in range(WORLD):
                sent = data(src, sum(IN_SPLITS[src]), dtype).split(IN_SPLITS[src])
                pieces.append(sent[rank])
            expected = torch.cat(pieces)
        else:
            expected = torch.cat([data(src, 4, dtype).chunk(WORLD)[rank] for src in range(WORLD)])
        assert_equal(result["foo"], expected)
        assert_equal(result["gloo"], expected)


@pytest.mark.parametrize("dst", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
def test_gather(world, dst, dtype):
    for rank, result in enumerate(world.run("gather", dst, dtype)):
        expected = inputs(4, dtype) if rank == dst else None
        if expected is None:
            assert result["foo"] is None and result["gloo"] is None
        else:
            assert_equal(result["foo"], expected)
            assert_equal(result["gloo"], expected)


@pytest.mark.parametrize("src", [0, 1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64], ids=str)
def test_scatter(world, src, dtype):
    for rank, result in enumerate(world.run("scatter", src, dtype)):
        assert_equal(result["foo"], data(src, 4, dtype, salt=rank))
        assert_equal(result["gloo"], data(src, 4, dtype, salt=rank))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_send_recv(world, dtype):
    back, got = world.run("send_recv", dtype)
    assert_equal(got, data(0, 5, dtype))
    assert_equal(back, data(0, 5, dtype) + 1)


def test_collectives_are_named_on_the_profilers_device_timeline(world):
    """As NCCL's kernels show in a CUDA profile, a collective's work on the communication stream."""
    expected = by_hand("SUM", inputs(6, torch.float32))
    for rank, (work, result) in enumerate(world.run("profiled_all_reduce")):
        assert ("fccl:ALLREDUCE", rank) in work
        assert_equal(result, expected)


def test_send_recv_cpu_tensors(world):
    back, got = world.run("send_recv", torch.float32, "cpu")
    assert_equal(got, data(0, 5))
    assert_equal(back, data(0, 5) + 1)


def test_recv_from_any_source_cpu_tensors(world):
    # In a gloo group, dist.recv without src receives CPU tensors from any rank; fccl hands CPU tensors to gloo.
    _, result = world.run("recv_from_any_source_cpu")
    assert "error" not in result, result["error"]
    assert result["src"] == 0
    assert_equal(result["value"], torch.full((3,), 1.0))


@pytest.mark.parametrize("send_first", [True, False], ids=["send_first", "recv_first"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
def test_isend_irecv(world, dtype, send_first):
    for rank, got in enumerate(world.run("isend_irecv", dtype, send_first)):
        assert_equal(got, data(1 - rank, 6, dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64], ids=str)
def test_batch_isend_irecv(world, dtype):
    for rank, (got_x, got_y) in enumerate(world.run("batch_isend_irecv", dtype)):
        assert_equal(got_x, data(1 - rank, 6, dtype))
        assert_equal(got_y, data(1 - rank, 2, dtype, salt=5))


@pytest.mark.parametrize("async_op", [False, True])
def test_barrier_waits_for_the_work_queued_before_it(world, async_op):
    assert world.run("barrier_waits_for_queued_work", async_op) == [True, True]


@pytest.mark.parametrize("op", ["SUM", "MAX"])
def test_all_reduce_coalesced(world, op):
    expected = [by_hand(op, inputs(3)), by_hand(op, inputs(5, salt=1))]
    for result in world.run("all_reduce_coalesced", op):
        assert_equal(result["foo"], expected)
        assert_equal(result["gloo"], expected)


@pytest.mark.parametrize("async_ops", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("kind", ["all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor"])
def test_coalescing_manager(world, kind, async_ops):
    results = world.run("coalescing_manager", kind, async_ops)
    for rank, result in enumerate(results):
        if kind == "all_reduce":
            expected = [by_hand("SUM", inputs(3)), by_hand("SUM", inputs(5, salt=1))]
        elif kind == "all_gather_into_tensor":
            expected = [torch.cat(inputs(3)), torch.cat(inputs(2, salt=1))]
        else:
            expected = [by_hand("SUM", inputs(4)).chunk(WORLD)[rank],
                        by_hand("SUM", inputs(2, salt=1)).chunk(WORLD)[rank]]
        assert_equal(result["foo"], expected)
        assert_equal(result["gloo"], expected)


def test_all_gather_coalesced(world):
    expected = [[data(r, 3), data(r, 2, salt=1)] for r in range(WORLD)]
    for result in world.run("all_gather_coalesced"):
        assert_equal(result["foo"], expected)
        assert_equal(result["gloo"], expected)


def test_object_collectives(world):
    results = world.run("object_collectives")
    for rank, result in enumerate(results):
        gathered = result["all_gather_object"]
        assert [(g["rank"], g["name"]) for g in gathered] == [(0, "r0"), (1, "r1")]
        for r, g in enumerate(gathered):
            assert_equal(g["t"], torch.arange(3) + r)
        assert result["broadcast_object_list"] == ["from 1", {"k": [1]}]
        assert result["scatter_object_list"] == [["zero", 0] if rank == 0 else ["one", 1]]
        assert result["gather_object"] == ([("g", 0), ("g", 1)] if rank == 1 else None)


@pytest.mark.parametrize("collective,args", [
    ("broadcast", (1, torch.float32)),
    ("all_gather_into_tensor", (torch.float32, False)),
    ("reduce_scatter_tensor", (torch.float32, "SUM")),
    ("all_to_all_single", (torch.float32, True)),
], ids=["broadcast", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single"])
def test_async_op_collectives(world, collective, args):
    # async_op=True returns a Work whose wait() gives the same results as the synchronous call.
    synchronous = world.run(collective, *args)
    asynchronous = world.run(collective, *args, async_op=True)
    for s, a in zip(synchronous, asynchronous):
        assert_equal(a["foo"], s["foo"])
        assert_equal(a["foo"], a["gloo"])


@pytest.mark.parametrize("async_op", [False, True])
def test_cpu_tensors_in_the_group(world, async_op):
    for result in world.run("cpu_tensors_in_the_group", async_op):
        assert_equal(result["all_reduce"], by_hand("SUM", inputs(4)))
        assert_equal(result["all_gather"], inputs(4))
        assert_equal(result["broadcast"], data(1, 4))


def test_work_api(world):
    for result in world.run("work_api"):
        assert result["is_completed"] and result["is_success"]
        assert result["exception"] is None
        assert result["result_is_x"]
        assert_equal(result["x"], by_hand("SUM", inputs(4)))


def test_many_collectives_in_flight(world):
    for result in world.run("many_in_flight"):
        assert_equal(result["reduced"], [by_hand("SUM", inputs(5, salt=i)) for i in range(8)])
        assert_equal(result["gathered"], torch.cat(inputs(5)))


def test_large_all_reduce(world):
    assert world.run("large_all_reduce", 1 << 20) == [{"min": 3.0, "max": 3.0}] * 2


def test_views_and_odd_shapes(world):
    for result in world.run("views_and_odd_shapes"):
        base = torch.full((12,), -5.0)
        base[3:9] = by_hand("SUM", inputs(6))
        assert_equal(result["base"], base)  # only the view's elements change
        gathered = torch.full((2, 8), -5.0)
        gathered[1] = torch.cat(inputs(4))
        assert_equal(result["gathered"], gathered)
        transposed = (2 * torch.arange(12.0).reshape(3, 4) + 1).t()
        assert_equal(result["transposed"], transposed)
        assert_equal(result["cpu_transposed"], transposed)
        assert_equal(result["scalar"], torch.tensor(3.0))
        assert_equal(result["empty"], torch.ones(0))


def test_a_subgroup_between_collectives_of_the_default_group(world):
    for result in world.run("subgroup"):
        assert_equal(result["x"], by_hand("SUM", inputs(4)))
        assert_equal(result["y"], by_hand("SUM", inputs(4, salt=1)))
        assert_equal(result["z"], by_hand("SUM", inputs(4, salt=2)))
        assert_equal(result["gathered"], [by_hand("SUM", inputs(4))] * WORLD)


def test_collectives_from_two_streams_keep_the_issue_order(world):
    for result in world.run("collectives_from_two_streams_keep_issue_order"):
        assert_equal(result["x"], by_hand("SUM", inputs(6)))
        assert_equal(result["y"], by_hand("SUM", inputs(6, salt=3)))


def test_distributed_data_parallel_averages_gradients(world):
    for result in world.run("ddp_step"):
        torch.testing.assert_close(result["ddp"], result["by_hand"])


# ---- stream semantics, as NCCL's ------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["all_reduce", "all_gather_into_tensor"])
def test_a_collective_waits_for_the_work_queued_before_it(world, kind):
    plus_one = [t + 1 for t in inputs(6)]
    expected = by_hand("SUM", plus_one) if kind == "all_reduce" else torch.cat(plus_one)
    for result in world.run("collective_waits_for_queued_work", kind):
        assert_equal(result, expected)


@pytest.mark.parametrize("when", ["after_wait", "before_wait"])
def test_the_next_collective_sees_the_work_queued_in_between(world, when):
    for x, y in world.run("next_collective_sees_work_queued_in_between", when):
        assert_equal(x, by_hand("SUM", inputs(6)))
        assert_equal(y, by_hand("SUM", [t + 1 for t in inputs(6, salt=3)]))


@pytest.mark.parametrize("async_op", [True, False], ids=["work_wait", "synchronous_call"])
def test_waiting_does_not_block_the_host(world, async_op):
    expected = by_hand("SUM", inputs(6))
    for result in world.run("wait_does_not_block_the_host", async_op, next(_counter)):
        if async_op:
            assert result["completed_after_wait"] is False  # wait() returned before the collective ran
        assert_equal(result["seen"], expected)  # ...and the current stream waited for it


def test_work_synchronize_orders_the_current_stream(world):
    expected = by_hand("SUM", inputs(6))
    for result in world.run("synchronize_orders_the_current_stream", next(_counter)):
        assert result["completed_while_held"] is False
        assert result["completed_after_synchronize"] is True
        assert_equal(result["seen"], expected)
        assert_equal(result["x"], expected)


def test_device_synchronize_completes_a_collective(world):
    for result in world.run("device_synchronize_completes_a_collective"):
        assert result["completed_while_held"] is False
        assert result["completed_after_synchronize"] is True
        assert_equal(result["x"], by_hand("SUM", inputs(6)))


def test_future_of_a_collective(world):
    expected = by_hand("SUM", inputs(6))
    for result in world.run("future_of_a_collective"):
        assert_equal(result["wait"], expected)
        assert_equal(result["value"], expected)
        assert_equal(result["then"], expected * 2)
        assert_equal(result["seen_in_callback"], [expected])


@pytest.mark.parametrize("kind", ["all_gather_into_tensor", "reduce_scatter_tensor"])
def test_an_input_freed_while_the_collective_is_pending(world, kind):
    n = 1 << 14
    for rank, result in enumerate(world.run("freed_while_pending", kind)):
        assert not result["fresh_reused_the_input"], "the input's memory was handed out again while in use"
        if kind == "all_gather_into_tensor":
            assert_equal(result["out"], torch.cat(inputs(n)))
        else:
            assert_equal(result["out"], by_hand("SUM", inputs(2 * n)).chunk(WORLD)[rank])
        assert bool((result["fresh"] == -7.0).all())


def test_an_output_freed_while_the_collective_is_pending(world):
    for result in world.run("output_freed_while_pending"):
        assert not result["fresh_reused_the_output"], "the output's memory was handed out again while in use"
        assert bool((result["fresh"] == -7.0).all())


@pytest.mark.parametrize("wait_kind", ["wait", "sync"])
def test_a_collective_from_a_side_stream_orders_after_that_stream(world, wait_kind):
    expected = by_hand("SUM", [t + 1 for t in inputs(6)])
    for result in world.run("side_stream_collective", wait_kind):
        assert_equal(result["x"], expected)
        assert_equal(result["seen"], expected)
        if wait_kind == "wait":
            assert result["completed_while_held"] is False


def test_a_cpu_collective_while_a_foo_collective_is_queued_on_one_rank(world):
    for result in world.run("cpu_collective_while_a_foo_collective_is_queued"):
        assert_equal(result["foo"], by_hand("SUM", inputs(6)))
        assert_equal(result["cpu"], by_hand("SUM", inputs(4, salt=1)))


# ---- errors ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", [
    "all_gather_two_devices", "all_gather_into_tensor_two_devices", "all_gather_foo_and_cpu",
    "all_gather_into_tensor_foo_and_cpu", "reduce_scatter_foo_and_cpu", "all_to_all_foo_and_cpu",
    "all_reduce_coalesced_foo_and_cpu", "all_reduce_coalesced_two_devices", "all_reduce_not_dense",
])
def test_bad_tensors_raise_at_the_call(world, kind):
    # Tensors on two devices, or foo and CPU tensors mixed, or a tensor with gaps: RuntimeError at the call.
    for result in world.run("mixed_devices", kind):
        assert result["message"] is not None, "no RuntimeError"
        expected = r"contiguous" if kind.endswith("not_dense") else r"device"
        assert re.search(expected, result["message"]), result["message"]
        assert_equal(result["after"], by_hand("SUM", inputs(3)))  # the group still works


@pytest.mark.parametrize("kind", ["all_gather_into_tensor_output_size", "reduce_scatter_tensor_input_size",
                                  "all_to_all_single_splits"])
def test_invalid_sizes_raise_at_the_call(world, kind):
    for result in world.run("invalid_sizes", kind):
        assert result["cpu_at_call"] is not None  # the oracle: gloo on CPU tensors
        assert result["foo_at_call"] is not None, f"raised only later, on the device: {result['foo_later']}"
        assert result["foo_later"] is None
        assert_equal(result["after"], by_hand("SUM", inputs(3)))


# ---- registration: fresh worlds --------------------------------------------------------------------

INIT_SCRIPT = """
import datetime, gc, os, sys, threading
import torch  # and nothing else: the autoload entry point registers foo and fccl
import torch.distributed as dist

rank = int(os.environ["RANK"])
FORM = {form!r}
print("autoloaded", "foo_backend" in sys.modules and hasattr(torch, "foo") and "fccl" in dist.Backend.backend_list)
timeout = datetime.timedelta(seconds=60)
if FORM == "default":
    dist.init_process_group()
elif FORM == "fccl":
    dist.init_process_group("fccl", timeout=timeout)
elif FORM == "per_device":
    dist.init_process_group("cpu:gloo,foo:fccl", timeout=timeout)
elif FORM == "device_id":
    dist.init_process_group(device_id=torch.device("foo", rank), timeout=timeout)
torch.foo.set_device(rank)
print("backend", dist.get_backend())
print("config", dist.get_backend_config())
print("bound_device", dist.group.WORLD.bound_device_id)
print("foo_backend_class", type(dist.group.WORLD._get_backend(torch.device("foo"))).__name__)
x = torch.full((3,), rank + 1.0, device="foo")
dist.all_reduce(x)
print("foo_all_reduce", x.device, x.cpu().tolist())
try:  # a group without a backend for CPU tensors refuses them
    print("cpu_backend_class", type(dist.group.WORLD._get_backend(torch.device("cpu"))).__name__)
    c = torch.full((3,), rank + 1.0)
    dist.all_reduce(c)
    print("cpu_all_reduce", c.tolist())
except RuntimeError as e:
    print("cpu_error", e)
dist.destroy_process_group()
gc.collect()
print("initialized_after_destroy", dist.is_initialized())
print("python_threads", [t.name for t in threading.enumerate()])
tasks = os.listdir("/proc/self/task")
names = [open(f"/proc/self/task/{{t}}/comm").read().strip() for t in tasks]
print("communication_threads", sorted(n for n in names if n.startswith(("gloo", "pt_"))))
print("child_processes", [c for t in tasks for c in open(f"/proc/self/task/{{t}}/children").read().split()])
print("done", flush=True)
"""

FAULT_SCRIPT = """
import datetime, os, sys
import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
SCENARIO = {scenario!r}
torch.foo.set_device(rank)
# The store waits long enough for both processes to start on a loaded machine; the group's timeout is short.
store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), 2, rank == 0,
                      timeout=datetime.timedelta(seconds=120))
dist.init_process_group("fccl", store=store, rank=rank, world_size=2, timeout=datetime.timedelta(seconds=10))
x = torch.ones(4, device="foo")
dist.all_reduce(x)
print("first", x.cpu().tolist(), flush=True)
try:
    if SCENARIO == "peer_exits":
        if rank == 1:
            os._exit(0)
        y = torch.ones(4, device="foo")
        dist.all_reduce(y)
    elif SCENARIO == "peer_exits_before_recv":
        if rank == 1:
            os._exit(0)
        y = torch.ones(4, device="foo")
        dist.recv(y, src=1)
    elif SCENARIO == "peer_stalls":
        if rank == 1:  # never joins the collective; ends when rank 0 is done with it
            store.wait(["rank0_done"], datetime.timedelta(seconds=120))
            store.set("rank1_done", "1")
            print("released", flush=True)
            os._exit(0)
        y = torch.ones(4, device="foo")
        dist.all_reduce(y)
    elif SCENARIO == "mismatched":
        y = torch.ones(4 if rank == 0 else 8, device="foo")
        dist.all_reduce(y)
    print("issued", flush=True)
    print("value", y.cpu().tolist(), flush=True)
    torch.foo.synchronize()
    print("no error", flush=True)
    code = 0
except Exception as e:
    print("error", type(e).__name__, " ".join(str(e).split()), flush=True)
    code = 3
if SCENARIO == "peer_stalls":
    store.set("rank0_done", "1")
    store.wait(["rank1_done"], datetime.timedelta(seconds=60))
sys.stdout.flush()
os._exit(code)
"""

INIT_FORMS = ["default", "fccl", "per_device", "device_id"]
FAULTS = ["peer_exits", "peer_exits_before_recv", "peer_stalls", "mismatched"]
FRESH_WORLDS = {
    **{f"init_{form}": INIT_SCRIPT.format(form=form) for form in INIT_FORMS},
    **{f"fault_{scenario}": FAULT_SCRIPT.format(scenario=scenario) for scenario in FAULTS},
}


class FreshWorlds:
    """Scripts run as 2-process worlds over env:// (MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE), all started
    together; ``self[name]`` waits for one world (killing it if it outlives its bound) and returns
    ``[(returncode, output)]`` for its two ranks."""

    def __init__(self, scripts):
        self.procs, self.results = {}, {}
        self.started = time.monotonic()
        for (name, code), port in zip(scripts.items(), _free_ports(len(scripts))):
            for rank in range(WORLD):
                log = tempfile.TemporaryFile(mode="w+")
                env = _child_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=rank, WORLD_SIZE=WORLD,
                                 LOCAL_RANK=rank)
                proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=log,
                                        stderr=subprocess.STDOUT, env=env, cwd=tempfile.gettempdir())
                self.procs[name, rank] = (proc, log)

    def __getitem__(self, name):
        if name not in self.results:
            deadline = self.started + FRESH_WORLD_TIMEOUT_S
            timed_out = False
            for rank in range(WORLD):
                proc, _ = self.procs[name, rank]
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
            for rank in range(WORLD):  # a rank that hangs: both go
                proc, _ = self.procs[name, rank]
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            self.results[name] = [(proc.returncode, _read(log))
                                  for proc, log in (self.procs[name, rank] for rank in range(WORLD))]
            if timed_out:
                pytest.fail(f"world {name} did not finish within {FRESH_WORLD_TIMEOUT_S} s:\n"
                            + "\n".join(f"--- rank {r}:\n{out}" for r, (_, out) in enumerate(self.results[name])),
                            pytrace=False)
        return self.results[name]

    def close(self):
        for proc, log in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            log.close()


@pytest.fixture(scope="module", autouse=True)
def fresh_worlds():
    """Started with the module, so they run while the module's world is busy."""
    worlds = FreshWorlds(FRESH_WORLDS)
    yield worlds
    worlds.close()


def labelled(output):
    """{label: the rest of its line} of a script's output."""
    lines = (line.partition(" ") for line in output.splitlines() if line.strip())
    return {label: rest for label, _, rest in lines}


@pytest.mark.parametrize("form", INIT_FORMS)
def test_init_process_group_forms(fresh_worlds, form):
    for rank, (code, output) in enumerate(fresh_worlds[f"init_{form}"]):
        assert code == 0, f"rank {rank} exited with {code}:\n{output}"
        out = labelled(output)
        assert out["autoloaded"] == "True", output
        if form == "per_device":
            assert out["backend"] == "cpu:gloo,foo:fccl"
            assert out["config"] == "cpu:gloo,foo:fccl"
            assert out["cpu_backend_class"] == "ProcessGroupGloo"
        elif form == "default" and _patches.torch_release() != "2.13":
            # 2.14 as CUDA's: an unnamed group has the accelerator's backend only, and get_backend() says so.
            assert out["backend"] == "undefined"
            assert out["config"] == "foo:fccl"
            assert out["cpu_error"] == "No backend type associated with device type cpu"
        else:  # 2.13's unnamed group: fccl, as if the user had named it (the patch below)
            assert out["backend"] == "fccl"
            assert set(out["config"].split(",")) == {"foo:fccl", "cpu:fccl"}
            assert out["cpu_backend_class"] == "ProcessGroupFoo"
        assert out["foo_backend_class"] == "ProcessGroupFoo"
        assert out["bound_device"] == (f"foo:{rank}" if form == "device_id" else "None")
        assert out["foo_all_reduce"] == f"foo:{rank} [3.0, 3.0, 3.0]"
        if out.get("backend") != "undefined":
            assert "cpu_error" not in out, output
            assert out["cpu_all_reduce"] == "[3.0, 3.0, 3.0]"
        # destroy_process_group() ends the group's threads (gloo's, the store's) and starts no process.
        assert out["initialized_after_destroy"] == "False"
        assert out["python_threads"] == "['MainThread']"
        assert out["communication_threads"] == "[]", output
        assert out["child_processes"] == "[]"
        assert "done" in out


def test_the_unnamed_backend_workaround_matches_this_torch():
    # The "unnamed_process_group_backend" patch (foo_backend._patches) renames an unnamed backend to fccl on 2.13,
    # whose _new_process_group_helper marks such a group's default backend as gloo; 2.14 marks it from the group's
    # backends itself, so the patch is not applied there. A torch that changes either must fail here.
    source = inspect.getsource(distributed_c10d)
    if _patches.torch_release() == "2.13":
        assert _patches.applied("unnamed_process_group_backend")
        assert getattr(distributed_c10d._new_process_group_helper, "_foo_wrapped", False)
        assert re.search(r"if backend == Backend\.UNDEFINED:\n(?:\s*#.*\n)*(?:.*\n){0,6}?\s*"
                         r"pg\._set_default_backend\(ProcessGroup\.BackendType\.GLOO\)", source)
    else:
        assert not _patches.applied("unnamed_process_group_backend")
        assert not hasattr(distributed_c10d._new_process_group_helper, "_foo_wrapped")
        unnamed = distributed_c10d.BackendConfig(dist.Backend.UNDEFINED)
        assert unnamed.get_device_backend_map() == {"foo": "fccl"}
        assert (distributed_c10d._get_default_backend_type_for_backend_config(unnamed)
                == dist.ProcessGroup.BackendType.CUSTOM)


# ---- faults: fresh worlds --------------------------------------------------------------------------

FAILURE_WORDS = r"(?i)connection|closed|reset|peer|timed? ?out|mismatch|size"


def _error_line(output):
    return labelled(output).get("error", "")


def test_a_rank_that_exits_fails_the_collective_of_the_other(fresh_worlds):
    (code0, out0), (code1, out1) = fresh_worlds["fault_peer_exits"]
    assert code1 == 0, out1  # os._exit(0)
    assert code0 == 3, f"rank 0 did not raise ({code0}):\n{out0}"
    assert re.search(FAILURE_WORDS, _error_line(out0)), out0


def test_a_rank_that_exits_fails_the_recv_of_the_other(fresh_worlds):
    (code0, out0), (code1, out1) = fresh_worlds["fault_peer_exits_before_recv"]
    assert code1 == 0, out1
    assert code0 == 3, f"rank 0 did not raise ({code0}):\n{out0}"
    assert re.search(FAILURE_WORDS, _error_line(out0)), out0


def test_a_rank_that_stalls_times_the_collective_out(fresh_worlds):
    (code0, out0), (code1, out1) = fresh_worlds["fault_peer_stalls"]
    assert code0 == 3, f"rank 0 did not raise ({code0}):\n{out0}"
    assert re.search(r"(?i)timed? ?out|timeout", _error_line(out0)), out0
    assert code1 == 0 and "released" in out1, out1


def test_mismatched_collectives_fail_instead_of_hanging(fresh_worlds):
    # Rank 0 reduces 4 elements, rank 1 8: both end with an error (gloo may abort the process).
    for rank, (code, output) in enumerate(fresh_worlds["fault_mismatched"]):
        assert code != 0, f"rank {rank} reported no error:\n{output}"
        assert "no error" not in output
        assert re.search(FAILURE_WORDS, output), output
