"""torch.distributed on loom as users run it: ``torchrun --nproc-per-node=2``.

One torchrun job (this file run as a script by ``torch.distributed.run``)
checks, on each rank:

- devices per process: ``torch.loom.device_count()`` is the local world
  size, the rank's own device ``loom:<LOCAL_RANK>`` gets the rank's share of
  the host threads and the other device only its executor, and it is the
  current device before any ``set_device``;
- ``init_process_group(device_id=loom:<LOCAL_RANK>)`` with no backend picks
  loomccl, and ``split_group`` makes working subgroups;
- a small GPT trained with DDP (rank 1 starting from other weights, several
  buckets; both ranks end with the same bits), with FSDP2 (``fully_shard``) and with
  DTensor tensor parallelism (``parallelize_module``, colwise and rowwise,
  over a 2-rank DeviceMesh on ``loom``) ends with the parameters of the same
  GPT trained in one process on the global batch;
- DTensor random ops: a replicated tensor draws the same values on both
  ranks, a sharded one different values per shard, each drawn at the offset
  DTensor's tracker chose through torch.loom's RNG state, and the ranks'
  generators stay in step;
- functional collectives (all_reduce, all_gather_tensor,
  reduce_scatter_tensor) in a function compiled with ``fullgraph=True`` by
  Inductor and by the loom backend give eager's results.

The environment variables part checks ``LOCAL_WORLD_SIZE`` handling without
torchrun.
"""

import json
import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.dirname(os.path.abspath(__file__))


def _env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LOOM_") and k not in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "RANK",
                                                      "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO_ROOT, "python"), TESTS,
                                         env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    return env


def _reports(stdout):
    # torchrun prefixes each rank's lines ("[default0]:").
    return {r["rank"]: r for r in (json.loads(l.split("REPORT ", 1)[1]) for l in stdout.splitlines()
                                   if "REPORT " in l)}


def test_torchrun_two_ranks():
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         "--tee=3", os.path.abspath(__file__)],
        env=_env(), cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr[-6000:]}"
    reports = _reports(proc.stdout)
    assert sorted(reports) == [0, 1], proc.stdout
    cores = os.cpu_count()
    for rank, r in reports.items():
        assert r["device_count"] == 2
        # The rank's share of the cores on its own device, one executor on the other.
        share = max(1, cores // 2 + (rank < cores % 2))
        assert r["threads"][rank] == share and r["threads"][1 - rank] == 1, r
        assert r["backend"] == "loomccl"
        assert r["default_device"] == [rank, f"loom:{rank}"], r
    # The random draws of a replicated DTensor agree, a sharded one's shards differ.
    assert reports[0]["replicate_draw"] == reports[1]["replicate_draw"]
    assert reports[0]["shard_draw"] != reports[1]["shard_draw"]
    assert reports[0]["after_draw"] == reports[1]["after_draw"]


def test_devices_and_threads_from_environment():
    # LOOM_NUM_DEVICES and LOOM_NUM_THREADS win over torchrun's variables;
    # the threads still go to loom:<LOCAL_RANK>.
    code = ("import torch; n = torch.loom.device_count(); "
            "print(n, [torch.loom.get_device_properties(i).num_threads for i in range(n)]); "
            "print(torch.loom.current_device(), torch.ones(1, device='loom').device)")
    env = {**_env(), "LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOOM_NUM_DEVICES": "3",
           "LOOM_NUM_THREADS": "3"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr
    # With no set_device, the process runs on loom:<LOCAL_RANK>.
    assert out.stdout.split() == ["3", "[1,", "3,", "1]", "1", "loom:1"], out.stdout


# ---------------------------------------------------------------------------
# The ranks (run by torchrun)
# ---------------------------------------------------------------------------

def _gpt(torch):
    from compile_models import GPT

    torch.manual_seed(0)
    return GPT(vocab=32, d=16, heads=2, layers=2, max_seq=8)


def _batches(torch, steps):
    g = torch.Generator().manual_seed(3)
    return [(torch.randint(0, 32, (4, 8), generator=g), torch.randint(0, 32, (4, 8), generator=g))
            for _ in range(steps)]


def _loss(torch, model, x, y):
    logits = model(x)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def _train(torch, model, batches, dev, part=None, lr=0.05):
    # foreach=False: the TP model mixes DTensor and plain parameters.
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, foreach=False)
    for x, y in batches:
        if part is not None:
            x, y = x[part], y[part]
        opt.zero_grad()
        _loss(torch, model, x.to(dev), y.to(dev)).backward()
        opt.step()


def _compare(torch, got, want, what):
    for (name, p), q in zip(got, want.parameters()):
        p = p.full_tensor() if hasattr(p, "full_tensor") else p
        torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), rtol=1e-4, atol=1e-5,
                                   msg=lambda m: f"{what} {name}: {m}")


