r"""OpInfo sweep of torch.compile on foo: for every OpInfo of PyTorch's ``op_db``, the op compiled with Inductor
on foo tensors must give what the op gives in eager mode on the same foo tensors.

Eager foo is the reference (that it equals eager CPU is tests/test_opinfo_parity.py's job). Per op: float32,
forward only, the first ``N_SAMPLES`` sample inputs, each run as ``torch.compile(call_op, backend="inductor",
dynamic=False)`` where ``call_op`` calls the op on the sample. Outputs, and the inputs (which an op may mutate),
must have the same structure, devices, dtypes and shapes, and values within ``torch.testing.assert_close``'s
float32 tolerance (``equal_nan``): the compiled C++ kernels meet it for every op of the full sweep, so no looser
tolerance is needed. Samples are test_opinfo_parity's: generated once on CPU with a fixed seed, the leaves that
the sample function makes for the device replicated onto foo (what ``op.sample_inputs("foo", torch.float32)``
makes, with the same values on every device); the eager and the compiled run each get a fresh replica.

Dynamo captures data-dependent output shapes and scalars, so that nonzero, unique, masked_select and the like
are compiled too. A sample for which Dynamo compiles no graph at all (the whole op runs eagerly behind a graph
break) compares nothing: an op with no compiled sample is skipped, with the graph break's reason.

Foo or Inductor? Where a sample fails on foo (an error, or different results), the same comparison runs on CPU
tensors. Failing there too, it is Inductor's own limitation, not foo's: the test is an xfail with the reason
"Inductor, not foo". A failure on foo only is foo's: it fails the test unless
``tests/support/inductor_opinfo_expected_failures.py`` lists the op, with a reason; entries are strict xfails (an
unexpected pass fails the suite, and so does a listed op that turns out to fail on CPU too).

Ops not run (SKIPPED_OPS; their test is a skip with the reason): random or uninitialised outputs, sparse layouts,
no float32 support.

Compiling is slow (every graph's C++ kernels are compiled), so by default only a deterministic subset runs: every
``FAST_STRIDE``-th of the sorted names of the ops that run. ``FOO_INDUCTOR_OPINFO=all`` runs all of op_db (about
35 minutes on two cores with cold Inductor caches).
"""
import math
import os
import sys
import warnings

import pytest
import torch
import torch._dynamo
import torch._dynamo.config as dynamo_config
import torch._inductor.config as inductor_config
from torch._dynamo.utils import counters
from torch.utils._pytree import tree_flatten

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support.inductor_opinfo_expected_failures import EXPECTED_FAILURES  # noqa: E402
from test_opinfo_parity import OPS, RANDOM_OPS, SEED, Replica, manual_seed, samples  # noqa: E402

FOO = "foo"
N_SAMPLES = 3
FULL_SWEEP = os.environ.get("FOO_INDUCTOR_OPINFO") == "all"
# The default run: every FAST_STRIDE-th of the sorted names of the ops that run, about 80 s on two cores with cold
# Inductor caches.
FAST_STRIDE = 30

pytestmark = pytest.mark.filterwarnings("ignore")


def _skip_reason(key, op):
    if key in RANDOM_OPS or op.has_nondeterministic_output:
        return "random or uninitialised output: eager and compiled results differ by design"
    if "sparse" in key:
        return "sparse layouts: Inductor does not compile sparse operators"
    if torch.float32 not in op.supported_dtypes("cpu"):
        return "no float32 support"
    return None


SKIPPED_OPS = {key: reason for key, op in OPS.items() if (reason := _skip_reason(key, op)) is not None}
SWEPT_OPS = sorted(key for key in OPS if key not in SKIPPED_OPS)


class CompiledMismatch(AssertionError):
    """The compiled op failed, or its results differ from eager's, on one device."""


class FooOnlyFailure(AssertionError):
    """The compiled op fails on foo but matches eager on CPU."""


