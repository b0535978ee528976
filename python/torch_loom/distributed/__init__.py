"""torch.distributed on loom: the ``loomccl`` backend.

``loomccl`` runs the collectives of loom tensors between the processes of
one machine (``runtime/ccl``: a private shared segment, the reductions as
loom kernels in rank order, asynchronous on a communication stream). Ranks
on several machines (grouped by host name, or by ``LOOM_CCL_HOST_ID``
where set) are joined hierarchically: shared memory inside each machine,
Gloo between the machines' first ranks (CPU views of loom memory, or pinned
host copies where the device's memory is not host memory), reductions in
a fixed order (each machine's ranks in rank order, then the machines in
order); those calls finish before they return. It is
registered for the ``loom`` device, so that::

    dist.init_process_group("loomccl")                 # loom tensors only
    dist.init_process_group("cpu:gloo,loom:loomccl")   # CPU tensors too
    dist.init_process_group()                          # loom is the accelerator
    dist.init_process_group(device_id=torch.device("loom", local_rank))

all pick it. Registration only adds names to torch.distributed's tables (no
import of anything else); the backend's code runs when a process group is
made. Pass :class:`Options` as ``pg_options`` to set its staging buffer.

:mod:`.sharing` lets ``torch.multiprocessing`` pass loom tensors between
processes without copying them (installed with the backend).
"""

BACKEND = "loomccl"


def Options(timeout=None, buffer_bytes: int = 0):
    """loomccl's backend options: ``timeout`` (a ``timedelta``; default
    torch.distributed's) and ``buffer_bytes``, the staging bytes per rank
    and chunk (0: 4 MiB)."""
    from .. import _C

    opts = _C._distributed.Options() if timeout is None else _C._distributed.Options(timeout)
    opts.buffer_bytes = buffer_bytes
    return opts


_gloo_factory_set = False


def _make_gloo(store, rank, size, timeout):
    """A Gloo process group between hosts (loomccl's inter-host part)."""
    import torch.distributed as dist

    return dist.ProcessGroupGloo(store, rank, size, timeout)


def _create_backend(dist_opts, backend_options):
    """The factory torch.distributed calls (extended API) for each group."""
    from .. import _C

    global _gloo_factory_set
    if not _gloo_factory_set:
        _C._distributed._set_gloo_factory(_make_gloo)
        _gloo_factory_set = True

    opts = backend_options
    if not isinstance(opts, _C._distributed.Options):
        opts = _C._distributed.Options(dist_opts.timeout)
    else:
        opts._timeout = dist_opts.timeout
    opts.group_name = dist_opts.group_id
    opts.global_ranks_in_group = list(dist_opts.global_ranks_in_group)
    return _C._distributed.ProcessGroupLoom(
        dist_opts.store, dist_opts.group_rank, dist_opts.group_size, opts
    )


def install() -> None:
    """Registers loomccl with torch.distributed. ``import torch`` has
    imported torch.distributed already (2.13), and registering only adds the
    name to its tables: it costs nothing at import."""
    import torch.distributed as dist

    from . import sharing

    sharing.install()  # loom tensors through torch.multiprocessing
    if not dist.is_available() or BACKEND in dist.Backend.backend_list:
        return
    # devices must be a list: a bare string is iterated character by character.
    dist.Backend.register_backend(BACKEND, _create_backend, extended_api=True, devices=["loom"])
