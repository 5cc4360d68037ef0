"""foo across processes: forked children (CONTRACT: "``_is_in_bad_fork``; using foo in a forked child after the
parent initialised it raises a clear error") and ``torch.multiprocessing`` with spawn and forkserver, where foo
tensors, storages and events are shared as CUDA IPC shares them (foo_backend._multiprocessing): the receiver's
tensor aliases the sender's memory, the sender's queued work comes first, the sender's block lives while a
receiver holds it. Every fork happens inside a fresh interpreter, never in the test runner; every wait between
processes is on a queue or an event, with a bounded timeout."""
import ast
import textwrap

import pytest

from support.subprocesses import Subprocesses, labelled

MSG = "Cannot re-initialize foo in forked subprocess"

# Uses of foo in a child forked after the parent initialised it; each must raise RuntimeError with MSG.
# (Names are globals of the fork_after_init script: x on foo:1, y on foo:0, N elements in a block the parent
# freed and its allocator keeps cached.)
BAD_FORK_USES = {
    "new_tensor": 'torch.ones(2, device="foo")',
    "new_tensor_foo1": 'torch.zeros(3, device="foo:1")',
    "new_tensor_literal": 'torch.tensor([1.0, 2.0], device="foo")',
    "empty": 'torch.empty(10, device="foo")',
    "empty_cached_size": 'torch.empty(N, device="foo:0")',
    "to_foo": 'torch.ones(2).to("foo:1")',
    "op_on_inherited": "x + 1",
    "inplace_on_inherited": "y.add_(1)",
    "setitem_on_inherited": "y.__setitem__(0, 5.0)",
    "copy_into_inherited": "y.copy_(torch.zeros(1000))",
    "storage_fill": "y.untyped_storage().fill_(0)",
    "resize_inherited": "y.resize_(5000)",
    "cpu": "x.cpu()",
    "item": "y[0].item()",
    "to_other_device": 'x.to("foo:0")',
    "synchronize": "torch.foo.synchronize()",
    "accelerator_synchronize": "torch.accelerator.synchronize()",
    "current_device": "torch.foo.current_device()",
    "set_device": "torch.foo.set_device(1)",
    "get_device_properties": "torch.foo.get_device_properties(0)",
    "get_rng_state": "torch.foo.get_rng_state()",
    "init": "torch.foo.init()",
    "pin_memory": "torch.ones(3).pin_memory()",
}


def _spawning(helpers, imports, main):
    """A script whose main block (`main`) starts processes that run `helpers` (functions of HELPERS, which a
    spawned process imports), with torch, torch.multiprocessing as mp, gc, os and sys imported."""
    return (
        "import gc, os, sys, torch\nimport torch.multiprocessing as mp\n" + textwrap.dedent(imports)
        + 'sys.path.insert(0, os.environ["FOO_MP_HELPERS"])\n'
        + f"from foo_mp_helpers import {', '.join(helpers)}\n\n"
        + 'if __name__ == "__main__":\n' + textwrap.indent(textwrap.dedent(main), "    "),
        {},
    )


