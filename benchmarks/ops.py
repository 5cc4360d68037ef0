"""foo vs CPU: how much slower (or faster) is an operation on the foo device than the same operation on CPU?

foo runs PyTorch's CPU kernels on device memory, so the ratio foo/CPU measures foo's overhead
(dispatch, allocation, copies, synchronisation). Both sides are measured in the same process with
``torch.utils.benchmark.Timer``, interleaved: each round times every case on CPU and on foo, back to back
(alternating which goes first), and the table reports the median over rounds, so machine noise hits
both sides alike. Every foo statement ends with ``torch.foo.synchronize()``. Before timing, each
case's foo result is checked against CPU.

    python benchmarks/ops.py [--quick] [--rounds N] [--json PATH]

Benchmarks report, they don't gate: the exit code is 0 whatever the ratios (a broken harness still fails).
"""
import argparse
import copy
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.benchmark import Timer

import foo_backend  # noqa: F401  (registers the foo device even with autoload disabled)

FOO = torch.device("foo")
CPU = torch.device("cpu")
N_COPY = 16 * 1024 * 1024  # 16M float32 = 64 MB


# ---- Shared statement bodies (the same Python code runs on both devices) --------------------------

def chain20(x: torch.Tensor) -> torch.Tensor:
    """20 small element-wise ops, each producing a new tensor."""
    for _ in range(4):
        x = torch.add(x, 1.0)
        x = torch.mul(x, 0.5)
        x = torch.relu(x)
        x = torch.sigmoid(x)
        x = torch.sub(x, 0.25)
    return x


def add_x100(a: torch.Tensor, b: torch.Tensor) -> None:
    """100 small adds per statement: one synchronize per block, as one times a GPU."""
    for _ in range(100):
        torch.add(a, b)


def alloc_free(dev: torch.device) -> None:
    for _ in range(100):
        torch.empty(262144, device=dev)  # 1 MB, dropped at once


def make_mlp(dropout: float = 0.0) -> nn.Module:
    layers = [nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)]
    if dropout:
        layers[4:4] = [nn.Dropout(dropout)]  # after the second ReLU; random operators are queued too
        layers[2:2] = [nn.Dropout(dropout)]
    return nn.Sequential(*layers)


def mlp_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach()


# ---- Cases --------------------------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    target: Optional[float]  # max foo/CPU ratio; None: reported, no target
    setup: Callable[[], tuple[dict, dict]]  # -> (cpu globals, foo globals)
    cpu_stmt: str
    foo_stmt: str  # "; torch.foo.synchronize()" is appended
    check: Callable[[dict, dict], Optional[str]]  # runs both once; a message when foo differs from CPU


def _same(name: str, cpu: torch.Tensor, foo: torch.Tensor, exact: bool = False) -> Optional[str]:
    """None when the foo result (on foo) matches the CPU one (exactly, or to float32 tolerance)."""
    if foo.device.type != "foo":
        return f"{name}: result on {foo.device}, expected a foo tensor"
    foo = foo.cpu()
    ok = torch.equal(cpu, foo) if exact else torch.allclose(cpu, foo, rtol=1e-5, atol=1e-6)
    return None if ok else f"{name}: max |foo - cpu| = {(cpu - foo).abs().max().item():.3e}"


def _randn_pair(*shape: int) -> tuple[torch.Tensor, torch.Tensor]:
    t = torch.randn(*shape)
    return t, t.to(FOO)


def setup_add10():
    (a, fa), (b, fb) = _randn_pair(10), _randn_pair(10)
    return dict(a=a, b=b, add_x100=add_x100), dict(a=fa, b=fb, add_x100=add_x100)


def setup_chain():
    x, fx = _randn_pair(100)
    return dict(x=x, chain20=chain20), dict(x=fx, chain20=chain20)


def setup_add_out():
    (a, fa), (b, fb) = _randn_pair(4 * 1024 * 1024), _randn_pair(4 * 1024 * 1024)
    return dict(a=a, b=b, c=torch.empty_like(a)), dict(a=fa, b=fb, c=torch.empty_like(fa))


