"""foo_backend._patches, the registry of every patch foo makes to PyTorch: each entry is complete (what it
patches, why, for which releases, which test guards it, what applies it), and on this torch each patch for it
is applied, when its subsystem is first used and not before."""
import ast
import importlib
import re
from pathlib import Path

import pytest
import torch

from foo_backend import _patches
from support.subprocesses import labelled

TESTS = Path(__file__).parent


def _resolve(dotted):
    """The object a dotted path names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            obj = getattr(obj, attribute)
        return obj
    raise ImportError(dotted)


def _test_functions(path):
    return {node.name for node in ast.parse(path.read_text()).body if isinstance(node, ast.FunctionDef)}


@pytest.mark.parametrize("name", sorted(_patches.PATCHES))
def test_every_patch_is_declared_completely(name):
    patch = _patches.PATCHES[name]
    assert isinstance(patch.releases, tuple) and patch.releases, name
    assert all(re.fullmatch(r"\d+\.\d+", release) for release in patch.releases), patch.releases
    assert patch.why and "\n" not in patch.why and patch.when
    # The guard: a test of this suite, which fails loudly if PyTorch changes what the patch works around.
    file, _, test = patch.guard.partition("::")
    assert file.startswith("tests/") and test.startswith("test_"), patch.guard
    assert test in _test_functions(TESTS.parent / file), f"{name}: no guard test {patch.guard}"
    # What it patches exists in PyTorch (on the releases it is for), and what applies it exists in foo.
    assert isinstance(patch.targets, tuple) and patch.targets
    for target in patch.targets:
        assert target.startswith("torch.")
        if _patches.applies(name):
            _resolve(target)
    module, _, function = patch.apply.partition(":")
    assert module.startswith("foo_backend") and callable(getattr(importlib.import_module(module), function))


def test_every_patch_for_this_torch_is_applied():
    import torch._dynamo  # noqa: F401  (foo's Dynamo patches are applied right after it is imported)
    from foo_backend.compiler import inductor

    inductor.register()  # what Inductor's first compilation for foo does
    for name in _patches.PATCHES:
        assert _patches.applied(name) == _patches.applies(name), name
        assert _patches.apply(name) == _patches.applies(name)  # applying again changes nothing
    assert _patches.applies("accelerator_snapshot")  # this torch is one the patches are for
    before = _patches.upstream("accelerator_snapshot")
    assert _patches.apply("accelerator_snapshot") and _patches.upstream("accelerator_snapshot") is before


def test_the_version_guard_reads_the_release():
    version = torch.__version__
    try:
        torch.__version__ = "2.13.1+cu130"
        assert _patches.torch_release() == "2.13" and _patches.applies("accelerator_snapshot")
        torch.__version__ = "2.14.0a0+git1234567"
        assert _patches.torch_release() == "2.14" and _patches.applies("accelerator_snapshot")
        torch.__version__ = "2.15.0"
        assert _patches.torch_release() == "2.15" and not _patches.applies("accelerator_snapshot")
        torch.__version__ = "2.1.0"
        assert not _patches.applies("accelerator_snapshot")
    finally:
        torch.__version__ = version


def test_patches_are_applied_when_their_subsystem_is_first_used(subprocesses):
    out = labelled(subprocesses.check("lazy"))
    at_import = ['accelerator_snapshot', 'default_dtype_setters']
    if _patches.torch_release() == "2.13":  # 2.14 marks an unnamed group's default backend itself
        at_import.append('unnamed_process_group_backend')
    assert out["at_import"] == str(at_import)
    assert out["after_dynamo"] == ("['dynamo_current_stream', 'dynamo_preserve_rng_state', 'dynamo_stream_classes', "
                                   "'fake_convolution', 'rng_state_operators_on_foo']")
    skip_logs = {"2.13": "graph_skips_logged_by_device_types", "2.14": "graph_skips_logged_as_gpus"}
    assert out["after_graph_trees"] == str(sorted([skip_logs[_patches.torch_release()], "graph_trees_on_foo"]))
    assert out["after_compile"] == ("['inductor_cpp_wrapper_header', 'inductor_current_backend', "
                                    "'inductor_device_need_guard', 'inductor_is_cpu', 'inductor_lowering_is_gpu']")


FRESH_SCRIPTS = {"lazy"}  # which patches importing torch applies: a fresh interpreter (tests/support/forkserver.py)
SCRIPTS = {
    "lazy": ("""
        import torch  # foo through PyTorch's backend autoload
        from foo_backend import _patches

        seen = set()
        def newly_applied(label):
            now = {name for name in _patches.PATCHES if _patches.applied(name)}
            print(label, sorted(now - seen))
            seen.update(now)

        newly_applied("at_import")
        import torch._dynamo
        newly_applied("after_dynamo")
        import torch._inductor.cudagraph_trees  # a program may call the trees before anything compiles
        newly_applied("after_graph_trees")
        x = torch.compile(lambda a: a * 2)(torch.ones(3, device="foo"))
        assert x.cpu().tolist() == [2.0, 2.0, 2.0]
        newly_applied("after_compile")
    """, {}),
}