SCRIPTS = {
    "fork_after_init": (
        f"MSG = {MSG!r}\nUSES = {BAD_FORK_USES!r}\n" + textwrap.dedent("""
        import gc, os, sys, torch
        import torch.multiprocessing as mp

        N = 1 << 20
        x = torch.arange(N, dtype=torch.float32, device="foo:1")
        y = torch.full((1000,), 7.0, device="foo:0")
        cached = torch.ones(N, device="foo:0")
        del cached  # a freed block the parent's allocator (and the child's copy of it) keeps cached
        allocated = [torch.foo.memory_allocated(i) for i in range(3)]

        def child():
            global x, y
            print("child_bad_fork", torch.foo._is_in_bad_fork())
            print("child_count", torch.foo.device_count(), torch.foo.is_available(), torch.accelerator.device_count())
            print("child_initialized", torch.foo.is_initialized())
            for name, code in USES.items():
                try:
                    eval(code)
                    print("use_" + name, "NO_ERROR")
                except Exception as e:
                    print("use_" + name, type(e).__name__, MSG in str(e), "|", " ".join(str(e).split())[:150])
            print("child_initialized_after", torch.foo.is_initialized(), torch.foo._is_in_bad_fork())
            # What a child may still do without error, as in a CUDA bad-fork child: query, queue seeds, drop tensors.
            print("child_queries", torch.foo.memory_allocated(0), len(torch.foo.memory_stats(0)))
            torch.foo.manual_seed_all(1)
            del x, y
            gc.collect()
            torch.foo.empty_cache()
            torch.accelerator.empty_cache()
            print("child_cleanup ok")
            sys.stdout.flush()

        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            child()
            sys.exit(0)  # a normal exit: interpreter shutdown and atexit handlers run in the bad-fork child
        _, status = os.waitpid(pid, 0)
        print("child_exit", os.waitstatus_to_exitcode(status))
        print("parent_state", torch.foo._is_in_bad_fork(), torch.foo.is_initialized())
        print("parent_intact", torch.equal(x.cpu(), torch.arange(N, dtype=torch.float32)),
              torch.equal(y.cpu(), torch.full((1000,), 7.0)))
        print("parent_allocated_same", [torch.foo.memory_allocated(i) for i in range(3)] == allocated)
        z = torch.full((N,), 2.0, device="foo:0")  # takes the cached block again
        z2 = torch.full((N,), 3.0, device="foo:1")
        print("parent_new", z.sum().item() == 2.0 * N, z2.sum().item() == 3.0 * N,
              torch.equal(x.cpu(), torch.arange(N, dtype=torch.float32)),
              torch.equal(y.cpu(), torch.full((1000,), 7.0)))

        def mp_child(q):
            out = {"bad_fork": torch.foo._is_in_bad_fork()}
            for name in ("new_tensor", "op_on_inherited", "cpu"):
                try:
                    eval(USES[name])
                    out[name] = "NO_ERROR"
                except Exception as e:
                    out[name] = (type(e).__name__, MSG in str(e))
            q.put(out)

        def mp_child_uncaught():
            torch.ones(1, device="foo")

        ctx = mp.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=mp_child, args=(q,))
        p.start()
        print("mp_fork", q.get(timeout=120))
        p.join(timeout=120)
        print("mp_fork_exit", p.exitcode)
        sys.stdout.flush()
        p = ctx.Process(target=mp_child_uncaught)
        p.start()
        p.join(timeout=120)
        print("mp_fork_uncaught_exit", p.exitcode)
        print("parent_final", torch.equal(x.cpu(), torch.arange(N, dtype=torch.float32)), (y + 1).cpu()[0].item())
        """),
        {"FOO_DEVICE_COUNT": 3},
    ),
    "fork_before_init": (
        """
        import os, sys, torch
        import torch.multiprocessing as mp

        print("parent_before", torch.foo.is_initialized(), torch.foo._is_in_bad_fork())
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            t = torch.arange(6.0, device="foo:1") * 2
            print("child", torch.foo._is_in_bad_fork(), torch.foo.is_initialized(), t.device, t.cpu().tolist(),
                  torch.foo.current_device(), torch.foo.device_count())
            sys.stdout.flush()
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        print("child_exit", os.waitstatus_to_exitcode(status))

        def mp_child(q):
            t = torch.tensor([1.0, 2.0], device="foo:0").pow(2)
            q.put((torch.foo._is_in_bad_fork(), str(t.device), t.cpu().tolist()))

        ctx = mp.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=mp_child, args=(q,))
        p.start()
        print("mp_child", q.get(timeout=120))
        p.join(timeout=120)
        print("mp_exit", p.exitcode)
        print("parent_still_uninitialised", torch.foo.is_initialized())
        u = torch.ones(3, device="foo:0") + 1
        print("parent_after", torch.foo._is_in_bad_fork(), torch.foo.is_initialized(), u.cpu().tolist())
        """,
        {},
    ),
    "spawn": _spawning(
        ["describe", "spawn_child"],
        "",
        """
        ctx = mp.get_context("spawn")
        t = torch.arange(6.0).reshape(2, 3).to("foo:1")
        view = t[1]
        param = torch.nn.Parameter(torch.full((2,), 1.5, device="foo:0"))
        frozen = torch.nn.Parameter(torch.ones(2, device="foo:1"), requires_grad=False)
        leaf = torch.ones(3, device="foo:1", requires_grad=True)
        queued = torch.tensor([10, 20, 30], device="foo:1")
        storage = torch.arange(4, dtype=torch.uint8).to("foo:1").untyped_storage()
        cpu_tensor = torch.arange(3)
        to_child, from_child = ctx.Queue(), ctx.Queue()
        proc = ctx.Process(target=spawn_child, args=(t, view, param, frozen, leaf, cpu_tensor, to_child, from_child))
        proc.start()
        to_child.put(queued)
        to_child.put(storage)
        report = from_child.get(timeout=120)
        sent_back = from_child.get(timeout=120)
        echoed = from_child.get(timeout=120)
        proc.join(timeout=120)
        print("exitcode", proc.exitcode)
        for key, value in report.items():
            print(key, value)
        print("sent_back", describe(sent_back))
        print("echoed", describe(echoed))
        # The child changed them in place, and synchronized before answering.
        print("parent_t", describe(t))
        print("parent_view", describe(view))
        print("parent_param", describe(param))
        print("parent_leaf", describe(leaf))
        print("parent_queued", describe(queued))
        print("parent_storage", list(bytes(storage.cpu())))
        """,
    ),
    # Aliasing both ways, views and offsets, events across processes, a received tensor sent home and on to a
    # third process (started by forkserver).
    "sharing": _spawning(
        ["aliasing_child", "onward_child"],
        "",
        """
        torch.foo.set_device(1)
        base = torch.arange(12.0, device="foo:1")
        view = base[2:8].view(2, 3)  # storage offset 2
        storage = base.untyped_storage()
        ctx, fs = mp.get_context("spawn"), mp.get_context("forkserver")
        to_a, from_a, a_to_b, from_b = ctx.Queue(), ctx.Queue(), ctx.Queue(), ctx.Queue()
        a = ctx.Process(target=aliasing_child, args=(base, to_a, from_a, a_to_b))
        b = fs.Process(target=onward_child, args=(a_to_b, from_b))
        a.start()
        b.start()
        to_a.put(view)
        to_a.put(storage)
        print("a_saw", from_a.get(timeout=120))
        print("parent_sees_a_writes", base.cpu().tolist())
        # The parent's next write is queued behind its held stream: only the event orders the child's read.
        base.add_(0)  # an operator's first call runs at once (and would wait for the held stream)
        with torch.foo._hold_stream() as release:
            base.add_(1000)
            event = torch.foo.Event(interprocess=True)
            event.record()
            to_a.put(event)
            print("a_queried_while_parent_held", from_a.get(timeout=120))
            release()
        print("a_saw_after_event", from_a.get(timeout=120))
        print("a_recorded_while_held", from_a.get(timeout=120), event.query())
        to_a.put("release")
        event.synchronize()
        print("parent_after_a_event", base.cpu().tolist())
        home = from_a.get(timeout=120)  # the child sends base back: the parent gets its own tensor
        print("came_home_as_itself", home.data_ptr() == base.data_ptr(), torch.equal(home, base))
        to_a.put("forward")
        print("b_saw", from_b.get(timeout=120))
        print("parent_sees_b_write", base.cpu().tolist()[:4])
        to_a.put("done")
        a.join(timeout=120)
        b.join(timeout=120)
        print("exits", a.exitcode, b.exitcode)
        """,
    ),
    # Lifetime: a sent block lives while a receiver holds it, and returns to the sender's cache after.
    "lifetime": _spawning(
        ["lifetime_child"],
        "",
        """
        ctx = mp.get_context("spawn")
        to_c, from_c = ctx.Queue(), ctx.Queue()
        c = ctx.Process(target=lifetime_child, args=(to_c, from_c))
        c.start()
        start = torch.foo.memory_allocated(0)
        t = torch.full((100000,), 3.0, device="foo:0")
        to_c.put(t)
        print("child_read", from_c.get(timeout=120))
        del t
        gc.collect()
        print("collect_while_held", torch.foo.ipc_collect(), torch.foo.memory_allocated(0) > start)
        t2 = torch.zeros(100000, device="foo:0")  # the held block is not handed out again
        to_c.put("check")
        print("child_still_reads", from_c.get(timeout=120))
        to_c.put("release")
        print("child", from_c.get(timeout=120))
        torch.foo.ipc_collect()
        del t2
        print("allocated_back", torch.foo.memory_allocated(0) == start)
        u = torch.ones(1000, device="foo:0")
        to_c.put(u)
        print("child_read_u", from_c.get(timeout=120), from_c.get(timeout=120))
        held = torch.foo.memory_allocated(0)
        del u
        print("freed_at_once", torch.foo.memory_allocated(0) < held, torch.foo.memory_allocated(0) == start)
        v = from_c.get(timeout=120)  # the child is the producer now, and exits while this process holds v
        to_c.put("got")
        c.join(timeout=120)
        print("child_exit", c.exitcode)
        print("v_after_producer_exit", v.cpu().tolist())
        try:
            from_c.get(timeout=120)
            print("late NO_ERROR")
        except RuntimeError as e:
            print("late", " ".join(str(e).split()))
        """,
    ),
    # 100 tensors through a producer/consumer pair, no leak on either side.
    "queue_of_100": _spawning(
        ["producer"],
        "",
        """
        ctx = mp.get_context("spawn")
        q, done = ctx.Queue(), ctx.Queue()
        p = ctx.Process(target=producer, args=(q, done))
        p.start()
        start = torch.foo.memory_allocated(0)
        good = 0
        for i in range(100):
            t = q.get(timeout=120)
            good += t.shape == (i + 1, 7) and bool((t == i).all())
            del t
        gc.collect()
        print("consumer", good, torch.foo.memory_allocated(0) - start)
        done.put("done")
        print("producer", q.get(timeout=120))
        p.join(timeout=120)
        print("producer_exit", p.exitcode)
        """,
    ),
    # Errors: other devices, a forked receiver, a pinned host tensor (shared CPU memory, as with CUDA), events.
    "sharing_errors": _spawning(
        ["receive_and_report", "pinned_child", "dense_forms"],
        "from multiprocessing.reduction import ForkingPickler\n",
        """
        ctx = mp.get_context("spawn")
        q, r = ctx.Queue(), ctx.Queue()
        os.environ["FOO_DEVICE_COUNT"] = "3"
        c = ctx.Process(target=receive_and_report, args=(q, r))
        c.start()
        os.environ["FOO_DEVICE_COUNT"] = "2"
        q.put(torch.ones(2, device="foo:1"))
        print("other_devices", r.get(timeout=120))
        c.join(timeout=120)
        fork = mp.get_context("fork")
        fq, fr = fork.Queue(), fork.Queue()
        f = fork.Process(target=receive_and_report, args=(fq, fr))
        f.start()
        fq.put(torch.ones(2, device="foo:0"))
        print("forked", fr.get(timeout=120))
        f.join(timeout=120)
        q, r = ctx.Queue(), ctx.Queue()
        c = ctx.Process(target=dense_forms, args=(q, r))
        c.start()
        q.put(torch.eye(3, device="foo:1").to_sparse())
        q.put(torch.nested.nested_tensor([torch.ones(2), torch.arange(3.0)], device="foo:1"))
        print("sparse_and_nested", r.get(timeout=120))
        c.join(timeout=120)
        pinned = torch.arange(5.0).pin_memory()
        q, r = ctx.Queue(), ctx.Queue()
        c = ctx.Process(target=pinned_child, args=(q, r))
        c.start()
        q.put(pinned)
        print("pinned_child", r.get(timeout=120))
        print("pinned_parent", pinned.tolist(), pinned.device)
        c.join(timeout=120)
        for name, make in (("plain_event", lambda: torch.foo.Event()),
                           ("timing_event", lambda: torch.foo.Event(enable_timing=True, interprocess=True))):
            try:
                ForkingPickler.dumps(make())
                print(name, "NO_ERROR")
            except Exception as e:
                print(name, type(e).__name__, " ".join(str(e).split()))
        """,
    ),
    # Actors read the weights a learner updates, each round: the same memory, no copies.
    "actor_learner": _spawning(
        ["actor"],
        "import copy\n",
        """
        torch.manual_seed(0)
        cpu_model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        model = copy.deepcopy(cpu_model).to("foo:0")
        x = torch.randn(16, 4)
        opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (cpu_model, model)]
        ctx = mp.get_context("spawn")
        orders, results = [ctx.Queue() for _ in range(2)], ctx.Queue()
        actors = [ctx.Process(target=actor, args=(i, model, x, orders[i], results)) for i in range(2)]
        for p in actors:
            p.start()
        for step in range(3):
            for m, opt, device in ((cpu_model, opts[0], "cpu"), (model, opts[1], "foo:0")):
                opt.zero_grad()
                m(x.to(device)).pow(2).sum().backward()
                opt.step()
            torch.foo.synchronize()  # the update is done before the actors read
            for q in orders:
                q.put(step)
            answers = sorted((results.get(timeout=120) for _ in actors), key=lambda a: a[0])
            with torch.no_grad():
                expected = cpu_model(x)
            print(f"step{step}", [a[1] for a in answers],
                  all(torch.allclose(a[2], expected, rtol=1e-5, atol=1e-6) for a in answers))
        for q in orders:
            q.put(None)
        for p in actors:
            p.join(timeout=120)
        print("exits", [p.exitcode for p in actors])
        """,
    ),
}

