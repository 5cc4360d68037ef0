"""PyTorch's tests of Inductor's graph trees (test/inductor/test_cudagraph_trees.py) on foo.

That file is not part of the PyTorch wheel: pass the folder holding a copy of it in ``PYTORCH_INDUCTOR_TESTS_DIR``.
It is written for CUDA alone (its classes exist only where CUDA does, its tensors are made on "cuda"). This
module reads it and writes it for foo before running it, changing only how it names the device: the device
"cuda" (and "cuda:N") becomes "foo", ``torch.cuda.<name>`` becomes ``torch.foo.<name>`` (``CUDAGraph``:
``FooGraph``; ``amp.autocast()``: ``torch.autocast("foo")``), ``.cuda()`` becomes ``.foo()``, the storage
error function of CUDA's ``torch._C`` is foo's, and its gates
(``HAS_CUDA``, ``TEST_CUDA_GRAPH``, ``TEST_MULTIGPU``) ask foo. The tests themselves are unchanged (each
ends with the Inductor configuration it began with: a few set it without restoring it); pytest collects them
here as ``CudaGraphTreeTests``:

    cd <that folder>
    TORCHINDUCTOR_COMPILE_THREADS=1 PYTORCH_INDUCTOR_TESTS_DIR=$PWD \\
        python -m pytest <foo_backend>/tools/pytorch_tests_harness/cudagraph_trees_foo_tests.py -p no:cacheprovider
"""
import os
import re
import sys
from pathlib import Path

import pytest

DEVICE = "foo"
# (pattern, replacement), applied in order to the file's text; each keeps the lines where they are, so that a
# failure's line number is the file's.
FOR_FOO = [
    (r"torch\.cuda\.CUDAGraph\b", "torch.foo.FooGraph"),
    (r"torch\.cuda\.amp\.autocast\(\)", f'torch.autocast("{DEVICE}")'),
    (r"torch\.cuda\.", "torch.foo."),
    # A function of CUDA's builds that foo's extension has under its own name.
    (r"torch\._C\._set_storage_access_error_msg", "torch.foo._C._set_storage_access_error_msg"),
    (r"\.cuda\(\)", f".{DEVICE}()"),
    (r'"cuda(:\d+)?"', rf'"{DEVICE}\1"'),
    (r'\\"cuda\\"', rf'\\"{DEVICE}\\"'),  # the device's name in a regular expression matching source lines
    (r"^from torch\.testing\._internal\.inductor_utils import .*$",
     "HAS_CPU = HAS_CUDA = True  # the harness: the device is foo"),
    (r"^(from torch\.testing\._internal\.common_cuda import .*)$",
     rf"\1; TEST_MULTIGPU = torch.{DEVICE}.device_count() >= 2  # the harness"),
    (r"\bTEST_CUDA_GRAPH\b(?!,)", "True"),
]


def written_for_foo(source):
    for pattern, replacement in FOR_FOO:
        source = re.sub(pattern, replacement, source, flags=re.MULTILINE)
    return source


_folder = Path(os.environ.get("PYTORCH_INDUCTOR_TESTS_DIR", "."))
_path = _folder / "test_cudagraph_trees.py"
sys.path.insert(0, str(_folder))
exec(compile(written_for_foo(_path.read_text()), str(_path), "exec"), globals())  # noqa: S102


@pytest.fixture(autouse=True)
def inductor_configuration_restored():
    """Some tests of the file set Inductor's configuration without restoring it (``test_cudagraph_capture_sizes*``
    set ``triton.cudagraph_capture_sizes``): every later test in the process would record only those sizes,
    on CUDA as on foo. Each test ends with the configuration it began with, as when run on its own."""
    from torch._inductor import config

    saved = config.get_config_copy()
    yield
    config.load_config(saved)
