"""torch.distributed on loom with the loomccl backend, two processes.

Each test starts its ranks as fresh interpreters running this file (the
``__main__`` part below: ``python tests/test_distributed.py <job> <rank>
<world> <dir>``), joined through a FileStore, as torchrun's processes would
be through theirs. A rank asserts what it sees and exits non-zero on a
failure; the test checks every rank's exit and output.

- every collective x dtypes x ops against a reference computed on the CPU
  from every rank's inputs (bitwise: the reductions run in rank order),
  async work and futures, coalescing, the error of an unsupported op;
- (DDP, FSDP2 and tensor-parallel training: tests/test_distributed_torchrun.py);
- sharing a storage copies it before the process joins a group of several
  ranks and shares it in place after (LOOM_SHAREABLE_MEMORY's default);
- init_process_group() with no backend, "cpu:gloo,loom:loomccl",
  device_id=loom:<rank> with split_group and new_group;
- a rank killed mid-job makes the other raise ("rank 1 died") well before
  the timeout, and no segment (mapping, descriptor, socket name) remains.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORLD = 2


# ---------------------------------------------------------------------------
# The launcher (pytest side)
# ---------------------------------------------------------------------------

def _launch(job, world=WORLD, timeout=240):
    """Runs `job` on `world` ranks; returns [(returncode, stdout, stderr)]."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LOOM_") and k != "LOCAL_WORLD_SIZE"}
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO_ROOT, "python"), env.get("PYTHONPATH", "")])
    # Two devices per process, one thread each: the machine has two cores.
    env.update(LOOM_NUM_DEVICES="2", LOOM_NUM_THREADS="1", OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        procs = [
            subprocess.Popen([sys.executable, os.path.abspath(__file__), job, str(r), str(world), tmp],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=REPO_ROOT)
            for r in range(world)
        ]
        out = []
        for p in procs:
            try:
                stdout, stderr = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                stdout, stderr = p.communicate()
                stderr += "\n(timed out)"
            out.append((p.returncode, stdout, stderr))
        return out


def _check_ok(results):
    for rank, (code, stdout, stderr) in enumerate(results):
        assert code == 0, f"rank {rank} exited with {code}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"


def _report(stdout):
    lines = [l for l in stdout.splitlines() if l.startswith("REPORT ")]
    assert lines, stdout
    return json.loads(lines[-1][len("REPORT "):])


def test_collectives_match_cpu_reference():
    results = _launch("collectives")
    _check_ok(results)
    reports = [_report(r[1]) for r in results]
    # Every rank checked its cases (the roots of reduce and gather more),
    # and the all_reduce results agree bit for bit across ranks.
    assert min(r["cases"] for r in reports) > 150, reports
    assert reports[0]["digest"] == reports[1]["digest"]


def test_init_variants_and_split_group():
    _check_ok(_launch("init"))


def _loomccl_socket_names():
    with open("/proc/net/unix") as f:
        return [l for l in f.read().splitlines() if f"@loomccl/{os.getuid()}/" in l]


def test_killed_rank_fails_peer_and_leaves_nothing():
    results = _launch("killed")
    code1, _, _ = results[1]
    assert code1 == -signal.SIGKILL
    _check_ok(results[:1])
    report = _report(results[0][1])
    assert "rank 1 died" in report["error"], report
    # The survivor had the segment mapped while the job ran, and nothing of
    # it after destroying its group.
    assert report["mapped_during"] and not report["mapped_after"]
    assert not report["fds_after"]
    assert not _loomccl_socket_names()


# ---------------------------------------------------------------------------
# The ranks (run as scripts)
# ---------------------------------------------------------------------------

def _init(backend, rank, world, tmp, name="store", timeout_s=60, **kwargs):
    import datetime

    import torch.distributed as dist

    path = os.path.join(tmp, name)
    dist.init_process_group(backend, init_method=f"file://{path}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s), **kwargs)


def _inputs(dtype, rank, shape, torch):
    """Rank `rank`'s input: reproducible anywhere, with values whose order
    of summation matters (floats) or that overflow in a product (ints)."""
    g = torch.Generator().manual_seed(1234 + rank)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) < 0.4
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=g, dtype=torch.float64) * 100).to(dtype)
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    lo, hi = (0, 12) if dtype == torch.uint8 else (-11, 12)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def _reference(xs, op, torch, world, factor=0.375):
    """The reduction of the ranks' CPU tensors `xs` in rank order, in
    loomccl's arithmetic (loom/kernels/ccl.h)."""
    import torch.distributed as dist

    dtype = xs[0].dtype
    if dtype == torch.bool:
        acc = xs[0].clone()
        for x in xs[1:]:
            acc = acc | x if op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX) else acc & x
        return acc
    if dtype.is_complex:
        real = [torch.view_as_real(x) for x in xs]
        return torch.view_as_complex(_reference(real, op, torch, world, factor).contiguous())
    acc_type = torch.float64 if dtype == torch.float64 else (
        torch.float32 if dtype.is_floating_point else torch.int64)
    vals = [x.to(acc_type) for x in xs]
    if op == "premul":
        vals = [v * factor for v in vals]
    acc = vals[0]
    for v in vals[1:]:
        if op == dist.ReduceOp.PRODUCT:
            acc = acc * v
        elif op == dist.ReduceOp.MAX:
            acc = torch.maximum(acc, v)
        elif op == dist.ReduceOp.MIN:
            acc = torch.minimum(acc, v)
        else:
            acc = acc + v
    if op == dist.ReduceOp.AVG:
        acc = acc / world if acc_type != torch.int64 else torch.div(acc, world, rounding_mode="trunc")
    return acc.to(dtype)


