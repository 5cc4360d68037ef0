"""Finds ATen operators whose outputs' metadata depend on their inputs' values.

foo queues a call once it has seen its signature (operator, tensor metadata, other arguments): the
outputs' dtype, shape, strides and storage size must then follow from the signature alone. PyTorch tags
the operators for which they do not (dynamic_output_shape, data_dependent_output), and foo keeps those
synchronous; this tool looks for the ones that are not tagged.

Every OpInfo sample of PyTorch's op_db runs on CPU twice: as generated, and with other values in tensors of
the same dtype, shape and strides. A TorchDispatchMode records every ATen call and its outputs' metadata;
the first call whose outputs differ between the two runs (or after which the two runs call different
operators) is reported. Run: python tools/find_value_dependent_ops.py [--samples N] [--include-kept]
"""
import argparse
import itertools
import warnings

import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

# Already synchronous on foo.
KEPT_SYNCHRONOUS_TAGS = {torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output,
                         torch.Tag.nondeterministic_seeded}


def metadata(value):
    if isinstance(value, torch.Tensor) and value.layout == torch.strided and not value.is_nested:
        return (value.dtype, tuple(value.shape), value.stride(), value.untyped_storage().nbytes())
    if isinstance(value, torch.Tensor):
        return (value.dtype, value.layout)
    return None


class Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # A call is the same call in both runs when its operator, its inputs' metadata and its other
        # arguments are: exactly what foo's launch signature holds.
        inputs = tuple(metadata(a) if isinstance(a, torch.Tensor) else repr(a) for a in tree_flatten((args, kwargs))[0])
        self.calls.append(((func, inputs), tuple(metadata(o) for o in tree_flatten(out)[0])))
        return out


def kept_synchronous(func):
    if KEPT_SYNCHRONOUS_TAGS & set(func.tags):
        return True
    return any(str(a.type) == "List[Optional[Tensor]]" for a in func._schema.arguments)


def perturbations(t, generator):
    """Same dtype, shape and strides; other values."""
    if t.dtype == torch.bool:
        yield lambda: torch.ones_like(t)
        yield lambda: torch.zeros_like(t)
        yield lambda: torch.randint(0, 2, t.shape, generator=generator).to(torch.bool)
    elif t.dtype.is_floating_point or t.dtype.is_complex:
        yield lambda: torch.zeros_like(t)
        yield lambda: torch.ones_like(t)
        yield lambda: torch.randn(t.shape, generator=generator).to(t.dtype)
        yield lambda: -torch.rand(t.shape, generator=generator).to(t.dtype)
        yield lambda: torch.randint(0, 2, t.shape, generator=generator).to(t.dtype)
    else:
        lo = int(t.min()) if t.numel() else 0
        hi = int(t.max()) + 1 if t.numel() else 2
        yield lambda: torch.zeros_like(t)
        yield lambda: torch.ones_like(t)
        yield lambda: torch.randint(0, 3, t.shape, generator=generator).to(t.dtype)
        yield lambda: torch.randint(lo, max(hi, lo + 1), t.shape, generator=generator).to(t.dtype)


def record(op, args, kwargs):
    recorder = Recorder()
    try:
        with recorder, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            op(*args, **kwargs)
    except Exception:
        return None
    return recorder.calls


def first_divergence(a, b):
    """The first call made with the same signature in both runs whose outputs differ."""
    for (call_a, outputs_a), (call_b, outputs_b) in zip(a, b):
        if call_a != call_b:
            return None  # the runs took other paths before any output differed: nothing to blame
        if outputs_a != outputs_b:
            return call_a[0], outputs_a, outputs_b
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--include-kept", action="store_true",
                        help="also report operators foo already keeps synchronous (checks that the search finds them)")
    options = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    found = {}
    for opinfo, dtype in itertools.product(op_db, (torch.float32, torch.int64, torch.bool)):
        if dtype not in opinfo.supported_dtypes("cpu"):
            continue
        try:
            samples = list(itertools.islice(opinfo.sample_inputs("cpu", dtype), options.samples))
        except Exception:
            continue
        for sample in samples:
            args, kwargs = (sample.input, *sample.args), sample.kwargs
            baseline = record(opinfo.op, args, kwargs)
            if baseline is None:
                continue
            tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
            for t in tensors:
                if t.layout != torch.strided or t.numel() == 0:
                    continue
                for values in perturbations(t, generator):
                    try:
                        perturbed = tree_map(lambda x, target=t, values=values: refill(x, target, values), (args, kwargs))
                    except RuntimeError:
                        continue
                    calls = record(opinfo.op, *perturbed)
                    if calls is None:
                        continue
                    divergence = first_divergence(baseline, calls)
                    if divergence and (options.include_kept or not kept_synchronous(divergence[0])):
                        name = str(divergence[0])
                        found.setdefault(name, (opinfo.name, dtype, divergence[1], divergence[2]))
    for name, (source, dtype, a, b) in sorted(found.items()):
        print(f"{name}  (from OpInfo {source}, {dtype}): {a} vs {b}")
    print(f"{len(found)} operators")


def refill(x, target, values):
    """`target` with other values (same dtype, shape, strides, offset and storage size); any other leaf as it is."""
    if x is not target:
        return x
    storage = torch.UntypedStorage(x.untyped_storage().nbytes())
    y = torch.empty(0, dtype=x.dtype).set_(storage, x.storage_offset(), x.shape, x.stride())
    y.copy_(values())  # raises for overlapping (expanded) inputs: that perturbation is skipped
    return y.requires_grad_(x.requires_grad) if (y.is_floating_point() or y.is_complex()) else y


if __name__ == "__main__":
    main()
