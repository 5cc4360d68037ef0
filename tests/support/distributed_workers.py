"""The ranks' half of tests/test_distributed.py: the command loop of a worker process, and the functions
the tests run on both ranks by name.

A worker (``serve``) joins the 2-rank world with the fccl backend, makes foo:<rank> its device, then runs
commands from the test process until told to stop. Every function below runs on both ranks with the same
arguments and returns CPU tensors and plain values; the test compares them with its oracle. Inputs come
from ``data()``, which the test calls too, to compute the expected values by hand.

Tests of stream semantics keep a foo stream busy with ``torch.foo._hold_stream`` (see
tests/test_async_execution.py): work queued behind the hold cannot have run until the block ends, so
"the collective waited for it" is decided by the backend, not by how fast the machine is. Nothing in a
held block may wait for the held stream, including the first call of an operator (which runs
synchronously to learn its outputs): ``_warm`` runs each operator once beforehand.
"""
import contextlib
import datetime
import os
import pickle
import threading
import traceback
from multiprocessing.connection import Connection

import torch
import torch.distributed as dist

WORLD_SIZE = 2
# A held stream is released after this long if the host blocks on it (the bug a test looks for), so the
# test fails with a message instead of deadlocking; a correct backend never comes near it.
WATCHDOG_S = 20.0
DELAY_CYCLES = 250_000_000  # of the 1 GHz simulated device: 0.25 s


# ---- the worker process --------------------------------------------------------------------------

def serve(fd, rank, init_method, timeout_s=60):
    """A rank's main loop. Commands arrive on the pipe ``fd`` as pickles of ``(name, args, kwargs)``;
    each reply is ``("ok", result)`` or ``("error", formatted traceback)``. ``None`` ends the loop:
    the process group is destroyed and the process exits."""
    conn = Connection(fd)
    dist.init_process_group(backend="fccl", init_method=init_method, rank=rank, world_size=WORLD_SIZE,
                            timeout=datetime.timedelta(seconds=timeout_s))
    torch.foo.set_device(rank)
    conn.send_bytes(pickle.dumps(("ready", os.getpid())))
    while True:
        try:
            message = pickle.loads(conn.recv_bytes())
        except EOFError:  # the test process is gone
            break
        if message is None:
            break
        name, args, kwargs = message
        try:
            reply = ("ok", _to_cpu(globals()[name](*args, **kwargs)))
        except BaseException:  # reported to the test, which fails
            reply = ("error", traceback.format_exc())
        conn.send_bytes(pickle.dumps(reply))
    dist.destroy_process_group()
    try:
        conn.send_bytes(pickle.dumps(("closed", None)))
    except OSError:
        pass


def _to_cpu(value):
    """Results travel by pickle: foo tensors as CPU copies."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    return value


# ---- helpers ---------------------------------------------------------------------------------------

def data(rank, n=6, dtype=torch.float32, salt=0):
    """Rank ``rank``'s input: small positive integers, different on each rank, so sums, products and
    averages are exact in every dtype (bfloat16 included)."""
    values = (torch.arange(n) * (rank + 2) + salt) % 9 + 1 + rank
    return values.to(dtype)


def _rank():
    return dist.get_rank()


def _dev():
    return torch.device("foo", dist.get_rank())


def _op(name):
    return getattr(dist.ReduceOp, name)


def _warm(*fns):
    """Runs each once, and waits: the first call of an operator signature runs synchronously (it would
    wait for a held stream)."""
    for fn in fns:
        fn()
    torch.foo.synchronize()


@contextlib.contextmanager
def _held(stream=None):
    """``torch.foo._hold_stream(stream)`` with a watchdog: if the host blocks on the held stream, the
    watchdog releases it after WATCHDOG_S and the block fails."""
    fired = []
    with torch.foo._hold_stream(stream) as release:
        timer = threading.Timer(WATCHDOG_S, lambda: (fired.append(True), release()))
        timer.daemon = True
        timer.start()
        try:
            yield release
        finally:
            timer.cancel()
    assert not fired, "the host blocked on a held stream (released by the watchdog)"


def _delay():
    """Queues a quarter second of device time on the current stream, ahead of the work a test wants the
    collective to wait for. A correct collective waits for it too and gives the same result; one that did
    not wait would be done long before that work runs, so the test sees the difference (the hold alone
    guarantees only that the work has not run when the collective is issued: a collective that did not
    wait could still be overtaken by it once the hold ends)."""
    torch.foo._sleep(DELAY_CYCLES)


def _store():
    return dist.distributed_c10d._get_default_store()


def _reduce_by_hand(op, tensors):
    """The reduction of the ranks' tensors, computed in their dtype."""
    out = tensors[0].clone()
    for t in tensors[1:]:
        if op == "SUM":
            out = out + t
        elif op == "PRODUCT":
            out = out * t
        elif op == "MIN":
            out = torch.minimum(out, t)
        elif op == "MAX":
            out = torch.maximum(out, t)
        else:
            raise ValueError(op)
    return out


