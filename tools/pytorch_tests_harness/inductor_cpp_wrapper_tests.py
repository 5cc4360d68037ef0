"""PyTorch's device-generic Inductor tests (``CommonTemplate`` of test/inductor/test_torchinductor.py) once more
with Inductor's C++ wrapper (``torch._inductor.config.cpp_wrapper``), on CPU and on foo.

PyTorch runs the template this way for its own devices (test/inductor/test_cpu_cpp_wrapper.py and
test_gpu_cpp_wrapper.py): the device's class, every test with the C++ wrapper on. ``CpuCppWrapperTests`` is the
file's ``CpuTests`` (run it with foo not loaded, ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``), ``FooCppWrapperTests``
the ``FooTests`` of ``inductor_foo_tests.py`` (which says where the file is found); the tests are unchanged:

    cd <the folder holding test_torchinductor.py>
    TORCHINDUCTOR_COMPILE_THREADS=1 PYTORCH_INDUCTOR_TESTS_DIR=$PWD python -m pytest \\
        <foo_backend>/tools/pytorch_tests_harness/inductor_cpp_wrapper_tests.py -k FooCppWrapperTests
"""
import torch._inductor.config as inductor_config

import inductor_foo_tests  # the module, not its class: pytest would collect FooTests here once more


def with_cpp_wrapper(tests):
    """A subclass of the unittest class ``tests`` whose every test runs with the C++ wrapper."""

    class CppWrapperTests(tests):
        def setUp(self):
            super().setUp()
            cpp_wrapper = inductor_config.patch(cpp_wrapper=True)
            cpp_wrapper.__enter__()
            self.addCleanup(cpp_wrapper.__exit__, None, None, None)

    CppWrapperTests.__name__ = CppWrapperTests.__qualname__ = tests.__name__.replace("Tests", "CppWrapperTests")
    return CppWrapperTests


FooCppWrapperTests = with_cpp_wrapper(inductor_foo_tests.FooTests)
CpuCppWrapperTests = with_cpp_wrapper(inductor_foo_tests.template.CpuTests)
