r"""torch.compile on foo: Dynamo traces foo streams, Inductor generates C++ kernels launched on foo's streams.

Loading foo imports neither Dynamo nor Inductor (together more than a second per process): ``install()``
only arranges for ``dynamo`` (importing it registers foo with Dynamo) to be imported right after
``torch._dynamo`` is first imported, and for Inductor's graph trees to be given to foo right after
``torch._inductor.cudagraph_trees`` is first imported (``graph_trees.bind``: a program may call the trees
before anything compiles). Inductor finds foo's code generators as attributes of ``torch.foo``
(``Scheduling``, ``PythonWrapperCodegen``, ``CppWrapperCodegen``) the first time it compiles for foo: that
lookup imports ``inductor`` and registers it.
"""
import importlib.abc
import importlib.machinery
import sys


def _register_with_dynamo():
    from . import dynamo  # noqa: F401  (registers on import)


def _give_graph_trees_to_foo():
    from . import graph_trees

    graph_trees.bind()


# Module name -> what runs once that module has been imported: PyTorch offers no hook.
_AFTER_IMPORT = {"torch._dynamo": _register_with_dynamo, "torch._inductor.cudagraph_trees": _give_graph_trees_to_foo}


class _RunAfterImport(importlib.abc.MetaPathFinder):
    """Runs ``_AFTER_IMPORT[name]`` once module ``name`` has been imported."""

    def __init__(self, name):
        self.name = name

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_run(module):
            exec_module(module)
            _AFTER_IMPORT[name]()

        spec.loader.exec_module = exec_then_run
        return spec


def install():
    for name, run in _AFTER_IMPORT.items():
        if name in sys.modules:
            run()
        else:
            sys.meta_path.insert(0, _RunAfterImport(name))