def _gloo(fn):
    """The same collective on CPU tensors in the same group (fccl hands CPU tensors to gloo)."""
    return fn(torch.device("cpu"))


# ---- collectives on foo, each with its oracle on CPU ------------------------------------------------

def all_reduce(op, dtype, n=6, async_op=False):
    def run(device):
        x = data(_rank(), n, dtype).to(device)
        work = dist.all_reduce(x, op=_op(op), async_op=async_op)
        if async_op:
            assert isinstance(work, dist.Work), type(work)
            assert work.wait() is True
        else:
            assert work is None
        return x
    foo = run(_dev())
    assert foo.device == _dev() and foo.dtype == dtype
    return {"foo": foo, "gloo": _gloo(run)}


def premul_sum(factor_kind, dtype):
    x = data(_rank(), 6, dtype).to(_dev())
    if factor_kind == "float":
        factor = 0.5
    else:
        factor = torch.tensor([0.5], dtype=dtype, device=_dev())
    dist.all_reduce(x, op=dist._make_nccl_premul_sum(factor))
    return x


def premul_sum_factor_written_by_queued_work():
    """The foo factor tensor is read when the collective runs, after the work queued before it."""
    x = data(_rank(), 6).to(_dev())
    factor = torch.tensor([1.0], device=_dev())
    _warm(lambda: torch.empty(1, device=_dev()).fill_(3.0))
    with _held():
        _delay()
        factor.fill_(3.0)
        work = dist.all_reduce(x, op=dist._make_nccl_premul_sum(factor), async_op=True)
    work.wait()
    return x


def premul_sum_reduce_scatter_tensor(factor_kind):
    """PREMUL_SUM in a reduce-scatter scales a copy: the input is unchanged."""
    inp = data(_rank(), 8).to(_dev())
    out = torch.empty(4, device=_dev())
    factor = 0.25 if factor_kind == "float" else torch.tensor([0.25], device=_dev())
    dist.reduce_scatter_tensor(out, inp, op=dist._make_nccl_premul_sum(factor))
    return {"out": out, "input": inp}


def broadcast(src, dtype, async_op=False):
    def run(device):
        x = data(_rank(), 5, dtype).to(device)
        work = dist.broadcast(x, src=src, async_op=async_op)
        if async_op:
            work.wait()
        return x
    return {"foo": run(_dev()), "gloo": _gloo(run)}


def reduce(dst, op):
    def run(device):
        x = data(_rank(), 5).to(device)
        dist.reduce(x, dst=dst, op=_op(op))
        return x
    return {"foo": run(_dev()), "gloo": _gloo(run)}


def all_gather(dtype):
    def run(device):
        outs = [torch.full((4,), -1, dtype=dtype, device=device) for _ in range(WORLD_SIZE)]
        dist.all_gather(outs, data(_rank(), 4, dtype).to(device))
        return outs
    return {"foo": run(_dev()), "gloo": _gloo(run)}


def all_gather_into_tensor(dtype, stacked, async_op=False):
    def run(device):
        shape = (WORLD_SIZE, 4) if stacked else (WORLD_SIZE * 4,)
        out = torch.full(shape, -1, dtype=dtype, device=device)
        work = dist.all_gather_into_tensor(out, data(_rank(), 4, dtype).to(device), async_op=async_op)
        if async_op:
            work.wait()
        return out
    foo = run(_dev()).cpu()  # an error the collective raises on the device comes out here
    return {"foo": foo, "gloo": None if stacked else _gloo(run)}  # gloo gathers into flat tensors only


def reduce_scatter_tensor_stacked_input():
    """reduce_scatter_tensor with its input as a stack of the outputs, shape (world, n), as torch
    documents it."""
    inp = torch.stack([data(_rank(), 3, salt=i) for i in range(WORLD_SIZE)]).to(_dev())
    out = torch.full((3,), -1.0, device=_dev())
    dist.reduce_scatter_tensor(out, inp)
    return out


