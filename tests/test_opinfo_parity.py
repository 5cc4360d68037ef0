r"""OpInfo parity: every OpInfo of PyTorch's ``op_db`` runs on foo and on CPU, and foo must agree with CPU.

CPU is the independent oracle. For every (op, dtype) pair that *runs on CPU* (its sample inputs generate
and the CPU op succeeds on at least one of them) foo must produce the same results:

* same output structure, dtype, shape, layout, conj/neg bits and device (foo wherever CPU gives cpu);
* the same strides wherever CPU's output is non-overlapping and dense;
* the same aliasing (an output that is a view of an input on CPU must be a view of that input on foo);
* values equal within ``torch.testing.assert_close``'s default tolerance for the dtype (``equal_nan``);
* an error wherever CPU raises, of the same exception type.

Checks (one parametrized test each, parametrized over op names, so a failure names the op and dtype):

* ``test_forward_float32``      forward, float32;
* ``test_grad_float32``         gradients of all grad-requiring float32 inputs for a random-cotangent backward;
* ``test_forward_other_dtype``  forward in float16, bfloat16, float64, int64, bool, complex64;
* ``test_out_float32``          out= variants (an out of the result's shape, and an empty out the op must resize);
* ``test_inplace_float32``      in-place variants (the mutated input, the result, and that it returns self);
* ``test_error_inputs``         OpInfo's error inputs: where CPU raises the documented error, foo raises too.

Only the first ``N_SAMPLES`` (env ``FOO_OPINFO_SAMPLES``, default 10) sample inputs of each op are used, for
the time budget, and the first ``DTYPE_SAMPLES`` (env ``FOO_OPINFO_DTYPE_SAMPLES``, default 4, at most
``N_SAMPLES``) in the other dtypes, where the samples' shapes and arguments were compared in float32 already. Every sample is generated once on CPU with a fixed seed; each run (CPU and foo) gets its own
replica with identical sizes, strides and storage offsets. Which leaves of a sample belong on the device is
learned by generating the same samples for the meta device: a tensor the sample function makes on CPU
whatever the device (tensor_split's index tensor) stays on CPU on foo, as on CUDA.

Random and nondeterministic ops: a sample whose CPU results change when CPU runs it again with another seed
(or whose op OpInfo marks ``has_nondeterministic_output``, or is in RANDOM_OPS, or whose out= result differs
from the functional one on CPU) is compared on metadata only (dtype, shape, strides, device), since foo's RNG
is not CPU's. The summary lists these ops.

Expected failures live in ``tests/support/opinfo_expected_failures.py``; each has a reason. They are strict xfails
(an unexpected pass fails the suite; not strict with fewer samples than the default, as `make test-fast` runs),
and entries whose reason starts with "crashes" are not run at all.
They count as NOT matching in the summary that the session prints at the end: matched/runnable pairs for
float32 forward, gradients and the other dtypes together (the acceptance targets), then out=, in-place and
error inputs. ``python tests/test_opinfo_parity.py [pytest args]`` runs this file and prints the same summary.
"""
import contextlib
import itertools
import math
import os
import sys
import warnings

import pytest
import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten, tree_map

import foo_backend  # noqa: F401  (registers foo)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support.opinfo_expected_failures import EXPECTED_FAILURES  # noqa: E402

FOO = "foo"
SEED = 1234
DEFAULT_SAMPLES = 10
N_SAMPLES = int(os.environ.get("FOO_OPINFO_SAMPLES", str(DEFAULT_SAMPLES)))
DEFAULT_DTYPE_SAMPLES = 4
DTYPE_SAMPLES = int(os.environ.get("FOO_OPINFO_DTYPE_SAMPLES", str(min(N_SAMPLES, DEFAULT_DTYPE_SAMPLES))))
OTHER_DTYPES = (torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.bool, torch.complex64)

# Ops whose results are not a function of their inputs (uninitialised memory or random numbers) even when the
# two-seed probe below happens not to notice it.
RANDOM_OPS = {
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal", "normal.in_place",
    "normal.number_mean", "uniform", "rand_like", "randn_like", "randint", "randint_like", "randn",
    "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d", "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout.with_train", "nn.functional.rrelu",
    "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
    "svd_lowrank", "pca_lowrank", "resize_", "resize_as_",
}

