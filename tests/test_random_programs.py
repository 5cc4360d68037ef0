"""Random programs, run on CPU and on foo, must agree: a differential test of the whole execution path.

A program is 6-16 steps drawn at random from unary and binary operators (broadcasting, dtype promotion),
reductions, views, in-place operators (on views too), ``out=`` variants (right-sized, strided and empty
outputs, which must be resized), matmul, cat/stack, indexing (index_select, gather, advanced indexing with
foo and CPU index tensors, boolean masks, indexed assignment), dtype casts, factories and CPU scalars
(0-dim CPU tensors, also overwritten right after use; Python numbers; ``.item()``) and switches of the
default dtype, on small shapes (1-4 dims of sizes 1-6), in float32 mostly. A step reads earlier values
(``v0, v1, ...``) and data made on the host when it was drawn, copied to the device (some from pinned
memory, without blocking).

A program is a pure function of its seed: ``random.Random(seed)`` draws the steps and a CPU
``torch.Generator`` seeded with it makes the data. The steps are drawn while the program runs on CPU,
the oracle, so that each step fits the values before it. One program in ten starts with float64 as the
default dtype. In one in five, floating-point inputs require grad, in-place steps act on values autograd
records (never on those inputs), and a last step runs backward from the sum of every value that
requires grad. The program then runs on foo

* twice: the second run finds every signature learnt, so its kernels are queued and run asynchronously;
* a third time with the plans it learnt forgotten (``foo_backend._C._forget_launch_plans()``): every call
  is then of a signature not seen before, as a call of new shapes is, of kernels that ran once. It must make
  the host wait exactly where the second run did (``torch.foo.set_sync_debug_mode("warn")`` names each
  wait), as CUDA sizes outputs on the host: except for the operators of ``NEW_SIGNATURES_WAIT``;
* spread over two streams: step k runs on the default stream (k even) or on a side stream (k odd); a
  stream waits for the other (``wait_stream`` or ``wait_event``) before a step that touches storage the
  other stream wrote, or writes storage it read, since it last waited; a tensor used on a stream other
  than the one its memory was allocated on is ``record_stream``-ed there, as a correct CUDA program does;
* with ``FOO_LAUNCH_BLOCKING=1``: every program in one subprocess, again all but the third way (every
  launch then runs at its call: nothing is planned).

Before each step, the stream is kept busy for a moment (``torch.foo._sleep``) so that the host runs
ahead of queued kernels, as of a busy GPU; correct results do not depend on it. Each run must end with
every value, and the gradient of every input, equal to CPU's: device, dtype, shape, strides and values
(exactly for integers and booleans, within ``assert_close``'s tolerance for floats). Where CPU raises,
foo must raise the same exception type at the same step (not the asynchronous error of an earlier
kernel), and the program ends there; few programs do.

``FOO_RANDOM_PROGRAMS=N`` runs N programs (seeds 0 to N-1) instead of 300. A failure names the seed and
prints the program; ``python tests/test_random_programs.py SEED...`` replays programs.
"""
import collections
import contextlib
import functools
import operator
import os
import random
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import foo_backend

# Random programs warn (std() of one element, masked_fill_ on an expanded view...) on CPU and foo alike.
pytestmark = pytest.mark.filterwarnings("ignore")

PROGRAMS = int(os.environ.get("FOO_RANDOM_PROGRAMS", "300"))
LAUNCH_BLOCKING = os.environ.get("FOO_LAUNCH_BLOCKING") == "1"
CHUNKS = 15
STEP_DELAY = 50_000  # cycles of the 1 GHz device that each step on foo keeps its stream busy first: 50 us
# How foo reports the failure of an earlier, queued kernel: never the error a step itself must raise.
ASYNC_ERROR = "an asynchronously launched operation"
SYNCHRONIZING = "called a synchronizing foo operation: "
# Operators whose calls of a signature not seen before (new shapes) still run at the call, to learn their
# outputs, where CUDA sizes them on the host: foo plans the others from their meta functions. It only shrinks.
NEW_SIGNATURES_WAIT = {
    # Its meta function lays some outputs out otherwise than CPU's kernel (with a 0-dim operand of another dtype).
    "aten::logical_xor",
    # With a 0-dim CPU tensor as the bound, which the meta function refuses beside meta tensors.
    "aten::clamp_",
}

FLOAT = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
INTEGER = (torch.int64, torch.int32)
NUMBER = FLOAT + INTEGER
INTEGRAL = INTEGER + (torch.bool,)
ANY = NUMBER + (torch.bool,)
# The conversion methods, by target dtype.
CASTS = {torch.float32: "float", torch.float64: "double", torch.bfloat16: "bfloat16", torch.float16: "half",
         torch.int64: "long", torch.int32: "int", torch.bool: "bool"}
# Dtypes of the same size, which Tensor.view(dtype) reinterprets a tensor's bytes as.
REINTERPRET = {torch.float32: torch.int32, torch.int32: torch.float32, torch.float64: torch.int64,
               torch.int64: torch.float64, torch.bfloat16: torch.float16, torch.float16: torch.bfloat16}