# Imported by the spawned child (its target must be importable there).
HELPERS = '''
import traceback

import torch


def describe(t):
    if not torch.is_tensor(t):
        return repr(t)
    return f"{type(t).__name__} {t.device} {t.detach().cpu().tolist()} {t.requires_grad}"


def spawn_child(t, view, param, frozen, leaf, cpu_tensor, to_child, from_child):
    # Always answer the parent's three reads, even on failure, so a bug fails the test instead of stalling it.
    report, sent_back, queued = {}, None, None
    try:
        queued = to_child.get(timeout=120)
        try:
            storage = to_child.get(timeout=120)
            report["storage"] = f"{type(storage).__name__} {storage.device} {list(bytes(storage.cpu()))}"
        except Exception as e:
            storage = None
            report["storage"] = f"ERROR {type(e).__name__}: {e}"
        report.update({
            "child_state": f"{torch.foo._is_in_bad_fork()} {torch.foo.device_count()}",
            "arg_t": describe(t),
            "arg_view": describe(view),
            "arg_param": describe(param),
            "arg_frozen": describe(frozen),
            "arg_leaf": describe(leaf),
            "arg_cpu": describe(cpu_tensor),
            "queued": describe(queued),
        })
        with torch.no_grad():
            t.add_(100)
            view.fill_(-1)
            param.mul_(0)
            leaf.zero_()
            queued.neg_()
            if storage is not None:
                storage.fill_(9)
        report["child_t_after"] = describe(t)
        report["child_grad"] = str((param * 2).sum().requires_grad)
        for device in range(torch.foo.device_count()):  # the parent reads after this process's writes
            torch.foo.synchronize(device)
        sent_back = (torch.arange(4.0, device="foo:1") * 2).requires_grad_()
    except Exception:
        report["child_error"] = " ".join(traceback.format_exc().split())
    from_child.put(report)
    from_child.put(sent_back)
    from_child.put(queued)


def _error(e):
    return (type(e).__name__, " ".join(str(e).split()))


def aliasing_child(base, to_a, from_a, a_to_b):
    torch.foo.set_device(1)
    try:
        view = to_a.get(timeout=120)
        storage = to_a.get(timeout=120)
        saw = (base.cpu().tolist(), view.cpu().tolist(), view.storage_offset(), view.data_ptr() - base.data_ptr(),
               storage.data_ptr() == base.data_ptr(), str(view.device))
        view.fill_(-1)  # through the view, into the parent's memory
        torch.foo.synchronize()
        from_a.put(saw)
        event = to_a.get(timeout=120)
        from_a.put(event.query())
        event.wait()  # this process's current stream waits for the parent's held stream
        from_a.put(base.cpu().tolist())
        base.mul_(1)  # an operator's first call runs at once (and would wait for the held stream)
        with torch.foo._hold_stream() as release:
            base.mul_(2)
            event.record()
            from_a.put("recorded")
            to_a.get(timeout=120)
            release()
        torch.foo.synchronize()
        from_a.put(base)  # back to the process it came from
        to_a.get(timeout=120)
        a_to_b.put(base)  # and on to a third process
        to_a.get(timeout=120)
    except Exception as e:
        from_a.put(_error(e))


def onward_child(a_to_b, from_b):
    torch.foo.set_device(1)
    try:
        t = a_to_b.get(timeout=120)
        saw = t.cpu().tolist()[:4]
        t[:3] = 7
        torch.foo.synchronize()
        from_b.put(saw)
    except Exception as e:
        from_b.put(_error(e))


def lifetime_child(to_c, from_c):
    import gc
    t = to_c.get(timeout=120)
    from_c.put(t.sum().item())
    to_c.get(timeout=120)
    from_c.put(t.sum().item())
    to_c.get(timeout=120)
    del t
    gc.collect()
    from_c.put("released")
    u = to_c.get(timeout=120)
    from_c.put(u.sum().item())
    del u
    gc.collect()
    from_c.put("released")
    from_c.put(torch.full((10,), 5.0, device="foo:1"))
    late = torch.full((3_000_000,), 6.0, device="foo:1")  # a segment of its own (small blocks share the one v is in)
    to_c.get(timeout=120)
    from_c.put(late)  # read by the parent after this process exits


def producer(q, done):
    start = torch.foo.memory_allocated(0)
    for i in range(100):
        q.put(torch.full((i + 1, 7), float(i), device="foo:0"))
    done.get(timeout=120)  # the consumer released them all
    torch.foo.ipc_collect()
    q.put((torch.foo.memory_allocated(0) - start, torch.foo.memory_stats(0)["active_bytes.all.current"]))


def receive_and_report(q, r):
    try:
        r.put(("received", q.get(timeout=120).cpu().tolist()))
    except Exception as e:
        r.put(_error(e))


def dense_forms(q, r):
    """Sparse and nested foo tensors, received: their layouts and dense values."""
    try:
        sparse, nested = q.get(timeout=120), q.get(timeout=120)
        r.put((str(sparse.layout), str(sparse.device), sparse.to_dense().cpu().tolist(), nested.is_nested,
               str(nested.device), [t.cpu().tolist() for t in nested.unbind()]))
    except Exception as e:
        r.put(_error(e))


def pinned_child(q, r):
    t = q.get(timeout=120)
    saw = (str(t.device), t.tolist())
    t.add_(1)  # shared CPU memory: the parent sees it
    r.put(saw)


def actor(index, model, x, orders, results):
    while True:
        step = orders.get(timeout=120)
        if step is None:
            return
        with torch.no_grad():
            results.put((index, step, model(x.to("foo:0")).cpu()))
'''


