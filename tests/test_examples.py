"""The programs in examples/ run and check themselves (docs/custom_ops.md points users at custom_op.py).

Each runs in a fresh interpreter, as a user runs it. custom_op.py compiles a C++ extension with
load_inline on its first run (about 20-40 s); later runs reuse the build in the temp directory."""
import os

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def _run_example(name, *args):
    path = os.path.join(EXAMPLES, name)
    return (
        f"""
        import runpy, sys
        sys.argv = [{path!r}, *{list(args)!r}]
        runpy.run_path({path!r}, run_name="__main__")
        """,
        {},
    )


SCRIPTS = {"custom_op": _run_example("custom_op.py")}


def test_custom_op_example(subprocesses):
    out = subprocesses.check("custom_op")
    assert "myops::swish on foo:0" in out
    assert "myops_cpp::scale_add on foo:0" in out
    assert out.rstrip().endswith("foo results equal CPU results")
