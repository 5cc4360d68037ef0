"""Random number generation on foo devices, as ``torch.cuda.random``.

Each foo device has a default generator (``default_generators``); ``torch.Generator(device="foo:1")``
makes more. foo's random operators run CPU's kernels with a CPU generator state, so for the same seed
foo produces exactly CPU's numbers, and the RNG state is a ``torch.uint8`` tensor in CPU's format.
Seeding needs no device initialisation.
"""
from collections.abc import Iterable
from typing import Any

import torch

from ._utils import _C, _check_device_index, _check_not_in_bad_fork, _get_device_index

__all__ = [
    "default_generators", "get_rng_state", "get_rng_state_all", "initial_seed", "manual_seed", "manual_seed_all",
    "seed", "seed_all", "set_rng_state", "set_rng_state_all",
]

default_generators: tuple[torch.Generator, ...] = tuple(_C._default_generator(i) for i in range(_C._device_count()))


def _generator(device: Any) -> torch.Generator:
    """The default generator of foo device ``device`` (None or ``"foo"``: the current device)."""
    return default_generators[_check_device_index(_get_device_index(device, optional=True))]


def get_rng_state(device: Any = "foo") -> torch.Tensor:
    """Return the random number generator state of a foo device as a ByteTensor (in CPU's format).

    Args:
        device (torch.device, str or int, optional): the device to return the RNG state of. Default: ``"foo"``
            (i.e., ``torch.device("foo")``, the current foo device).
    """
    _check_not_in_bad_fork()
    return _generator(device).get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    """Return a list of ByteTensors, the random number generator state of each foo device."""
    return [generator.get_state() for generator in default_generators]


def set_rng_state(new_state: torch.Tensor, device: Any = "foo") -> None:
    """Set the random number generator state of a foo device.

    Args:
        new_state (torch.ByteTensor): the desired state, as :func:`get_rng_state` returns it.
        device (torch.device, str or int, optional): the device to set the RNG state of. Default: ``"foo"``
            (i.e., ``torch.device("foo")``, the current foo device).
    """
    _check_not_in_bad_fork()
    # The generator copies the bytes. No operator may reach a dispatch mode here, as none does for CUDA:
    # DTensor's local-tensor mode restores each rank's state while fake tensors are active.
    with torch._C._DisableTorchDispatch():
        state = new_state.contiguous()
    _generator(device).set_state(state)


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    """Set the random number generator state of every foo device.

    Args:
        new_states (Iterable of torch.ByteTensor): the desired state for each device, in device order.
    """
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def manual_seed(seed: int) -> None:
    """Set the seed for generating random numbers on the current foo device. Needs no device initialisation.

    Args:
        seed (int): the desired seed.
    """
    _generator(None).manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Set the seed for generating random numbers on every foo device. Needs no device initialisation.

    Args:
        seed (int): the desired seed.
    """
    for generator in default_generators:
        generator.manual_seed(int(seed))


def seed() -> None:
    """Seed the current foo device's generator with a random number."""
    _generator(None).seed()


def seed_all() -> None:
    """Seed every foo device's generator with one random number."""
    if default_generators:
        random_seed = default_generators[0].seed()
        for generator in default_generators[1:]:
            generator.manual_seed(random_seed)


def initial_seed() -> int:
    """The seed of the current foo device's generator."""
    return _generator(None).initial_seed()
