r"""torch.compile on foo: Dynamo traces foo streams, Inductor generates C++ kernels launched on foo's streams.

Loading foo imports neither Dynamo nor Inductor (together more than a second per process): ``install()``
only arranges for ``dynamo`` (importing it registers foo with Dynamo) to be imported right after
``torch._dynamo`` is first imported, and Inductor finds foo's code generators as attributes of
``torch.foo`` (``Scheduling``, ``PythonWrapperCodegen``, ``CppWrapperCodegen``) the first time it compiles
for foo: that lookup imports ``inductor`` and registers it.
"""
import importlib.abc
import importlib.machinery
import sys

_DYNAMO = "torch._dynamo"


def _register_with_dynamo():
    from . import dynamo  # noqa: F401  (registers on import)


class _RegisterAfterDynamoImport(importlib.abc.MetaPathFinder):
    """Runs foo's Dynamo registration once ``torch._dynamo`` has been imported: PyTorch offers no hook."""

    def find_spec(self, name, path, target=None):
        if name != _DYNAMO:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            _register_with_dynamo()

        spec.loader.exec_module = exec_then_register
        return spec


def install():
    if _DYNAMO in sys.modules:
        _register_with_dynamo()
    else:
        sys.meta_path.insert(0, _RegisterAfterDynamoImport())
