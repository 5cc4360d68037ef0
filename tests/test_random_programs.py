"""Random programs, run on CPU and on foo, must agree: a differential test of the whole execution path.

A program is 6-16 steps drawn from unary, binary (broadcasting), reduction, view, in-place, ``out=``,
matmul, cat/stack, indexing, dtype-cast and CPU-scalar operations on small random shapes. It is a pure
function of its seed: the steps are drawn while the program runs on CPU, the oracle, and every input
tensor comes from a CPU generator seeded by the program. Each program then runs on foo

* twice in one process: the second run finds every signature learnt, so its kernels are queued;
* spread over two streams, the default one and a side stream, with the ``wait_stream`` and
  ``record_stream`` calls a correct CUDA program makes;
* with ``FOO_LAUNCH_BLOCKING=1`` (a batch in one subprocess),

and every value it made must equal CPU's (dtype, shape, values). Where CPU raises, foo must raise the same
exception type at the same step. ``FOO_RANDOM_PROGRAMS=N`` runs N programs instead of the default 300.
"""
import os
import random
import subprocess
import sys

import pytest
import torch

PROGRAMS = int(os.environ.get("FOO_RANDOM_PROGRAMS", "300"))
CHUNKS = 15
FLOAT_TYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def in_place(method, *args):
    """Runs an in-place method; the step makes no new value."""
    method(*args)


class Step:
    """One operation: `run(values)` computes it from earlier values (a list) and returns the new value
    (None for an in-place step, which changes earlier values)."""

    def __init__(self, text, run):
        self.text, self.run = text, run