def setup_mm():
    (a, fa), (b, fb) = _randn_pair(512, 512), _randn_pair(512, 512)
    return dict(a=a, b=b), dict(a=fa, b=fb)


def setup_conv():
    (x, fx), (w, fw) = _randn_pair(8, 32, 32, 32), _randn_pair(64, 32, 3, 3)
    return dict(x=x, w=w, F=F), dict(x=fx, w=fw, F=F)


def setup_h2d():
    src = torch.randn(N_COPY)
    return dict(src_cpu=src, dst_cpu=torch.empty(N_COPY)), dict(src_cpu=src, dst_foo=torch.empty(N_COPY, device=FOO))


def setup_d2h():
    src = torch.randn(N_COPY)
    return (dict(src_cpu2=src, dst_cpu=torch.empty(N_COPY)),
            dict(src_foo=src.to(FOO), dst_cpu=torch.empty(N_COPY)))


def setup_alloc():
    return dict(alloc_free=alloc_free, dev=CPU), dict(alloc_free=alloc_free, dev=FOO)


def setup_mlp(dropout: float = 0.0):
    torch.default_generator.manual_seed(0)  # CPU initialises both models (foo gets a copy)
    cpu_model = make_mlp(dropout)
    foo_model = copy.deepcopy(cpu_model).to(FOO)  # same initial weights on both devices
    (x, fx), y = _randn_pair(64, 784), torch.randint(0, 10, (64,))
    return tuple(dict(model=m, opt=torch.optim.SGD(m.parameters(), lr=0.01), x=xx, y=y.to(m[0].weight.device),
                      mlp_step=mlp_step)
                 for m, xx in ((cpu_model, x), (foo_model, fx)))


# A batch size from 33 to 96 at every step (64.5 on average, as the plain step's 64), in a scrambled order
# (37 is prime to 64).
NEW_SIZES = [33 + (k * 37) % 64 for k in range(64)]


def mlp_step_new_size(model, opt, x, y, step):
    """mlp_step on the first b rows of x, b the next of NEW_SIZES. Before each step foo forgets the plans it
    learnt, so that every call is of a signature not seen before, as with sizes never seen (sizes enough
    to outnumber the plans foo keeps would need a warm-up longer than the benchmark)."""
    b = NEW_SIZES[step[0] % len(NEW_SIZES)]
    step[0] += 1
    if x.device.type == "foo":
        foo_backend._C._forget_launch_plans()
    return mlp_step(model, opt, x[:b], y[:b])


def setup_mlp_new_sizes():
    torch.default_generator.manual_seed(0)
    cpu_model = make_mlp()
    foo_model = copy.deepcopy(cpu_model).to(FOO)
    (x, fx), y = _randn_pair(96, 784), torch.randint(0, 10, (96,))
    # Both sides start at the same step, and the interleaved blocks run as many steps: they see the same sizes.
    return tuple(dict(model=m, opt=torch.optim.SGD(m.parameters(), lr=0.01), x=xx, y=y.to(m[0].weight.device),
                      mlp_step=mlp_step, mlp_step_new_size=mlp_step_new_size, step=[0])
                 for m, xx in ((cpu_model, x), (foo_model, fx)))


def sanitized(step):
    """`step` under torch.foo.sanitizer, which each call turns on and, once the step's work is done, off (the
    other cases run unsanitized)."""
    def run(model, opt, x, y):
        torch.foo.sanitizer.enable()
        try:
            loss = step(model, opt, x, y)
            torch.foo.synchronize()
            return loss
        finally:
            torch.foo.sanitizer.disable()
    return run


def setup_mlp_sanitized():
    """The MLP step on foo under the sanitizer, against the same step on foo without it (the "CPU" side)."""
    torch.default_generator.manual_seed(0)
    model = make_mlp().to(FOO)
    x, y = torch.randn(64, 784).to(FOO), torch.randint(0, 10, (64,)).to(FOO)
    return tuple(dict(model=m, opt=torch.optim.SGD(m.parameters(), lr=0.01), x=x, y=y, mlp_step=step)
                 for m, step in ((copy.deepcopy(model), mlp_step), (model, sanitized(mlp_step))))