def _short(e, n=400):
    """The first line of an error; with the next one when it only introduces it ("backend='inductor' raised:")."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    s = " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else (lines[0] if lines else "")
    return s if len(s) <= n else s[:n] + "..."


def _compare_leaf(expected, got, where):
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise CompiledMismatch(f"{where}: eager returned a tensor, compiled returned {type(got).__name__}")
        if got.device != expected.device:
            raise CompiledMismatch(f"{where}: device {got.device}, eager gave {expected.device}")
        try:
            torch.testing.assert_close(got.detach().cpu(), expected.detach().cpu(), equal_nan=True,
                                       check_stride=False)
        except AssertionError as e:
            raise CompiledMismatch(f"{where}: {' '.join(str(e).split())}") from None
    elif isinstance(expected, float) and isinstance(got, float) and math.isnan(expected) and math.isnan(got):
        return
    elif type(got) is not type(expected) or got != expected:
        raise CompiledMismatch(f"{where}: compiled returned {got!r}, eager returned {expected!r}")


def compare(expected, got, what):
    """Raises CompiledMismatch unless ``got`` (compiled) equals ``expected`` (eager) within assert_close's
    tolerance for the dtype."""
    e_leaves, e_spec = tree_flatten(expected)
    g_leaves, g_spec = tree_flatten(got)
    if e_spec != g_spec:
        raise CompiledMismatch(f"{what}: structure differs: compiled {g_spec} vs eager {e_spec}")
    for i, (e, g) in enumerate(zip(e_leaves, g_leaves)):
        _compare_leaf(e, g, f"{what}[{i}]" if len(e_leaves) > 1 else what)


def _call_op(op):
    def call_op(input, *args, **kwargs):
        return op.op(input, *args, **kwargs)
    return call_op


def _eager(op, sample, device):
    """(replica, result) of the op in eager mode, or None if it raises (a sample the op rejects)."""
    manual_seed(SEED)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = Replica(sample, device)
            out = op.op(r.input, *r.args, **r.kwargs)
            if device == FOO:
                torch.foo.synchronize()  # a queued kernel's error belongs to this run
        return r, out
    except Exception:  # noqa: BLE001 -- eager's errors are test_opinfo_parity's business
        return None


def compiled_matches_eager(op, sample, device, where):
    """How many graphs Dynamo compiled for the sample on ``device`` (0: the op ran eagerly behind a graph break,
    nothing was compared), or None where eager mode rejects the sample. Raises CompiledMismatch if the compiled
    op fails or its results (outputs, and inputs after the call) differ from eager's."""
    eager = _eager(op, sample, device)
    if eager is None:
        return None
    e_rep, e_out = eager
    torch._dynamo.reset()  # a fresh compilation: its graphs are counted, and none is another device's
    graphs_before = counters["stats"]["unique_graphs"]
    manual_seed(SEED)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c_rep = Replica(sample, device)
            compiled = torch.compile(_call_op(op), backend="inductor", dynamic=False)
            c_out = compiled(c_rep.input, *c_rep.args, **c_rep.kwargs)
            if device == FOO:
                torch.foo.synchronize()
    except Exception as e:  # noqa: BLE001 -- any error of the compiled op is a failure
        raise CompiledMismatch(f"{where} on {device}: compiled raised {type(e).__name__}: {_short(e)}") from None
    compare(e_out, c_out, f"{where} on {device}: output")
    compare(e_rep.tensors(), c_rep.tensors(), f"{where} on {device}: inputs after the call")
    return counters["stats"]["unique_graphs"] - graphs_before


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Each op compiles from scratch, in this process (no compile workers to start or leave behind). Dynamo
    captures data-dependent output shapes (nonzero, unique, masked_select) and scalars in the graph rather
    than breaking it there, so that those ops are compiled rather than run eagerly."""
    torch._dynamo.reset()
    counters.clear()
    with inductor_config.patch(compile_threads=1), \
            dynamo_config.patch(capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True):
        yield
    torch._dynamo.reset()


def _param(key):
    if key in SKIPPED_OPS:
        return pytest.param(key, id=key, marks=pytest.mark.skip(reason=SKIPPED_OPS[key]))
    reason = EXPECTED_FAILURES.get(key)
    if reason is None:
        return pytest.param(key, id=key)
    return pytest.param(key, id=key, marks=pytest.mark.xfail(strict=True, reason=reason, raises=FooOnlyFailure))


OP_PARAMS = [_param(key) for key in (sorted(OPS) if FULL_SWEEP else SWEPT_OPS[::FAST_STRIDE])]


def _first_graph_break():
    """Dynamo's first graph-break reason, with its explanation (which names the untraceable call)."""
    reasons = list(counters["graph_break"])
    if not reasons:
        return "Dynamo gave up on the frame"
    reason = " ".join(line.strip() for line in reasons[0].splitlines()[:2])
    return reason if len(reason) <= 300 else reason[:300] + "..."


