"""foo's generators: CPU's numbers for CPU's seeds, per-device state, the torch.cuda-style seeding API."""
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from support.host_wait_cases import sync_debug_mode

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


DROPOUTS = {
    "dropout_p0.1": lambda x: F.dropout(x, 0.1),
    "dropout_p0.5": lambda x: F.dropout(x, 0.5),
    "dropout_p0.7": lambda x: F.dropout(x, 0.7),
    "dropout_inplace": lambda x: F.dropout(x.clone(), 0.3, inplace=True),
    "dropout2d": lambda x: F.dropout2d(x.view(4, 8, 4, 4), 0.4),
    "alpha_dropout": lambda x: F.alpha_dropout(x, 0.2, training=True),
    "feature_alpha_dropout": lambda x: F.feature_alpha_dropout(x.view(4, 8, 16), 0.2, training=True),
    "rrelu": lambda x: F.rrelu(x, training=True),
}


@pytest.mark.parametrize("name", sorted(DROPOUTS))
def test_dropout_equals_cpu_bitwise_with_gradient(name):
    data = torch.randn(512, generator=torch.Generator().manual_seed(0))
    results = {}
    for device in ("cpu", "foo"):
        x = data.detach().to(device).requires_grad_()
        torch.manual_seed(11)
        y = DROPOUTS[name](x)
        y.backward(torch.arange(y.numel(), dtype=y.dtype, device=device).view_as(y))
        results[device] = (y.detach().cpu(), x.grad.cpu())
    assert torch.equal(results["foo"][0], results["cpu"][0])
    assert torch.equal(results["foo"][1], results["cpu"][1])


def _train_mlp_with_dropout(device, steps=20):
    torch.manual_seed(0)  # CPU's generator initialises the weights
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Dropout(0.3),
        torch.nn.Linear(64, 64), torch.nn.GELU(), torch.nn.Dropout(0.1), torch.nn.Linear(64, 10),
    ).to(device)
    # Dropout draws from the generator of the model's device only: seeding that one alone reproduces it.
    (torch.foo.manual_seed if device == "foo" else torch.default_generator.manual_seed)(5)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(16, 32, generator=data).to(device)
        y = torch.randint(0, 10, (16,), generator=data).to(device)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_mlp_with_dropout_trains_bitwise_equal_to_cpu():
    cpu_losses, cpu_params = _train_mlp_with_dropout("cpu")
    foo_losses, foo_params = _train_mlp_with_dropout("foo")
    assert foo_losses == cpu_losses
    assert all(torch.equal(f, c) for f, c in zip(foo_params, cpu_params))
    assert len(set(cpu_losses)) > 1


@pytest.mark.slow  # a fresh interpreter
def test_seeding_before_initialisation_is_applied_lazily():
    script = """
import torch
torch.foo.manual_seed(7)
torch.foo.manual_seed_all(8)
print(torch.foo.is_initialized())
torch.manual_seed(8)
expected = torch.randn(6)
print(torch.equal(torch.randn(6, device="foo:0").cpu(), expected),
      torch.equal(torch.randn(6, device="foo:1").cpu(), expected))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True", "True"]


# Every random operator on foo draws from its device's foo generator only (CONTRACT: RNG).
DEVICE_RNG_OPS = {
    **DROPOUTS,
    "bernoulli": lambda x: torch.bernoulli(x.sigmoid()),
    "rand_like": lambda x: torch.rand_like(x),
    "randperm": lambda x: torch.randperm(64, device=x.device),
    "multinomial": lambda x: torch.multinomial(x.abs()[:32] + 0.1, 8),
}


@pytest.mark.parametrize("name", sorted(DEVICE_RNG_OPS))
def test_random_ops_draw_from_their_devices_generator_only(name):
    op = DEVICE_RNG_OPS[name]
    data = torch.randn(512, generator=torch.Generator().manual_seed(0))
    x0, x1 = data.to("foo:0"), data.to("foo:1")

    torch.foo.manual_seed_all(31)
    first = op(x0).cpu()
    torch.default_generator.manual_seed(31)  # reseeding CPU does not rewind foo
    second = op(x0).cpu()
    assert not torch.equal(first, second)

    torch.foo.manual_seed(31)  # seeding foo:0 alone reproduces it...
    op(x1)  # ...and drawing on foo:1 does not move foo:0's generator
    assert torch.equal(op(x0).cpu(), first)

    torch.default_generator.manual_seed(31)  # the same seed draws CPU's numbers
    assert torch.equal(op(data).cpu(), first)


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_recomputes_dropout_with_the_forward_masks(use_reentrant):
    # torch.utils.checkpoint restores a device's generator only if its module says `_initialized`.
    from torch.utils.checkpoint import checkpoint

    def f(x):
        return F.dropout(x, 0.5) * 2

    x = torch.ones(64, device="foo", requires_grad=True)
    torch.foo.manual_seed(3)
    y = checkpoint(f, x, use_reentrant=use_reentrant)
    y.sum().backward()
    assert torch.equal(x.grad.cpu(), y.detach().cpu())  # the backward's recomputation drew the same mask
    assert torch.foo._initialized is torch.foo.is_initialized()


def test_set_rng_state_runs_no_operator_a_dispatch_mode_sees():
    """Restoring a state runs no operator that an active dispatch mode could refuse, as with torch.cuda:
    DTensor's local-tensor mode restores each simulated rank's state while fake tensors are active."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class RefuseEveryOperator(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            raise AssertionError(f"{func} reached the dispatch mode")

    torch.foo.manual_seed(5)
    state = torch.foo.get_rng_state()
    expected = torch.rand(4, device="foo").cpu()
    with RefuseEveryOperator():
        torch.foo.set_rng_state(state)
        torch.foo.set_rng_state_all([state] * torch.foo.device_count())
    assert torch.equal(torch.rand(4, device="foo").cpu(), expected)


