"""torch_loom.tile's examples against loom's library kernels, measured
side by side in one process (alternating, best of several rounds):

    .venv/bin/python -m bench.tile_kernels [--quick] [--only softmax,layer_norm,...]

softmax and layer norm (forward) against torch.softmax / F.layer_norm on
loom, matmul (fp32, 2048^3) against torch.mm on loom, flash attention
against F.scaled_dot_product_attention on loom, and the calling thread's
time per call: a cached kernel launch, the softmax and layer-norm calls. Prints a table (the speed is the median of the
rounds' paired ratios, robust to a machine whose load changes between
rounds; the best times of each are shown too); --json writes it as JSON.

Softmax and layer norm take a different input on each call and keep each
output for as many calls (rings larger than the last-level cache), as
consecutive row ops in a model do. On one input repeated, outputs freed at
once, adaptive eager groups the library's queued launches (their row maps
let them join: chunk k of every call runs back to back, so the input is
read from memory once per group and the output, the same memory each call,
is rewritten in the cache), which a kernel registered at run time cannot
join; the rows marked "same input" show that case."""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import statistics
import time

import torch
import torch.nn.functional as F

import torch_loom  # noqa: F401
from torch_loom import _C
from torch_loom.tile.examples import flash_attention, layer_norm, matmul, softmax, vector_add


def _time(fn, reps):
    fn()
    torch.loom.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.loom.synchronize()
    return (time.perf_counter() - t) / reps


def side_by_side(tile_fn, lib_fn, reps, rounds):
    """Best time of each over `rounds` rounds of `reps` calls of both (in
    alternating order), and the median over the rounds of lib time / tile time measured next
    to each other (on a loaded machine a pair shares its moment's load,
    where the best times of each may come from different moments)."""
    best_t = best_l = float("inf")
    ratios = []
    fused = {"tile": [0, 0], "library": [0, 0]}  # adaptive eager's groups, launches in them

    def timed(which, fn):
        before = torch.loom.fusion.counters()
        t = _time(fn, reps)
        after = torch.loom.fusion.counters()
        fused[which][0] += after["groups"] - before["groups"]
        fused[which][1] += after["ops_fused"] - before["ops_fused"]
        return t

    for k in range(rounds):
        # which goes first alternates: the first of a pair runs measurably
        # slower here (10-15% at 1-2 ms), which would bias a fixed order
        if k % 2:
            l_, t = timed("library", lib_fn), timed("tile", tile_fn)
        else:
            t, l_ = timed("tile", tile_fn), timed("library", lib_fn)
        best_t, best_l = min(best_t, t), min(best_l, l_)
        ratios.append(l_ / t)
    side_by_side.fused = fused
    return best_t, best_l, statistics.median(ratios)


