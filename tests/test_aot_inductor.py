"""AOTInductor on foo: a model exported with torch.export, compiled into a package with
torch._inductor.aoti_compile_and_package, loaded with torch._inductor.aoti_load_package and run on foo.

The package's library is Inductor's C++ wrapper for foo (tests/test_cpp_wrapper.py) inside the AOTI runtime:
foo's model runner (csrc/compiled/AotiModelRunner.cpp) loads it, its constants are copied to the model's foo
device at load, its kernels are launched on the current foo stream. The oracle is the model in eager mode on CPU.
Packages compile once per module (a compilation takes tens of seconds on two cores).
"""
import copy
import json
import os
import subprocess
import sys

import pytest
import torch
import torch._inductor.config as inductor_config

from foo_backend.compiler import inductor as foo_inductor


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden = torch.nn.Linear(8, 32)
        self.out = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x))).softmax(-1)


class ConvAttention(torch.nn.Module):
    """A CNN in channels_last whose feature map a transformer block reads as a sequence."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16),
                                        torch.nn.ReLU())
        self.block = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)

    def forward(self, images):
        features = self.conv(images)  # (batch, 16, h, w)
        return self.block(features.flatten(2).transpose(1, 2)).mean(1)


def compile_package(model, example, path, dynamic_shapes=None):
    """model (on CPU), exported and compiled on foo into the package at path."""
    on_foo = copy.deepcopy(model).foo()
    exported = torch.export.export(on_foo, (example.foo(),), dynamic_shapes=dynamic_shapes)
    with inductor_config.patch(compile_threads=1):
        return torch._inductor.aoti_compile_and_package(exported, package_path=str(path))


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    torch.manual_seed(0)
    model = MLP().eval()
    batch = torch.export.Dim("batch", min=2, max=64)
    path = compile_package(model, torch.randn(5, 8), tmp_path_factory.mktemp("mlp") / "mlp.pt2",
                           dynamic_shapes={"x": {0: batch}})
    return model, path


@pytest.fixture(scope="module")
def conv_attention(tmp_path_factory):
    torch.manual_seed(0)
    model = ConvAttention().eval().to(memory_format=torch.channels_last)
    images = torch.randn(2, 3, 6, 6).to(memory_format=torch.channels_last)
    return model, compile_package(model, images, tmp_path_factory.mktemp("conv") / "conv_attention.pt2")


def test_a_package_runs_on_foo_with_a_dynamic_batch(mlp):
    model, path = mlp
    loaded = torch._inductor.aoti_load_package(path)
    for rows in (5, 2, 37):
        x = torch.randn(rows, 8)
        out = loaded(x.foo())
        assert out.device == torch.device("foo", 0)
        torch.testing.assert_close(out.cpu(), model(x))


def test_a_cnn_in_channels_last_and_a_transformer_block(conv_attention):
    model, path = conv_attention
    images = torch.randn(2, 3, 6, 6).to(memory_format=torch.channels_last)
    out = torch._inductor.aoti_load_package(path)(images.foo())
    with torch.no_grad():
        torch.testing.assert_close(out.cpu(), model(images), rtol=1e-4, atol=1e-4)


def test_a_package_loads_on_foo1_with_its_weights_there(mlp):
    model, path = mlp
    torch.foo.set_device(0)
    before = torch.foo.memory_allocated(1)
    loaded = torch._inductor.aoti_load_package(path, device_index=1)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert torch.foo.memory_allocated(1) - before >= weights  # the constants are copied to foo:1 at load
    x = torch.randn(6, 8)
    out = loaded(x.to("foo:1"))
    assert out.device == torch.device("foo", 1)
    torch.testing.assert_close(out.cpu(), model(x))
    assert torch.foo.current_device() == 0


def test_a_run_queues_its_kernels_on_the_current_stream_without_a_host_wait(mlp):
    model, path = mlp
    loaded = torch._inductor.aoti_load_package(path)
    x = torch.randn(9, 8)
    x_foo = x.foo()
    loaded(x_foo)
    side = torch.foo.Stream()
    torch.foo.current_stream().synchronize()
    with torch.foo._hold_stream(side) as release:
        with torch.foo.stream(side):
            out = loaded(x_foo)  # returned while its kernels wait behind the hold
        assert not side.query()
        assert torch.foo.current_stream().query()  # nothing went to the default stream
        release()
    torch.foo.current_stream().wait_stream(side)
    torch.testing.assert_close(out.cpu(), model(x))


def test_a_package_loads_in_a_fresh_process(mlp, tmp_path):
    model, path = mlp
    x = torch.randn(3, 8)
    torch.save(x, tmp_path / "x.pt")
    script = (f"import torch\n"  # foo is autoloaded with torch
              f"loaded = torch._inductor.aoti_load_package({str(path)!r})\n"
              f"out = loaded(torch.load({str(tmp_path / 'x.pt')!r}).to('foo'))\n"
              f"torch.save(out.cpu(), {str(tmp_path / 'out.pt')!r})\n")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    torch.testing.assert_close(torch.load(tmp_path / "out.pt"), model(x))


def test_inputs_on_another_device_are_refused_naming_foo(mlp):
    _, path = mlp
    loaded = torch._inductor.aoti_load_package(path)
    with pytest.raises(RuntimeError, match="foo:0 and cpu"):
        loaded(torch.randn(4, 8))


def with_metadata(path, tmp_path, **metadata):
    """A copy of the package at path whose metadata says what metadata says."""
    from torch.export.pt2_archive import PT2ArchiveReader, PT2ArchiveWriter

    copied = tmp_path / "copy" / os.path.basename(path)
    copied.parent.mkdir()
    with PT2ArchiveReader(path) as source, PT2ArchiveWriter(str(copied)) as target:
        for name in source.get_file_names():
            data = source.read_bytes(name)
            if name.endswith("_metadata.json"):
                data = json.dumps({**json.loads(data), **metadata}).encode()
            target.write_bytes(name, data)
    return str(copied)


def test_packages_compiled_for_another_device_or_another_foo_are_refused(tmp_path, monkeypatch):
    class Tiny(torch.nn.Module):
        def forward(self, x):
            return x.sin() + 1

    x = torch.randn(4)
    for_cpu = torch._inductor.aoti_compile_and_package(torch.export.export(Tiny(), (x,)),
                                                       package_path=str(tmp_path / "cpu.pt2"))
    with pytest.raises(RuntimeError, match="was not compiled for foo by foo_backend"):
        torch._inductor.aoti_load_package(with_metadata(for_cpu, tmp_path, AOTI_DEVICE_KEY="foo"))
    # A package from a foo_backend whose C functions for generated code had another version.
    monkeypatch.setattr(foo_inductor, "_ABI_VERSION", "FOO_AOTI_ABI_VERSION + 1")
    older = compile_package(Tiny(), x, tmp_path / "other_foo.pt2")
    with pytest.raises(RuntimeError, match="compile the model again with this foo_backend"):
        torch._inductor.aoti_load_package(older)


def test_a_cpp_program_runs_a_package_on_foo_without_python(mlp, tmp_path):
    """examples/aoti_cpp: PyTorch's C++ package loader and foo's device library, no Python in the process."""
    import runpy

    model, path = mlp
    example = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "aoti_cpp")
    program = runpy.run_path(os.path.join(example, "build.py"))["build"](str(tmp_path / "run_package"))
    assert "libpython" not in subprocess.run(["ldd", program], capture_output=True, text=True, check=True).stdout
    rows, columns = 7, 8  # a batch size the package was not traced with
    result = subprocess.run([program, path, str(rows), str(columns), "1"], capture_output=True, text=True,
                            timeout=300, check=True)
    words = result.stdout.split()
    assert words[:3] == ["foo:1", str(rows), "4"]
    expected = model(torch.arange(rows * columns, dtype=torch.float).sin().reshape(rows, columns))
    torch.testing.assert_close(torch.tensor([float(v) for v in words[3:]]).reshape(rows, 4), expected)
