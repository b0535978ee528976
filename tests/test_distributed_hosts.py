"""loomccl across machines, simulated on one: ``torchrun`` ranks that name
different hosts (``LOOM_CCL_HOST_ID``) are joined hierarchically, shared
memory inside a host and Gloo between hosts (csrc/distributed/hierarchy.cpp).

- 4 ranks, 2 per host: every collective loomccl runs between hosts
  (all_reduce with each op, broadcast from every root, all_gather and
  all_gather_into_tensor, reduce_scatter and reduce_scatter_tensor,
  all_to_all and all_to_all_single with equal and uneven splits, reduce,
  gather, scatter, barrier, send/recv inside a host and between hosts,
  coalesced calls) against a reference computed on the CPU; reductions of
  random floats are the same bits on every rank and equal the CPU's sum in
  the fixed order (each host's ranks in order, then the hosts in order),
  and reduce_scatter gives each rank all_reduce's bits of its part;
  DDP training of a small GPT ends with the parameters of the same GPT
  trained in one process on the global batch; the calls are asynchronous
  (rank 0's all_reduce and all_gather return before the last rank, on the
  other host, has called them, and wait() gives the right values), and a
  Gloo step that times out raises on the ranks of the host that called;
- 2 ranks, each its own host, on the guarded driver (device memory the host
  cannot address: Gloo gets pinned host copies): the same collectives.
"""

import json
import os
import subprocess
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.dirname(os.path.abspath(__file__))


def _run(nproc, per_host, ddp, driver=None):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LOOM_") and k not in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "RANK",
                                                      "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO_ROOT, "python"), TESTS,
                                         env.get("PYTHONPATH", "")])
    env.update(OMP_NUM_THREADS="1", LOOM_NUM_THREADS="1", TEST_RANKS_PER_HOST=str(per_host),
               TEST_DDP="1" if ddp else "0")
    if driver:
        env["LOOM_DRIVER"] = driver
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         f"--nproc-per-node={nproc}", "--tee=3", os.path.abspath(__file__)],
        env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, f"--- stdout\n{proc.stdout[-8000:]}\n--- stderr\n{proc.stderr[-8000:]}"
    reports = {r["rank"]: r for r in (json.loads(l.split("REPORT ", 1)[1])
                                      for l in proc.stdout.splitlines() if "REPORT " in l)}
    assert sorted(reports) == list(range(nproc)), proc.stdout
    return reports


def _check(reports, hosts):
    for r in reports.values():
        assert r["hosts"] == hosts, r
        assert r["cases"] > 60, r
    # The reductions of random data: the same bits on every rank.
    assert len({r["digest"] for r in reports.values()}) == 1, reports


def test_four_ranks_on_two_hosts():
    reports = _run(4, 2, ddp=True)
    _check(reports, [0, 0, 1, 1])
    assert all(r["ddp"] for r in reports.values())


def test_two_hosts_on_the_guarded_driver():
    reports = _run(2, 1, ddp=False, driver="guarded")
    _check(reports, [0, 1])


# ---------------------------------------------------------------------------
# The ranks (run by torchrun)
# ---------------------------------------------------------------------------