def _job_collectives(rank, world, tmp):
    import hashlib

    import torch
    import torch.distributed as dist

    _init("loomccl", rank, world, tmp)
    assert dist.get_backend() == "loomccl"
    dev = torch.device("loom", 0)
    R = dist.ReduceOp
    cases = 0
    digest = hashlib.sha256()

    def same(got, want, what):
        nonlocal cases
        got = got.cpu()
        assert got.dtype == want.dtype and torch.equal(got, want), (
            f"{what}: got {got.flatten()[:8]} want {want.flatten()[:8]}")
        cases += 1

    float_types = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
    int_types = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
    ops = [R.SUM, R.AVG, R.PRODUCT, R.MIN, R.MAX, "premul"]
    shape = (5, 1001)  # with the default buffer: one chunk; big cases below take several
    for dtype in float_types + int_types + [torch.bool, torch.complex64]:
        xs = [_inputs(dtype, r, shape, torch) for r in range(world)]
        for op in ops:
            if op == "premul" and not (dtype.is_floating_point or dtype.is_complex):
                continue
            if dtype == torch.bool and op in (R.AVG, "premul"):
                continue
            if dtype.is_complex and op not in (R.SUM, R.AVG, "premul"):
                continue
            rop = dist._make_nccl_premul_sum(0.375) if op == "premul" else op
            want = _reference(xs, op, torch, world)
            t = xs[rank].to(dev)
            dist.all_reduce(t, op=rop)
            same(t, want, f"all_reduce {dtype} {op}")
            digest.update(t.cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
            # reduce_scatter_tensor: rank r gets part r of the reduction.
            if dtype != torch.complex64:
                out = torch.empty(1001, dtype=dtype, device=dev)
                inp = xs[rank].reshape(-1)[: 1001 * world].to(dev)
                dist.reduce_scatter_tensor(out, inp, op=rop)
                want_rs = _reference([x.reshape(-1)[: 1001 * world] for x in xs], op, torch, world)
                same(out, want_rs[rank * 1001:(rank + 1) * 1001], f"reduce_scatter_tensor {dtype} {op}")
            # reduce to rank 1.
            t = xs[rank].to(dev)
            dist.reduce(t, dst=1, op=rop)
            if rank == 1:
                same(t, want, f"reduce {dtype} {op}")
        # A premul_sum factor given as a tensor on the device.
        if dtype.is_floating_point:
            t = xs[rank].to(dev)
            dist.all_reduce(t, op=dist._make_nccl_premul_sum(torch.tensor([0.375], device=dev)))
            same(t, _reference(xs, "premul", torch, world), f"premul tensor {dtype}")

    # Data movement: every dtype, chunked sizes (beyond one 4 MiB chunk).
    for dtype, n in [(torch.float32, 1_500_001), (torch.int64, 1000), (torch.bfloat16, 777),
                     (torch.bool, 999), (torch.complex128, 300)]:
        xs = [_inputs(dtype, r, (n,), torch) for r in range(world)]
        mine = xs[rank].to(dev)
        outs = [torch.empty_like(mine) for _ in range(world)]
        dist.all_gather(outs, mine)
        for r in range(world):
            same(outs[r], xs[r], f"all_gather {dtype} {n} from {r}")
        flat = torch.empty(world * n, dtype=dtype, device=dev)
        dist.all_gather_into_tensor(flat, mine)
        same(flat, torch.cat(xs), f"all_gather_into_tensor {dtype}")
        for root in range(world):
            t = xs[rank].to(dev)
            dist.broadcast(t, src=root)
            same(t, xs[root], f"broadcast {dtype} from {root}")
        gathered = [torch.empty_like(mine) for _ in range(world)] if rank == 0 else None
        dist.gather(mine, gathered, dst=0)
        if rank == 0:
            for r in range(world):
                same(gathered[r], xs[r], f"gather {dtype}")
        parts = [_inputs(dtype, 100 + r, (n,), torch) for r in range(world)]
        out = torch.empty_like(mine)
        dist.scatter(out, [p.to(dev) for p in parts] if rank == 1 else None, src=1)
        same(out, parts[rank], f"scatter {dtype}")

    # reduce_scatter with a list of inputs, float32 sum over several chunks.
    n = 1_200_000
    xs = [[_inputs(torch.float32, 10 * r + p, (n,), torch) for p in range(world)] for r in range(world)]
    out = torch.empty(n, device=dev)
    dist.reduce_scatter(out, [x.to(dev) for x in xs[rank]])
    same(out, _reference([xs[r][rank] for r in range(world)], R.SUM, torch, world), "reduce_scatter")

    # all_to_all_single with uneven splits (rows), and all_to_all of lists.
    sends = {(s, d): (s + 1) * (d + 2) * 3 for s in range(world) for d in range(world)}
    cols = 7
    data = {s: _inputs(torch.float32, 50 + s, (sum(sends[s, d] for d in range(world)), cols), torch)
            for s in range(world)}
    in_splits = [sends[rank, d] for d in range(world)]
    out_splits = [sends[s, rank] for s in range(world)]
    out = torch.empty(sum(out_splits), cols, device=dev)
    dist.all_to_all_single(out, data[rank].to(dev), out_splits, in_splits)
    want = torch.cat([data[s].split([sends[s, d] for d in range(world)])[rank] for s in range(world)])
    same(out, want, "all_to_all_single uneven")
    ins = [_inputs(torch.int32, 60 + rank * world + d, (d + 3, 2), torch).to(dev) for d in range(world)]
    outs = [torch.empty(rank + 3, 2, dtype=torch.int32, device=dev) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for s in range(world):
        same(outs[s], _inputs(torch.int32, 60 + s * world + rank, (rank + 3, 2), torch), f"all_to_all from {s}")

    # send/recv and isend/irecv (larger than a channel: several chunks).
    big = _inputs(torch.float32, 70, (700_000,), torch)
    if rank == 0:
        dist.send(big.to(dev), dst=1)
        back = torch.empty_like(big, device=dev)
        dist.recv(back, src=1)
        same(back, big * 2, "recv")
    else:
        got = torch.empty_like(big, device=dev)
        dist.recv(got, src=0)
        same(got, big, "send/recv")
        dist.send(got * 2, dst=0)
    peer = 1 - rank
    mine = _inputs(torch.float16, 80 + rank, (3000,), torch).to(dev)
    theirs = torch.empty(3000, dtype=torch.float16, device=dev)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, peer), dist.P2POp(dist.irecv, theirs, peer)])
    for req in reqs:
        req.wait()
    same(theirs, _inputs(torch.float16, 80 + peer, (3000,), torch), "batch_isend_irecv")

    # Async work: wait() orders the current stream after the collective, no
    # host wait; the future's value is the output.
    xs = [_inputs(torch.float32, 90 + r, (4096,), torch) for r in range(world)]
    t = xs[rank].to(dev)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    same(t * 1, sum(xs), "async all_reduce then compute")
    # wait() does not wait on the host: rank 1 joins only after rank 0's
    # wait() returned and found the collective still running.
    store = dist.distributed_c10d._get_default_store()
    t = xs[rank].to(dev)
    if rank == 0:
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        pending = not work.is_completed()
        store.set("rank0_waited", "1")
        assert pending, "wait() returned after the collective completed"
    else:
        store.get("rank0_waited")
        dist.all_reduce(t)
    same(t, sum(xs), "wait() without a host wait")
    t = xs[rank].to(dev)
    fut = dist.all_reduce(t, async_op=True).get_future()
    same(fut.wait()[0], sum(xs), "future value")
    # Coalescing: the fast path (allreduce_coalesced) and the generic one.
    from torch.distributed.distributed_c10d import _coalescing_manager
    ts = [_inputs(torch.float32, 95 + r, (100 + i,), torch) for i, r in enumerate([rank] * 3)]
    loomed = [x.to(dev) for x in ts]
    with _coalescing_manager(device=dev):
        for x in loomed:
            dist.all_reduce(x)
    for i, x in enumerate(loomed):
        same(x, sum(_inputs(torch.float32, 95 + r, (100 + i,), torch) for r in range(world)), "coalesced")
    a = _inputs(torch.float32, 97 + rank, (64,), torch).to(dev)
    b = _inputs(torch.int64, 98 + rank, (32,), torch).to(dev)
    with _coalescing_manager(device=dev, async_ops=True) as cm:  # each call joins one work
        dist.broadcast(a, src=0)
        dist.broadcast(b, src=1)
    cm.wait()
    same(a, _inputs(torch.float32, 97, (64,), torch), "coalesced broadcast from 0")
    same(b, _inputs(torch.int64, 99, (32,), torch), "coalesced broadcast from 1")
    # The native coalesced entry points FSDP2 uses.
    pg = dist.group.WORLD
    outs = [torch.empty(world * 10, device=dev), torch.empty(world * 3, device=dev)]
    ins = [torch.full((10,), float(rank), device=dev), torch.full((3,), 1.0 + rank, device=dev)]
    pg.allgather_into_tensor_coalesced(outs, ins).wait()
    same(outs[0], torch.arange(world).repeat_interleave(10).float(), "allgather_into_tensor_coalesced")
    rs_out = [torch.empty(4, device=dev), torch.empty(2, device=dev)]
    rs_in = [torch.arange(4 * world, device=dev).float(), torch.ones(2 * world, device=dev)]
    pg.reduce_scatter_tensor_coalesced(rs_out, rs_in).wait()
    same(rs_out[0], torch.arange(4 * world).float()[rank * 4:(rank + 1) * 4] * world, "reduce_scatter_tensor_coalesced")

    # Errors name the op; unsupported ops say so.
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int32, device=dev), op=R.BAND)
        raise AssertionError("BAND did not raise")
    except (NotImplementedError, RuntimeError) as e:
        assert "loomccl" in str(e) and "not supported" in str(e), e
    try:
        dist.all_reduce(torch.ones(3))
        raise AssertionError("a CPU tensor did not raise")
    except (RuntimeError, ValueError) as e:
        assert "cpu" in str(e).lower(), e
    dist.barrier()
    dist.destroy_process_group()
    print("REPORT " + json.dumps({"cases": cases, "digest": digest.hexdigest()}))


