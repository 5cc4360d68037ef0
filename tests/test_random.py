"""foo's generators: CPU's numbers for CPU's seeds, per-device state, the torch.cuda-style seeding API."""
import pytest
import torch

RANDOM_OPS = {
    "rand": lambda dev, g=None: torch.rand(64, device=dev, generator=g),
    "randn": lambda dev, g=None: torch.randn(8, 8, device=dev, generator=g),
    "randint": lambda dev, g=None: torch.randint(0, 100, (64,), device=dev, generator=g),
    "randperm": lambda dev, g=None: torch.randperm(50, device=dev, generator=g),
    "normal_": lambda dev, g=None: torch.empty(64, device=dev).normal_(2.0, 3.0, generator=g),
    "uniform_": lambda dev, g=None: torch.empty(64, device=dev).uniform_(-1, 1, generator=g),
    "exponential_": lambda dev, g=None: torch.empty(64, device=dev).exponential_(generator=g),
    "bernoulli": lambda dev, g=None: torch.bernoulli(torch.full((64,), 0.3, device=dev), generator=g),
    "multinomial": lambda dev, g=None: torch.multinomial(torch.arange(1.0, 11.0, device=dev), 5, generator=g),
}


@pytest.mark.parametrize("name", sorted(RANDOM_OPS))
def test_seeded_random_ops_equal_cpu_bitwise(name):
    op = RANDOM_OPS[name]
    torch.manual_seed(1234)
    expected = op("cpu")
    torch.manual_seed(1234)
    assert torch.equal(op("foo").cpu(), expected)


@pytest.mark.parametrize("name", sorted(RANDOM_OPS))
def test_explicit_generator_equals_cpu_generator(name):
    op = RANDOM_OPS[name]
    expected = op("cpu", torch.Generator().manual_seed(7))
    actual = op("foo:1", torch.Generator(device="foo:1").manual_seed(7))
    assert torch.equal(actual.cpu(), expected)


def test_rng_state_round_trip_and_format():
    state = torch.foo.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    assert state.shape == torch.get_rng_state().shape  # CPU's state format
    first = torch.randn(10, device="foo")
    torch.foo.set_rng_state(state)
    assert torch.equal(torch.randn(10, device="foo").cpu(), first.cpu())


def test_devices_have_independent_generators():
    torch.foo.manual_seed_all(3)
    a0 = torch.randn(5, device="foo:0")
    b1 = torch.randn(5, device="foo:1")
    assert torch.equal(a0.cpu(), b1.cpu())  # same seed, separate streams
    torch.foo.set_rng_state(torch.foo.get_rng_state(0), 1)
    states = torch.foo.get_rng_state_all()
    assert len(states) == torch.foo.device_count() and torch.equal(states[0], states[1])
    torch.randn(5, device="foo:0")  # advances only device 0
    assert not torch.equal(torch.foo.get_rng_state(0), torch.foo.get_rng_state(1))
    torch.foo.set_rng_state_all(states)
    assert torch.equal(torch.foo.get_rng_state(0), states[0])


def test_seeding_api():
    torch.foo.manual_seed(42)
    assert torch.foo.initial_seed() == 42
    with torch.foo.device(1):
        torch.foo.manual_seed(43)
        assert torch.foo.initial_seed() == 43
    assert torch.foo.default_generators[0].initial_seed() == 42
    torch.foo.seed_all()
    seeds = {g.initial_seed() for g in torch.foo.default_generators}
    assert len(seeds) == 1
    torch.foo.seed()
    assert isinstance(torch.foo.initial_seed(), int)
    assert all(g.device == torch.device("foo", i) for i, g in enumerate(torch.foo.default_generators))


def test_torch_manual_seed_seeds_foo_without_warning(recwarn):
    torch.manual_seed(99)
    assert all(g.initial_seed() == 99 for g in torch.foo.default_generators)
    assert not [w for w in recwarn if "foo" in str(w.message)]


def test_fork_rng_restores_foo_state():
    torch.foo.manual_seed(5)
    before = torch.foo.get_rng_state()
    with torch.random.fork_rng(devices=[0], device_type="foo"):
        torch.randn(100, device="foo")
    assert torch.equal(torch.foo.get_rng_state(), before)


def test_cpu_generator_on_foo_op_is_rejected():
    with pytest.raises(RuntimeError, match="foo"):
        torch.randn(3, device="foo", generator=torch.Generator())