# Ops whose CPU out= kernel reads the out tensor's prior contents (PyTorch 2.13's ihfft2/ihfftn: the
# result changes with what `out` held), so their out= results are not a function of the inputs either:
# the two-seed probe misses it when the empty outs happen to hold the same bytes.
OUT_READS_PRIOR_CONTENTS = {"fft.ihfft2", "fft.ihfftn"}

OPS = {(op.name + "." + op.variant_test_name) if op.variant_test_name else op.name: op for op in op_db}

pytestmark = pytest.mark.filterwarnings("ignore")


# ---------------------------------------------------------------------------------------------------------
# Samples


def manual_seed(seed):
    """Seeds CPU's default generator, the one every sample generator and CPU kernel here uses. (torch.manual_seed
    would also queue lazy seeding calls for CUDA, XPU and MTIA, recording a stack trace each time, and warn that
    foo's generator cannot be seeded yet.)"""
    torch.random.default_generator.manual_seed(seed)


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def _replicate_tensor(t, device):
    """A copy of ``t`` on ``device`` with the same sizes, strides and storage offset (its whole storage is
    copied, so overlapping and offset views survive). Not a view of anything; requires_grad is kept."""
    if not isinstance(t, torch.Tensor):
        return t
    with torch.no_grad():
        src = t.detach()
        if src.layout != torch.strided:
            out = src.to(device)
        else:
            if src.is_conj() or src.is_neg():
                src = src.resolve_conj().resolve_neg()
            numel = src.untyped_storage().nbytes() // src.element_size()
            flat = src.as_strided((numel,), (1,), 0)
            dst = torch.empty(numel, dtype=src.dtype, device=device)
            dst.copy_(flat)
            out = torch.empty(0, dtype=src.dtype, device=device).set_(
                dst.untyped_storage(), src.storage_offset(), src.size(), src.stride())
    if t.requires_grad:
        out.requires_grad_(True)
    return out


def _is_device_leaf(x, device_type):
    if isinstance(x, torch.device):
        return x.type == device_type
    return isinstance(x, str) and (x == device_type or x.startswith(device_type + ":"))


def _move_leaf(x, device, move):
    if isinstance(x, torch.Tensor):
        return _replicate_tensor(x, device if move else "cpu")
    if move and device != "cpu" and _is_device_leaf(x, "cpu"):
        return torch.device(device) if isinstance(x, torch.device) else device
    return x


class Sample:
    """A sample input generated on CPU, and which of its leaves are "on the device": tensors and device
    arguments that the sample function creates for the device it is asked for. The rest (a CPU index tensor
    of tensor_split, say) stays on CPU on foo, as it would on CUDA. ``plan`` comes from generating the same
    samples for the meta device; None (meta generation failed) moves every tensor and every "cpu"."""

    def __init__(self, sample, plan):
        self.sample = sample
        self.plan = plan


class Replica:
    """A fresh copy of a sample for one run on ``device``."""

    def __init__(self, sample, device):
        s = sample.sample
        leaves, spec = tree_flatten((s.input, tuple(s.args), dict(s.kwargs)))
        plan = sample.plan or [True] * len(leaves)
        moved = [_move_leaf(x, device, m) for x, m in zip(leaves, plan)]
        # What a CPU result of this sample stands for on `device`: `device`, unless the sample names CPU itself.
        explicit_cpu = any(not m and _is_device_leaf(x, "cpu") for x, m in zip(leaves, plan))
        self.cpu_means = "cpu" if explicit_cpu else torch.device(device).type
        self.input, self.args, self.kwargs = spec.unflatten(moved)
        self.output_process_fn_grad = s.output_process_fn_grad

    def tensors(self):
        return [t for t in tree_flatten((self.input, self.args, self.kwargs))[0] if isinstance(t, torch.Tensor)]


@contextlib.contextmanager
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _generate(op, device, dtype, requires_grad, n):
    # op.sample_inputs_func rather than op.sample_inputs: the latter's TrackedInputIter looks for the running
    # unittest method with inspect.stack() (~0.1 s a call under pytest) and reseeds through torch.manual_seed.
    manual_seed(SEED)
    with _quiet():
        return list(itertools.islice(op.sample_inputs_func(op, device, dtype, requires_grad), n))