def _rank_main():
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    from torch.nn.parallel import DistributedDataParallel as DDP

    local_rank, world = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    report = {"rank": local_rank, "device_count": torch.loom.device_count(),
              "threads": [torch.loom.get_device_properties(i).num_threads
                          for i in range(torch.loom.device_count())]}
    dev = torch.device("loom", local_rank)
    # Before any set_device, as on CUDA under torchrun: loom:<LOCAL_RANK>,
    # the device with the rank's threads.
    report["default_device"] = [torch.loom.current_device(), str(torch.ones(1, device="loom").device)]
    torch.loom.set_device(dev)
    dist.init_process_group(device_id=dev)
    report["backend"] = dist.get_backend()  # the default group's backend for loom

    # split_group: each rank alone, then both again.
    single = dist.split_group(split_ranks=[[0], [1]])
    t = torch.full((3,), float(local_rank + 1), device=dev)
    dist.all_reduce(t, group=single)
    assert t.cpu().tolist() == [local_rank + 1.0] * 3
    both = dist.split_group(split_ranks=[[0, 1]])
    dist.all_reduce(t, group=both)
    assert t.cpu().tolist() == [3.0] * 3

    batches = _batches(torch, 3)
    half = slice(local_rank * 2, local_rank * 2 + 2)
    reference = _gpt(torch).to(dev)
    _train(torch, reference, batches, dev)

    # DDP: each rank half the global batch, several gradient buckets. Rank 1
    # starts from other weights: DDP broadcasts rank 0's.
    model = _gpt(torch)
    if local_rank == 1:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    ddp = DDP(model.to(dev), bucket_cap_mb=0.002)
    _train(torch, ddp, batches, dev, half)
    _compare(torch, ddp.module.named_parameters(), reference, "DDP")
    for name, p in ddp.module.named_parameters():  # the same bits on both ranks
        both = [torch.empty_like(p) for _ in range(world)]
        dist.all_gather(both, p.detach().contiguous())
        assert torch.equal(both[0].cpu(), both[1].cpu()), name

    # FSDP2.
    model = _gpt(torch).to(dev)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    _train(torch, model, batches, dev, half)
    _compare(torch, model.named_parameters(), reference, "FSDP2")

    # Tensor parallelism: every block's MLP split column-wise then row-wise;
    # both ranks see the whole batch.
    mesh = init_device_mesh("loom", (world,))
    model = _gpt(torch).to(dev)
    for block in model.blocks:
        parallelize_module(block, mesh, {"fc": ColwiseParallel(), "out": RowwiseParallel()})
    assert type(model.blocks[0].fc.weight).__name__ == "DTensor"
    assert model.blocks[0].fc.weight.to_local().shape == (32, 16)
    _train(torch, model, batches, dev)
    _compare(torch, model.named_parameters(), reference, "TP")

    # DTensor random ops.
    torch.manual_seed(5)
    rep = distribute_tensor(torch.empty(8, device=dev), mesh, [Replicate()])
    rep.uniform_()
    shard = distribute_tensor(torch.empty(8, device=dev), mesh, [Shard(0)])
    shard.uniform_()
    report["replicate_draw"] = rep.to_local().cpu().tolist()
    report["shard_draw"] = shard.to_local().cpu().tolist()
    report["after_draw"] = torch.rand(4, device=dev).cpu().tolist()
    # Offset-based (DTensor's OffsetBasedRNGTracker through torch.loom's RNG
    # state): the replicated draw took offsets [0, 8), the shard of rank r
    # starts at 8 + 4 r, the generators go on from 16 on both ranks.
    torch.manual_seed(5)
    state = torch.loom.get_rng_state()
    state[-8:] = torch.tensor([8 + 4 * local_rank], dtype=torch.int64).view(torch.uint8)
    torch.loom.set_rng_state(state)
    assert torch.empty(4, device=dev).uniform_().cpu().tolist() == report["shard_draw"]
    state[-8:] = torch.tensor([16], dtype=torch.int64).view(torch.uint8)
    torch.loom.set_rng_state(state)
    assert torch.rand(4, device=dev).cpu().tolist() == report["after_draw"]
    full = shard.full_tensor().cpu()
    assert len(set(full.tolist())) == 8

    # Functional collectives in compiled code (no graph break), with
    # Inductor and with the loom backend.
    import torch.distributed._functional_collectives as fc

    def step(x):
        y = fc.all_reduce(x * 2, "sum", dist.group.WORLD)
        z = fc.all_gather_tensor(y + 1, 0, dist.group.WORLD)
        return fc.reduce_scatter_tensor(z * z, "sum", 0, dist.group.WORLD)

    x = torch.arange(6.0, device=dev) + local_rank
    want = step(x).cpu()
    y = (2 * (torch.arange(6.0) * 2 + 1)) + 1  # sum over ranks of 2x, plus one
    assert torch.equal(want, 2 * y * y), (want, y)
    for backend in ("inductor", "loom"):
        torch._dynamo.reset()
        got = torch.compile(step, backend=backend, fullgraph=True)(x)
        assert got.device == dev
        assert torch.equal(got.cpu(), want), (backend, got.cpu(), want)

    dist.destroy_process_group()
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    _rank_main()