def _job_init(rank, world, tmp):
    import torch
    import torch.distributed as dist

    from torch_loom import _C

    # 0. Not yet in a job (no torchrun, no group): the first send of a
    # storage moves it into a shared region, one copy (LOOM_SHAREABLE_MEMORY
    # unset, README); once this process joined a loomccl group of several
    # ranks, new device memory is shareable and a send shares it in place.
    alone = torch.ones(4 << 20, device="loom")
    _C._distributed.share_storage(alone)
    assert _C._distributed.sharing_counts() == (0, 1, 16 << 20), _C._distributed.sharing_counts()

    # 1. No backend: loom is the accelerator, so loomccl.
    _init(None, rank, world, tmp, name="s1")
    torch.loom.empty_cache()
    joined = torch.ones(8 << 20, device="loom")
    ptr = joined.data_ptr()
    _C._distributed.share_storage(joined)
    assert _C._distributed.sharing_counts() == (1, 1, 16 << 20), _C._distributed.sharing_counts()
    assert joined.data_ptr() == ptr and _C._distributed.is_shared_storage(joined)
    assert joined.sum().item() == 8 << 20
    del alone, joined
    from torch_loom._C._distributed import ProcessGroupLoom
    assert dist.get_backend_config() == "loom:loomccl", dist.get_backend_config()
    assert isinstance(dist.group.WORLD._get_backend(torch.device("loom")), ProcessGroupLoom)
    t = torch.full((4,), rank + 1.0, device="loom")
    dist.all_reduce(t)
    assert t.cpu().tolist() == [3.0] * 4
    dist.destroy_process_group()

    # 2. CPU tensors through gloo, loom tensors through loomccl, one group.
    _init("cpu:gloo,loom:loomccl", rank, world, tmp, name="s2")
    c = torch.full((3,), rank + 1.0)
    dist.all_reduce(c)
    l = torch.full((3,), rank + 1.0, device="loom")
    dist.all_reduce(l)
    assert c.tolist() == [3.0] * 3 and l.cpu().tolist() == [3.0] * 3
    assert dist.get_backend_config() == "cpu:gloo,loom:loomccl", dist.get_backend_config()
    dist.destroy_process_group()

    # 3. Bound to loom:<rank> (eager), then split_group and new_group.
    import torch_loom.distributed

    dev = torch.device("loom", rank)
    torch.loom.set_device(dev)
    # With loomccl's options: a small staging buffer, so that collectives
    # take many chunks (split_group copies the options to the children).
    _init("loomccl", rank, world, tmp, name="s3", device_id=dev,
          pg_options=torch_loom.distributed.Options(buffer_bytes=65536))
    assert dist.get_backend() == "loomccl"
    assert dist.group.WORLD._get_backend(dev).options.buffer_bytes == 65536
    big = torch.arange(300_000, dtype=torch.float64, device=dev) * (rank + 1)
    dist.all_reduce(big)
    assert torch.equal(big.cpu(), torch.arange(300_000, dtype=torch.float64) * 3)
    sub = dist.split_group(split_ranks=[[0, 1]])
    t = torch.full((5,), 2.0 * rank, device=dev)
    dist.all_reduce(t, group=sub)
    assert t.cpu().tolist() == [2.0] * 5
    solo = dist.split_group(split_ranks=[[0], [1]])
    t = torch.full((2,), 5.0, device=dev)
    dist.all_reduce(t, group=solo, op=dist.ReduceOp.AVG)
    assert dist.get_world_size(solo) == 1 and t.cpu().tolist() == [5.0, 5.0]
    grp = dist.new_group([0, 1])
    t = torch.arange(3.0, device=dev) + rank
    dist.all_reduce(t, group=grp, op=dist.ReduceOp.MAX)
    assert t.cpu().tolist() == [1.0, 2.0, 3.0]
    # Functional collectives (what traced code calls) on the same backend.
    import torch.distributed._functional_collectives as fc
    y = fc.all_reduce(torch.full((4,), rank + 1.0, device=dev), "sum", dist.group.WORLD)
    assert y.cpu().tolist() == [3.0] * 4
    dist.barrier()
    dist.destroy_process_group()
    print("REPORT {}")


def _segment_mapped():
    with open("/proc/self/maps") as f:
        return "memfd:loomccl" in f.read()


def _segment_fds():
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "memfd:loomccl" in os.readlink(f"/proc/self/fd/{fd}"):
                found.append(fd)
        except OSError:
            pass
    return found


def _job_killed(rank, world, tmp):
    import torch
    import torch.distributed as dist

    # A timeout far longer than the test: only the death can end the wait.
    _init("loomccl", rank, world, tmp, timeout_s=600)
    t = torch.ones(1000, device="loom")
    dist.all_reduce(t)
    assert t.cpu()[0].item() == 2.0
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    mapped_during = _segment_mapped()
    error = ""
    try:
        for _ in range(1000):
            dist.all_reduce(t)
            t.cpu()
    except RuntimeError as e:
        error = str(e)
    dist.destroy_process_group()
    print("REPORT " + json.dumps({"error": error, "mapped_during": mapped_during,
                                  "mapped_after": _segment_mapped(), "fds_after": _segment_fds()}))


if __name__ == "__main__":
    job, rank, world, tmp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    {"collectives": _job_collectives, "init": _job_init,
     "killed": _job_killed}[job](rank, world, tmp)