# Operators as (text, function, dtypes of their first operand); "{}" in a text stands for an operand.
UNARY = [
    ("torch.exp({})", torch.exp, NUMBER), ("torch.sin({})", torch.sin, NUMBER),
    ("torch.sqrt({})", torch.sqrt, NUMBER), ("torch.reciprocal({})", torch.reciprocal, NUMBER),
    ("torch.tanh({})", torch.tanh, FLOAT), ("torch.sigmoid({})", torch.sigmoid, FLOAT),
    ("torch.log({})", torch.log, FLOAT), ("torch.rsqrt({})", torch.rsqrt, FLOAT),
    ("torch.erf({})", torch.erf, FLOAT), ("F.gelu({})", F.gelu, FLOAT),
    ("torch.nan_to_num({})", torch.nan_to_num, FLOAT), ("torch.abs({})", torch.abs, NUMBER),
    ("torch.neg({})", torch.neg, NUMBER), ("torch.relu({})", torch.relu, NUMBER),
    ("torch.floor({})", torch.floor, NUMBER), ("torch.round({})", torch.round, NUMBER),
    ("torch.square({})", torch.square, NUMBER), ("{}.clamp(-1, 2)", lambda x: x.clamp(-1, 2), NUMBER),
    ("torch.sign({})", torch.sign, ANY), ("torch.logical_not({})", torch.logical_not, ANY),
    ("torch.isnan({})", torch.isnan, ANY), ("torch.bitwise_not({})", torch.bitwise_not, INTEGRAL),
    ("{}.clone()", torch.clone, ANY),
]
# Along a dim: the second "{}" is the dim.
ALONG_DIM = [
    ("{}.softmax({})", torch.softmax, FLOAT), ("{}.log_softmax({})", torch.log_softmax, FLOAT),
    ("{}.cumsum({})", torch.cumsum, ANY), ("{}.cummax({})", torch.cummax, NUMBER),
    ("{}.flip({})", lambda x, dim: x.flip(dim), ANY), ("{}.roll(2, {})", lambda x, dim: x.roll(2, dim), ANY),
    ("{}.sort(dim={}, stable=True)", lambda x, dim: x.sort(dim=dim, stable=True), NUMBER),
    ("{}.argsort(dim={}, stable=True)", lambda x, dim: x.argsort(dim=dim, stable=True), NUMBER),
]
# Binary: the fourth field says whether the second operand may be a Python number.
BINARY = [
    ("{} + {}", operator.add, ANY, True), ("{} - {}", operator.sub, NUMBER, True),
    ("{} * {}", operator.mul, ANY, True), ("{} / {}", operator.truediv, NUMBER, True),
    ("torch.add({}, {}, alpha=2)", lambda x, y: torch.add(x, y, alpha=2), NUMBER, True),
    ("{} ** {}", operator.pow, FLOAT, True), ("{} < {}", operator.lt, NUMBER, True),
    ("{} == {}", operator.eq, ANY, True), ("{} & {}", operator.and_, INTEGRAL, True),
    ("torch.remainder({}, {})", torch.remainder, FLOAT, True),
    ("torch.where({0} > 0, {0}, {1})", lambda x, y: torch.where(x > 0, x, y), NUMBER, True),
    ("torch.maximum({}, {})", torch.maximum, NUMBER, False),
    ("torch.minimum({}, {})", torch.minimum, NUMBER, False),
    ("torch.atan2({}, {})", torch.atan2, NUMBER, False),
    ("torch.logical_xor({}, {})", torch.logical_xor, ANY, False),
]
# In place, with a second operand (which broadcasts to the target).
INPLACE_BINARY = [
    ("{}.add_({})", torch.Tensor.add_, NUMBER, True), ("{}.sub_({})", torch.Tensor.sub_, NUMBER, True),
    ("{}.mul_({})", torch.Tensor.mul_, ANY, True), ("{}.div_({})", torch.Tensor.div_, FLOAT, True),
    ("{}.clamp_(min={})", lambda t, y: t.clamp_(min=y), NUMBER, True),
    ("{}.copy_({})", torch.Tensor.copy_, ANY, False),
    ("{}.lerp_({}, 0.25)", lambda t, y: t.lerp_(y, 0.25), FLOAT, False),
    ("{0}.addcmul_({1}, {1}, value=0.5)", lambda t, y: t.addcmul_(y, y, value=0.5), FLOAT, False),
]
INPLACE_UNARY = [
    ("{}.relu_()", torch.Tensor.relu_, NUMBER), ("{}.neg_()", torch.Tensor.neg_, NUMBER),
    ("{}.abs_()", torch.Tensor.abs_, NUMBER), ("{}.exp_()", torch.Tensor.exp_, FLOAT),
    ("{}.sigmoid_()", torch.Tensor.sigmoid_, FLOAT),
    ("{}.clamp_(-0.5, 0.5)", lambda t: t.clamp_(-0.5, 0.5), FLOAT),
    ("{}.zero_()", torch.Tensor.zero_, ANY), ("{}.fill_(3)", lambda t: t.fill_(3), ANY),
]