def check_sanitized_mlp(plain, sanitized_env):
    def one_step(env):
        model = copy.deepcopy(env["model"])  # the timed models stay at their initial weights
        return env["mlp_step"](model, torch.optim.SGD(model.parameters(), lr=0.01), env["x"], env["y"]).cpu()

    losses = [one_step(plain), one_step(sanitized_env)]
    return None if torch.equal(*losses) else f"loss: {losses[0]} without the sanitizer, {losses[1]} with it"


# Compile times of the compiled cases, printed under the table.
COMPILE_TIMES = []


def compiled(fn, label: str, *example_args, mode: Optional[str] = None, calls: int = 1):
    """torch.compile(fn, mode=mode), compiled now (`calls` calls with `example_args`: with reduce-overhead, the
    third records its graphs): its compile time joins COMPILE_TIMES."""
    compiled_fn = torch.compile(fn, mode=mode)
    start = time.perf_counter()
    for _ in range(calls):
        compiled_fn(*example_args)
    if any(isinstance(a, torch.Tensor) and a.device.type == "foo" for a in example_args):
        torch.foo.synchronize()
    COMPILE_TIMES.append(f"{label} {time.perf_counter() - start:.1f} s")
    return compiled_fn


def setup_chain_compiled():
    """CPU runs the chain eagerly; foo runs it compiled (one fused kernel)."""
    x, fx = _randn_pair(100)
    return dict(x=x, chain20=chain20), dict(x=fx, chain20=compiled(chain20, "chain on foo", fx))


def setup_mlp_compiled(foo_mode: Optional[str] = None, calls: int = 1):
    """The MLP step compiled (forward, backward and optimizer) on both devices, on foo with `foo_mode` (with
    reduce-overhead, its forward and backward replayed as graphs; the optimizer step, which mutates its
    inputs, runs compiled without). Both take the same `calls` steps before the check."""
    cpu_env, foo_env = setup_mlp()
    for env, label, mode in ((cpu_env, "MLP step on CPU", None), (foo_env, "MLP step on foo", foo_mode)):
        env["mlp_step"] = compiled(mlp_step, label + (f", {mode}" if mode else ""), env["model"], env["opt"],
                                   env["x"], env["y"], mode=mode, calls=calls)
    return cpu_env, foo_env


def setup_chain_reduce_overhead():
    """CPU runs the chain eagerly; foo runs it compiled with mode="reduce-overhead" (a graph tree's replay)."""
    x, fx = _randn_pair(100)
    return dict(x=x, chain20=chain20), dict(x=fx, chain20=compiled(chain20, "chain on foo, reduce-overhead", fx,
                                                                   mode="reduce-overhead", calls=3))


class Chain20(nn.Module):
    def forward(self, x):
        return chain20(x)


def setup_chain_aoti():
    """CPU runs the chain eagerly; foo runs it from an AOTInductor package (exported, compiled, loaded)."""
    import tempfile

    x, fx = _randn_pair(100)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        package = torch._inductor.aoti_compile_and_package(torch.export.export(Chain20(), (fx,)),
                                                           package_path=f"{folder}/chain20.pt2")
        loaded = torch._inductor.aoti_load_package(package)
    COMPILE_TIMES.append(f"chain on foo, AOTInductor package {time.perf_counter() - start:.1f} s")
    return dict(x=x, chain20=chain20), dict(x=fx, chain20=loaded)


def setup_chain_graph():
    """CPU runs the chain eagerly; foo replays it captured in a graph (no host dispatch per op)."""
    x, fx = _randn_pair(100)
    side = torch.foo.Stream()
    side.wait_stream(torch.foo.current_stream())
    with torch.foo.stream(side):  # warm-up, as before any capture
        chain20(fx)
        chain20(fx)
    torch.foo.current_stream().wait_stream(side)
    graph = torch.foo.FooGraph()
    with torch.foo.graph(graph):
        out = chain20(fx)
    return dict(x=x, chain20=chain20), dict(replay=graph.replay, out=out, graph=graph)