class Program:
    """Draws a program while running it on CPU (each step is drawn from the values so far)."""

    def __init__(self, seed):
        self.seed = seed
        self.rng = random.Random(seed)
        self.generator = torch.Generator().manual_seed(seed)
        self.steps = []
        self.values = []
        self.error = None  # (step index, exception type) where CPU raised

    # ---- drawing values and inputs

    def shape(self, dims=None):
        dims = self.rng.randint(1, 4) if dims is None else dims
        return tuple(self.rng.randint(1, 6) for _ in range(dims))

    def pick(self, floating=True, broadcasts_with=None):
        """A value's index: a floating one or not, and one whose shape broadcasts with value
        `broadcasts_with`'s (a few programs mix shapes that do not: CPU raises, and so must foo)."""
        candidates = [i for i, v in enumerate(self.values) if (v.dtype in FLOAT_TYPES) == floating]
        if broadcasts_with is not None and self.rng.random() < 0.95:
            candidates = [i for i in candidates if self.broadcasts(i, broadcasts_with)]
        return self.rng.choice(candidates) if candidates else None

    def broadcasts(self, i, j):
        try:
            torch.broadcast_shapes(self.values[i].shape, self.values[j].shape)
        except RuntimeError:
            return False
        return True

    def input(self, shape, dtype=torch.float32, device_side=True):
        """A fresh input, made on CPU from the program's generator; `device_side` ones move to the device."""
        if dtype == torch.int64:
            cpu = torch.randint(-4, 5, shape, generator=self.generator)
        elif dtype == torch.bool:
            cpu = torch.randint(0, 2, shape, generator=self.generator).bool()
        else:
            cpu = torch.randn(shape, generator=self.generator).to(dtype)
        return cpu, device_side

    def broadcastable(self, shape):
        """A shape that broadcasts with `shape` (some dims 1, maybe fewer dims)."""
        dims = self.rng.randint(max(0, len(shape) - 1), len(shape))
        tail = shape[len(shape) - dims:]
        return tuple(1 if self.rng.random() < 0.3 else s for s in tail)

    # ---- the operations

    def draw_step(self):
        kinds = ["input", "unary", "binary", "binary", "reduce", "view", "inplace", "out", "matmul", "cat",
                 "index", "cast", "scalar", "compare", "copy"]
        while True:
            kind = self.rng.choice(kinds)
            step = getattr(self, "_" + kind)()
            if step is not None:
                return step

    def _input(self):
        cpu, _ = self.input(self.shape(), self.rng.choice([torch.float32] * 4 + [torch.int64, torch.float64]))
        return Step(f"input {tuple(cpu.shape)} {cpu.dtype}", lambda v, d, cpu=cpu: cpu.to(d, copy=True))

    def _unary(self):
        i = self.pick()
        if i is None:
            return None
        name = self.rng.choice(["exp", "sin", "abs", "neg", "sigmoid", "tanh", "relu", "sqrt_abs", "log1p_abs"])
        fns = {"sqrt_abs": lambda x: x.abs().sqrt(), "log1p_abs": lambda x: x.abs().log1p()}
        fn = fns[name] if name in fns else getattr(torch, name)
        return Step(f"{name}(v{i})", lambda v, d: fn(v[i]))

    def _binary(self):
        i = self.pick()
        if i is None:
            return None
        name = self.rng.choice(["add", "sub", "mul", "div", "maximum", "atan2"])
        fn = getattr(torch, name)
        j = self.pick(broadcasts_with=i)
        if j is not None and self.rng.random() < 0.5:
            return Step(f"{name}(v{i}, v{j})", lambda v, d: fn(v[i], v[j]))
        cpu, _ = self.input(self.broadcastable(tuple(self.values[i].shape)))
        return Step(f"{name}(v{i}, input {tuple(cpu.shape)})", lambda v, d: fn(v[i], cpu.to(d, copy=True)))

    def _reduce(self):
        i = self.pick(floating=self.rng.random() < 0.8)
        if i is None or self.values[i].dim() == 0:
            return None
        dim = self.rng.randrange(self.values[i].dim())
        keepdim = self.rng.random() < 0.5
        name = self.rng.choice(["sum", "mean", "amax", "prod"] if self.values[i].is_floating_point() else ["sum", "amax"])
        fn = getattr(torch, name)
        return Step(f"{name}(v{i}, dim={dim}, keepdim={keepdim})", lambda v, d: fn(v[i], dim, keepdim=keepdim))

    def _view(self):
        i = self.pick(floating=self.rng.random() < 0.8)
        if i is None:
            return None
        x = self.values[i]
        if x.dim() == 0:
            return Step(f"v{i}.unsqueeze(0)", lambda v, d: v[i].unsqueeze(0))
        dim = self.rng.randrange(x.dim())
        other = self.rng.randrange(x.dim())
        size = x.shape[dim]
        choices = {
            "transpose": (f"v{i}.transpose({dim}, {other})", lambda v, d: v[i].transpose(dim, other)),
            "permute": (f"v{i}.permute(reversed)", lambda v, d: v[i].permute(*reversed(range(v[i].dim())))),
            "narrow": (f"v{i}.narrow({dim}, {size // 2}, {size - size // 2})",
                       lambda v, d: v[i].narrow(dim, size // 2, size - size // 2)),
            "select": (f"v{i}.select({dim}, {size - 1})", lambda v, d: v[i].select(dim, size - 1)),
            "unsqueeze": (f"v{i}.unsqueeze({dim})", lambda v, d: v[i].unsqueeze(dim)),
            "expand": (f"v{i}.unsqueeze(0).expand(3, ...)", lambda v, d: v[i].unsqueeze(0).expand(3, *v[i].shape)),
            "reshape": (f"v{i}.reshape(-1)", lambda v, d: v[i].reshape(-1)),
            "contiguous": (f"v{i}.t_like().contiguous()", lambda v, d: v[i].transpose(dim, other).contiguous()),
            "view": (f"v{i}.contiguous().view(-1)", lambda v, d: v[i].contiguous().view(-1)),
        }
        text, run = choices[self.rng.choice(sorted(choices))]
        return Step(text, run)

    def _inplace(self):
        i = self.pick()
        if i is None:
            return None
        name = self.rng.choice(["add_", "mul_", "clamp_", "sub_"])
        if name == "clamp_":
            return Step(f"v{i}.clamp_(-0.5, 0.5)", lambda v, d: in_place(v[i].clamp_, -0.5, 0.5))
        cpu, _ = self.input(self.broadcastable(tuple(self.values[i].shape)), self.values[i].dtype)
        return Step(f"v{i}.{name}(input {tuple(cpu.shape)})", lambda v, d: in_place(getattr(v[i], name), cpu.to(d, copy=True)))

    def _copy(self):
        i = self.pick()
        if i is None:
            return None
        j = self.pick(floating=self.rng.random() < 0.7)
        if j is not None and self.rng.random() < 0.5:  # between device values: any dtype, maybe a bad shape
            return Step(f"v{i}.copy_(v{j})", lambda v, d: in_place(v[i].copy_, v[j]))
        cpu, _ = self.input(self.broadcastable(tuple(self.values[i].shape)))
        return Step(f"v{i}.copy_(host input {tuple(cpu.shape)})", lambda v, d: in_place(v[i].copy_, cpu))

    def _out(self):
        i = self.pick()
        j = None if i is None else self.pick(broadcasts_with=i)
        if j is None:
            return None
        name = self.rng.choice(["add", "mul", "maximum"])
        fn = getattr(torch, name)
        empty = self.rng.random() < 0.5

        def run(v, d):
            like = fn(v[i], v[j])
            out = torch.empty(0, dtype=like.dtype, device=d) if empty else torch.empty_like(like)
            result = fn(v[i], v[j], out=out)
            assert result is out
            return out
        return Step(f"{name}(v{i}, v{j}, out={'empty' if empty else 'right-sized'})", run)

    def _matmul(self):
        i = self.pick()
        if i is None or self.values[i].dim() not in (1, 2, 3) or self.values[i].dtype not in (torch.float32, torch.float64):
            return None
        k = self.values[i].shape[-1]
        cpu, _ = self.input((k, self.rng.randint(1, 6)), self.values[i].dtype)
        if self.values[i].dim() == 3 and self.rng.random() < 0.5:
            batch = self.values[i].shape[0]
            cpu, _ = self.input((batch, k, self.rng.randint(1, 6)), self.values[i].dtype)
            return Step(f"bmm(v{i}, input {tuple(cpu.shape)})", lambda v, d: torch.bmm(v[i], cpu.to(d, copy=True)))
        return Step(f"matmul(v{i}, input {tuple(cpu.shape)})", lambda v, d: torch.matmul(v[i], cpu.to(d, copy=True)))

    def _cat(self):
        i = self.pick()
        if i is None or self.values[i].dim() == 0:
            return None
        dim = self.rng.randrange(self.values[i].dim())
        if self.rng.random() < 0.5:
            return Step(f"cat([v{i}, v{i}.sin()], {dim})", lambda v, d: torch.cat([v[i], v[i].sin()], dim))
        return Step(f"stack([v{i}, v{i} * 2], {dim})", lambda v, d: torch.stack([v[i], v[i] * 2], dim))

    def _index(self):
        i = self.pick(floating=self.rng.random() < 0.8)
        if i is None or self.values[i].dim() == 0:
            return None
        x = self.values[i]
        dim = self.rng.randrange(x.dim())
        index = torch.randint(0, x.shape[dim], (self.rng.randint(1, 5),), generator=self.generator)
        choice = self.rng.choice(["index_select", "gather", "cpu_index", "mask"])
        if choice == "index_select":
            return Step(f"v{i}.index_select({dim}, {index.tolist()})", lambda v, d: v[i].index_select(dim, index.to(d, copy=True)))
        if choice == "gather":
            shape = list(x.shape)
            shape[dim] = len(index)
            g = torch.randint(0, x.shape[dim], shape, generator=self.generator)
            return Step(f"v{i}.gather({dim}, input {tuple(shape)})", lambda v, d: v[i].gather(dim, g.to(d, copy=True)))
        if choice == "cpu_index":  # a CPU index tensor on a device tensor, accepted as on CUDA
            return Step(f"v{i}[cpu {index.tolist()}]", lambda v, d: v[i][index])
        return Step(f"v{i}[v{i} > 0]", lambda v, d: v[i][v[i] > 0])

    def _cast(self):
        i = self.pick(floating=self.rng.random() < 0.8)
        if i is None:
            return None
        dtype = self.rng.choice([torch.float64, torch.int64, torch.bfloat16, torch.float16, torch.float32])
        if dtype == torch.int64 and self.values[i].is_floating_point():
            return Step(f"(v{i} * 4).to(int64)", lambda v, d: (v[i] * 4).to(torch.int64))
        return Step(f"v{i}.to({dtype})", lambda v, d: v[i].to(dtype))

    def _scalar(self):
        i = self.pick(floating=self.rng.random() < 0.8)
        if i is None:
            return None
        if self.rng.random() < 0.5:
            scalar = torch.tensor(self.rng.choice([2.5, -1.0, 3]))  # a 0-dim CPU tensor: passed by value
            return Step(f"v{i} * cpu({scalar.item()})", lambda v, d: v[i] * scalar)
        number = self.rng.choice([2, 0.5, -3, 1.25])
        return Step(f"v{i} + {number}", lambda v, d: v[i] + number)

    def _compare(self):
        i = self.pick()
        if i is None:
            return None
        return Step(f"where(v{i} > 0, v{i}, 0.0)", lambda v, d: torch.where(v[i] > 0, v[i], torch.zeros_like(v[i])))

    # ---- running

    def draw(self):
        for index in range(self.rng.randint(6, 16)):
            step = self.draw_step()
            self.steps.append(step)
            try:
                out = step.run(self.values, "cpu")
            except Exception as e:  # noqa: BLE001 (CPU's error is the oracle)
                self.error = (index, type(e))
                return self
            if out is not None:
                self.values.append(out)
        return self

    def describe(self):
        lines = [f"seed {self.seed}:"] + [f"  {k}: {s.text}" for k, s in enumerate(self.steps)]
        if self.error:
            lines.append(f"  CPU raised {self.error[1].__name__} at step {self.error[0]}")
        return "\n".join(lines)


def run_on_foo(program, streams=None):
    """Replays `program` on foo; with `streams`, step k runs on streams[k % 2], ordered by wait_stream."""
    values = []
    for index, step in enumerate(program.steps):
        stream = streams[index % 2] if streams else None
        try:
            if stream is None:
                out = step.run(values, "foo")
            else:
                stream.wait_stream(streams[(index + 1) % 2])  # the other stream made its inputs
                with torch.foo.stream(stream):
                    out = step.run(values, "foo")
                for v in values:  # the step may have used them on this stream
                    v.record_stream(stream)
        except Exception as e:  # noqa: BLE001
            assert program.error == (index, type(e)), f"foo raised {type(e).__name__}: {e}\n{program.describe()}"
            return values
        if out is not None:
            values.append(out)
    assert program.error is None, f"CPU raised but foo did not\n{program.describe()}"
    if streams:
        torch.foo.current_stream().wait_stream(streams[0])
        torch.foo.current_stream().wait_stream(streams[1])
    torch.foo.synchronize()
    return values


def compare(program, values, how):
    assert len(values) == len(program.values), f"{how}\n{program.describe()}"
    for k, (foo_value, cpu_value) in enumerate(zip(values, program.values)):
        context = f"{how}: value {k}\n{program.describe()}"
        assert foo_value.device.type == "foo", context
        assert foo_value.dtype == cpu_value.dtype and foo_value.shape == cpu_value.shape, context
        torch.testing.assert_close(foo_value.cpu(), cpu_value, equal_nan=True, msg=lambda m: f"{m}\n{context}")


def check(seed):
    program = Program(seed).draw()
    compare(program, run_on_foo(program), "foo, first run")
    compare(program, run_on_foo(program), "foo, second run (queued)")
    side = torch.foo.Stream()
    compare(program, run_on_foo(program, (torch.foo.current_stream(), side)), "foo, two streams")


def seeds(chunk):
    return range(chunk, PROGRAMS, CHUNKS)


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_programs_equal_cpu(chunk):
    for seed in seeds(chunk):
        check(seed)


def test_random_programs_equal_cpu_with_launch_blocking():
    code = (f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
            f"import torch, foo_backend, test_random_programs as t\n"
            f"for seed in range(0, {PROGRAMS}, 3):\n"
            f"    p = t.Program(seed).draw(); t.compare(p, t.run_on_foo(p), 'FOO_LAUNCH_BLOCKING=1')\n"
            f"print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "FOO_LAUNCH_BLOCKING": "1"})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-4000:]
