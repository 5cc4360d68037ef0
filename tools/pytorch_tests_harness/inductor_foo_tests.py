"""PyTorch's device-generic Inductor tests (``CommonTemplate`` of test/inductor/test_torchinductor.py) on foo.

That file is not part of the PyTorch wheel: pass the folder holding a copy of it in ``PYTORCH_INDUCTOR_TESTS_DIR``
(or put that folder on ``sys.path``/``PYTHONPATH``). The file builds its CUDA class from ``check_model_cuda``, which
moves the model and the inputs to "cuda" and runs the file's ``check_model`` (eager against compiled, on that
device), then once more with the float inputs in half precision. ``FooTests`` is the same class for foo: the
file's own helpers with "foo" as the device. Run it beside the file's CPU class (``-k CpuTests``):

    cd <that folder>
    TORCHINDUCTOR_COMPILE_THREADS=1 PYTORCH_INDUCTOR_TESTS_DIR=$PWD \\
        python -m pytest <foo_backend>/tools/pytorch_tests_harness/inductor_foo_tests.py -p no:cacheprovider
"""
import os
import sys

import torch
import torch._inductor.config as inductor_config

if os.environ.get("PYTORCH_INDUCTOR_TESTS_DIR"):
    sys.path.insert(0, os.environ["PYTORCH_INDUCTOR_TESTS_DIR"])

import test_torchinductor as template  # noqa: E402

DEVICE = "foo"


def _half_on_device(value):
    """A float32 tensor as a float16 one on foo with the same strides; anything else unchanged."""
    if not isinstance(value, torch.Tensor) or value.dtype != torch.float:
        return value
    return torch.empty_strided(value.size(), value.stride(), device=DEVICE, dtype=torch.half).copy_(value)


@inductor_config.patch("triton.cudagraphs", False)
def check_model_foo(self, model, example_inputs, kwargs=None, *, check_lowp=True, copy_to_cuda=True,
                    rtol=None, **options):
    """``check_model`` with the model and the inputs on foo, then (``check_lowp``) with half-precision inputs,
    as ``check_model_cuda`` does for CUDA. ``copy_to_cuda`` keeps its name: the template passes it."""
    if hasattr(model, "to"):
        model = model.to(DEVICE)
    if copy_to_cuda:
        example_inputs = tuple(template.clone_preserve_strides(x, device=DEVICE) for x in example_inputs)
    template.check_model(self, model, example_inputs, kwargs, rtol=rtol, **options)
    if check_lowp:
        if hasattr(model, "to"):
            model = model.to(torch.half)
        template.check_model(self, model, [_half_on_device(x) for x in example_inputs], kwargs,
                             rtol=None if rtol is None else max(2e-3, rtol), **options)


class FooTests(template.TestCase):
    common = check_model_foo
    device = DEVICE


template.copy_tests(template.CommonTemplate, FooTests, DEVICE)