def check_chain_graph(c, f):
    f["replay"]()
    return _same("graph replay of chain20", chain20(c["x"]), f["out"], exact=True)


def check_chain_compiled(c, f):
    return _same("compiled chain20", chain20(c["x"]), f["chain20"](f["x"]))


def check_alloc(c, f):
    before = torch.foo.memory_allocated()
    t = torch.empty(262144, device=FOO)
    if t.device.type != "foo" or torch.foo.memory_allocated() < before + t.nbytes:
        return f"torch.empty on foo: device {t.device}, memory_allocated grew by {torch.foo.memory_allocated() - before}"
    del t
    f["alloc_free"](FOO)
    after = torch.foo.memory_allocated()
    return None if after == before else f"alloc/free leaked: memory_allocated {before} -> {after}"


def check_mlp(c, f):
    # One step on copies of the models (the timed models stay at their initial weights); dropout draws the
    # same masks on both devices from the same seed.
    cm, fm = copy.deepcopy(c["model"]), copy.deepcopy(f["model"])
    co, fo = torch.optim.SGD(cm.parameters(), lr=0.01), torch.optim.SGD(fm.parameters(), lr=0.01)
    torch.default_generator.manual_seed(1)
    torch.foo.manual_seed(1)
    msgs = [_same("loss", c["mlp_step"](cm, co, c["x"], c["y"]), f["mlp_step"](fm, fo, f["x"], f["y"]))]
    msgs += [_same(f"param {n}", p, q) for (n, p), q in zip(cm.named_parameters(), fm.parameters())]
    return "; ".join(m for m in msgs if m) or None


def _copy_check(label, dst_key, src_key):
    def check(c, f):
        dst, src = f[dst_key], f[src_key]
        dst.zero_()
        dst.copy_(src)
        return None if torch.equal(dst.cpu(), src.cpu()) else f"{label}: destination differs from source"
    return check


