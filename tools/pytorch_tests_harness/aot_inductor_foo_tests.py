"""PyTorch's device-generic AOTInductor tests (``AOTInductorTestsTemplate`` of test/inductor/test_aot_inductor.py)
on foo.

That file is not part of the PyTorch wheel: pass the folder holding a copy of it (with the files it imports from
beside it: test_aot_inductor_utils.py, test_control_flow.py, test_torchinductor.py) in
``PYTORCH_INDUCTOR_TESTS_DIR``. The file builds its CPU class and its GPU class from the template, each with the
template's helpers (``check_model``: export, ``aoti_compile_and_package``, ``aoti_load_package`` and run, against
eager on the device); ``AOTInductorTestABICompatibleFoo`` is the same class for foo. Run it beside the file's CPU
class (``-k AOTInductorTestABICompatibleCpu``, foo not loaded):

    cd <that folder>
    TORCHINDUCTOR_COMPILE_THREADS=1 PYTORCH_INDUCTOR_TESTS_DIR=$PWD python -m pytest \\
        <foo_backend>/tools/pytorch_tests_harness/aot_inductor_foo_tests.py -p no:cacheprovider
"""
import os
import sys

if os.environ.get("PYTORCH_INDUCTOR_TESTS_DIR"):
    sys.path.insert(0, os.environ["PYTORCH_INDUCTOR_TESTS_DIR"])

import test_aot_inductor as template  # noqa: E402

DEVICE = "foo"


class AOTInductorTestABICompatibleFoo(template.TestCase):
    device = DEVICE
    device_type = DEVICE
    check_model = template.check_model
    check_model_with_multiple_inputs = template.check_model_with_multiple_inputs
    code_check_count = template.code_check_count
    allow_stack_allocation = False
    use_minimal_arrayref_interface = False


template.copy_tests(template.AOTInductorTestsTemplate, AOTInductorTestABICompatibleFoo, DEVICE)