def _plan(cpu_sample, meta_sample):
    c_leaves, c_spec = tree_flatten((cpu_sample.input, tuple(cpu_sample.args), dict(cpu_sample.kwargs)))
    m_leaves, m_spec = tree_flatten((meta_sample.input, tuple(meta_sample.args), dict(meta_sample.kwargs)))
    if c_spec != m_spec:
        return None
    plan = []
    for c, m in zip(c_leaves, m_leaves):
        if isinstance(c, torch.Tensor):
            if not isinstance(m, torch.Tensor):
                return None
            plan.append(m.device.type == "meta")
        else:
            plan.append(_is_device_leaf(m, "meta"))
    return plan


def samples(op, dtype, requires_grad=False, n=None):
    """The first ``n`` sample inputs of ``op`` on CPU, generated with a fixed seed. None if generation fails."""
    n = N_SAMPLES if n is None else n
    try:
        cpu = _generate(op, "cpu", dtype, requires_grad, n)
    except Exception:
        return None
    try:
        meta = _generate(op, "meta", dtype, requires_grad, n)
    except Exception:
        meta = None
    if meta is None or len(meta) != len(cpu):
        return [Sample(s, None) for s in cpu]
    return [Sample(s, _plan(s, m)) for s, m in zip(cpu, meta)]


# ---------------------------------------------------------------------------------------------------------
# Comparison


class Mismatch(AssertionError):
    pass


def _tensor_leaves(tree):
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _storage_key(t):
    try:
        s = t.untyped_storage()
        return s.data_ptr() if s.nbytes() > 0 else None
    except Exception:
        return None


def _alias_map(outputs, inputs):
    """For each output tensor, the index of the input tensor whose storage it shares (-1: none)."""
    keys = [_storage_key(t) for t in inputs]
    result = []
    for t in outputs:
        k = _storage_key(t)
        result.append(keys.index(k) if k is not None and k in keys else -1)
    return result


def _compare_tensor(c, f, where, values, cpu_means):
    if not isinstance(f, torch.Tensor):
        raise Mismatch(f"{where}: CPU returned a tensor, foo returned {type(f).__name__}")
    expected_device = cpu_means if c.device.type == "cpu" else c.device.type
    if f.device.type != expected_device:
        raise Mismatch(f"{where}: device {f.device}, expected {expected_device} (CPU gave {c.device})")
    if f.layout != c.layout:
        raise Mismatch(f"{where}: layout {f.layout} != CPU {c.layout}")
    if f.dtype != c.dtype:
        raise Mismatch(f"{where}: dtype {f.dtype} != CPU {c.dtype}")
    if f.shape != c.shape:
        raise Mismatch(f"{where}: shape {tuple(f.shape)} != CPU {tuple(c.shape)}")
    if c.layout != torch.strided:
        f, c = f.to_dense(), c.to_dense()
    elif is_non_overlapping_and_dense(c) and f.stride() != c.stride():
        raise Mismatch(f"{where}: strides {f.stride()} != CPU {c.stride()} (shape {tuple(c.shape)})")
    if f.is_conj() != c.is_conj() or f.is_neg() != c.is_neg():
        raise Mismatch(f"{where}: conj/neg bits ({f.is_conj()}, {f.is_neg()}) != CPU ({c.is_conj()}, {c.is_neg()})")
    if values:
        with torch.no_grad():
            fc = f.detach().cpu()
        try:
            torch.testing.assert_close(fc, c.detach(), equal_nan=True, check_device=False, check_stride=False,
                                       check_layout=False)
        except AssertionError as e:
            raise Mismatch(f"{where}: values differ from CPU: {e}") from None


def _compare_leaf(c, f, where):
    if isinstance(c, float) and isinstance(f, float) and math.isnan(c) and math.isnan(f):
        return
    if isinstance(c, complex) and isinstance(f, complex) and (c != c) and (f != f):
        return
    if type(c) is not type(f) or c != f:
        raise Mismatch(f"{where}: foo returned {f!r}, CPU returned {c!r}")


def compare(cpu, foo, what="output", values=True, cpu_means=FOO):
    """Raises Mismatch unless foo's results equal CPU's. A CPU tensor in CPU's results must be a foo tensor in
    foo's (``cpu_means``), except after a sample that asks for CPU explicitly (``new_ones(..., device="cpu")``)."""
    c_leaves, c_spec = tree_flatten(cpu)
    f_leaves, f_spec = tree_flatten(foo)
    if c_spec != f_spec:
        raise Mismatch(f"{what}: structure differs: foo {f_spec} vs CPU {c_spec}")
    for i, (c, f) in enumerate(zip(c_leaves, f_leaves)):
        where = f"{what}[{i}]" if len(c_leaves) > 1 else what
        if isinstance(c, torch.Tensor):
            _compare_tensor(c, f, where, values, cpu_means)
        elif c is None:
            if f is not None:
                raise Mismatch(f"{where}: CPU gave None, foo gave {type(f).__name__}")
        elif isinstance(c, torch.Generator):
            continue
        else:
            _compare_leaf(c, f, where)