def _collectives(torch, dist, rank, world, dev, hosts):
    import hashlib

    cases = 0
    digest = hashlib.sha256()

    def inputs(r, dtype, n=37):
        # Small integers: every order of summing gives the same value.
        g = torch.Generator().manual_seed(100 + r)
        x = torch.randint(-4, 5, (n,), generator=g)
        return (x.abs() if dtype == torch.uint8 else x).to(dtype)

    def same(got, want, what):
        nonlocal cases
        assert got.dtype == want.dtype, what
        assert torch.equal(got.cpu(), want), f"{what}: {got.cpu()} != {want}"
        cases += 1

    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
              torch.int8, torch.uint8]
    ops = [("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX), ("min", dist.ReduceOp.MIN),
           ("prod", dist.ReduceOp.PRODUCT)]
    for dtype in dtypes:
        xs = [inputs(r, dtype) for r in range(world)]
        # Exact in float64; integers wrap as in the integer types.
        acc = torch.float64 if dtype.is_floating_point else torch.int64
        stack = torch.stack([x.to(acc) for x in xs])
        for name, op in ops:
            want = {"sum": stack.sum(0), "max": stack.amax(0), "min": stack.amin(0),
                    "prod": stack.prod(0)}[name]
            t = xs[rank].to(dev)
            dist.all_reduce(t, op=op)
            same(t, want.to(dtype), f"all_reduce {name} {dtype}")
        if dtype.is_floating_point:
            t = xs[rank].to(dev)
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
            same(t, (stack.sum(0) / world).to(dtype), f"all_reduce avg {dtype}")
            t = xs[rank].to(dev)
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.375))
            same(t, (stack.sum(0) * 0.375).to(dtype), f"all_reduce premul_sum {dtype}")
        # broadcast from every root
        for root in range(world):
            t = xs[rank].to(dev)
            dist.broadcast(t, src=root)
            same(t, xs[root], f"broadcast {dtype} from {root}")
        # all_gather (list and into one tensor)
        outs = [torch.empty_like(xs[0], device=dev) for _ in range(world)]
        dist.all_gather(outs, xs[rank].to(dev))
        for p in range(world):
            same(outs[p], xs[p], f"all_gather {dtype} part {p}")
        out = torch.empty(world * xs[0].numel(), dtype=dtype, device=dev)
        dist.all_gather_into_tensor(out, xs[rank].to(dev))
        same(out, torch.cat(xs), f"all_gather_into_tensor {dtype}")
        # reduce_scatter (tensor and list): part p of every rank's input
        n = 5
        big = [inputs(r + 10, dtype, n * world) for r in range(world)]
        bstack = torch.stack([b.to(acc) for b in big]).sum(0)
        out = torch.empty(n, dtype=dtype, device=dev)
        dist.reduce_scatter_tensor(out, big[rank].to(dev))
        same(out, bstack[rank * n:(rank + 1) * n].to(dtype), f"reduce_scatter_tensor {dtype}")
        out = torch.empty(n, dtype=dtype, device=dev)
        dist.reduce_scatter(out, list(big[rank].to(dev).chunk(world)))
        same(out, bstack[rank * n:(rank + 1) * n].to(dtype), f"reduce_scatter {dtype}")

    # all_to_all: equal parts, and uneven splits (rows rank q sends rank p:
    # (q + 2 p) % 3, zero included), list and single-tensor forms, and the
    # ranks' tensors of 2-D rows.
    for dtype in (torch.float32, torch.int8):
        def block(q, p, rows):  # what rank q sends rank p
            return (torch.arange(rows * 3).view(rows, 3) + 1000 * q + 100 * p).to(dtype)
        eq = torch.cat([block(rank, p, 2) for p in range(world)])
        out = torch.empty(2 * world, 3, dtype=dtype, device=dev)
        dist.all_to_all_single(out, eq.to(dev))
        same(out, torch.cat([block(q, rank, 2) for q in range(world)]), f"all_to_all_single {dtype}")
        rows = lambda q, p: (q + 2 * p) % 3
        send = torch.cat([block(rank, p, rows(rank, p)) for p in range(world)])
        out = torch.empty(sum(rows(q, rank) for q in range(world)), 3, dtype=dtype, device=dev)
        dist.all_to_all_single(out, send.to(dev), [rows(q, rank) for q in range(world)],
                               [rows(rank, p) for p in range(world)])
        same(out, torch.cat([block(q, rank, rows(q, rank)) for q in range(world)]),
             f"all_to_all_single uneven {dtype}")
        outs = [torch.empty(rows(q, rank), 3, dtype=dtype, device=dev) for q in range(world)]
        dist.all_to_all(outs, [block(rank, p, rows(rank, p)).to(dev) for p in range(world)])
        for q in range(world):
            same(outs[q], block(q, rank, rows(q, rank)), f"all_to_all {dtype} from {q}")

    x = inputs(rank, torch.float32)
    # reduce, gather, scatter with a root on the second host
    root = world - 1
    t = x.to(dev)
    dist.reduce(t, dst=root)
    want = torch.stack([inputs(r, torch.float32) for r in range(world)]).sum(0)
    same(t, want if rank == root else x, "reduce")
    gl = [torch.empty_like(x, device=dev) for _ in range(world)] if rank == root else None
    dist.gather(x.to(dev), gl, dst=root)
    if rank == root:
        for p in range(world):
            same(gl[p], inputs(p, torch.float32), f"gather part {p}")
    sl = [inputs(50 + p, torch.float32).to(dev) for p in range(world)] if rank == root else None
    t = torch.empty_like(x, device=dev)
    dist.scatter(t, sl, src=root)
    same(t, inputs(50 + rank, torch.float32), "scatter")
    dist.barrier()

    # send/recv: around the ring (across hosts at the hosts' boundaries) and
    # back, a 2-D tensor each way.
    right, left = (rank + 1) % world, (rank - 1) % world
    got = torch.empty(3, 4, device=dev)
    msg = (torch.arange(12.0) + 100 * rank).view(3, 4)
    if rank % 2 == 0:
        dist.send(msg.to(dev), right)
        dist.recv(got, left)
    else:
        dist.recv(got, left)
        dist.send(msg.to(dev), right)
    same(got, (torch.arange(12.0) + 100 * left).view(3, 4), "send/recv")

    # coalesced (what DDP and FSDP use) and async work with futures
    a, b = x.to(dev), (x * 2).to(dev)
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
    cm.wait()
    same(a, want, "coalesced all_reduce a")
    same(b, want * 2, "coalesced all_reduce b")
    t = x.to(dev)
    fut = dist.all_reduce(t, async_op=True).get_future()
    same(fut.wait()[0], want, "future")

    # Random floats: bitwise the CPU's sum in the fixed order (each host's
    # ranks in order, then the hosts in order), the same on every rank.
    rs = [torch.randn(1000, generator=torch.Generator().manual_seed(7 + r)) for r in range(world)]
    order = None
    for h in sorted(set(hosts)):
        part = None
        for r in (r for r in range(world) if hosts[r] == h):
            part = rs[r].clone() if part is None else part + rs[r]
        order = part if order is None else order + part
    t = rs[rank].to(dev)
    dist.all_reduce(t)
    same(t, order, "all_reduce of random floats in the fixed order")
    digest.update(t.cpu().numpy().tobytes())
    # reduce_scatter exchanges only the parts between hosts, and gives each
    # rank the bits all_reduce gives its part (sum, avg, premul_sum).
    n = 1000 // world
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist._make_nccl_premul_sum(0.3)):
        full = rs[rank][:n * world].to(dev)
        dist.all_reduce(full, op=op)
        part = torch.empty(n, device=dev)
        dist.reduce_scatter_tensor(part, rs[rank][:n * world].to(dev), op=op)
        same(part, full[rank * n:(rank + 1) * n].cpu(), f"reduce_scatter_tensor bits {op}")
        part = torch.empty(n, device=dev)
        dist.reduce_scatter(part, list(rs[rank][:n * world].to(dev).chunk(world)), op=op)
        same(part, full[rank * n:(rank + 1) * n].cpu(), f"reduce_scatter bits {op}")
        digest.update(full.cpu().numpy().tobytes())

    # Asynchronous between hosts: rank 0's all_reduce and all_gather return
    # before the last rank (on another host) has called them, for that rank
    # calls them only once rank 0 said so through the Store, after its calls
    # returned. A call that waited for its peers would never return, and the
    # last rank's wait would time out. wait() then gives the same values.
    from datetime import timedelta

    store = dist.distributed_c10d._get_default_store()
    if rank == world - 1:
        store.wait(["async/go"], timedelta(seconds=120))
    t = rs[rank].to(dev)
    work = dist.all_reduce(t, async_op=True)
    gathered = torch.empty(world * 37, device=dev)
    gwork = dist.all_gather_into_tensor(gathered, x.to(dev), async_op=True)
    if rank == 0:
        store.set("async/go", "1")
    work.wait()
    gwork.wait()
    same(t, order, "all_reduce enqueued before the last rank joined")
    same(gathered, torch.cat([inputs(r, torch.float32) for r in range(world)]),
         "all_gather enqueued before the last rank joined")

    # A Gloo step that times out (the other hosts never join) raises on the
    # ranks of the host that called, through the stream that waited, and
    # breaks the group: nothing hangs.
    group = dist.new_group(list(range(world)), timeout=timedelta(seconds=3), backend="loomccl")
    if hosts[rank] == 0:
        t = x.to(dev)
        work = dist.all_reduce(t, group=group, async_op=True)
        try:
            work.wait()
            t.cpu()
        except RuntimeError as e:
            failed = str(e)
        else:
            failed = None
        assert failed is not None, "a collective whose peers never came did not fail"
        if rank == 0:
            assert "between hosts" in failed, failed
        cases += 1
    dist.destroy_process_group(group)
    return cases, digest.hexdigest()