@pytest.fixture(scope="module")
def subprocesses(tmp_path_factory):
    helpers = tmp_path_factory.mktemp("mp_helpers")
    (helpers / "foo_mp_helpers.py").write_text(HELPERS)
    scripts = {name: (code, {**env, "FOO_MP_HELPERS": str(helpers)}) for name, (code, env) in SCRIPTS.items()}
    procs = Subprocesses(scripts)
    yield procs
    procs.close()


# ---- fork after initialisation ----------------------------------------------------------------------

def test_bad_fork_child_state(subprocesses):
    out = labelled(subprocesses.check("fork_after_init"))
    assert out["child_bad_fork"] == "True"
    assert out["child_count"] == "3 True 3"  # device_count works and does not raise
    assert out["child_initialized"] == "False"
    assert out["child_initialized_after"] == "False True"


@pytest.mark.parametrize("use", list(BAD_FORK_USES))
def test_bad_fork_use_raises(subprocesses, use):
    line = labelled(subprocesses.check("fork_after_init"))["use_" + use]
    assert line.startswith("RuntimeError True"), f"{BAD_FORK_USES[use]} in a bad-fork child: {line}"


def test_bad_fork_child_can_clean_up_and_exit(subprocesses):
    out = labelled(subprocesses.check("fork_after_init"))
    assert out["child_queries"] == "0 0"  # as torch.cuda: not initialised, so nothing to report
    assert out["child_cleanup"] == "ok"
    assert out["child_exit"] == "0"


