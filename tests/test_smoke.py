import torch


def test_tensor_round_trip_and_add_match_cpu():
    x = torch.randn(3, 4)
    y = x.foo()
    assert y.device == torch.device("foo", 0)
    torch.testing.assert_close((y + 1).cpu(), x + 1)


def _public_callables():
    """Every public function and class of torch.foo and its torch.cuda-like modules, with their public methods."""
    import inspect

    modules = (torch.foo, torch.foo.memory, torch.foo.random, torch.foo.streams, torch.foo.graphs, torch.foo.amp,
               torch.foo.faults, torch.foo.sanitizer)
    seen = set()
    for module in modules:
        for name in module.__all__:
            obj = getattr(module, name)
            if not callable(obj) or obj in seen or not obj.__module__.startswith("foo_backend"):
                continue
            seen.add(obj)
            yield f"{module.__name__}.{name}", obj
            if inspect.isclass(obj):
                for attribute, member in vars(obj).items():
                    if not attribute.startswith("_") and callable(getattr(member, "__func__", member)):
                        yield f"{module.__name__}.{name}.{attribute}", getattr(member, "__func__", member)


def test_every_public_torch_foo_function_is_documented_with_its_arguments():
    # As torch.cuda's: a docstring, with an "Args:" section where there are arguments.
    import inspect

    undocumented = []
    for name, obj in _public_callables():
        doc = inspect.getdoc(obj) or ""
        try:
            parameters = [p for p in inspect.signature(obj).parameters if p not in ("self", "cls")]
        except (TypeError, ValueError):
            parameters = []
        if not doc or (parameters and "Args:" not in doc):
            undocumented.append(name)
    assert not undocumented, undocumented