def _ddp(torch, dist, rank, world, dev):
    from torch.nn.parallel import DistributedDataParallel as DDP
    from test_distributed_torchrun import _batches, _compare, _gpt, _train

    batches = _batches(torch, 3)  # global batch 4: one sample per rank
    reference = _gpt(torch).to(dev)
    _train(torch, reference, batches, dev)
    model = _gpt(torch)
    if rank == 3:  # DDP broadcasts rank 0's weights, across the hosts too
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    ddp = DDP(model.to(dev), bucket_cap_mb=0.002)
    _train(torch, ddp, batches, dev, slice(rank * 4 // world, (rank + 1) * 4 // world))
    _compare(torch, ddp.module.named_parameters(), reference, "DDP")
    for name, p in ddp.module.named_parameters():  # the same bits on every rank
        parts = [torch.empty_like(p) for _ in range(world)]
        dist.all_gather(parts, p.detach().contiguous())
        assert all(torch.equal(parts[0].cpu(), q.cpu()) for q in parts), name
    return True


def _rank_main():
    local_rank = int(os.environ["LOCAL_RANK"])
    os.environ["LOOM_CCL_HOST_ID"] = f"sim{local_rank // int(os.environ['TEST_RANKS_PER_HOST'])}"
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("loom", local_rank)
    dist.init_process_group("loomccl", device_id=dev)
    from torch_loom import _C

    hosts = _C._distributed._topology(dist.group.WORLD._get_backend(dev))[0]
    report = {"rank": rank, "hosts": hosts}
    report["cases"], report["digest"] = _collectives(torch, dist, rank, world, dev, hosts)
    if os.environ.get("TEST_DDP") == "1":
        report["ddp"] = _ddp(torch, dist, rank, world, dev)
    dist.destroy_process_group()
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    _rank_main()
