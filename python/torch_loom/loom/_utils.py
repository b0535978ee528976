import torch

from .. import _C


def _get_device_index(device, optional: bool = False) -> int:
    """Index of a loom device given as int, str, torch.device or None (the
    current device when ``optional``)."""
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "loom":
            raise ValueError(f"Expected a loom device, but got: {device}")
        device = device.index
    if device is None:
        if not optional:
            raise ValueError("Expected a loom device with an index, got None")
        return _C._get_device()
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(
            f"Expected a loom device index (int, str or torch.device), got {device!r}"
        )
    return device