def test_bad_fork_child_leaves_parent_memory_intact(subprocesses):
    out = labelled(subprocesses.check("fork_after_init"))
    assert out["parent_state"] == "False True"
    assert out["parent_intact"] == "True True"
    assert out["parent_allocated_same"] == "True"
    assert out["parent_new"] == "True True True True"
    assert out["parent_final"] == "True 8.0"


def test_multiprocessing_fork_after_init_raises(subprocesses):
    proc = subprocesses["fork_after_init"]
    out = labelled(subprocesses.check("fork_after_init"))
    result = ast.literal_eval(out["mp_fork"])
    assert result == {"bad_fork": True, "new_tensor": ("RuntimeError", True), "op_on_inherited": ("RuntimeError", True),
                      "cpu": ("RuntimeError", True)}
    assert out["mp_fork_exit"] == "0"
    # Uncaught, the error ends the child with exit code 1 and names the fix.
    assert out["mp_fork_uncaught_exit"] == "1"
    assert MSG in proc.stderr and "'spawn' start method" in proc.stderr


# ---- fork before initialisation ---------------------------------------------------------------------

def test_fork_before_init_child_uses_foo(subprocesses):
    out = labelled(subprocesses.check("fork_before_init"))
    assert out["parent_before"] == "False False"
    assert out["child"] == "False True foo:1 [0.0, 2.0, 4.0, 6.0, 8.0, 10.0] 0 2"
    assert out["child_exit"] == "0"
    assert ast.literal_eval(out["mp_child"]) == (False, "foo:0", [1.0, 4.0])
    assert out["mp_exit"] == "0"


