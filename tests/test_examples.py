"""The programs in examples/ run and check themselves (docs/custom_ops.md points users at custom_op.py).

Each runs in a fresh interpreter, as a user runs it. custom_op.py compiles a C++ extension on its first
run (about 15 s); later runs reuse the build in the temp directory."""
import json
import os
import pickle

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


# The examples that train (compiled, with DDP, with graphs) run under the sanitizer (torch.foo.sanitizer):
# correct programs, where it must stay silent.
SANITIZED = {"FOO_SANITIZER": "1"}


def _run_example(name, *args):
    path = os.path.join(EXAMPLES, name)
    return (
        f"""
        import runpy, sys
        sys.argv = [{path!r}, *{list(args)!r}]
        runpy.run_path({path!r}, run_name="__main__")
        """,
        {},
    )


def _torchrun(name, *launches, env=None):
    """Runs examples/`name` under torchrun: one launch per node (its torchrun arguments), concurrently;
    prints each launch's output and exits with the first failure's code."""
    path = os.path.join(EXAMPLES, name)
    return (
        f"""
        import socket, subprocess, sys
        with socket.socket() as s:  # a free port for the rendezvous of a multi-node launch
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        launches = [[a.replace("PORT", str(port)) for a in args] for args in {list(launches)!r}]
        procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", *args, {path!r}],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for args in launches]
        outs = [p.communicate(timeout=150)[0] for p in procs]
        for out in outs:
            print(out)
        sys.exit(next((p.returncode for p in procs if p.returncode), 0))
        """,
        env or {},
    )


def _as_script(name, *args, env=None):
    """Runs examples/`name` as `python examples/<name>` does (its folder first on the import path), from
    a fresh temporary folder that is also its working directory; prints its output."""
    path = os.path.join(EXAMPLES, name)
    return (
        f"""
        import os, subprocess, sys, tempfile
        work = tempfile.mkdtemp()
        result = subprocess.run([sys.executable, {path!r}, *{list(args)!r}], cwd=work, capture_output=True, text=True)
        print(work)
        print(result.stdout)
        print(result.stderr, file=sys.stderr)
        sys.exit(result.returncode)
        """,
        env or {},
    )


_NODE = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:PORT"]

SCRIPTS = {
    "custom_op": _run_example("custom_op.py"),
    "train_compiled": _as_script("train.py", "--compile", env=SANITIZED),
    "ddp_one_node": _torchrun("ddp_train.py", ["--standalone", "--nproc-per-node", "2"], env=SANITIZED),
    "profile": _as_script("profile_training.py"),
    "sparse_embedding": _as_script("sparse_embedding.py"),
    "graph_training": _as_script("graph_training.py", env=SANITIZED),
    "find_race": _as_script("find_race.py"),
    "hogwild": _as_script("hogwild.py"),
    "ddp_two_nodes": _torchrun("ddp_train.py", _NODE + ["--node-rank", "0"], _NODE + ["--node-rank", "1"]),
}


def test_custom_op_example(subprocesses):
    out = subprocesses.check("custom_op")
    assert "myops::swish on foo:0" in out
    assert "myops_cpp::scale_add on foo:0" in out
    assert out.rstrip().endswith("foo results equal CPU results")


def test_train_example_compiled(subprocesses):
    """README's compiled demo: Inductor's kernels on foo learn what they learn on CPU."""
    out = subprocesses.check("train_compiled")
    assert out.rstrip().endswith("OK: the loss curve on foo matches the one on CPU")
    with open(os.path.join(out.splitlines()[0], "loss_curves.png"), "rb") as f:  # the curves, drawn
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_find_race_example(subprocesses):
    """README's "Finding device bugs": both forgotten orderings reported, then the corrected pipeline silent."""
    out = subprocesses.check("find_race")
    without_wait, without_record = out.split("---- without wait_stream: ----")[1].split("---- without record_stream")
    assert "read after write between two streams" in without_wait
    assert "Racing with: Memcpy HtoD (Pinned -> Device) on foo:0 stream" in without_wait
    assert "memory freed while another stream may still use it is reused" in without_record
    assert out.rstrip().endswith("foo's results equal CPU's")


def test_hogwild_example(subprocesses):
    """Processes that share one foo model train it, and the parent, which trained nothing, sees it trained."""
    proc = subprocesses["hogwild"]
    out = subprocesses.check("hogwild")
    assert out.rstrip().endswith("OK: the processes trained the shared foo model")
    assert "after 2 processes x 4 epochs" in out
    assert "Producer process has been terminated" not in proc.stderr  # the workers gave their memory back


def test_profile_example(subprocesses):
    """docs/profiling.md's command: the table has foo's device time, the trace foo's kernels on streams."""
    out = subprocesses.check("profile")
    work = out.splitlines()[0]
    assert "Self FOO" in out  # the table's device-time columns (its top rows depend on timing)
    with open(os.path.join(work, "profile", "trace.json")) as f:
        events = json.load(f)["traceEvents"]
    steps = [e for e in events if e.get("cat") == "user_annotation" and e["name"] == "train_step"]
    assert len(steps) == 3  # the schedule's active steps
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert kernels and all(e["pid"] == 0 and e["args"]["device"] == 0 for e in kernels)
    assert sum(e["name"] == "aten::addmm kernel" for e in kernels) == 3 * 3  # three layers, three steps
    with open(os.path.join(work, "profile", "memory.pickle"), "rb") as f:
        history = pickle.load(f)["device_traces"][0]
    assert {"alloc", "free_requested", "free_completed"} <= {e["action"] for e in history}
    with open(os.path.join(work, "profile", "memory.html")) as f:
        assert "snapshot.pickle" in f.read()  # the page PyTorch's memory viewer draws
    assert "PyTorch foo memory summary" in out


def test_sparse_embedding_example(subprocesses):
    """docs/using.md's sparse example: sparse gradients and SparseAdam on foo learn what they learn on CPU."""
    out = subprocesses.check("sparse_embedding")
    assert "sparse documents on foo:0" in out
    assert out.rstrip().endswith("OK: sparse training on foo matches CPU")


def test_graph_training_example(subprocesses):
    """docs/graphs.md's example: a captured training step (dropout, capturable Adam) replays eager CPU training."""
    out = subprocesses.check("graph_training")
    assert "one training step captured, replayed 40 times" in out
    assert out.rstrip().endswith("OK: the replayed training step on foo learns what eager training on CPU learns")


def test_ddp_example_one_node(subprocesses):
    """README's torchrun command: two processes on foo:0 and foo:1 train as one process does."""
    out = subprocesses.check("ddp_one_node")
    assert "rank 0/2 on foo:0" in out and "rank 1/2 on foo:1" in out
    assert "OK: DDP on foo trains as one process does" in out


def test_ddp_example_two_nodes(subprocesses):
    """The same script across two torchrun launches ("nodes") meeting at one rendezvous endpoint."""
    out = subprocesses.check("ddp_two_nodes")
    assert "rank 0/2" in out and "rank 1/2" in out
    assert "OK: DDP on foo trains as one process does" in out