def same_on_cpu(a, b):
    """Whether two CPU results are identical (values exactly, NaNs equal)."""
    try:
        compare_cpu(a, b)
        return True
    except AssertionError:
        return False


def compare_cpu(a, b):
    a_leaves, a_spec = tree_flatten(a)
    b_leaves, b_spec = tree_flatten(b)
    assert a_spec == b_spec
    for x, y in zip(a_leaves, b_leaves):
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype
            if x.layout != torch.strided:
                x, y = x.to_dense(), y.to_dense()
            torch.testing.assert_close(x.detach(), y.detach(), rtol=0, atol=0, equal_nan=True, check_stride=False)
        elif isinstance(x, float) and isinstance(y, float):
            assert x == y or (math.isnan(x) and math.isnan(y))
        elif not isinstance(x, torch.Generator):
            assert x == y


def attempt(fn):
    """(result, None) or (None, exception)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn(), None
    except Exception as e:  # noqa: BLE001 -- any error is a result to compare
        return None, e


def check_error_parity(cpu_err, foo_result, foo_err, where):
    if foo_err is None:
        raise Mismatch(f"{where}: CPU raised {type(cpu_err).__name__}({_short(cpu_err)}) but foo succeeded")
    if type(foo_err) is not type(cpu_err):
        raise Mismatch(f"{where}: CPU raised {type(cpu_err).__name__}({_short(cpu_err)}) but foo raised "
                       f"{type(foo_err).__name__}({_short(foo_err)})")


def _short(e, n=300):
    s = str(e).strip().splitlines()
    s = s[0] if s else ""
    return s if len(s) <= n else s[:n] + "..."


def _foo_error(e, where):
    return Mismatch(f"{where}: CPU succeeded, foo raised {type(e).__name__}: {_short(e, 600)}")


def both_ran(cpu_err, foo_result, foo_err, where):
    """Whether CPU and foo both ran the sample. Where CPU raised, foo must raise alike (False); where
    only foo raised, that is a Mismatch."""
    if cpu_err is not None:
        check_error_parity(cpu_err, foo_result, foo_err, where)
        return False
    if foo_err is not None:
        raise _foo_error(foo_err, where)
    return True


# ---------------------------------------------------------------------------------------------------------
# The checks. Each returns the number of samples that ran on CPU (0: the pair is not runnable) and raises
# Mismatch on the first difference. RANDOM_FOUND collects the ops compared on metadata only.

RANDOM_FOUND = set()


def _is_random(op, key):
    return key in RANDOM_OPS or op.has_nondeterministic_output


def compare_unless_random(op, key, pairs, varies_on_cpu):
    """compare() of each (cpu, foo, what, cpu_means) in ``pairs``: on values, unless the op is random, when only
    their metadata are compared. Random: known to be (RANDOM_OPS, OpInfo's flag), or ``varies_on_cpu()``, a
    second CPU run with another seed giving other results, asked only once foo's values differ (asking for
    every sample would double CPU's share of this suite for ops whose values match anyway)."""
    random = _is_random(op, key)
    try:
        for cpu, foo, what, cpu_means in pairs:
            compare(cpu, foo, what, values=not random, cpu_means=cpu_means)
    except Mismatch:
        if random or not varies_on_cpu():
            raise
        random = True
        for cpu, foo, what, cpu_means in pairs:
            compare(cpu, foo, what, values=False, cpu_means=cpu_means)
    if random:
        RANDOM_FOUND.add(key)


@contextlib.contextmanager
def cpu_oracle(device):
    """The CPU reference runs as CPU-only PyTorch would. OpInfo's ``wrapper_set_seed`` (dropout, bernoulli, ...)
    saves and restores the RNG state of the current accelerator; with foo registered that accelerator is foo,
    so the CPU runs use a CPU-only ``freeze_rng_state``. foo runs keep the real one."""
    if device != "cpu":
        yield
        return
    import torch.testing._utils as testing_utils

    @contextlib.contextmanager
    def freeze_cpu_rng_state():
        state = torch.get_rng_state()
        try:
            yield
        finally:
            torch.set_rng_state(state)

    saved = testing_utils.freeze_rng_state
    testing_utils.freeze_rng_state = freeze_cpu_rng_state
    try:
        yield
    finally:
        testing_utils.freeze_rng_state = saved


def _run(fn, sample, device, seed):
    def go():
        manual_seed(seed)
        r = Replica(sample, device)
        with cpu_oracle(device):
            return r, fn(r.input, *r.args, **r.kwargs)
    got, err = attempt(go)
    if device == FOO and err is None:
        got, err = attempt(go)  # queued on the stream this time (see _queued_again)
    return (got if got else (None, None)), err


def check_forward(key, dtype, fn=None, n=None):
    op = OPS[key]
    fn = fn or op.op
    ss = samples(op, dtype, n=n)
    if not ss:
        return 0
    ran = 0
    for i, s in enumerate(ss):
        where = f"{key} {_dtype_name(dtype)} sample {i}"
        (c_rep, c_out), c_err = _run(fn, s, "cpu", SEED)
        (f_rep, f_out), f_err = _run(fn, s, FOO, SEED)
        if not both_ran(c_err, f_out, f_err, where):
            continue
        ran += 1

        def varies_on_cpu():
            (_, c_out2), c_err2 = _run(fn, s, "cpu", SEED + 1)
            return c_err2 is not None or not same_on_cpu(c_out, c_out2)

        compare_unless_random(op, key, [(c_out, f_out, where + " output", f_rep.cpu_means)], varies_on_cpu)
        c_alias = _alias_map(_tensor_leaves(c_out), c_rep.tensors())
        f_alias = _alias_map(_tensor_leaves(f_out), f_rep.tensors())
        if c_alias != f_alias:
            raise Mismatch(f"{where}: outputs alias inputs {f_alias} on foo but {c_alias} on CPU (-1: no alias)")
    return ran


def _differentiable(outputs):
    return [t for t in _tensor_leaves(outputs) if t.requires_grad and (t.is_floating_point() or t.is_complex())]


def _queued_again(run):
    """foo runs a call synchronously the first time it sees its signature (operator, shapes, strides,
    dtypes, scalar arguments) and learns its outputs' metadata; later calls with that signature are queued
    on the stream (csrc/execution/QueuedLaunch.h). Running every foo sample twice and comparing the second run checks
    the queued path of every operator against CPU too."""
    first = run()
    return run() if first[0] is not None else first


def _grad_run(op, sample, device, seed, cotangents):
    """(grads, cotangents) of the sample's grad-requiring inputs; cotangents generated when None."""
    manual_seed(seed)
    r = Replica(sample, device)
    with cpu_oracle(device):
        out = op.op(r.input, *r.args, **r.kwargs)
    out = r.output_process_fn_grad(out)
    outs = _differentiable(out)
    inputs = [t for t in r.tensors() if t.requires_grad]
    if not outs or not inputs:
        return None, None, None
    if cotangents is None:
        g = torch.Generator().manual_seed(SEED)
        cotangents = [torch.randn(t.shape, dtype=t.dtype, generator=g) for t in outs]
    cots = [c.to(device) for c in cotangents]
    grads = torch.autograd.grad(outs, inputs, cots, allow_unused=True)
    return list(grads), cotangents, r.cpu_means


def check_grad(key):
    op = OPS[key]
    ss = samples(op, torch.float32, requires_grad=True)
    if not ss:
        return 0
    ran = 0
    for i, s in enumerate(ss):
        where = f"{key} float32 grad sample {i}"
        c_res, c_err = attempt(lambda: _grad_run(op, s, "cpu", SEED, None))
        c_grads, cots, _ = c_res if c_res is not None else (None, None, None)
        if c_err is None and c_grads is None:
            continue  # nothing differentiable in this sample
        f_res, f_err = attempt(lambda: _queued_again(lambda: _grad_run(op, s, FOO, SEED, cots)))
        if not both_ran(c_err, f_res, f_err, where):
            continue
        ran += 1

        def varies_on_cpu():
            c_res2, c_err2 = attempt(lambda: _grad_run(op, s, "cpu", SEED + 1, cots))
            return c_err2 is not None or not same_on_cpu(c_grads, c_res2[0])

        compare_unless_random(op, key, [(c_grads, f_res[0], where + " input grads", f_res[2])], varies_on_cpu)
    return ran


def _empty_like_tree(tree, device, resize):
    def mk(t):
        if not isinstance(t, torch.Tensor):
            return t
        if resize:
            return torch.empty(0, dtype=t.dtype, device=device)
        return torch.empty_like(t, device=device)
    return tree_map(mk, tree)


def _as_out_arg(expected):
    if isinstance(expected, torch.Tensor):
        return expected
    return tuple(expected)


def check_out(key):
    """out= with an out of the result's shape and strides, then with empty outs that the op must resize."""
    op = OPS[key]
    ss = samples(op, torch.float32)
    if not ss:
        return 0
    ran = 0
    for i, s in enumerate(ss):
        (c_rep, expected), c_err = _run(op.op, s, "cpu", SEED)
        if c_err is not None or not _tensor_leaves(expected):
            continue
        if not all(isinstance(x, torch.Tensor) for x in tree_flatten(expected)[0]):
            continue
        random = _is_random(op, key) or key in OUT_READS_PRIOR_CONTENTS
        for resize in (False, True):
            where = f"{key} float32 out= ({'empty out' if resize else 'out of result shape'}) sample {i}"
            results = {}
            for device in ("cpu", FOO):
                def go(device=device):
                    manual_seed(SEED)
                    r = Replica(s, device)
                    out = _as_out_arg(_empty_like_tree(expected, r.cpu_means, resize))
                    with cpu_oracle(device):
                        res = op.op(r.input, *r.args, **r.kwargs, out=out)
                    same = [a is b or (a.data_ptr() == b.data_ptr() and a.shape == b.shape)
                            for a, b in zip(_tensor_leaves(res), _tensor_leaves(out))]
                    return res, out, same, r.cpu_means
                results[device] = attempt(go)
            (c, c_err), (f, f_err) = results["cpu"], results[FOO]
            if not both_ran(c_err, f, f_err, where):
                continue
            ran += 1
            if not random:  # out= results that differ from the functional call on CPU: random
                random = not same_on_cpu(tree_flatten(c[1])[0], tree_flatten(expected)[0])
            compare(c[1], f[1], where + " out", values=not random, cpu_means=f[3])
            compare(c[0], f[0], where + " returned", values=not random, cpu_means=f[3])
            if c[2] != f[2]:
                raise Mismatch(f"{where}: returned-is-out {f[2]} on foo but {c[2]} on CPU")
        if random:
            RANDOM_FOUND.add(key)
    return ran


def check_inplace(key):
    op = OPS[key]
    fn = op.inplace_variant
    ss = samples(op, torch.float32)
    if not ss:
        return 0
    ran = 0
    for i, s in enumerate(ss):
        if not isinstance(s.sample.input, torch.Tensor):
            continue
        where = f"{key} float32 in-place sample {i}"
        (c_rep, c_out), c_err = _run(fn, s, "cpu", SEED)
        (f_rep, f_out), f_err = _run(fn, s, FOO, SEED)
        if not both_ran(c_err, f_out, f_err, where):
            continue
        ran += 1

        def varies_on_cpu():
            (c_rep2, _), c_err2 = _run(fn, s, "cpu", SEED + 1)
            return c_err2 is not None or not same_on_cpu(c_rep.input, c_rep2.input)

        compare_unless_random(op, key, [(c_rep.input, f_rep.input, where + " mutated input", f_rep.cpu_means),
                                        (c_out, f_out, where + " returned", f_rep.cpu_means)], varies_on_cpu)
        if (c_out is c_rep.input) != (f_out is f_rep.input):
            raise Mismatch(f"{where}: returns self on foo: {f_out is f_rep.input}, on CPU: {c_out is c_rep.input}")
    return ran


def _error_inputs(op, device):
    manual_seed(SEED)
    with _quiet():
        return list(op.error_inputs_func(op, device))


def check_error_inputs(key):
    """OpInfo's error inputs: wherever CPU raises the documented error, foo must raise the same type."""
    op = OPS[key]
    try:
        eis = _error_inputs(op, "cpu")
    except Exception:
        return 0
    try:
        metas = _error_inputs(op, "meta")
        if len(metas) != len(eis):
            metas = None
    except Exception:
        metas = None
    ran = 0
    for i, ei in enumerate(eis):
        sample = Sample(ei.sample_input, _plan(ei.sample_input, metas[i].sample_input) if metas else None)
        where = f"{key} error input {i} ({ei.error_type.__name__}: {ei.error_regex!r})"
        (_, c_out), c_err = _run(op.op, sample, "cpu", SEED)
        if c_err is None or not isinstance(c_err, ei.error_type):
            continue  # not an error on CPU (error inputs may be device specific)
        ran += 1
        (_, f_out), f_err = _run(op.op, sample, FOO, SEED)
        check_error_parity(c_err, f_out, f_err, where)
    return ran


# ---------------------------------------------------------------------------------------------------------
# Parametrization and bookkeeping

# (check, op key, dtype name) -> "matched" | "mismatched" | "not runnable"
RESULTS = {}


def _param(check, key, dtype=None):
    dname = _dtype_name(dtype) if dtype is not None else "float32"
    reason = EXPECTED_FAILURES.get((check, key, dname))
    pid = key if dtype is None else f"{key}-{dname}"
    if reason is None:
        return pytest.param(key, dtype, id=pid)
    if reason.startswith("crashes"):
        return pytest.param(key, dtype, id=pid)  # the test body skips it (and counts it as not matching)
    # Listed for the default sample counts: with fewer samples the failing one may not be drawn.
    strict = N_SAMPLES >= DEFAULT_SAMPLES and (check != "forward_dtype" or DTYPE_SAMPLES >= DEFAULT_DTYPE_SAMPLES)
    return pytest.param(key, dtype, id=pid, marks=pytest.mark.xfail(strict=strict, reason=reason, raises=Mismatch))


def _supports(op, dtype):
    try:
        return dtype in op.supported_dtypes("cpu")
    except Exception:
        return False


FORWARD_PARAMS = [_param("forward", k) for k, op in OPS.items() if _supports(op, torch.float32)]
GRAD_PARAMS = [_param("grad", k) for k, op in OPS.items()
               if op.supports_autograd and torch.float32 in op.supported_backward_dtypes("cpu")]
DTYPE_PARAMS = [_param("forward_dtype", k, d) for k, op in OPS.items() for d in OTHER_DTYPES if _supports(op, d)]
OUT_PARAMS = [_param("out", k) for k, op in OPS.items() if op.supports_out and _supports(op, torch.float32)]
INPLACE_PARAMS = [_param("inplace", k) for k, op in OPS.items()
                  if op.inplace_variant is not None and _supports(op, torch.float32)]
ERROR_PARAMS = [_param("errors", k) for k, op in OPS.items() if op.error_inputs_func is not None]


def _record(check, key, dtype, run):
    rkey = (check, key, _dtype_name(dtype) if dtype is not None else "float32")
    expected = EXPECTED_FAILURES.get(rkey)
    if expected is not None and expected.startswith("crashes"):
        RESULTS[rkey] = "mismatched"
        pytest.skip(expected)
    RESULTS[rkey] = "mismatched"  # until proven otherwise (an exception leaves it so)
    ran = run()
    if ran == 0:
        RESULTS[rkey] = "not runnable"
        pytest.skip("not runnable on CPU (no sample generates or the CPU op fails on all of them)")
    RESULTS[rkey] = "matched"


@pytest.mark.parametrize("key, dtype", FORWARD_PARAMS)
def test_forward_float32(key, dtype):
    _record("forward", key, None, lambda: check_forward(key, torch.float32))


@pytest.mark.parametrize("key, dtype", GRAD_PARAMS)
def test_grad_float32(key, dtype):
    _record("grad", key, None, lambda: check_grad(key))


@pytest.mark.parametrize("key, dtype", DTYPE_PARAMS)
def test_forward_other_dtype(key, dtype):
    _record("forward_dtype", key, dtype, lambda: check_forward(key, dtype, n=DTYPE_SAMPLES))


@pytest.mark.parametrize("key, dtype", OUT_PARAMS)
def test_out_float32(key, dtype):
    _record("out", key, None, lambda: check_out(key))


@pytest.mark.parametrize("key, dtype", INPLACE_PARAMS)
def test_inplace_float32(key, dtype):
    _record("inplace", key, None, lambda: check_inplace(key))


@pytest.mark.parametrize("key, dtype", ERROR_PARAMS)
def test_error_inputs(key, dtype):
    _record("errors", key, None, lambda: check_error_inputs(key))


def test_comparison_detects_differences():
    """The oracle comparison is not vacuous: each kind of difference it claims to catch raises Mismatch."""
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    compare(x, x.to(FOO))  # equal: passes
    bad = [
        (x, (x + 1).to(FOO)),                                  # values
        (x, x.double().to(FOO)),                               # dtype
        (x, x.reshape(3, 2).to(FOO)),                          # shape
        (x, x.t().contiguous().t().to(FOO)),                   # strides of a dense result
        (x, x.clone()),                                        # device: a CPU result where foo was expected
        ((x, 1), (x.to(FOO), 2)),                              # a non-tensor result
        ((x, x), [x.to(FOO), x.to(FOO)]),                      # structure
        (torch.tensor([1 + 1j]).conj(), torch.tensor([1 - 1j]).to(FOO)),  # conj bit
    ]
    for cpu, foo in bad:
        with pytest.raises(Mismatch):
            compare(cpu, foo)
    compare(torch.tensor([float("nan")]), torch.tensor([float("nan")]).to(FOO))  # NaNs are equal
    with pytest.raises(Mismatch):
        check_error_parity(RuntimeError("cpu"), x, None, "a sample")
    with pytest.raises(Mismatch):
        check_error_parity(RuntimeError("cpu"), None, ValueError("foo"), "a sample")
    check_error_parity(RuntimeError("cpu"), None, RuntimeError("foo"), "a sample")


def test_expected_failures_are_known_pairs():
    """Every expected-failure entry names a real parametrized test (no stale entries)."""
    known = set()
    for check, params in (("forward", FORWARD_PARAMS), ("grad", GRAD_PARAMS), ("forward_dtype", DTYPE_PARAMS),
                          ("out", OUT_PARAMS), ("inplace", INPLACE_PARAMS), ("errors", ERROR_PARAMS)):
        for p in params:
            key, dtype = p.values
            known.add((check, key, _dtype_name(dtype) if dtype is not None else "float32"))
    stale = sorted(set(EXPECTED_FAILURES) - known)
    assert not stale, f"expected failures that match no test: {stale}"
    empty = [k for k, reason in EXPECTED_FAILURES.items() if not reason or not reason.strip()]
    assert not empty, f"expected failures without a reason: {empty}"


# ---------------------------------------------------------------------------------------------------------
# Summary


TARGETS = {"float32 forward": 99, "float32 gradients": 99, "other dtypes forward": 98}


def summary_lines():
    lines = []
    groups = (("float32 forward", ("forward",)), ("float32 gradients", ("grad",)),
              ("other dtypes forward", ("forward_dtype",)), ("float32 out=", ("out",)),
              ("float32 in-place", ("inplace",)), ("error inputs", ("errors",)))
    for title, checks in groups:
        runnable = [k for k, v in RESULTS.items() if k[0] in checks and v != "not runnable"]
        matched = [k for k in runnable if RESULTS[k] == "matched"]
        if not runnable:
            continue
        pct = 100.0 * len(matched) / len(runnable)
        target = TARGETS.get(title)
        verdict = "" if target is None else f"  (target >= {target}%: {'met' if pct >= target else 'NOT met'})"
        lines.append(f"{title:24s} {len(matched):5d} / {len(runnable):5d} runnable pairs matched = {pct:6.2f}%"
                     f"{verdict}")
    dtype_rows = {}
    for (check, _, dname), v in RESULTS.items():
        if check == "forward_dtype" and v != "not runnable":
            row = dtype_rows.setdefault(dname, [0, 0])
            row[1] += 1
            row[0] += v == "matched"
    for dname, (m, n) in sorted(dtype_rows.items()):
        lines.append(f"    {dname:20s} {m:5d} / {n:5d} = {100.0 * m / n:6.2f}%")
    if RANDOM_FOUND:
        lines.append("compared on metadata only (CPU results not reproducible: random, uninitialised, or out= differing "
                     "from the functional call): " + ", ".join(sorted(RANDOM_FOUND)))
    return lines


class _SummaryPlugin:
    def pytest_terminal_summary(self, terminalreporter):
        lines = summary_lines()
        if lines:
            terminalreporter.write_sep("=", "foo OpInfo parity (matched / runnable (op, dtype) pairs)")
            for line in lines:
                terminalreporter.write_line(line)


@pytest.fixture(scope="session", autouse=True)
def _parity_summary(request):
    if not request.config.pluginmanager.has_plugin("foo-opinfo-parity-summary"):
        request.config.pluginmanager.register(_SummaryPlugin(), "foo-opinfo-parity-summary")
    yield


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"] + sys.argv[1:]))