def test_fork_before_init_parent_unaffected(subprocesses):
    out = labelled(subprocesses.check("fork_before_init"))
    assert out["parent_still_uninitialised"] == "False"
    assert out["parent_after"] == "False True [2.0, 2.0, 2.0]"


# ---- spawn: foo tensors are shared ----------------------------------------------------------------

def test_spawn_child_exits_cleanly(subprocesses):
    out = labelled(subprocesses.check("spawn"))
    assert "child_error" not in out, out["child_error"]
    assert out["exitcode"] == "0"
    assert out["child_state"] == "False 2"


def test_spawn_tensor_args_arrive_on_same_device(subprocesses):
    out = labelled(subprocesses.check("spawn"))
    assert out["arg_t"] == "Tensor foo:1 [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] False"
    assert out["arg_view"] == "Tensor foo:1 [3.0, 4.0, 5.0] False"
    assert out["arg_cpu"] == "Tensor cpu [0, 1, 2] False"


def test_spawn_parameters_keep_type_and_requires_grad(subprocesses):
    out = labelled(subprocesses.check("spawn"))
    assert out["arg_param"] == "Parameter foo:0 [1.5, 1.5] True"
    assert out["arg_frozen"] == "Parameter foo:1 [1.0, 1.0] False"
    assert out["arg_leaf"] == "Tensor foo:1 [1.0, 1.0, 1.0] True"
    assert out["child_grad"] == "True"