def premul_sum_collectives(collective, factor_kind):
    """PREMUL_SUM (``_make_nccl_premul_sum``) in each collective that reduces."""
    rank, dev = _rank(), _dev()
    factor = 0.5 if factor_kind == "float" else torch.tensor([0.5], device=dev)
    op = dist._make_nccl_premul_sum(factor)
    if collective == "reduce":
        x = data(rank, 4).to(dev)
        dist.reduce(x, dst=1, op=op)
        return x if rank == 1 else None
    if collective == "all_reduce_coalesced":
        ts = [data(rank, 4).to(dev), data(rank, 3, salt=1).to(dev)]
        dist.all_reduce_coalesced(ts, op=op)
        return ts
    if collective == "reduce_scatter":
        inputs = [data(rank, 4, salt=i).to(dev) for i in range(WORLD_SIZE)]
        out = torch.full((4,), -1.0, device=dev)
        dist.reduce_scatter(out, inputs, op=op)
        return {"out": out, "inputs": inputs}
    if collective == "coalesced_reduce_scatter_tensor":
        ins = [data(rank, 4).to(dev), data(rank, 2, salt=1).to(dev)]
        outs = [torch.full((2,), -1.0, device=dev), torch.full((1,), -1.0, device=dev)]
        with dist._coalescing_manager():
            for o, i in zip(outs, ins):
                dist.reduce_scatter_tensor(o, i, op=op)
        return {"outs": outs, "inputs": ins}
    raise ValueError(collective)


def reduce_scatter(dtype):
    def run(device):
        inputs = [data(_rank(), 3, dtype, salt=i).to(device) for i in range(WORLD_SIZE)]
        out = torch.full((3,), -1, dtype=dtype, device=device)
        dist.reduce_scatter(out, inputs)
        return out
    return {"foo": run(_dev()), "gloo": _gloo(run)}


def reduce_scatter_tensor(dtype, op="SUM", async_op=False):
    def run(device):
        inp = data(_rank(), 2 * 3, dtype).to(device)
        out = torch.full((3,), -1, dtype=dtype, device=device)
        work = dist.reduce_scatter_tensor(out, inp, op=_op(op), async_op=async_op)
        if async_op:
            work.wait()
        return out
    return {"foo": run(_dev()), "gloo": _gloo(run)}


def all_to_all(dtype):
    def run(device):
        inputs = [data(_rank(), 3, dtype, salt=i).to(device) for i in range(WORLD_SIZE)]
        outs = [torch.full((3,), -1, dtype=dtype, device=device) for _ in range(WORLD_SIZE)]
        dist.all_to_all(outs, inputs)
        return outs
    return {"foo": run(_dev()), "gloo": _gloo(run)}


# Uneven all_to_all_single: rank r sends IN_SPLITS[r][j] elements to rank j.
IN_SPLITS = {0: [1, 3], 1: [2, 1]}


def all_to_all_single(dtype, uneven, async_op=False):
    rank = _rank()
    in_splits = IN_SPLITS[rank] if uneven else None
    out_splits = [IN_SPLITS[j][rank] for j in range(WORLD_SIZE)] if uneven else None
    n_in = sum(IN_SPLITS[rank]) if uneven else 4
    n_out = sum(out_splits) if uneven else 4

    def run(device):
        inp = data(rank, n_in, dtype).to(device)
        out = torch.full((n_out,), -1, dtype=dtype, device=device)
        work = dist.all_to_all_single(out, inp, output_split_sizes=out_splits, input_split_sizes=in_splits,
                                      async_op=async_op)
        if async_op:
            work.wait()
        return out
    return {"foo": run(_dev()), "gloo": _gloo(run)}


def gather(dst, dtype):
    def run(device):
        outs = [torch.full((4,), -1, dtype=dtype, device=device) for _ in range(WORLD_SIZE)]
        dist.gather(data(_rank(), 4, dtype).to(device), outs if _rank() == dst else None, dst=dst)
        return outs if _rank() == dst else None
    return {"foo": run(_dev()), "gloo": _gloo(run)}


def scatter(src, dtype):
    def run(device):
        out = torch.full((4,), -1, dtype=dtype, device=device)
        chunks = [data(_rank(), 4, dtype, salt=i).to(device) for i in range(WORLD_SIZE)]
        dist.scatter(out, chunks if _rank() == src else None, src=src)
        return out
    return {"foo": run(_dev()), "gloo": _gloo(run)}


def send_recv(dtype, device_kind="foo"):
    """Rank 0 sends to rank 1, then rank 1 sends back (tag 7) what it received plus one."""
    device = _dev() if device_kind == "foo" else torch.device("cpu")
    x = data(_rank(), 5, dtype).to(device)
    if _rank() == 0:
        dist.send(x, dst=1)
        back = torch.zeros(5, dtype=dtype, device=device)
        dist.recv(back, src=1, tag=7)
        return back
    got = torch.zeros(5, dtype=dtype, device=device)
    dist.recv(got, src=0)
    dist.send(got + 1, dst=0, tag=7)
    return got