CASES = [
    Case("add, 10 elements (x100)", 1.3, setup_add10, "add_x100(a, b)", "add_x100(a, b)",
         lambda c, f: _same("add", torch.add(c["a"], c["b"]), torch.add(f["a"], f["b"]), exact=True)),
    Case("chain of 20 ops, 100 elements", 1.3, setup_chain, "chain20(x)", "chain20(x)",
         lambda c, f: _same("chain20", chain20(c["x"]), chain20(f["x"]), exact=True)),
    Case("add out=, 4M elements", 1.10, setup_add_out, "torch.add(a, b, out=c)", "torch.add(a, b, out=c)",
         lambda c, f: _same("add out=", torch.add(c["a"], c["b"], out=c["c"]), torch.add(f["a"], f["b"], out=f["c"]),
                            exact=True)),
    Case("mm 512x512", 1.10, setup_mm, "torch.mm(a, b)", "torch.mm(a, b)",
         lambda c, f: _same("mm", torch.mm(c["a"], c["b"]), torch.mm(f["a"], f["b"]))),
    Case("conv2d 8x32x32x32, 64x3x3", 1.10, setup_conv,
         "F.conv2d(x, w, padding=1)", "F.conv2d(x, w, padding=1)",
         lambda c, f: _same("conv2d", F.conv2d(c["x"], c["w"], padding=1), F.conv2d(f["x"], f["w"], padding=1))),
    Case("copy 64 MB host->foo", 1.25, setup_h2d, "dst_cpu.copy_(src_cpu)", "dst_foo.copy_(src_cpu)",
         _copy_check("host->foo copy", "dst_foo", "src_cpu")),
    Case("copy 64 MB foo->host", 1.25, setup_d2h, "dst_cpu.copy_(src_cpu2)", "dst_cpu.copy_(src_foo)",
         _copy_check("foo->host copy", "dst_cpu", "src_foo")),
    Case("alloc+free 1 MB x100", 1.0, setup_alloc, "alloc_free(dev)", "alloc_free(dev)", check_alloc),
    Case("MLP step 784-256-256-10, b64", 1.25, setup_mlp,
         "mlp_step(model, opt, x, y)", "mlp_step(model, opt, x, y)", check_mlp),
    Case("MLP step with dropout 0.1", 1.25, lambda: setup_mlp(dropout=0.1),
         "mlp_step(model, opt, x, y)", "mlp_step(model, opt, x, y)", check_mlp),
    Case("MLP step, a new batch size every step", 1.25, setup_mlp_new_sizes,
         "mlp_step_new_size(model, opt, x, y, step)", "mlp_step_new_size(model, opt, x, y, step)", check_mlp),
    # The sanitizer's cost: its "CPU" side is the same step on foo without it (target: 3x).
    Case("MLP step, sanitizer on (vs foo, off)", 3.0, setup_mlp_sanitized,
         "mlp_step(model, opt, x, y); torch.foo.synchronize()", "mlp_step(model, opt, x, y)", check_sanitized_mlp),
    # torch.compile: foo compiled against CPU eager (the chain) and against CPU compiled (the MLP step).
    Case("chain of 20 ops compiled (CPU eager)", 0.8, setup_chain_compiled, "chain20(x)", "chain20(x)",
         check_chain_compiled),
    Case("MLP step compiled (CPU compiled)", 1.1, setup_mlp_compiled,
         "mlp_step(model, opt, x, y)", "mlp_step(model, opt, x, y)", check_mlp),
    # mode="reduce-overhead": Inductor's graph trees replay foo graphs.
    Case("chain of 20 ops, reduce-overhead (CPU eager)", 0.3, setup_chain_reduce_overhead, "chain20(x)",
         "chain20(x)", check_chain_compiled),
    Case("MLP step reduce-overhead (CPU compiled)", 0.6, lambda: setup_mlp_compiled("reduce-overhead", calls=3),
         "mlp_step(model, opt, x, y)", "mlp_step(model, opt, x, y)", check_mlp),
    # AOTInductor: the chain exported, compiled into a package, loaded and run on foo, against CPU eager.
    Case("chain of 20 ops, AOTInductor package (CPU eager)", None, setup_chain_aoti, "chain20(x)", "chain20(x)",
         check_chain_compiled),
    # Graphs: the chain captured once on foo, replayed, against CPU eager.
    Case("chain of 20 ops, graph replay (CPU eager)", 0.5, setup_chain_graph, "chain20(x)", "replay()",
         check_chain_graph),
]


# ---- Measurement ---------------------------------------------------------------------------------------

def timer(stmt: str, env: dict) -> Timer:
    # Timer defaults to 1 thread; measure with the process default (what users get) on both sides.
    return Timer(stmt, globals=env, num_threads=torch.get_num_threads())


def per_call(t: Timer, number: int) -> float:
    return t.timeit(number).median  # seconds per call, over one block of `number` calls


def run(args) -> list[dict]:
    rows = []
    live = []  # (row, cpu Timer, foo Timer, calls per block)
    for case in CASES:
        if args.only and args.only not in case.name:
            continue
        row = dict(name=case.name, target=case.target, cpu_stmt=case.cpu_stmt,
                   foo_stmt=case.foo_stmt + "; torch.foo.synchronize()", error=None, mismatch=None,
                   cpu_times=[], foo_times=[])
        rows.append(row)
        try:
            cpu_env, foo_env = case.setup()
            row["mismatch"] = case.check(cpu_env, foo_env)
            torch.foo.synchronize()
            cpu_t, foo_t = timer(case.cpu_stmt, cpu_env), timer(row["foo_stmt"], foo_env)
            # One block size for both sides, sized by the slower one: ~args.block seconds per block.
            slowest = max(per_call(cpu_t, 3), per_call(foo_t, 3))
            live.append((row, cpu_t, foo_t, max(1, int(args.block / slowest))))
        except Exception as e:  # a backend failure is a result: report it, keep benchmarking the rest
            row["error"] = f"{type(e).__name__}: {e}".splitlines()[0]
    for r in range(args.rounds):
        if sys.stderr.isatty():
            print(f"\rround {r + 1}/{args.rounds}", end="", file=sys.stderr, flush=True)
        for row, cpu_t, foo_t, number in live:
            if row["error"]:
                continue
            try:
                order = [("cpu_times", cpu_t), ("foo_times", foo_t)]
                for key, t in order if r % 2 == 0 else order[::-1]:  # alternate who goes first
                    row[key].append(per_call(t, number))
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}".splitlines()[0]
    if sys.stderr.isatty():
        print("\r" + " " * 20 + "\r", end="", file=sys.stderr)
    for row in rows:
        if row["error"] or not row["cpu_times"]:
            row.update(cpu=None, foo=None, ratio=None, spread=None,
                       status="ERROR" if row["error"] else "SKIP")
            continue
        row["cpu"], row["foo"] = statistics.median(row["cpu_times"]), statistics.median(row["foo_times"])
        # Each round's foo and CPU blocks ran back to back, so their ratio cancels slow drifts in machine
        # load; the reported ratio is the median of these per-round ratios (with their interquartile range).
        paired = [f / c for c, f in zip(row["cpu_times"], row["foo_times"])]
        row["ratio_of_medians"] = row["foo"] / row["cpu"]
        row["ratio"] = statistics.median(paired)
        row["spread"] = tuple(statistics.quantiles(paired, n=4)[::2]) if len(paired) > 1 else (paired[0],) * 2
        if row["mismatch"]:
            row["status"] = "MISMATCH"
        elif row["target"] is None:
            row["status"] = "-"
        else:
            row["status"] = "PASS" if row["ratio"] <= row["target"] else "FAIL"
    return rows


