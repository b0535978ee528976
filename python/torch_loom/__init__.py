"""torch_loom: the loom accelerator as a native PyTorch device."""

try:
    from . import _C  # noqa: F401
except ImportError:  # not built yet: `make build`
    _C = None


def _autoload():
    """Entry point of the ``torch.backends`` group, run by ``import torch``.

    Importing this package has already registered the device."""