def test_spawn_queue_tensor(subprocesses):
    out = labelled(subprocesses.check("spawn"))
    assert out["queued"] == "Tensor foo:1 [10, 20, 30] False"


def test_spawn_queue_untyped_storage(subprocesses):
    out = labelled(subprocesses.check("spawn"))
    assert out["storage"] == "UntypedStorage foo:1 [0, 1, 2, 3]"


def test_spawn_child_changes_are_seen_by_the_parent(subprocesses):
    # As with CUDA IPC: the child's tensors alias the parent's memory (the view aliases t in the child too).
    out = labelled(subprocesses.check("spawn"))
    assert out["child_t_after"] == "Tensor foo:1 [[100.0, 101.0, 102.0], [-1.0, -1.0, -1.0]] False"
    assert out["parent_t"] == "Tensor foo:1 [[100.0, 101.0, 102.0], [-1.0, -1.0, -1.0]] False"
    assert out["parent_view"] == "Tensor foo:1 [-1.0, -1.0, -1.0] False"
    assert out["parent_param"] == "Parameter foo:0 [0.0, 0.0] True"
    assert out["parent_leaf"] == "Tensor foo:1 [0.0, 0.0, 0.0] True"
    assert out["parent_queued"] == "Tensor foo:1 [-10, -20, -30] False"
    assert out["parent_storage"] == "[9, 9, 9, 9]"


def test_spawn_child_sends_tensors_back(subprocesses):
    out = labelled(subprocesses.check("spawn"))
    assert out["sent_back"] == "Tensor foo:1 [0.0, 2.0, 4.0, 6.0] True"
    assert out["echoed"] == "Tensor foo:1 [-10, -20, -30] False"


# ---- sharing: CUDA IPC's semantics -------------------------------------------------------------------

def test_a_received_tensor_aliases_the_senders_memory_with_its_views_and_offsets(subprocesses):
    out = labelled(subprocesses.check("sharing"))
    values = [float(v) for v in range(12)]
    # The child's base, view and storage: one memory, the view at its offset, on foo:1.
    assert ast.literal_eval(out["a_saw"]) == (values, [values[2:5], values[5:8]], 2, 8, True, "foo:1")
    assert ast.literal_eval(out["parent_sees_a_writes"]) == [0.0, 1.0] + [-1.0] * 6 + [8.0, 9.0, 10.0, 11.0]
    assert out["exits"] == "0 0"


