"""Default random number generators of the loom devices (Philox)."""

import torch

from .. import _C
from ._utils import _get_device_index


def _generator(device=None) -> torch.Generator:
    from . import _lazy_init

    _lazy_init()
    return _C._get_default_generator(_get_device_index(device, optional=True))


def get_rng_state(device="loom") -> torch.Tensor:
    """The generator state as a ByteTensor: seed and offset (uint64 each)."""
    return _generator(device).get_state()


def get_rng_state_all() -> list:
    from . import device_count

    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state(new_state: torch.Tensor, device="loom") -> None:
    _generator(device).set_state(new_state.clone(memory_format=torch.contiguous_format))


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    from . import device_count

    for i in range(device_count()):
        _generator(i).manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    from . import device_count

    s = _generator(0).seed() if device_count() else None
    for i in range(1, device_count()):
        _generator(i).manual_seed(s)


def initial_seed() -> int:
    return _generator().initial_seed()
