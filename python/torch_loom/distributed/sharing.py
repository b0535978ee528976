"""Loom tensors through ``torch.multiprocessing``: queues, pipes, pools.

PyTorch 2.13 shares CPU and CUDA tensors only (a loom tensor fails in
``_share_fd_``). These reducers, registered with
``multiprocessing.reduction.ForkingPickler`` in front of PyTorch's own, send
a loom tensor as a descriptor of its storage's shared region (a memfd: mode
0600, no path, handed over a unix socket by ``multiprocessing``'s own
descriptor passing) plus its view (dtype, offset, sizes, strides); every
other tensor and storage goes to PyTorch's reducer unchanged.

Semantics are CUDA IPC's: the receiver's tensor is the same memory, so
in-place changes on either side are seen by the other once their streams
are synchronized; the memory stays valid in each process as long as that
process holds a tensor on it (a producer dropping its tensor does not pull
it from under the consumers), and is freed when the last holder lets go or
exits. The first send of a storage moves it into a shared region (one
device copy, as ``share_memory_()`` does for a CPU tensor); later sends of
it copy nothing. In a process of a multi-process job (``LOCAL_WORLD_SIZE``
> 1, or once it joined a loomccl group of several ranks) or with
``LOOM_SHAREABLE_MEMORY=1``, the host driver backs its memory with memfds,
and a storage alone in its allocator segment (large tensors) becomes the
region where it lies: no copy at all (``_C._distributed.sharing_counts()``:
storages shared in place, storages moved, bytes moved). The device's
memory must be host-addressable (not under
``LOOM_DRIVER=guarded``).
"""

import os
from multiprocessing.reduction import ForkingPickler

import torch

_installed = False


def _rebuild_loom_tensor(cls, fd_holder, nbytes, device, dtype, offset, size, stride,
                         requires_grad):
    from .. import _C

    region, used = nbytes  # the region's bytes, the storage's
    fd = fd_holder.detach()
    try:
        base = _C._distributed.open_shared_storage(fd, region, device, used)
    finally:
        os.close(fd)
    t = torch.empty(0, dtype=dtype, device=base.device)
    t.set_(base.untyped_storage(), offset, size, stride)
    if cls is torch.nn.Parameter:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad)


def _rebuild_empty(cls, device, dtype, size, stride, requires_grad):
    t = torch.empty_strided(size, stride, dtype=dtype, device=torch.device("loom", device))
    if cls is torch.nn.Parameter:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad)


def reduce_loom_tensor(t):
    """ForkingPickler's reducer of a loom tensor (zero copy, see above)."""
    from multiprocessing.reduction import DupFd

    from .. import _C

    if t.requires_grad and not t.is_leaf:
        raise RuntimeError(
            "torch.multiprocessing (loom): cannot send a tensor that requires grad and is not "
            "a leaf; detach() it first, as for CPU and CUDA tensors")
    cls = torch.nn.Parameter if isinstance(t, torch.nn.Parameter) else torch.Tensor
    args = (t.dtype, t.storage_offset(), tuple(t.size()), tuple(t.stride()), t.requires_grad)
    if t.untyped_storage().nbytes() == 0:
        return (_rebuild_empty, (cls, t.device.index, t.dtype, tuple(t.size()), tuple(t.stride()),
                                 t.requires_grad))
    fd, region, device, used = _C._distributed.share_storage(t.detach())
    return (_rebuild_loom_tensor, (cls, DupFd(fd), (region, used), device) + args)


def _rebuild_loom_storage(fd_holder, nbytes, device):
    return _rebuild_loom_tensor(torch.Tensor, fd_holder, nbytes, device, torch.uint8, 0,
                                (nbytes[1],), (1,), False).untyped_storage()


def _rebuild_empty_storage(device):
    return torch.UntypedStorage(0, device=torch.device("loom", device))


def reduce_loom_storage(storage):
    from multiprocessing.reduction import DupFd

    from .. import _C

    if storage.nbytes() == 0:
        return (_rebuild_empty_storage, (storage.device.index,))
    base = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
    fd, region, device, used = _C._distributed.share_storage(base)
    return (_rebuild_loom_storage, (DupFd(fd), (region, used), device))


def _chain(loom_reduce, previous, is_loom):
    def reduce(obj):
        return loom_reduce(obj) if is_loom(obj) else previous(obj)

    reduce.__wrapped__ = previous
    return reduce


def _tensor_is_loom(t):
    return t.device.type == "loom" and type(t) in (torch.Tensor, torch.nn.Parameter)


def _storage_is_loom(s):
    return s.device.type == "loom"


def install() -> None:
    """Puts loom's reducers in front of PyTorch's for every tensor and
    untyped storage class (typed storages go through their untyped one).
    Idempotent; cheap (a few dictionary entries)."""
    global _installed
    if _installed:
        return
    import torch.multiprocessing  # noqa: F401  (PyTorch's reducers first)

    reducers = ForkingPickler._extra_reducers
    tensor_classes = {torch.Tensor, torch.nn.Parameter, *torch._tensor_classes}
    for cls in tensor_classes:
        if cls in reducers:
            reducers[cls] = _chain(reduce_loom_tensor, reducers[cls], _tensor_is_loom)
    if torch.UntypedStorage in reducers:
        reducers[torch.UntypedStorage] = _chain(reduce_loom_storage,
                                                reducers[torch.UntypedStorage], _storage_is_loom)
    _installed = True