@contextlib.contextmanager
def default_dtype(dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def name(dtype):
    return str(dtype).removeprefix("torch.")


def broadcasts(shape, other, into=False):
    """Whether shape `other` broadcasts with `shape` (`into`: to exactly `shape`, as an in-place operand)."""
    try:
        result = torch.broadcast_shapes(shape, other)
    except RuntimeError:
        return False
    return not into or result == tuple(shape)


def overlaps_itself(t):
    """Whether elements of t share memory (an expanded view): CPU refuses to write into such a tensor."""
    return any(stride == 0 and size > 1 for stride, size in zip(t.stride(), t.shape))


def outputs(result):
    """The values a step made: none (in place), one tensor, or a tuple of them."""
    if result is None:
        return []
    return list(result) if isinstance(result, tuple) else [result]


def first_line(error):
    """An exception's message without the C++ stack trace."""
    return str(error).splitlines()[0] if str(error) else ""


def assign(t, index, value):
    t[index] = value


class Operand:
    """An argument of a step: an earlier value (``v3``), data made on the host when the step was drawn, a
    Python number or the device. ``get(values, device)`` gives it in a run on `device`; ``cpu`` is what
    it is in the CPU run (to draw the step); ``reads`` are the indices of the values it reads."""

    def __init__(self, text, get, cpu, reads=()):
        self.text, self.get, self.cpu, self.reads = text, get, cpu, reads

    def __str__(self):
        return self.text


DEVICE = Operand("D", lambda values, device: device, "cpu")


class Step:
    """One operation: ``run(values, device)`` returns the values it makes (a tensor, a tuple of them, or
    None in place). It reads values ``reads`` and writes values ``writes``; ``made`` is how many values
    it made on CPU."""

    def __init__(self, text, run, reads, writes):
        self.text, self.run, self.reads, self.writes = text, run, reads, writes
        self.made = 0


class Program:
    """The program of `seed`, drawn step by step while it runs on CPU: ``values`` are CPU's values at the
    end, ``error`` is (step index, exception) if CPU raised, and ``storage[k]`` names the storage value k
    lives in (a view shares its base's). ``grad``: its floating-point inputs require grad."""

    KINDS = {"input": 2, "factory": 1, "unary": 3, "binary": 4, "reduce": 2.5, "view": 3.5, "inplace": 3.5,
             "out": 2, "matmul": 1.5, "cat": 1.5, "index": 2.5, "cast": 1.5, "scalar": 1.5, "default_dtype": 0.5,
             "free": 1}

    def __init__(self, seed):
        self.seed = seed
        self.rng = random.Random(seed)
        self.generator = torch.Generator().manual_seed(seed)
        self.default_dtype = torch.float64 if self.rng.random() < 0.1 else torch.float32
        self.grad = self.rng.random() < 0.2
        self.steps, self.values, self.error = [], [], None
        self.freed = set()  # the values a step dropped
        with default_dtype(self.default_dtype):
            for index in range(self.rng.randint(6, 16)):
                if not self.run_on_cpu(self._input() if index == 0 else self.draw_step()):
                    break
            else:
                if self.grad and any(t.requires_grad for t in self.values):
                    self.run_on_cpu(self._backward())
        self.storage = [t.untyped_storage().data_ptr() for t in self.values]

    def run_on_cpu(self, step):
        """Appends `step` and runs it; False if CPU raised."""
        self.steps.append(step)
        try:
            made = outputs(step.run(self.values, "cpu"))
        except Exception as e:  # noqa: BLE001 (CPU's error is the oracle)
            self.error = (len(self.steps) - 1, e)
            return False
        step.made = len(made)
        self.values.extend(made)
        return True

    def describe(self):
        lines = [f"program {self.seed} (starts with default dtype {name(self.default_dtype)}; D is the device; "
                 f"foo(...) is data copied to D, cpu(...) a CPU tensor):"]
        count = 0
        for index, step in enumerate(self.steps):
            names = ", ".join(f"v{count + k}" for k in range(step.made))
            lines.append(f"  {index:2}: {names + ' = ' if names else ''}{step.text}")
            count += step.made
        if self.error:
            index, e = self.error
            lines.append(f"  CPU raised {type(e).__name__} at step {index}: {first_line(e)}")
        return "\n".join(lines)

    def draw_step(self):
        kinds, weights = list(self.KINDS), list(self.KINDS.values())
        while True:
            step = getattr(self, "_" + self.rng.choices(kinds, weights)[0])()
            if step is not None:
                return step

    def step(self, text, fn, *operands, writes=None):
        """The step computing fn(*operands); in place on operand `writes`, it makes no value."""
        def run(values, device):
            result = fn(*(o.get(values, device) for o in operands))
            return None if writes is not None else result
        reads = tuple(sorted({k for o in operands for k in o.reads}))
        return Step(text, run, reads, writes.reads if writes is not None else ())

    # ---- operands

    def value(self, k):
        return Operand(f"v{k}", lambda values, device: values[k], self.values[k], (k,))

    def pick(self, accept=lambda t: True):
        """An earlier value accepted by `accept` (recent ones likelier), or None."""
        candidates = [k for k, t in enumerate(self.values) if k not in self.freed and accept(t)]
        if not candidates:
            return None
        return self.value(self.rng.choices(candidates, [k + 1 for k in candidates])[0])

    def shape(self):
        return tuple(self.rng.randint(1, 6) for _ in range(self.rng.randint(1, 4)))

    def broadcastable(self, shape, into=False):
        """A shape that broadcasts with `shape` (`into`: to exactly `shape`): leading dims dropped, sizes
        set to 1, maybe a new leading dim; now and then a random one, which may not broadcast."""
        if self.rng.random() < 0.01:
            return self.shape()
        result = [1 if self.rng.random() < 0.3 else s for s in shape[self.rng.randint(0, len(shape)):]]
        if not into and len(result) == len(shape) and self.rng.random() < 0.3:
            result.insert(0, self.rng.randint(1, 3))
        return tuple(result)

    def dtype(self, allowed=ANY):
        """A dtype for new data: float32 mostly, where allowed."""
        if torch.float32 in allowed and self.rng.random() < 0.7:
            return torch.float32
        return self.rng.choice(allowed)

    def tensor(self, shape, dtype):
        """New CPU data from the program's generator: small integers for integer dtypes."""
        if dtype == torch.bool:
            return torch.rand(shape, generator=self.generator) < 0.5
        if not dtype.is_floating_point:
            return torch.randint(-5, 6, shape, generator=self.generator, dtype=dtype)
        return torch.randn(shape, generator=self.generator).to(dtype)

    def data(self, tensor, host=False):
        """`tensor` as an operand: copied to the device in each run (from pinned memory without blocking
        now and then), or (`host`) a copy on the host."""
        pinned = not host and self.rng.random() < 0.2
        if tensor.dim() == 0:
            shown = repr(tensor.item())
        elif tensor.numel() <= 8 and not tensor.is_floating_point():
            shown = repr(tensor.tolist())
        else:
            shown = f"rand{tuple(tensor.shape)}"
        text = f"{'cpu' if host else 'foo'}({shown}, {name(tensor.dtype)}{', pinned' if pinned else ''})"
        if host:
            return Operand(text, lambda values, device: tensor.clone(), tensor)
        if pinned:
            return Operand(text, lambda values, device: tensor.pin_memory().to(device, non_blocking=True), tensor)
        return Operand(text, lambda values, device: tensor.to(device, copy=True), tensor)

    def number(self, allowed=ANY):
        n = self.rng.choice([1, 3, -2] if allowed == INTEGRAL else [2, -3, 0.5, -1.5, 3.25])
        return Operand(repr(n), lambda values, device: n, n)

    def cpu_scalar(self, allowed=ANY):
        """A 0-dim CPU tensor, which operators on device tensors take as a scalar; `allowed`: its dtypes,
        or its dtype. Programs that require grad get a 0-dim device tensor instead: some backward formulas
        mix a CPU scalar with device tensors in ways CUDA rejects too (pytorch/pytorch#80061)."""
        dtype = allowed if isinstance(allowed, torch.dtype) else self.dtype(allowed)
        return self.data(torch.tensor(self.number(allowed).cpu, dtype=dtype), host=not self.grad)

    def operand_for(self, x, allowed, numbers=True, into=False, constant=False):
        """A second operand for x, of a dtype in `allowed`: an earlier value (`constant`: one that does not
        require grad) or new data that broadcasts with x (`into`: to x's shape, and castable to x's
        dtype), a Python number or a 0-dim CPU tensor."""
        r = self.rng.random()
        if r < 0.45:
            def accept(t):
                castable = not into or torch.can_cast(torch.promote_types(t.dtype, x.cpu.dtype), x.cpu.dtype)
                fits = t.dtype in allowed and castable and broadcasts(x.cpu.shape, t.shape, into)
                return fits and not (constant and t.requires_grad)
            y = self.pick(accept)
            if y is not None:
                return y
        if r < 0.75 or not numbers:
            dtype = x.cpu.dtype if into and self.rng.random() < 0.8 else self.dtype(allowed)
            return self.data(self.tensor(self.broadcastable(x.cpu.shape, into), dtype))
        if r < 0.88:
            return self.number(allowed)
        return self.cpu_scalar(allowed)

    def index(self, size, shape=None, host=False, negative=False, unique=False):
        """An int64 tensor of indices into a dim of `size`; `negative`: some counted from the end."""
        shape = shape or (self.rng.randint(1, 5),)
        if unique:  # 1-dim
            indices = torch.tensor(self.rng.sample(range(size), min(shape[0], size)))
        else:
            indices = torch.randint(0, size, shape, generator=self.generator)
        if negative:
            indices -= size * (torch.rand(indices.shape, generator=self.generator) < 0.3)
        return self.data(indices, host)

    def mask(self, shape, host=False):
        return self.data(torch.rand(shape, generator=self.generator) < 0.5, host)

    def reshaped(self, numel):
        """A random shape of `numel` elements (1-4 dims), maybe with one size -1."""
        if numel == 0:
            return (0,)
        sizes = []
        for _ in range(self.rng.randint(0, 3)):
            sizes.append(self.rng.choice([k for k in range(1, numel + 1) if numel % k == 0]))
            numel //= sizes[-1]
        sizes.append(numel)
        self.rng.shuffle(sizes)
        if self.rng.random() < 0.3:
            sizes[self.rng.randrange(len(sizes))] = -1
        return tuple(sizes)

    def dim(self, t, new=False):
        """A valid dim of t, maybe negative (`new`: a position for a new dim)."""
        n = max(t.dim(), 1) if not new else t.dim() + 1
        return self.rng.randrange(-n, n)

    # ---- the kinds of step: each returns a Step, or None if it does not fit the values so far

    def _input(self):
        x = self.data(self.tensor(self.shape(), self.dtype()))
        if self.grad and x.cpu.is_floating_point():
            return self.step(f"{x}.requires_grad_()", torch.Tensor.requires_grad_, x)
        return self.step(str(x), lambda t: t, x)

    def _backward(self):
        """Backward from the sum of every value that requires grad: the inputs' gradients accumulate."""
        xs = [self.value(k) for k, t in enumerate(self.values) if t.requires_grad and k not in self.freed]
        return self.step(f"({' + '.join(f'{x}.sum()' for x in xs)}).backward()",
                         lambda *ts: sum(t.sum() for t in ts).backward(), *xs)

    def _factory(self):
        shape, n = self.shape(), self.rng.randint(1, 6)
        forms = [
            (f"torch.zeros({shape}, device=D)", lambda d: torch.zeros(shape, device=d)),
            (f"torch.ones({shape}, dtype=int64, device=D)",
             lambda d: torch.ones(shape, dtype=torch.int64, device=d)),
            (f"torch.full({shape}, 1.5, device=D)", lambda d: torch.full(shape, 1.5, device=d)),
            (f"torch.full({shape}, 7, device=D)", lambda d: torch.full(shape, 7, device=d)),
            (f"torch.arange({n}, device=D)", lambda d: torch.arange(n, device=d)),
            (f"torch.arange(-1.0, {n}, 0.5, device=D)", lambda d: torch.arange(-1.0, n, 0.5, device=d)),
            (f"torch.linspace(-1, 1, {n}, device=D)", lambda d: torch.linspace(-1, 1, n, device=d)),
            (f"torch.eye({n}, {shape[0]}, device=D)", lambda d: torch.eye(n, shape[0], device=d)),
            ("torch.tensor([1.5, -2, 3], device=D)", lambda d: torch.tensor([1.5, -2, 3], device=d)),
        ]
        text, fn = self.rng.choice(forms)
        x = self.pick()
        if x is not None and self.rng.random() < 0.3:
            like = [("torch.zeros_like({})", torch.zeros_like),
                    ("torch.full_like({}, 2.5)", lambda t: torch.full_like(t, 2.5)),
                    ("torch.ones_like({}, dtype=float64)", lambda t: torch.ones_like(t, dtype=torch.float64))]
            text, fn = self.rng.choice(like)
            return self.step(text.format(x), fn, x)
        return self.step(text, fn, DEVICE)

    def _unary(self):
        if self.rng.random() < 0.3:
            text, fn, allowed = self.rng.choice(ALONG_DIM)
            x = self.pick(lambda t: t.dtype in allowed)
            if x is None:
                return None
            dim = self.dim(x.cpu)
            return self.step(text.format(x, dim), lambda t: fn(t, dim), x)
        text, fn, allowed = self.rng.choice(UNARY)
        x = self.pick(lambda t: t.dtype in allowed)
        return None if x is None else self.step(text.format(x), fn, x)

    def _binary(self):
        text, fn, allowed, numbers = self.rng.choice(BINARY)
        x = self.pick(lambda t: t.dtype in allowed)
        if x is None:
            return None
        y = self.operand_for(x, allowed, numbers)
        # Numbers and CPU scalars go first in operator forms only (torch.logical_xor(cpu_scalar, x) makes
        # its output on the CPU, and then raises for device tensors x, on CUDA too).
        may_swap = text.startswith("{} ") or isinstance(y.cpu, torch.Tensor) and y.cpu.dim() > 0
        if may_swap and self.rng.random() < 0.3:
            x, y = y, x
        return self.step(text.format(x, y), fn, x, y)

    def _reduce(self):
        x = self.pick()
        if x is None:
            return None
        n = max(x.cpu.dim(), 1)
        dims = tuple(self.rng.sample(range(n), self.rng.randint(1, n)))
        dim, keep = self.dim(x.cpu), self.rng.random() < 0.4
        forms = [
            (f"{{}}.sum({dims}, keepdim={keep})", lambda t: t.sum(dims, keepdim=keep), ANY),
            (f"{{}}.mean({dims}, keepdim={keep})", lambda t: t.mean(dims, keepdim=keep), FLOAT),
            (f"{{}}.amax({dims}, keepdim={keep})", lambda t: t.amax(dims, keepdim=keep), NUMBER),
            (f"{{}}.amin({dims})", lambda t: t.amin(dims), NUMBER),
            (f"{{}}.std({dims}, keepdim={keep})", lambda t: t.std(dims, keepdim=keep), FLOAT),
            (f"{{}}.logsumexp({dims})", lambda t: t.logsumexp(dims), FLOAT),
            (f"{{}}.prod({dim}, keepdim={keep})", lambda t: t.prod(dim, keepdim=keep), NUMBER),
            (f"{{}}.argmax({dim}, keepdim={keep})", lambda t: t.argmax(dim, keepdim=keep), NUMBER),
            (f"{{}}.max({dim}, keepdim={keep})", lambda t: tuple(t.max(dim, keepdim=keep)), NUMBER),
            (f"{{}}.sum({dim}, dtype=float64)", lambda t: t.sum(dim, dtype=torch.float64), ANY),
            (f"{{}}.any({dim})", lambda t: t.any(dim), ANY),
            ("{}.sum()", torch.sum, ANY), ("{}.mean()", torch.mean, FLOAT), ("{}.amax()", torch.amax, NUMBER),
            ("{}.all()", torch.all, ANY),
        ]
        text, fn, _ = self.rng.choice([f for f in forms if x.cpu.dtype in f[2]])
        return self.step(text.format(x), fn, x)

    def _view(self):
        x = self.pick()
        if x is None:
            return None
        t = x.cpu
        d0, d1 = self.dim(t), self.dim(t)
        shape = self.reshaped(t.numel())
        perm = tuple(self.rng.sample(range(t.dim()), t.dim()))
        new = self.dim(t, new=True)
        sizes = [-1 if s != 1 or self.rng.random() < 0.5 else self.rng.randint(2, 4) for s in t.shape]
        if not sizes or self.rng.random() < 0.3:
            sizes.insert(0, self.rng.randint(1, 3))
        forms = [
            (f"{{}}.reshape({shape})", lambda v: v.reshape(shape)),
            (f"{{}}.transpose({d0}, {d1})", lambda v: v.transpose(d0, d1)),
            (f"{{}}.permute({perm})", lambda v: v.permute(perm)),
            (f"{{}}.unsqueeze({new})", lambda v: v.unsqueeze(new)),
            (f"{{}}.expand({sizes})", lambda v: v.expand(sizes)),
            (f"{{}}.squeeze({d0})", lambda v: v.squeeze(d0)),
            ("{}.contiguous()", torch.Tensor.contiguous),
            ("{}.flatten()", torch.flatten),
        ]
        if t.is_contiguous() or self.rng.random() < 0.1:  # else CPU raises: foo must too
            forms.append((f"{{}}.view({shape})", lambda v: v.view(shape)))
        if t.dtype in REINTERPRET:
            as_dtype = REINTERPRET[t.dtype]
            forms.append((f"{{}}.view({name(as_dtype)})", lambda v: v.view(as_dtype)))
        if t.dim() >= 1 and t.shape[d0] > 0:
            size = t.shape[d0]
            start = self.rng.randrange(size)
            length, step = self.rng.randint(1, size - start), self.rng.randint(1, 3)
            slices = (slice(None),) * (d0 % t.dim()) + (slice(start, None, step),)
            shown = ", ".join([":"] * (d0 % t.dim()) + [f"{start}::{step}"])
            forms += [
                (f"{{}}.narrow({d0}, {start}, {length})", lambda v: v.narrow(d0, start, length)),
                (f"{{}}.select({d0}, {start - size})", lambda v: v.select(d0, start - size)),
                (f"{{}}[{shown}]", lambda v: v[slices]),
                (f"{{}}.unfold({d0}, {length}, {step})", lambda v: v.unfold(d0, length, step)),
            ]
        if t.dim() >= 2:
            other = (d0 + self.rng.randint(1, t.dim() - 1)) % t.dim()
            forms += [(f"{{}}.diagonal({d1}, {d0}, {other})", lambda v: v.diagonal(d1, d0, other)),
                      ("{}.mT", lambda v: v.mT)]
        text, fn = self.rng.choice(forms)
        return self.step(text.format(x), fn, x)

    def _inplace(self):
        # The target: a view half the time; rarely one CPU refuses to write (elements that overlap, an
        # input that requires grad or a view of one): foo must refuse too.
        views, refused = self.rng.random() < 0.5, self.rng.random() < 0.05

        def writable(v):
            leaf = v.requires_grad and (v.is_leaf or v._base is not None and v._base.is_leaf)
            return refused or not (leaf or overlaps_itself(v))
        t = (self.pick(lambda v: writable(v) and v._base is not None) if views else None) or self.pick(writable)
        if t is None:
            return None
        r = self.rng.random()
        if r < 0.4:
            text, fn, allowed, numbers = self.rng.choice(INPLACE_BINARY)
            if t.cpu.dtype not in allowed:
                return None
            y = self.operand_for(t, ANY, numbers, into=True)
            if text == "{}.copy_({})" and self.rng.random() < 0.3:  # from host memory
                y = self.data(self.tensor(self.broadcastable(t.cpu.shape, into=True), self.dtype()), host=True)
            return self.step(text.format(t, y), fn, t, y, writes=t)
        if r < 0.6 or t.cpu.numel() == 0 or t.cpu.dim() == 0:
            text, fn, allowed = self.rng.choice(INPLACE_UNARY)
            return self.step(text.format(t), fn, t, writes=t) if t.cpu.dtype in allowed else None
        shape, dim = t.cpu.shape, self.dim(t.cpu)
        index = self.index(shape[dim])
        forms = [
            ("{0}.masked_fill_({0} < 0, {1})", lambda v, n: v.masked_fill_(v < 0, n), [t, self.number()]),
            ("{}[{}] = {}", assign,
             [t, self.mask(shape, host=self.rng.random() < 0.5), self.cpu_scalar(t.cpu.dtype)]),
            (f"{{}}.index_fill_({dim}, {{}}, -1)", lambda v, i: v.index_fill_(dim, i, -1), [t, index]),
        ]
        rows = self.index(shape[0], host=self.rng.random() < 0.4, negative=True, unique=True)
        source = self.data(self.tensor(self.broadcastable((len(rows.cpu),) + shape[1:], into=True), t.cpu.dtype))
        forms.append(("{}[{}] = {}", assign, [t, rows, source]))
        if t.cpu.dtype in NUMBER:
            d = dim % len(shape)
            added = self.data(self.tensor(shape[:d] + (len(index.cpu),) + shape[d + 1:], t.cpu.dtype))
            gathered = self.index(shape[dim], tuple(self.rng.randint(1, s) for s in shape))
            scattered = self.data(self.tensor(gathered.cpu.shape, t.cpu.dtype))
            forms += [
                (f"{{}}.index_add_({dim}, {{}}, {{}})", lambda v, i, s: v.index_add_(dim, i, s),
                 [t, index, added]),
                (f"{{}}.scatter_add_({dim}, {{}}, {{}})", lambda v, i, s: v.scatter_add_(dim, i, s),
                 [t, gathered, scattered]),
                ("{}.index_put_(({},), {}, accumulate=True)",
                 lambda v, i, s: v.index_put_((i,), s, accumulate=True),
                 [t, self.index(shape[0]), self.cpu_scalar(t.cpu.dtype)]),
            ]
        text, fn, operands = self.rng.choice(forms)
        return self.step(text.format(*operands), fn, *operands, writes=t)

    def _out(self):
        x = self.pick(lambda t: t.dtype in NUMBER and not t.requires_grad)  # out= does not support autograd
        if x is None:
            return None
        t = x.cpu
        dims, dim, keep = tuple(self.rng.sample(range(max(t.dim(), 1)), 1)), self.dim(t), self.rng.random() < 0.4
        y = self.operand_for(x, NUMBER, numbers=False, constant=True)
        forms = [
            ("torch.add({}, {}, out={})", lambda a, b, out: torch.add(a, b, out=out), [x, y]),
            ("torch.mul({}, {}, out={})", lambda a, b, out: torch.mul(a, b, out=out), [x, y]),
            ("torch.maximum({}, {}, out={})", lambda a, b, out: torch.maximum(a, b, out=out), [x, y]),
            ("torch.abs({}, out={})", lambda a, out: torch.abs(a, out=out), [x]),
            ("torch.clamp({}, -1, 1, out={})", lambda a, out: torch.clamp(a, -1, 1, out=out), [x]),
            (f"torch.sum({{}}, {dims}, keepdim={keep}, out={{}})",
             lambda a, out: torch.sum(a, dims, keep, out=out), [x]),
            (f"torch.amax({{}}, {dims}, keepdim={keep}, out={{}})",
             lambda a, out: torch.amax(a, dims, keep, out=out), [x]),
            (f"torch.cumsum({{}}, {dim}, out={{}})", lambda a, out: torch.cumsum(a, dim, out=out), [x]),
        ]
        if t.is_floating_point():
            forms += [("torch.exp({}, out={})", lambda a, out: torch.exp(a, out=out), [x]),
                      (f"torch.mean({{}}, {dims}, keepdim={keep}, out={{}})",
                       lambda a, out: torch.mean(a, dims, keep, out=out), [x])]
        if t.numel() > 0 and t.dim() >= 1:
            forms += [(f"torch.cat([{{0}}, {{0}}], {dim}, out={{1}})",
                       lambda a, out: torch.cat([a, a], dim, out=out), [x]),
                      (f"torch.index_select({{}}, {dim}, {{}}, out={{}})",
                       lambda a, i, out: torch.index_select(a, dim, i, out=out), [x, self.index(t.shape[dim])])]
        if t.dim() >= 2 and t.is_floating_point():
            forms.append(("torch.matmul({0}, {0}.mT, out={1})",
                          lambda a, out: torch.matmul(a, a.mT, out=out), [x]))
        text, call, operands = self.rng.choice(forms)
        try:
            like = call(*(o.cpu for o in operands), out=None)
        except Exception:  # noqa: BLE001 (the step raises on CPU: the output's kind does not matter)
            like = t
        dtype = like.dtype if self.rng.random() < 0.9 else self.dtype(NUMBER)
        kind = self.rng.choice(["empty", "right-sized"] + ["strided"] * (like.dim() >= 2))
        shape = {"empty": (0,), "right-sized": tuple(like.shape), "strided": tuple(like.shape)[::-1]}[kind]
        reverse = tuple(range(len(shape)))[::-1]
        made = f"torch.empty({shape}, dtype={name(dtype)}, device=D)"
        made += f".permute({reverse})" if kind == "strided" else ""

        def empty(values, device):
            out = torch.empty(shape, dtype=dtype, device=device)
            return out.permute(reverse) if kind == "strided" else out

        def fn(*args):
            *inputs, out = args
            assert call(*inputs, out=out) is out, "an out= variant returned another tensor than out"
            return out
        return self.step(text.format(*operands, made), fn, *operands, Operand(made, empty, None))

    def _matmul(self):
        x = self.pick(lambda t: t.dtype in (torch.float32, torch.float64, torch.bfloat16) and t.dim() >= 1)
        if x is None:
            return None
        t = x.cpu
        k = t.shape[-1] if self.rng.random() < 0.99 else self.rng.randint(1, 6)  # else CPU raises: foo must too
        m = self.rng.randint(1, 6)

        def weight(shape):  # an earlier value of that shape and dtype, or new data
            w = self.pick(lambda v: v.shape == shape and v.dtype == t.dtype) if self.rng.random() < 0.3 else None
            return w or self.data(self.tensor(shape, t.dtype))
        batch = self.broadcastable(tuple(t.shape[:-2])) if t.dim() >= 3 and self.rng.random() < 0.5 else ()
        w = weight(self.rng.choice([(k,), (k, m)]) if t.dim() == 1 else batch + (k, m))
        forms = [("torch.matmul({}, {})", torch.matmul, [x, w]), ("{} @ {}", operator.matmul, [x, w])]
        if t.dim() == 2:
            forms += [("torch.mm({}, {})", torch.mm, [x, w]),
                      ("F.linear({}, {}, {})", F.linear, [x, weight((m, k)), weight((m,))]),
                      ("torch.addmm({}, {}, {}, beta=0.5, alpha=2)",
                       lambda b, a, c: torch.addmm(b, a, c, beta=0.5, alpha=2), [weight((m,)), x, w])]
        if t.dim() == 3:
            forms.append(("torch.bmm({}, {})", torch.bmm, [x, weight((t.shape[0], k, m))]))
        if t.dim() >= 2:
            forms.append(("torch.matmul({0}, {0}.mT)", lambda a: torch.matmul(a, a.mT), [x]))
        text, fn, operands = self.rng.choice(forms)
        return self.step(text.format(*operands), fn, *operands)

    def _cat(self):
        x = self.pick(lambda t: t.dim() >= 1)
        if x is None:
            return None
        t, stack = x.cpu, self.rng.random() < 0.35
        dim = self.dim(t, new=stack)
        parts = [x]
        for _ in range(self.rng.randint(1, 2)):
            shape = list(t.shape)
            if not stack:
                shape[dim] = self.rng.randint(1, 4)
            shape = tuple(shape) if self.rng.random() < 0.99 else self.shape()

            def fits(v):
                return v.dim() == t.dim() and all(a == b or (i == dim % t.dim() and not stack)
                                                  for i, (a, b) in enumerate(zip(v.shape, shape)))
            r = self.rng.random()
            part = self.pick(fits) if r < 0.4 else x if r < 0.55 else None
            dtype = t.dtype if self.rng.random() < 0.8 else self.dtype()
            parts.append(part or self.data(self.tensor(shape, dtype)))
        function = torch.stack if stack else torch.cat
        text = f"torch.{function.__name__}([{', '.join(map(str, parts))}], {dim})"
        return self.step(text, lambda *ts: function(ts, dim), *parts)

    def _index(self):
        x = self.pick(lambda t: t.dim() >= 1 and t.numel() > 0)
        if x is None:
            return None
        t = x.cpu
        dim = self.dim(t)
        size = t.shape[dim]
        host = self.rng.random() < 0.5
        gathered = tuple(self.rng.randint(1, s) for s in t.shape)
        gathered = gathered[:dim % t.dim()] + (self.rng.randint(1, 5),) + gathered[dim % t.dim() + 1:]
        rows = [self.rng.randrange(-t.shape[0], t.shape[0]) for _ in range(self.rng.randint(1, 3))]
        forms = [
            (f"{{}}.index_select({dim}, {{}})", lambda v, i: v.index_select(dim, i), [x, self.index(size)]),
            (f"{{}}.gather({dim}, {{}})", lambda v, i: v.gather(dim, i), [x, self.index(size, gathered)]),
            ("{}[{}]", operator.getitem, [x, self.index(t.shape[0], self.rng.choice([(3,), (2, 2)]), host, True)]),
            (f"{{}}[{rows}]", lambda v: v[rows], [x]),
            ("{0}[{0} > 0]", lambda v: v[v > 0], [x]),
            ("{}[{}]", operator.getitem, [x, self.mask(t.shape[:self.rng.randint(1, t.dim())], host)]),
            ("{}.masked_select({})", torch.masked_select, [x, self.mask(self.broadcastable(t.shape))]),
            ("torch.nonzero({})", torch.nonzero, [x]),
        ]
        if t.dim() >= 2:
            count = self.rng.randint(1, 4)
            first = self.index(t.shape[0], (count,), host, True)
            second = self.index(t.shape[1], (count,), self.rng.random() < 0.5, True)
            forms += [("{}[:, {}]", lambda v, i: v[:, i], [x, second]),
                      ("{}[{}, {}]", lambda v, i, j: v[i, j], [x, first, second])]
        text, fn, operands = self.rng.choice(forms)
        return self.step(text.format(*operands), fn, *operands)

    def _cast(self):
        x = self.pick()
        if x is None:
            return None
        t, dtype = x.cpu, self.rng.choice(list(CASTS))
        if t.is_floating_point() and dtype in INTEGER and not bool((t.abs() < 1e6).all()):
            # converting NaN, infinities or floats out of the integer's range is undefined behaviour
            dtype = torch.float64
        text, fn = self.rng.choice([(f"{{}}.to({name(dtype)})", lambda v: v.to(dtype)),
                                    (f"{{}}.{CASTS[dtype]}()", getattr(torch.Tensor, CASTS[dtype]))])
        return self.step(text.format(x), fn, x)

    def _free(self):
        """Drops an earlier value on foo: its memory goes back to the caching allocator (once no view of it
        is left) while queued kernels may still use it, and later steps may be given it. CPU keeps its
        values: they are the oracle."""
        x = self.pick()
        if x is None:
            return None
        k = x.reads[0]
        self.freed.add(k)

        def run(values, device):
            if device != "cpu":
                values[k] = None
        return Step(f"del {x}", run, (), ())

    def _default_dtype(self):
        """Switches the default dtype between float32 and float64 (the program's run restores it)."""
        dtype = torch.float64 if torch.get_default_dtype() == torch.float32 else torch.float32
        return self.step(f"torch.set_default_dtype({name(dtype)})", lambda: torch.set_default_dtype(dtype))

    def _scalar(self):
        x = self.pick(lambda t: t.dtype in NUMBER)
        if x is None:
            return None
        s, n, y = self.cpu_scalar(NUMBER), self.number(NUMBER), self.pick()
        forms = [
            ("{} * {}", operator.mul, [x, s]), ("{} - {}", operator.sub, [s, x]),
            ("{0} * {1}, then {1}.zero_()", lambda a, b: (a * b, b.zero_())[0], [x, s]),  # b is passed by value
            ("torch.add({}, {}, alpha=2)", lambda a, b: torch.add(a, b, alpha=2), [x, s]),
            ("torch.where({0} > 0, {0}, {1})", lambda a, b: torch.where(a > 0, a, b), [x, s]),
            ("{} + {}", operator.add, [x, n]), ("{} / {}", operator.truediv, [n, x]),
            ("{} * {}.sum().item()", lambda a, b: a * b.sum().item(), [x, y]),
        ]
        text, fn, operands = self.rng.choice(forms)
        return self.step(text.format(*operands), fn, *operands)


@functools.cache
def side_stream():
    """The side stream of the two-stream runs (a stream's worker thread lives as long as the process)."""
    return torch.foo.Stream()


def replay(program, streams=None, waits=None):
    """Runs `program` on foo and returns its values; with `streams`, step k runs on streams[k % 2]. Foo
    must raise where CPU raised, and only there. `waits`, a list, receives each step's host waits (what
    each waited for)."""
    values = []
    allocated_on = {}  # storage -> the stream (0 or 1) its memory was allocated on
    unseen = ([], [])  # unseen[s]: (storages read, storages written) by the other stream since s waited for it
    with default_dtype(program.default_dtype):
        for index, step in enumerate(program.steps):
            s = index % 2
            reads = {program.storage[k] for k in step.reads}
            writes = {program.storage[k] for k in step.writes}
            if streams is not None and any(w & (reads | writes) or r & writes for r, w in unseen[s]):
                if index % 4 < 2:
                    streams[s].wait_stream(streams[1 - s])
                else:
                    streams[s].wait_event(streams[1 - s].record_event())
                unseen[s].clear()
            try:
                with torch.foo.stream(streams[s]) if streams else contextlib.nullcontext():
                    torch.foo._sleep(STEP_DELAY)
                    with host_waits(waits):
                        made = outputs(step.run(values, "foo"))
            except Exception as e:  # noqa: BLE001 (compared with CPU's)
                expected = program.error and (program.error[0], type(program.error[1]))
                raised = f"step {index} raised {type(e).__name__}: {first_line(e)}"
                assert expected == (index, type(e)) and ASYNC_ERROR not in str(e), raised
                break
            if streams is not None:
                new = set(program.storage[len(values):len(values) + len(made)])
                for k in set(step.reads) | set(step.writes):
                    if allocated_on[program.storage[k]] != s:
                        values[k].record_stream(streams[s])
                for storage in new:
                    allocated_on.setdefault(storage, s)
                unseen[1 - s].append((reads, writes | new))
            values.extend(made)
        else:
            assert program.error is None, f"CPU raised at step {program.error[0]}, foo did not"
    if streams is not None:
        streams[0].wait_stream(streams[1])
    torch.foo.synchronize()
    return values


@contextlib.contextmanager
def host_waits(waits):
    """Appends to `waits` (unless None) what the host waited for in the block, as sync_debug_mode "warn"
    names it."""
    if waits is None:
        yield
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.foo.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.foo.set_sync_debug_mode("default")
            waits.append(sorted(str(w.message).split(" (Triggered")[0].removeprefix(SYNCHRONIZING)
                                for w in caught if str(w.message).startswith(SYNCHRONIZING)))


def same(got, expected, what):
    """Asserts that foo tensor `got` equals CPU tensor `expected`."""
    assert got.device.type == "foo", f"{what} is on {got.device}"
    assert (got.dtype, got.shape) == (expected.dtype, expected.shape), \
        f"{what}: {name(got.dtype)} {tuple(got.shape)} on foo, {name(expected.dtype)} {tuple(expected.shape)} on CPU"
    assert got.numel() <= 1 or got.stride() == expected.stride(), \
        f"{what} has strides {got.stride()} on foo, {expected.stride()} on CPU"
    torch.testing.assert_close(got.detach().cpu(), expected.detach(), equal_nan=True, msg=lambda m: f"{what}: {m}")


def compare(program, values):
    assert len(values) == len(program.values), f"foo made {len(values)} values, CPU {len(program.values)}"
    for k, (got, expected) in enumerate(zip(values, program.values)):
        if got is None:  # the program dropped it
            continue
        same(got, expected, f"v{k}")
        if expected.is_leaf and expected.requires_grad:
            assert (got.grad is None) == (expected.grad is None), f"v{k}.grad is {got.grad} on foo"
            if expected.grad is not None:
                same(got.grad, expected.grad, f"v{k}.grad")


def waits_beyond(new, learnt):
    """The host waits of each step in `new` that the same step did not make in `learnt` (the steps' lists of
    what they waited for), other than the operators listed in NEW_SIGNATURES_WAIT."""
    extra = []
    for index, (got, expected) in enumerate(zip(new, learnt)):
        beyond = collections.Counter(got) - collections.Counter(expected)
        extra += [f"step {index}: {what}" for what in beyond.elements() if what not in NEW_SIGNATURES_WAIT]
    return extra


def check(seed):
    """Runs program `seed` on foo four ways; raises an AssertionError naming the seed, the run and the
    program where a run does not end as CPU's did, or where a call of a signature not seen before made the
    host wait where the same call, learnt, did not."""
    program = Program(seed)
    learnt_waits, new_waits = [], []
    runs = [("first run", None, None), ("second run (learnt: queued)", None, learnt_waits),
            ("new signatures (plans forgotten)", None, new_waits),
            ("two streams", (torch.foo.current_stream(), side_stream()), None)]
    if LAUNCH_BLOCKING:
        del runs[2]  # every launch runs at its call: nothing is planned
    for run, streams, waits in runs:
        try:
            if waits is new_waits:
                foo_backend._C._forget_launch_plans()
            compare(program, replay(program, streams, waits))
            if waits is new_waits:
                extra = waits_beyond(new_waits, learnt_waits)
                assert not extra, "the host waited where the learnt run did not: " + "; ".join(extra)
        except Exception as e:  # noqa: BLE001 (an error on foo fails the program as a difference does)
            error = e if isinstance(e, AssertionError) else first_line(e)
            raise AssertionError(f"seed {seed}, {run}: {type(e).__name__}: {error}\n{program.describe()}") from e


def failures(seeds):
    """The failure message of each program of `seeds` whose runs on foo do not end as on CPU."""
    messages = []
    for seed in seeds:
        try:
            check(seed)
        except AssertionError as e:
            messages.append(str(e))
            with contextlib.suppress(RuntimeError):  # an asynchronous error the failed run left behind
                torch.foo.synchronize()
    return messages


def chunk(c):
    return range(c * PROGRAMS // CHUNKS, (c + 1) * PROGRAMS // CHUNKS)


@pytest.mark.parametrize("seeds", [chunk(c) for c in range(CHUNKS) if chunk(c)],
                         ids=lambda seeds: f"seeds{seeds.start}-{seeds.stop - 1}")
def test_random_programs_equal_cpu(seeds):
    failed = failures(seeds)
    assert not failed, f"{len(failed)} of {len(seeds)} programs differ:\n\n" + "\n\n".join(failed)


SCRIPTS = {"launch_blocking": (f"""
    import sys
    sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
    from test_random_programs import PROGRAMS, failures
    print("\\n\\n".join(failures(range(PROGRAMS))))
    """, {"FOO_LAUNCH_BLOCKING": "1"})}


def test_random_programs_equal_cpu_with_launch_blocking(subprocesses):
    failed = subprocesses.check("launch_blocking").strip()
    assert not failed, f"with FOO_LAUNCH_BLOCKING=1:\n{failed}"


if __name__ == "__main__":
    for seed in map(int, sys.argv[1:]):
        print(Program(seed).describe())
    print("\n\n".join(failures(map(int, sys.argv[1:]))) or "foo ran them as CPU did")