def profiled_all_reduce():
    """An all_reduce under torch.profiler with foo's device timeline: the device work it recorded, by
    name, device and stream, and the sum."""
    from torch.profiler import ProfilerActivity, profile

    x = data(_rank()).to(_dev())
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        dist.all_reduce(x)
        torch.foo.synchronize()
    work = [(e.name, e.device_index) for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    return work, x


def recv_from_any_source_cpu():
    """``dist.recv`` without a source, on CPU tensors (gloo supports it). If it fails, rank 1 still
    receives the message from rank 0, so the world stays in step."""
    x = torch.full((3,), float(_rank() + 1))
    if _rank() == 0:
        dist.send(x, dst=1)
        return None
    try:
        src = dist.recv(x)
    except RuntimeError as e:
        dist.recv(x, src=0)
        return {"error": str(e), "value": x}
    return {"src": src, "value": x}


def isend_irecv(dtype, send_first):
    """Both ranks exchange tensors at once: each posts its send and its receive before waiting."""
    peer = 1 - _rank()
    x = data(_rank(), 6, dtype).to(_dev())
    got = torch.full((6,), -1, dtype=dtype, device=_dev())
    if send_first:
        works = [dist.isend(x, dst=peer), dist.irecv(got, src=peer)]
    else:
        works = [dist.irecv(got, src=peer), dist.isend(x, dst=peer)]
    for w in works:
        assert isinstance(w, dist.Work)
        w.wait()
    return got


def batch_isend_irecv(dtype):
    peer = 1 - _rank()
    x = data(_rank(), 6, dtype).to(_dev())
    y = data(_rank(), 2, dtype, salt=5).to(_dev())
    got_x = torch.full((6,), -1, dtype=dtype, device=_dev())
    got_y = torch.full((2,), -1, dtype=dtype, device=_dev())
    ops = [dist.P2POp(dist.isend, x, peer), dist.P2POp(dist.irecv, got_x, peer),
           dist.P2POp(dist.isend, y, peer, tag=3), dist.P2POp(dist.irecv, got_y, peer, tag=3)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    return [got_x, got_y]


def barrier_waits_for_queued_work(async_op):
    """As NCCL's, a barrier on foo returns once every rank reached it with the work queued before it."""
    _warm(lambda: torch.foo._sleep(1))
    queued = torch.foo.Event()
    torch.foo._sleep(50_000_000)  # 50 ms of device time, queued before the barrier
    queued.record()
    work = dist.barrier(async_op=async_op)
    if async_op:
        work.wait()
    return queued.query()


def all_reduce_coalesced(op):
    def run(device):
        ts = [data(_rank(), 3).to(device), data(_rank(), 5, salt=1).to(device)]
        dist.all_reduce_coalesced(ts, op=_op(op))
        return ts
    return {"foo": run(_dev()), "gloo": _gloo(run)}


def coalescing_manager(kind, async_ops):
    """``with dist._coalescing_manager()``: the collectives inside run as one coalesced collective."""
    def run(device):
        if kind == "all_reduce":
            ins = [data(_rank(), 3).to(device), data(_rank(), 5, salt=1).to(device)]
            outs = ins
        elif kind == "all_gather_into_tensor":
            ins = [data(_rank(), 3).to(device), data(_rank(), 2, salt=1).to(device)]
            outs = [torch.full((WORLD_SIZE * t.numel(),), -1.0, device=device) for t in ins]
        else:  # reduce_scatter_tensor
            ins = [data(_rank(), 4).to(device), data(_rank(), 2, salt=1).to(device)]
            outs = [torch.full((t.numel() // WORLD_SIZE,), -1.0, device=device) for t in ins]
        with dist._coalescing_manager(async_ops=async_ops) as cm:
            for i, o in zip(ins, outs):
                if kind == "all_reduce":
                    dist.all_reduce(i)
                elif kind == "all_gather_into_tensor":
                    dist.all_gather_into_tensor(o, i)
                else:
                    dist.reduce_scatter_tensor(o, i)
        if async_ops:
            cm.wait()
        return outs
    return {"foo": run(_dev()), "gloo": _gloo(run)}


def all_gather_coalesced():
    def run(device):
        ins = [data(_rank(), 3).to(device), data(_rank(), 2, salt=1).to(device)]
        outs = [[torch.full_like(t, -1) for t in ins] for _ in range(WORLD_SIZE)]
        dist.all_gather_coalesced(outs, ins)
        return outs
    return {"foo": run(_dev()), "gloo": _gloo(run)}


def object_collectives():
    rank = _rank()
    gathered = [None] * WORLD_SIZE
    dist.all_gather_object(gathered, {"rank": rank, "name": f"r{rank}", "t": torch.arange(3) + rank})
    objects = [f"from {rank}", {"k": [rank]}]
    dist.broadcast_object_list(objects, src=1)
    received = [None]
    dist.scatter_object_list(received, [["zero", 0], ["one", 1]] if rank == 0 else None, src=0)
    dst_list = [None] * WORLD_SIZE if rank == 1 else None
    dist.gather_object(("g", rank), dst_list, dst=1)
    return {"all_gather_object": gathered, "broadcast_object_list": objects, "scatter_object_list": received,
            "gather_object": dst_list}


def cpu_tensors_in_the_group(async_op):
    """CPU tensors in the fccl group go to gloo: a collective on them works, synchronously or not."""
    x = data(_rank(), 4)
    work = dist.all_reduce(x, async_op=async_op)
    if async_op:
        assert isinstance(work, dist.Work)
        work.wait()
        assert work.is_completed() and work.is_success()
    outs = [torch.zeros(4) for _ in range(WORLD_SIZE)]
    dist.all_gather(outs, data(_rank(), 4))
    y = data(_rank(), 4)
    dist.broadcast(y, src=1)
    return {"all_reduce": x, "all_gather": outs, "broadcast": y}


def work_api():
    """A collective's Work: waits, completes, succeeds, and returns its tensors."""
    x = data(_rank(), 4).to(_dev())
    work = dist.all_reduce(x, async_op=True)
    assert work.wait() is True
    torch.foo.synchronize()
    result = work.result()
    return {"is_completed": work.is_completed(), "is_success": work.is_success(),
            "exception": work.exception(), "result": result,
            "result_is_x": len(result) == 1 and result[0].data_ptr() == x.data_ptr(), "x": x}


def many_in_flight():
    """Many asynchronous collectives in flight at once, of different kinds, waited for in reverse."""
    xs = [data(_rank(), 5, salt=i).to(_dev()) for i in range(8)]
    first = xs[0].clone()  # before the all_reduce that changes xs[0] is issued (reading it after would race)
    gathered = torch.empty(2 * 5, device=_dev())
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    works.append(dist.all_gather_into_tensor(gathered, first, async_op=True))
    for w in reversed(works):
        w.wait()
    return {"reduced": xs, "gathered": gathered}


def large_all_reduce(n):
    x = torch.full((n,), float(_rank() + 1), device=_dev())
    dist.all_reduce(x)
    return {"min": x.min().item(), "max": x.max().item()}


def ddp_step():
    """One step of DistributedDataParallel on foo: its reducer averages gradients with fccl."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    reference = torch.nn.Linear(4, 3)
    reference.load_state_dict(model.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(model.to(_dev()), device_ids=None)
    inputs = [torch.arange(8.0).reshape(2, 4) / (r + 1) for r in range(WORLD_SIZE)]
    ddp(inputs[_rank()].to(_dev())).sum().backward()
    # By hand on CPU: the gradient of the sum of both ranks' losses, averaged.
    sum(reference(i).sum() for i in inputs).backward()
    return {"ddp": [p.grad for p in ddp.parameters()], "by_hand": [p.grad / WORLD_SIZE for p in reference.parameters()]}


def views_and_odd_shapes():
    """Tensors that are views into a larger storage (an offset), transposed (dense, not contiguous),
    0-dimensional or empty."""
    rank, dev = _rank(), _dev()
    base = torch.full((12,), -5.0, device=dev)
    base[3:9] = data(rank, 6).to(dev)
    dist.all_reduce(base[3:9])
    gathered = torch.full((2, 8), -5.0, device=dev)
    dist.all_gather_into_tensor(gathered[1], data(rank, 4).to(dev))  # a row of a larger tensor
    transposed = (torch.arange(12.0).reshape(3, 4) + rank).to(dev).t()
    dist.all_reduce(transposed)
    cpu_transposed = (torch.arange(12.0).reshape(3, 4) + rank).t()
    dist.all_reduce(cpu_transposed)
    scalar = torch.tensor(rank + 1.0, device=dev)
    dist.all_reduce(scalar)
    empty = torch.ones(0, device=dev)
    dist.all_reduce(empty)
    return {"base": base, "gathered": gathered, "transposed": transposed, "cpu_transposed": cpu_transposed,
            "scalar": scalar, "empty": empty}


def subgroup():
    """A second group over the same ranks (its own fccl backend), used between collectives of the
    default group."""
    group = dist.new_group([0, 1])
    assert dist.get_backend(group) == "fccl"
    x = data(_rank(), 4).to(_dev())
    y = data(_rank(), 4, salt=1).to(_dev())
    z = data(_rank(), 4, salt=2).to(_dev())
    dist.all_reduce(x)
    work = dist.all_reduce(y, group=group, async_op=True)
    dist.all_reduce(z)
    work.wait()
    outs = [torch.empty(4, device=_dev()) for _ in range(WORLD_SIZE)]
    dist.all_gather(outs, x, group=group)
    dist.destroy_process_group(group)
    return {"x": x, "y": y, "z": z, "gathered": outs}


def collectives_from_two_streams_keep_issue_order():
    """Collectives reach gloo in the order the host issued them, whatever stream issued them: on rank 0
    the first waits behind a busy stream while the second, from an idle stream, could start at once; on
    rank 1 nothing waits. Same-sized tensors, so collectives paired out of order would swap values
    silently."""
    x = data(_rank(), 6).to(_dev())
    y = data(_rank(), 6, salt=3).to(_dev())
    busy, idle = torch.foo.Stream(), torch.foo.Stream()
    for s in (busy, idle):
        s.wait_stream(torch.foo.current_stream())
    if _rank() == 0:
        with _held(busy):
            with torch.foo.stream(busy):
                first = dist.all_reduce(x, async_op=True)
            with torch.foo.stream(idle):
                second = dist.all_reduce(y, async_op=True)
    else:
        with torch.foo.stream(busy):
            first = dist.all_reduce(x, async_op=True)
        with torch.foo.stream(idle):
            second = dist.all_reduce(y, async_op=True)
    first.wait()
    second.wait()
    return {"x": x, "y": y}


# ---- stream semantics (as NCCL's) -----------------------------------------------------------------

def collective_waits_for_queued_work(kind):
    """The collective sees the work queued on the current stream when it is issued: ``x.add_(1)`` is
    held up behind the hold, the collective is issued after it, and only then is the stream released."""
    x = data(_rank(), 6).to(_dev())
    _warm(lambda: torch.empty_like(x).add_(1))
    if kind == "all_reduce":
        out = x
    else:  # all_gather_into_tensor: reads x, writes another tensor
        out = torch.full((WORLD_SIZE * 6,), -1.0, device=_dev())
    with _held():
        _delay()
        x.add_(1)
        if kind == "all_reduce":
            work = dist.all_reduce(x, async_op=True)
        else:
            work = dist.all_gather_into_tensor(out, x, async_op=True)
    work.wait()
    return out


def next_collective_sees_work_queued_in_between(when):
    """Two collectives from one stream: the second sees the work queued between them. fccl skips the
    wait for the caller's stream when that stream received nothing but its wait for the previous
    collective; ``y.add_(1)`` comes after that wait (``after_wait``: a synchronous first collective) or
    before it (``before_wait``: an asynchronous one waited for after the add)."""
    x = data(_rank(), 6).to(_dev())
    y = data(_rank(), 6, salt=3).to(_dev())
    _warm(lambda: torch.empty_like(y).add_(1))
    if when == "after_wait":
        dist.all_reduce(x)
        with _held():
            _delay()
            y.add_(1)
            work = dist.all_reduce(y, async_op=True)
    else:
        first = dist.all_reduce(x, async_op=True)
        with _held():
            _delay()
            y.add_(1)
            first.wait()
            work = dist.all_reduce(y, async_op=True)
    work.wait()
    return x, y


def wait_does_not_block_the_host(async_op, counter):
    """Work.wait() (and a synchronous collective) make the current stream wait without blocking the
    host: with the collective held up behind the current stream, wait() returns while the collective is
    not done, and an operation queued after it on the current stream sees the reduced values.

    Rank 1 releases its hold only after rank 0 has released its own and queued the read, so the
    collective cannot have finished when rank 0's read becomes runnable: a read that did not wait for it
    sees the unreduced input."""
    store = _store()
    key = f"wait_does_not_block_the_host/{counter}"
    x = data(_rank(), 6).to(_dev())
    _warm(lambda: x.clone(), lambda: torch.empty_like(x).add_(1))
    with _held():
        if async_op:
            work = dist.all_reduce(x, async_op=True)
            assert work.wait() is True
            completed_after_wait = work.is_completed()
        else:
            work = None
            assert dist.all_reduce(x) is None
            completed_after_wait = None
        seen = x.clone()  # queued on the current stream after the wait
        if _rank() == 1:
            store.wait([key], datetime.timedelta(seconds=30))
    if _rank() == 0:
        store.set(key, "released")
    return {"completed_after_wait": completed_after_wait, "seen": seen}


def synchronize_orders_the_current_stream(counter):
    """Work.synchronize() makes the current stream wait (as wait() does); is_completed() is False while
    the collective is held up, True after torch.foo.synchronize()."""
    store = _store()
    key = f"synchronize_orders_the_current_stream/{counter}"
    x = data(_rank(), 6).to(_dev())
    _warm(lambda: x.clone())
    with _held():
        work = dist.all_reduce(x, async_op=True)
        work.synchronize()
        completed_while_held = work.is_completed()
        seen = x.clone()
        if _rank() == 1:
            store.wait([key], datetime.timedelta(seconds=30))
    if _rank() == 0:
        store.set(key, "released")
    torch.foo.synchronize()
    return {"completed_while_held": completed_while_held, "completed_after_synchronize": work.is_completed(),
            "seen": seen, "x": x}


def device_synchronize_completes_a_collective():
    """torch.foo.synchronize() waits for every stream of the device, the communication streams too."""
    x = data(_rank(), 6).to(_dev())
    with _held():
        work = dist.all_reduce(x, async_op=True)
        completed_while_held = work.is_completed()
    torch.foo.synchronize()
    return {"completed_while_held": completed_while_held, "completed_after_synchronize": work.is_completed(),
            "x": x}


def future_of_a_collective():
    """get_future(): completes with the foo tensors; wait()/value() give the reduced values, and a then()
    callback (which runs at once, on a stream that waits for the collective) sees them too, even while
    the collective is still held up."""
    x = data(_rank(), 6).to(_dev())
    _warm(lambda: x * 2)
    with _held():
        work = dist.all_reduce(x, async_op=True)
        fut = work.get_future()
        doubled = fut.then(lambda f: f.value()[0] * 2)
    value = fut.wait()
    assert isinstance(value, list) and len(value) == 1, value
    assert value[0].device == _dev() and value[0].data_ptr() == x.data_ptr()
    assert fut.done()
    seen_in_callback = []
    fut.then(lambda f: seen_in_callback.append(f.value()[0].cpu())).wait()
    return {"wait": value[0], "value": fut.value()[0], "then": doubled.wait(), "seen_in_callback": seen_in_callback}


def freed_while_pending(kind):
    """A tensor the collective uses is freed right after issue, while the collective is held up, and new
    tensors of its size are allocated and written on the same stream: the collective's memory is not
    handed out again until it is done (record_stream), so the result is right and the new tensors keep
    their values."""
    n = 1 << 14
    dev = _dev()
    _warm(lambda: torch.full((n,), -7.0, device=dev), lambda: torch.full((2 * n,), -7.0, device=dev))
    x = data(_rank(), 2 * n if kind == "reduce_scatter_tensor" else n).to(dev)
    if kind == "all_gather_into_tensor":
        out = torch.full((2 * n,), -1.0, device=dev)
        size = n
    else:
        out = torch.full((n,), -1.0, device=dev)
        size = 2 * n
    with _held():
        if kind == "all_gather_into_tensor":
            work = dist.all_gather_into_tensor(out, x, async_op=True)
        else:
            work = dist.reduce_scatter_tensor(out, x, async_op=True)
        freed = x.data_ptr()
        del x
        fresh = [torch.full((size,), -7.0, device=dev) for _ in range(4)]
        work.wait()
        result = out.clone()
    return {"out": result, "fresh_reused_the_input": any(t.data_ptr() == freed for t in fresh),
            "fresh": torch.stack(fresh)}


def output_freed_while_pending():
    """The caller drops the output and the Work of a pending collective: its memory is not handed out
    again while the collective may still write it."""
    n = 1 << 14
    dev = _dev()
    _warm(lambda: torch.full((2 * n,), -7.0, device=dev))
    x = data(_rank(), n).to(dev)
    out = torch.full((2 * n,), -1.0, device=dev)
    with _held():
        dist.all_gather_into_tensor(out, x, async_op=True)
        freed = out.data_ptr()
        del out
        fresh = [torch.full((2 * n,), -7.0, device=dev) for _ in range(4)]
    torch.foo.synchronize()
    return {"fresh_reused_the_output": any(t.data_ptr() == freed for t in fresh), "fresh": torch.stack(fresh)}


def side_stream_collective(wait_kind):
    """A collective issued from a side stream orders after that stream's work (not the default
    stream's), and waiting for it makes the side stream wait."""
    x = data(_rank(), 6).to(_dev())
    _warm(lambda: torch.empty_like(x).add_(1), lambda: x.clone())
    side = torch.foo.Stream()
    side.wait_stream(torch.foo.current_stream())  # x was written on the default stream
    with _held(side):
        with torch.foo.stream(side):
            _delay()
            x.add_(1)
            work = dist.all_reduce(x, async_op=wait_kind != "sync")
            if wait_kind == "wait":
                work.wait()
            seen = x.clone()  # on the side stream, after the collective
        completed_while_held = work.is_completed() if work is not None else None
    torch.foo.current_stream().wait_stream(side)
    return {"x": x, "seen": seen, "completed_while_held": completed_while_held}


def cpu_collective_while_a_foo_collective_is_queued():
    """A CPU collective issued while a foo collective of the same group is still queued behind a busy
    stream on rank 0, but already under way on rank 1: each pairs with its own kind (the host and the
    streams reach gloo in different orders)."""
    x = data(_rank(), 6).to(_dev())
    c = data(_rank(), 4, salt=1)
    if _rank() == 0:
        with _held():
            work = dist.all_reduce(x, async_op=True)
            dist.all_reduce(c)  # from the host, while rank 0's foo collective waits behind the hold
    else:
        work = dist.all_reduce(x, async_op=True)
        dist.all_reduce(c)
    work.wait()
    return {"foo": x, "cpu": c}


# ---- errors ---------------------------------------------------------------------------------------

def mixed_devices(kind):
    """A collective whose tensors are on two devices raises RuntimeError at the call (on both ranks,
    before anything is sent): returns its message. The group still works afterwards."""
    dev, other = _dev(), torch.device("foo", 1 - _rank())
    calls = {
        "all_gather_two_devices": lambda: dist.all_gather(
            [torch.empty(2, device=dev), torch.empty(2, device=other)], torch.ones(2, device=dev)),
        "all_gather_into_tensor_two_devices": lambda: dist.all_gather_into_tensor(
            torch.empty(4, device=other), torch.ones(2, device=dev)),
        "all_gather_foo_and_cpu": lambda: dist.all_gather(
            [torch.empty(2), torch.empty(2)], torch.ones(2, device=dev)),
        "all_gather_into_tensor_foo_and_cpu": lambda: dist.all_gather_into_tensor(
            torch.empty(4), torch.ones(2, device=dev)),
        "reduce_scatter_foo_and_cpu": lambda: dist.reduce_scatter(
            torch.empty(2, device=dev), [torch.ones(2, device=dev), torch.ones(2)]),
        "all_to_all_foo_and_cpu": lambda: dist.all_to_all(
            [torch.empty(2, device=dev), torch.empty(2)], [torch.ones(2, device=dev), torch.ones(2, device=dev)]),
        "all_reduce_coalesced_foo_and_cpu": lambda: dist.all_reduce_coalesced(
            [torch.ones(2, device=dev), torch.ones(2)]),
        "all_reduce_coalesced_two_devices": lambda: dist.all_reduce_coalesced(
            [torch.ones(2, device=dev), torch.ones(2, device=other)]),
        "all_reduce_not_dense": lambda: dist.all_reduce(torch.ones(8, device=dev)[::2]),
    }
    try:
        calls[kind]()
        message = None
    except RuntimeError as e:
        message = str(e)
    check = data(_rank(), 3).to(dev)
    dist.all_reduce(check)
    return {"message": message, "after": check}


def invalid_sizes(kind):
    """A collective whose tensor sizes do not fit together: gloo raises at the call on CPU tensors; on
    foo tensors it must too (as NCCL does), not later on the device. Returns where each raised."""
    def call(device):
        if kind == "all_gather_into_tensor_output_size":
            dist.all_gather_into_tensor(torch.empty(5, device=device), torch.ones(2, device=device))
        elif kind == "reduce_scatter_tensor_input_size":
            dist.reduce_scatter_tensor(torch.empty(2, device=device), torch.ones(5, device=device))
        elif kind == "all_to_all_single_splits":
            dist.all_to_all_single(torch.empty(4, device=device), torch.ones(4, device=device),
                                   output_split_sizes=[2, 2], input_split_sizes=[1, 2])

    def at_call(device):
        try:
            call(device)
        except (RuntimeError, ValueError) as e:
            return str(e)
        return None

    result = {"cpu_at_call": at_call(torch.device("cpu")), "foo_at_call": at_call(_dev()), "foo_later": None}
    try:
        torch.foo.synchronize()
    except RuntimeError as e:
        result["foo_later"] = str(e)
    check = data(_rank(), 3).to(_dev())
    dist.all_reduce(check)
    result["after"] = check
    return result



def sanitizer_reads_an_all_reduce_result(waits):
    """Under torch.foo.sanitizer: all-reduces a tensor (on the communication stream) and reads it on the
    default stream, after ``work.wait()`` or not. Returns the sanitizer's message ("" when silent) and the
    value read."""
    torch.foo.synchronize()
    torch.foo.sanitizer.enable()
    try:
        t = torch.full((8,), float(dist.get_rank() + 1), device="foo")
        work = dist.all_reduce(t, async_op=True)
        if waits:
            work.wait()
        try:
            return {"message": "", "read": (t * 2).cpu()}
        except RuntimeError as e:
            work.wait()
            return {"message": str(e), "read": None}
    finally:
        torch.foo.synchronize()
        torch.foo.sanitizer.disable()