def launch_overhead(n=3000):
    """The calling thread's CPU time per call (what a call costs Python and
    the enqueue, not the kernel, which runs on the workers, nor time the
    thread spent descheduled on a loaded machine): a cached launch of the
    vector add kernel, the registry launch alone, and the softmax and
    layer-norm examples' whole calls beside the library's (64 rows of
    1024: large enough to be queued, not run inline)."""
    x = torch.randn(64, device="loom")
    out = torch.empty_like(x)
    k = vector_add.add_kernel
    k[(1,)](x, x, out, 64, BLOCK_SIZE=64)
    name = next(iter(k._cache.values())).name

    def host_time(fn):
        fn()
        torch.loom.synchronize()
        best = float("inf")
        for _ in range(5):
            t = time.thread_time()
            for _ in range(n):
                fn()
            best = min(best, (time.thread_time() - t) / n)
            torch.loom.synchronize()
        return best

    rows = torch.randn(64, 1024, device="loom")
    w, b = torch.randn(1024, device="loom"), torch.randn(1024, device="loom")
    return {
        "tile launch": host_time(lambda: k[(1,)](x, x, out, 64, BLOCK_SIZE=64)),
        "_launch_kernel": host_time(lambda: _C._launch_kernel(name, [x, x, out], [1, 1, 1, 64], 1, 1)),
        "tile softmax": host_time(lambda: softmax.softmax(rows)),
        "torch.softmax": host_time(lambda: torch.softmax(rows, -1)),
        "tile layer_norm": host_time(lambda: layer_norm.layer_norm(rows, w, b)),
        "F.layer_norm": host_time(lambda: F.layer_norm(rows, (1024,), w, b)),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller shapes, fewer rounds")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--only", help="comma-separated subset of: softmax, layer_norm, matmul, attention, launch")
    args = p.parse_args(argv)
    torch.manual_seed(0)
    rounds = 3 if args.quick else 5
    dev = "loom"
    rows = []

    def add(name, shape, tile_s, lib_s, ratio, baseline, flops=None):
        row = {"kernel": name, "shape": shape, "tile_ms": tile_s * 1e3, "library_ms": lib_s * 1e3,
               "tile/library speed": ratio, "best/best": lib_s / tile_s, "baseline": baseline,
               "fused (groups, ops)": getattr(side_by_side, "fused", None)}
        if flops:
            row["tile_gflops"] = flops / tile_s / 1e9
            row["library_gflops"] = flops / lib_s / 1e9
        rows.append(row)

    only = set(args.only.split(",")) if args.only else {"softmax", "layer_norm", "matmul", "attention", "launch"}
    m, n = (1024, 1024) if args.quick else (4096, 1024)
    x = torch.randn(m, n, device=dev)
    # a new input per call, and its output kept as long: the rings span
    # 64 MB or more, beyond the last-level cache, so no call finds an
    # earlier one's input or output in the cache (a model keeps its
    # activations; an output freed at once would hand the next call the
    # same memory, still cached when the runtime groups the queued calls)
    ring = [x] + [torch.randn(m, n, device=dev) for _ in range(max(4, (64 << 20) // (4 * m * n)))]
    nxt = itertools.cycle(ring).__next__
    kept = collections.deque(maxlen=len(ring))
    keep = kept.append
    # rounds of 1-2 ms pairs: 60 of them keep the median steady on a
    # machine whose load changes from one round to the next
    if "softmax" in only:
        t, l_, r = side_by_side(lambda: keep(softmax.softmax(nxt())),
                                lambda: keep(torch.softmax(nxt(), -1)), 5, 12 * rounds)
        add("softmax", [m, n], t, l_, r, "torch.softmax")
        t, l_, r = side_by_side(lambda: softmax.softmax(x), lambda: torch.softmax(x, -1), 5, 12 * rounds)
        add("softmax same input", [m, n], t, l_, r, "torch.softmax, fused repeats")

    if "layer_norm" in only:
        w, b = torch.randn(n, device=dev), torch.randn(n, device=dev)
        t, l_, r = side_by_side(lambda: keep(layer_norm.layer_norm(nxt(), w, b)),
                                lambda: keep(F.layer_norm(nxt(), (n,), w, b)), 5, 12 * rounds)
        add("layer_norm fwd", [m, n], t, l_, r, "F.layer_norm")
        t, l_, r = side_by_side(lambda: layer_norm.layer_norm(x, w, b), lambda: F.layer_norm(x, (n,), w, b), 5,
                                12 * rounds)
        add("layer_norm same input", [m, n], t, l_, r, "F.layer_norm, fused repeats")

    kept.clear()

    if "matmul" in only:
        s = 1024 if args.quick else 2048
        a, bb = torch.randn(s, s, device=dev), torch.randn(s, s, device=dev)
        t, l_, r = side_by_side(lambda: matmul.matmul(a, bb), lambda: torch.mm(a, bb), 1, rounds)
        add("matmul fp32", [s, s, s], t, l_, r, "torch.mm", flops=2 * s ** 3)
        t, l_, r = side_by_side(lambda: matmul.matmul(a, bb, "gelu"), lambda: F.gelu(torch.mm(a, bb)), 1, rounds)
        add("matmul+gelu fp32", [s, s, s], t, l_, r, "F.gelu(torch.mm)", flops=2 * s ** 3)

    if "attention" in only:
        z, h, sq, d = (1, 4, 512, 64) if args.quick else (2, 8, 1024, 64)
        q, k, v = (torch.randn(z, h, sq, d, device=dev) for _ in range(3))
        for causal in (False, True):
            t, l_, r = side_by_side(lambda: flash_attention.attention(q, k, v, causal),
                                    lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), 1,
                                    2 * rounds)
            add(f"flash attention{' causal' if causal else ''}", [z, h, sq, d], t, l_, r,
                "F.scaled_dot_product_attention")

    host = launch_overhead() if "launch" in only else None
    print(f"{'kernel':<24}{'shape':<22}{'tile ms':>10}{'library ms':>12}{'tile/lib speed':>16}{'best/best':>11}")
    for r in rows:
        print(f"{r['kernel']:<24}{str(r['shape']):<22}{r['tile_ms']:>10.3f}{r['library_ms']:>12.3f}"
              f"{r['tile/library speed']:>16.2f}{r['best/best']:>11.2f}")
    print("tile/lib speed: median over alternating rounds of library time / tile time; "
          "best/best: the best library time over the best tile time")
    print("adaptive eager during the rounds (torch.loom.fusion.counters: groups, launches in them): " +
          "; ".join(f"{r['kernel']}: tile {tuple(r['fused (groups, ops)']['tile'])}, "
                    f"library {tuple(r['fused (groups, ops)']['library'])}"
                    for r in rows if r["fused (groups, ops)"]))
    if host is not None:
        print("calling thread's CPU time per call (us): " +
              ", ".join(f"{k} {v * 1e6:.1f}" for k, v in host.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "host_us": None if host is None else {k: v * 1e6 for k, v in host.items()}},
                      f, indent=1)


if __name__ == "__main__":
    main()