def test_an_interprocess_event_orders_work_between_processes(subprocesses):
    out = labelled(subprocesses.check("sharing"))
    after_add = [1000.0, 1001.0] + [999.0] * 6 + [1008.0, 1009.0, 1010.0, 1011.0]
    assert out["a_queried_while_parent_held"] == "False"
    assert ast.literal_eval(out["a_saw_after_event"]) == after_add  # its read waited for the parent's held write
    assert out["a_recorded_while_held"] == "recorded False"  # the child's record is the event's latest
    assert ast.literal_eval(out["parent_after_a_event"]) == [2 * v for v in after_add]


def test_a_received_tensor_comes_home_as_itself_and_can_be_shared_on(subprocesses):
    out = labelled(subprocesses.check("sharing"))
    assert out["came_home_as_itself"] == "True True"
    assert ast.literal_eval(out["b_saw"]) == [2000.0, 2002.0, 1998.0, 1998.0]
    assert ast.literal_eval(out["parent_sees_b_write"]) == [7.0, 7.0, 7.0, 1998.0]


def test_a_sent_block_lives_while_a_receiver_holds_it(subprocesses):
    out = labelled(subprocesses.check("lifetime"))
    assert out["child_read"] == "300000.0"
    assert out["collect_while_held"] == "False True"  # freed by the sender, held by the receiver
    assert out["child_still_reads"] == "300000.0"  # the sender's next allocation did not take the block
    assert out["child"] == "released"
    assert out["allocated_back"] == "True"
    assert out["child_read_u"] == "1000.0 released"
    assert out["freed_at_once"] == "True True"  # released by the receiver first: freed with the sender's tensor


def test_a_producer_that_exits_early_warns_and_its_later_handles_are_refused(subprocesses):
    proc = subprocesses["lifetime"]
    out = labelled(subprocesses.check("lifetime"))
    assert out["child_exit"] == "0"
    assert "Producer process has been terminated before all shared foo tensors released" in proc.stderr
    assert out["v_after_producer_exit"] == str([5.0] * 10)  # opened before: still valid, never reused
    assert out["late"].startswith("foo: cannot open foo memory shared by another process: that "
                                  "process has exited")


def test_a_queue_of_100_tensors_leaks_nothing(subprocesses):
    out = labelled(subprocesses.check("queue_of_100"))
    assert out["consumer"] == "100 0"
    assert ast.literal_eval(out["producer"]) == (0, 0)
    assert out["producer_exit"] == "0"


def test_sharing_errors(subprocesses):
    out = labelled(subprocesses.check("sharing_errors"))
    kind, message = ast.literal_eval(out["other_devices"])
    assert kind == "RuntimeError" and "same FOO_DEVICE_COUNT (this one has 3)" in message, message
    kind, message = ast.literal_eval(out["forked"])
    assert kind == "RuntimeError" and MSG in message, message
    assert out["plain_event"].startswith("RuntimeError foo: only an event created with interprocess=True")
    assert out["timing_event"].startswith("ValueError foo: an interprocess event cannot measure time")


def test_sparse_and_nested_tensors_go_through_their_components(subprocesses):
    out = labelled(subprocesses.check("sharing_errors"))
    eye = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    assert ast.literal_eval(out["sparse_and_nested"]) == (
        "torch.sparse_coo", "foo:1", eye, True, "foo:1", [[1.0, 1.0], [0.0, 1.0, 2.0]])


def test_a_pinned_host_tensor_is_shared_through_shared_cpu_memory(subprocesses):
    # As for CUDA's pinned tensors: PyTorch's CPU sharing moves it to shared memory, so both sides see writes.
    out = labelled(subprocesses.check("sharing_errors"))
    assert ast.literal_eval(out["pinned_child"]) == ("cpu", [0.0, 1.0, 2.0, 3.0, 4.0])
    assert out["pinned_parent"] == "[1.0, 2.0, 3.0, 4.0, 5.0] cpu"


def test_actors_see_the_weights_the_learner_updates(subprocesses):
    out = labelled(subprocesses.check("actor_learner"))
    for step in range(3):
        assert out[f"step{step}"] == f"[{step}, {step}] True"
    assert out["exits"] == "[0, 0]"
