"""torch.distributed on loom, measured: ``python -m bench.distributed [--out DIR]``.

One run, two ranks on this machine (started here as ``torchrun`` would:
LOCAL_RANK / LOCAL_WORLD_SIZE, so each rank uses loom:<rank> and its share
of the cores), then one rank alone:

- all_reduce (sum, float32) bus bandwidth from 4 KiB to 256 MiB: loomccl on
  loom tensors and Gloo on CPU tensors of the same data, in the same
  process group ("cpu:gloo,loom:loomccl");
- the copy bandwidth limit: both ranks copying buffers of the same size at
  once (loomccl's staged all_reduce moves each byte through shared memory:
  copy in, reduce, copy out);
- DDP training step time of a small GPT on loom on a fixed global batch:
  one process with the whole batch, and two ranks with half each;
- the same two ranks as two simulated hosts (``LOOM_CCL_HOST_ID`` differs):
  loomccl's path between machines (Gloo between the hosts on CPU views of
  the loom tensors, the hosts' results combined by loomccl's kernel).

``--shareable-memory 0|1`` runs every process with that
``LOOM_SHAREABLE_MEMORY`` (device memory from anonymous memory with
transparent huge pages, or from memfds, whose pages are 4 KiB where the
system gives shared memory no huge pages); by default the processes follow
the default rule (README).

Bus bandwidth is NCCL's: bytes x 2 (n - 1) / n / time, so that it compares
with the copy bandwidth whatever the world size. Each time is the slowest
rank's. Writes DIR/distributed.json and DIR/DISTRIBUTED.md (DIR: a new
temporary directory unless given) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]


def _repeat(fn, sync, budget_s, agree, min_iters=3, max_iters=200):
    """Seconds per call of fn: the median of about budget_s of calls after a
    timed warm-up. `agree` makes every rank run the same number of calls
    (a collective must be called as often on each)."""
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    first = time.perf_counter() - t0
    iters = int(agree(min(max_iters, max(min_iters, budget_s / max(first, 1e-6)))))
    times = []
    for _ in range(iters):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def _rank(rank, world, store_dir, args):
    import torch
    import torch.distributed as dist

    dev = torch.device("loom", rank)
    torch.loom.set_device(dev)
    dist.init_process_group("cpu:gloo,loom:loomccl", init_method=f"file://{store_dir}/store",
                            rank=rank, world_size=world)

    def slowest(seconds):
        t = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # over Gloo, on the CPU
        return t.item()

    def barrier_sync():
        torch.loom.synchronize()

    out = {"rank": rank, "world": world, "allreduce": [], "ddp_step_s": None}
    sizes = [s for s in SIZES if s <= args.max_bytes]
    if world > 1:
        for size in sizes:
            n = size // 4
            host = torch.arange(n, dtype=torch.float32) * (rank + 1) / n
            loom_t = host.to(dev)
            budget = args.budget_s
            t_loom = slowest(_repeat(lambda: dist.all_reduce(loom_t), barrier_sync, budget, slowest))
            t_gloo = slowest(_repeat(lambda: dist.all_reduce(host), lambda: None, budget, slowest))
            # Both ranks copy at once: what the staged collective competes for.
            src, dst = torch.empty(n), torch.empty(n)
            src.fill_(1.0)
            t_copy = slowest(_repeat(lambda: dst.copy_(src), lambda: None, budget, slowest))
            bus = size * 2 * (world - 1) / world
            out["allreduce"].append({"bytes": size, "loomccl_s": t_loom, "gloo_s": t_gloo,
                                     "copy_s": t_copy, "loomccl_busbw_GBs": bus / t_loom / 1e9,
                                     "gloo_busbw_GBs": bus / t_gloo / 1e9,
                                     "copy_GBs": size / t_copy / 1e9})
            del host, loom_t, src, dst

    # DDP training steps of a small GPT, global batch split over the ranks.
    sys.path.insert(0, str(ROOT / "tests"))
    from compile_models import GPT
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = GPT(vocab=256, d=args.width, heads=4, layers=args.layers, max_seq=64).to(dev)
    ddp = DDP(model) if world > 1 else model
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(1)
    per_rank = args.batch // world
    x = torch.randint(0, 256, (args.batch, 64), generator=g)[rank * per_rank:(rank + 1) * per_rank]
    x = x.to(dev)

    def step():
        opt.zero_grad()
        logits = ddp(x)
        torch.nn.functional.cross_entropy(logits.reshape(-1, 256), x.reshape(-1)).backward()
        opt.step()

    out["ddp_step_s"] = slowest(_repeat(step, barrier_sync, args.budget_s * 4, slowest, min_iters=5))
    out["params"] = sum(p.numel() for p in model.parameters())
    dist.destroy_process_group()
    if rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


def _launch(world, args, hosts=False):
    """Runs the ranks; `hosts`: each rank names its own host."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), str(ROOT), env.get("PYTHONPATH", "")])
    if args.shareable_memory is not None:
        env["LOOM_SHAREABLE_MEMORY"] = args.shareable_memory
    env.update(LOCAL_WORLD_SIZE=str(world), OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // world)))
    passed = ["--max-bytes", str(args.max_bytes), "--budget-s", str(args.budget_s), "--batch",
              str(args.batch), "--width", str(args.width), "--layers", str(args.layers)]
    with tempfile.TemporaryDirectory() as store:
        procs = [subprocess.Popen([sys.executable, "-m", "bench.distributed", "--rank", str(r),
                                   "--world", str(world), "--store", store] + passed,
                                  env={**env, "LOCAL_RANK": str(r),
                                       **({"LOOM_CCL_HOST_ID": f"bench-host{r}"} if hosts else {})},
                                  cwd=ROOT,
                                  stdout=subprocess.PIPE, text=True)
                 for r in range(world)]
        outs = [p.communicate()[0] for p in procs]
        for r, p in enumerate(procs):
            if p.returncode != 0:
                raise SystemExit(f"bench.distributed: rank {r} of {world} failed ({p.returncode})")
    line = [l for l in outs[0].splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def _markdown(two, one, meta, hosts):
    lines = [f"# torch.distributed on loom ({meta['when']}, {meta['cpus']} CPUs, "
             f"load average {meta['load_before']} before / {meta['load_after']} after, "
             f"LOOM_SHAREABLE_MEMORY {meta['shareable_memory']})", "",
             "all_reduce, float32 sum, 2 ranks; bus bandwidth in GB/s (median of repeats, slowest rank)",
             "", "| bytes | loomccl (loom) | Gloo (CPU) | loomccl / Gloo | copy, both ranks at once "
             "| loomccl, 2 simulated hosts |",
             "|---:|---:|---:|---:|---:|---:|"]
    for r, h in zip(two["allreduce"], hosts["allreduce"]):
        size = r["bytes"]
        label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        lines.append(f"| {label} | {r['loomccl_busbw_GBs']:.2f} | {r['gloo_busbw_GBs']:.2f} | "
                     f"{r['gloo_s'] / r['loomccl_s']:.2f}x | {r['copy_GBs']:.2f} | "
                     f"{h['loomccl_busbw_GBs']:.2f} |")
    lines += ["", f"DDP training step, GPT of {one['params']} parameters, global batch "
              f"{meta['batch']} x 64 tokens on loom:",
              "", "| processes | step (ms) |", "|---:|---:|",
              f"| 1 | {one['ddp_step_s'] * 1e3:.1f} |", f"| 2 | {two['ddp_step_s'] * 1e3:.1f} |",
              f"| 2, each its own simulated host | {hosts['ddp_step_s'] * 1e3:.1f} |"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m bench.distributed", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--max-bytes", type=int, default=SIZES[-1])
    p.add_argument("--budget-s", type=float, default=0.3, help="seconds of repeats per measurement")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--shareable-memory", choices=["0", "1"], default=None,
                   help="LOOM_SHAREABLE_MEMORY of every process (default: the default rule)")
    p.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--world", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--store", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.rank is not None:
        return _rank(args.rank, args.world, args.store, args)

    load_before = round(os.getloadavg()[0], 2)
    two = _launch(2, args)
    one = _launch(1, args)
    hosts = _launch(2, args, hosts=True)
    meta = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
            "load_before": load_before, "load_after": round(os.getloadavg()[0], 2),
            "batch": args.batch, "shareable_memory": args.shareable_memory or "default"}
    out = args.out or Path(tempfile.mkdtemp(prefix="loom_bench_distributed_"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "distributed.json").write_text(json.dumps({"meta": meta, "two_ranks": two, "one_rank": one,
                                                      "two_hosts": hosts},
                                                     indent=1))
    md = _markdown(two, one, meta, hosts)
    (out / "DISTRIBUTED.md").write_text(md)
    print(md)
    print(f"written to {out}")


if __name__ == "__main__":
    main()