def fmt_time(s: Optional[float]) -> str:
    if s is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def print_table(rows: list[dict]) -> None:
    header = ("case", "CPU time", "foo time", "foo/CPU", "(IQR)", "target", "status")
    lines = [header]
    for r in rows:
        lines.append((
            r["name"], fmt_time(r["cpu"]), fmt_time(r["foo"]),
            f"{r['ratio']:.2f}" if r["ratio"] is not None else "-",
            f"{r['spread'][0]:.2f}-{r['spread'][1]:.2f}" if r["spread"] else "",
            f"<= {r['target']:.2f}" if r["target"] is not None else "(report)",
            r["status"],
        ))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for i, line in enumerate(lines):
        print(" | ".join(c.ljust(w) if j == 0 else c.rjust(w) for j, (c, w) in enumerate(zip(line, widths))))
        if i == 0:
            print("-+-".join("-" * w for w in widths))
    for r in rows:
        if r["error"]:
            print(f"ERROR    {r['name']}: {r['error']}")
        if r["mismatch"]:
            print(f"MISMATCH {r['name']}: {r['mismatch']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a fast, noisier run (5 rounds of short blocks)")
    parser.add_argument("--rounds", type=int, help="interleaved CPU/foo rounds (default 31, --quick 5)")
    parser.add_argument("--json", metavar="PATH", help="also write the results to PATH as JSON")
    parser.add_argument("--only", metavar="TEXT", help="only the cases whose name contains TEXT")
    args = parser.parse_args()
    args.rounds = args.rounds or (5 if args.quick else 31)
    # Short blocks, many rounds: foo and CPU alternate often, so background load hits both alike.
    args.block = 0.02 if args.quick else 0.08  # seconds per timed block, per device

    print(f"foo: {torch.foo.get_device_name()} | torch {torch.__version__} | {torch.get_num_threads()} threads"
          f" | {platform.processor() or platform.machine()} | {args.rounds} rounds, medians")
    start = time.perf_counter()
    rows = run(args)
    elapsed = time.perf_counter() - start
    print_table(rows)
    print(f"({elapsed:.0f} s; times: medians over rounds; foo/CPU: median of the per-round ratios, IQR: their interquartile range)")
    if COMPILE_TIMES:
        print("compile times (first call, Inductor's caches warm or cold as found): " + ", ".join(COMPILE_TIMES))
    if args.json:
        meta = dict(torch=torch.__version__, device=torch.foo.get_device_name(), threads=torch.get_num_threads(),
                    rounds=args.rounds, block_seconds=args.block, quick=args.quick, seconds=elapsed,
                    python=platform.python_version(), machine=platform.machine())
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, results=rows), f, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
