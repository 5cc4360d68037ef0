"""foo across processes: forked children (CONTRACT: "``_is_in_bad_fork``; using foo in a forked child after the
parent initialised it raises a clear error") and ``torch.multiprocessing`` with spawn, where foo tensors travel
*by copy* (foo_backend._multiprocessing) rather than through shared device memory as CUDA IPC does. Every fork
happens inside a fresh interpreter, never in the test runner."""
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
    "spawn": (
        """
        import os, sys, torch
        import torch.multiprocessing as mp
        sys.path.insert(0, os.environ["FOO_MP_HELPERS"])
        from foo_mp_helpers import describe, spawn_child

        if __name__ == "__main__":
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
            # The child changed its copies in place; the parent's tensors are unchanged.
            print("parent_t", describe(t))
            print("parent_view", describe(view))
            print("parent_param", describe(param))
            print("parent_leaf", describe(leaf))
            print("parent_queued", describe(queued))
            print("parent_storage", list(bytes(storage.cpu())))
        """,
        {},
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
        sent_back = (torch.arange(4.0, device="foo:1") * 2).requires_grad_()
    except Exception:
        report["child_error"] = " ".join(traceback.format_exc().split())
    from_child.put(report)
    from_child.put(sent_back)
    from_child.put(queued)
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


# ---- spawn: foo tensors travel by copy ----------------------------------------------------------------

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


def test_spawn_child_changes_not_visible_to_parent(subprocesses):
    # The documented difference from CUDA IPC: the child works on copies.
    out = labelled(subprocesses.check("spawn"))
    assert out["child_t_after"] == "Tensor foo:1 [[100.0, 101.0, 102.0], [103.0, 104.0, 105.0]] False"
    assert out["parent_t"] == "Tensor foo:1 [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]] False"
    assert out["parent_view"] == "Tensor foo:1 [3.0, 4.0, 5.0] False"
    assert out["parent_param"] == "Parameter foo:0 [1.5, 1.5] True"
    assert out["parent_leaf"] == "Tensor foo:1 [1.0, 1.0, 1.0] True"
    assert out["parent_queued"] == "Tensor foo:1 [10, 20, 30] False"
    assert out["parent_storage"] == "[0, 1, 2, 3]"


def test_spawn_child_sends_tensors_back(subprocesses):
    out = labelled(subprocesses.check("spawn"))
    assert out["sent_back"] == "Tensor foo:1 [0.0, 2.0, 4.0, 6.0] True"
    assert out["echoed"] == "Tensor foo:1 [-10, -20, -30] False"