# Random operators are queued: they draw from the generator when they run, in launch order.

def _queued_draw(shape=(64,)):
    """A randn call on foo whose signature is learnt, so that it is queued."""
    torch.randn(*shape, device="foo")
    torch.foo.synchronize()
    return lambda: torch.randn(*shape, device="foo")


def _cpu_draws(seed, count, shape=(64,)):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=generator) for _ in range(count)]


def _host_waits():
    import foo_backend
    return foo_backend._C._host_wait_count()


def test_random_operators_are_queued_and_draw_cpu_numbers():
    draw = _queued_draw()
    torch.foo.manual_seed(11)  # the device generator alone
    before = _host_waits()
    with torch.foo._hold_stream():
        draws = [draw() for _ in range(3)]
        assert not torch.foo.current_stream().query()
    assert _host_waits() == before
    for actual, expected in zip(draws, _cpu_draws(11, 3)):
        assert torch.equal(actual.cpu(), expected)


def test_random_operators_on_two_streams_draw_in_launch_order():
    draw = _queued_draw()
    first, second = torch.foo.Stream(), torch.foo.Stream()
    torch.foo.manual_seed(5)
    before = _host_waits()
    with torch.foo._hold_stream(first):
        with torch.foo.stream(first):
            a = draw()
        with torch.foo.stream(second):
            b = draw()  # ordered after `a` on the device, not by the host
        assert not second.query()  # it waits for the held stream's draw
    assert _host_waits() == before
    torch.foo.synchronize()
    expected = _cpu_draws(5, 2)
    assert torch.equal(a.cpu(), expected[0]) and torch.equal(b.cpu(), expected[1])


def _state_use_waits(use_state):
    """Whether ``use_state`` waits for a queued draw (held on the stream): in sync-debug "error" mode it
    raises where it would wait. Then returns the draw and ``use_state()`` once the stream ran."""
    draw = _queued_draw()
    torch.foo.manual_seed(3)
    with torch.foo._hold_stream():
        queued = draw()
        try:
            with sync_debug_mode("foo", "error"):
                use_state()
            waited = False
        except RuntimeError as error:
            assert "called a synchronizing foo operation: the generator's state after queued random work" in str(error)
            waited = True
    return waited, queued, use_state()


def test_seeding_waits_for_queued_draws_and_applies_after_them():
    waited, queued, _ = _state_use_waits(lambda: torch.foo.manual_seed(4))
    assert waited
    assert torch.equal(queued.cpu(), _cpu_draws(3, 1)[0])  # drawn with the seed of its launch
    assert torch.equal(torch.randn(64, device="foo").cpu(), _cpu_draws(4, 1)[0])


def test_rng_state_read_between_queued_draws_is_cpus_after_them():
    waited, queued, state = _state_use_waits(torch.foo.get_rng_state)
    assert waited
    generator = torch.Generator().manual_seed(3)
    assert torch.equal(queued.cpu(), torch.randn(64, generator=generator))
    assert torch.equal(state, generator.get_state())


def test_an_explicit_generators_state_waits_for_its_queued_draws():
    generator = torch.Generator(device="foo").manual_seed(9)
    torch.randn(64, device="foo", generator=generator)
    torch.foo.synchronize()
    generator.manual_seed(9)
    with torch.foo._hold_stream():
        queued = torch.randn(64, device="foo", generator=generator)
        with sync_debug_mode("foo", "error"):
            with pytest.raises(RuntimeError, match="the generator's state after queued random work"):
                generator.get_state()
    state = generator.get_state()
    cpu = torch.Generator().manual_seed(9)
    assert torch.equal(queued.cpu(), torch.randn(64, generator=cpu))
    assert torch.equal(state, cpu.get_state())


@pytest.mark.parametrize("seed_device_only", [True, False])
def test_dropout_training_loop_is_queued_and_equals_cpu_bitwise(seed_device_only):
    def train(device, steps=5):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                                    torch.nn.Linear(32, 4)).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1)).to(device)
        if device == "foo" and seed_device_only:
            torch.foo.manual_seed(2)
        else:
            torch.manual_seed(2)
        waits = []
        for _ in range(steps):
            before = _host_waits()
            optimizer.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            optimizer.step()
            waits.append(_host_waits() - before)
        return [p.detach().cpu() for p in model.parameters()], waits

    expected, _ = train("cpu")
    actual, waits = train("foo")
    assert waits[2:] == [0, 0, 0]  # once every call's outputs are learnt, a step never waits
    for a, e in zip(actual, expected):
        assert torch.equal(a, e)