@pytest.mark.parametrize("key", OP_PARAMS)
def test_compiled_matches_eager(key):
    op = OPS[key]
    eager_ran = compiled = 0
    foo_only, inductor_too = [], []
    for i, sample in enumerate(samples(op, torch.float32, n=N_SAMPLES) or []):
        where = f"{key} sample {i}"
        try:
            graphs = compiled_matches_eager(op, sample, FOO, where)
        except CompiledMismatch as on_foo:
            eager_ran += 1
            compiled += 1
            try:
                on_cpu = compiled_matches_eager(op, sample, "cpu", where)
            except CompiledMismatch as cpu_failure:
                inductor_too.append(f"{on_foo} / {cpu_failure}")
            else:
                foo_only.append(str(on_foo) if on_cpu is not None else f"{on_foo} (eager mode rejects it on CPU)")
            continue
        eager_ran += graphs is not None
        compiled += bool(graphs)
    if foo_only:
        raise FooOnlyFailure("\n".join(foo_only))
    if inductor_too:
        if key in EXPECTED_FAILURES:
            raise AssertionError(f"{key} is listed as a foo-only failure but fails on CPU too: delete the entry. "
                                 + inductor_too[0])
        pytest.xfail("Inductor, not foo (fails on CPU too): " + inductor_too[0])
    if not eager_ran:
        pytest.skip("eager mode rejects every sample (or none generates)")
    if not compiled:
        pytest.skip("Dynamo compiled no graph for any sample, the op ran eagerly: " + _first_graph_break())


def test_comparison_detects_differences():
    """The comparison is not vacuous: each kind of difference raises CompiledMismatch."""
    x = torch.arange(6, dtype=torch.float32, device=FOO).reshape(2, 3)
    compare((x, 2, None), (x.clone(), 2, None), "equal")
    compare(torch.tensor([float("nan")], device=FOO), torch.tensor([float("nan")], device=FOO), "NaNs are equal")
    compare(x, x + 5e-6, "within float32's tolerance")
    bad = [
        (x, x + 1e-4),            # values
        (x, x.double()),          # dtype
        (x, x.reshape(3, 2)),     # shape
        (x, x.cpu()),             # device
        ((x, 1), (x, 2)),         # a non-tensor result
        ((x, x), [x, x]),         # structure
        (x, 1.0),                 # a tensor result that is not a tensor
    ]
    for expected, got in bad:
        with pytest.raises(CompiledMismatch):
            compare(expected, got, "differs")


def test_expected_failures_name_swept_ops_with_reasons():
    """Every expected failure names an op the sweep runs (no stale or skipped entries) and says why it fails."""
    stale = sorted(key for key in EXPECTED_FAILURES if key not in SWEPT_OPS)
    assert not stale, f"expected failures that name no swept op: {stale}"
    empty = sorted(key for key, reason in EXPECTED_FAILURES.items() if not reason or not reason.strip())
    assert not empty, f"expected failures without a reason: {empty}"


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"] + sys.argv[1:]))
