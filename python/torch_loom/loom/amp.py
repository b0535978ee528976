"""torch.loom.amp: automatic mixed precision on loom, as torch.cuda.amp is
on CUDA.

``torch.autocast("loom")`` and ``torch.amp.GradScaler("loom")`` are the
canonical spellings; :class:`autocast`, :class:`GradScaler`,
:func:`custom_fwd` and :func:`custom_bwd` here are the device-bound
shortcuts that code written for ``torch.cuda.amp`` looks for.

Autocast casts as on CUDA (the same op lists), but its default dtype on
loom is bfloat16, not float16: the loom host driver's fast path is bf16
(AVX-512-BF16 and AMX), and bf16 keeps fp32's range, so it trains without
a GradScaler. float16 works too, with a GradScaler.
"""

import functools

import torch

__all__ = ["GradScaler", "autocast", "custom_bwd", "custom_fwd", "get_amp_supported_dtype"]

_DEVICE = "loom"
DEFAULT_DTYPE = torch.bfloat16


def get_amp_supported_dtype():
    """The dtypes ``torch.autocast("loom", dtype=...)`` accepts; any other
    dtype makes autocast warn and disable itself."""
    return [torch.bfloat16, torch.float16]


def _set_default_dtype():
    """Makes bfloat16 the default autocast dtype of loom (PyTorch's default
    for a PrivateUse1 device is float16). PyTorch keeps the setting per
    thread: this sets it for the thread that imports torch_loom."""
    torch.set_autocast_dtype(_DEVICE, DEFAULT_DTYPE)


class autocast(torch.amp.autocast_mode.autocast):
    """``torch.autocast("loom", ...)``; ``dtype`` defaults to the current
    thread's loom autocast dtype (bfloat16 unless changed with
    ``torch.set_autocast_dtype``)."""

    def __init__(self, enabled: bool = True, dtype: torch.dtype = None,
                 cache_enabled: bool = True):
        super().__init__(_DEVICE, enabled=enabled, dtype=dtype,
                         cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler("loom", ...)``. Its unscale and scale update
    run as loom kernels: found_inf and the scale stay on the device."""

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True):
        super().__init__(_DEVICE, init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)


custom_fwd = functools.partial(torch.amp.custom_fwd, device_type=_DEVICE)
custom_bwd = functools.partial(torch.amp.custom_bwd, device_type=_DEVICE)
