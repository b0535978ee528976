"""What the Python wrappers Inductor generates for loom graphs call at run
time. Kept apart from the code generators so that loading a compiled graph
imports nothing of Inductor's codegen."""

from __future__ import annotations

import torch

from .. import _C


def wait_for_stream(device_index: int) -> None:
    """Waits until the current stream of loom device `device_index` has
    executed what was enqueued on it: a kernel that runs on the calling
    thread then reads what that work wrote, and overwrites nothing it still
    reads. Raises the stream's asynchronous error, if any."""
    torch.loom.current_stream(device_index).synchronize()
