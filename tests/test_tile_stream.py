"""Stores past the cache: a fused group tells a member whose outputs no
later member touches, when such outputs outgrow the last-level cache,
that nothing will read them from it (LOOM_KERNEL_HINT_STREAM); a
torch_loom.tile kernel then stores its rows' whole chunks of 16 floats
with non-temporal stores (loom_tile_put16), with the same bytes."""

import torch

import torch_loom.tile as tl
from torch_loom import _C
from torch_loom.compiler import jit as cjit
from torch_loom.tile.examples import layer_norm

from test_fusion import held, raw

fusion = torch.loom.fusion

HINT_CACHED, HINT_STREAM = 1, 2

# A row kernel written in C that copies its rows and records, per row, the
# hints its launch got (a per-row output: the group defers it to scratch
# and copies it in after the chunks).
_PROBE = r"""
#include <stdint.h>
#include "loom/kernel_abi.h"
struct loom_row_map { int64_t n; uint32_t row_tensors, whole_tensors, written; };
int loom_test_hint_probe(const loom_kernel_args *A, int64_t begin, int64_t end) {
  const int64_t n = A->scalars[0].i;
  const float *x = (const float *)A->tensors[0].data;
  float *y = (float *)A->tensors[1].data;
  int32_t *h = (int32_t *)A->tensors[2].data;
  for (int64_t r = begin; r < end; ++r) {
    for (int64_t j = 0; j < n; ++j) y[r * n + j] = x[r * n + j] + 1.0f;
    h[r] = (int32_t)A->hints;
  }
  return 0;
}
int loom_test_hint_probe_rows(const loom_kernel_args *A, struct loom_row_map *out) {
  if (A->num_tensors != 3 || A->num_scalars != 1 || A->scalars[0].i <= 0) return 0;
  out->n = A->scalars[0].i;
  out->row_tensors = 1u << 0 | 1u << 1;
  out->whole_tensors = 0;
  out->written = 1u << 1 | 1u << 2;
  return 1;
}
"""
_probe_ready = []


def _probe(x, y):
    if not _probe_ready:
        job = _C._jit_compile_async(_PROBE, [("loom_test_hint_probe", "loom_test_hint_probe")], False, [],
                                    cjit.include_dir(), ["loom_test_hint_probe_rows"])
        cjit.CompileJob(job, ["loom_test_hint_probe"]).result()
        _probe_ready.append(True)
    rows, n = x.shape
    h = torch.zeros(rows, dtype=torch.int32, device="loom")
    _C._launch_kernel("loom_test_hint_probe", [x, y, h], [n], rows, 16)
    return h


def _hints(calls):
    """Runs calls() (a list of per-row hint tensors) queued as one group."""
    torch.loom.synchronize()
    before = fusion.counters()
    with fusion.mode(1):
        with held():
            hs = calls()
        got = [sorted(set(h.cpu().tolist())) for h in hs]
    after = fusion.counters()
    assert after["groups"] - before["groups"] == 1, (before, after)
    return got


def test_the_group_hints_streaming_outputs_nothing_reads(no_fallback):
    rows, n = 1024, 2048  # 8 MB a tensor
    xs = [torch.randn(rows, n, device="loom") for _ in range(5)]
    ys = [torch.empty(rows, n, device="loom") for _ in range(5)]
    # five independent row ops, 40 MB of outputs kept: each member streams
    assert _hints(lambda: [_probe(x, y) for x, y in zip(xs, ys)]) == [[HINT_STREAM]] * 5
    # 16 MB of them: they may stay in the cache for the next op
    assert _hints(lambda: [_probe(x, y) for x, y in zip(xs[:2], ys[:2])]) == [[0]] * 2
    # one output overwritten call after call: kept in the cache
    assert _hints(lambda: [_probe(x, ys[0]) for x in xs]) == [[0]] * 5
    # a chain: what the next member reads stays cached, the last one's
    # output (8 MB) alone is not enough to stream
    assert _hints(lambda: [_probe(xs[0], ys[0]), _probe(ys[0], ys[1])]) == [[HINT_CACHED], [0]]
    # in place (a member reads where it writes): not streamed
    assert _hints(lambda: [_probe(y, y) for y in ys]) == [[0]] * 5
    # and the values are those of running them one by one
    with fusion.mode(1):
        with held():
            for x, y in zip(xs, ys):
                _probe(x, y)
    assert all(torch.equal(raw(y), raw(x + 1.0)) for x, y in zip(xs, ys))


def test_row_stores_are_streamable_in_the_generated_code():
    x = torch.randn(8, 256, device="loom")
    y, w = torch.empty_like(x), torch.randn(256, device="loom")
    stat = torch.empty(8, device="loom")
    src = layer_norm._layer_norm_fwd.source(x, y, w, w, stat, stat, 256, 256, 1e-5, BLOCK_N=256)
    # the unmasked version of y's store: 16 lanes computed, then put
    assert src.count("loom_tile_put16(&p1[") == 1
    assert "LOOM_TILE_FENCE(A);" in src
    # a store whose lanes are not consecutive has none, nor its kernel's fence
    src = _every_other.source(y, x, 256, BLOCK=128)
    assert "loom_tile_put16(&" not in src and "LOOM_TILE_FENCE(A);" not in src


@tl.jit
def _every_other(out_ptr, in_ptr, n, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n // 2
    x = tl.load(in_ptr + tl.program_id(0) * n + cols * 2, mask=mask, other=0.0)
    tl.store(out_ptr + tl.program_id(0) * n + cols * 2, x * 3.0, mask=mask)


def _layer_norms(xs, w, b, offset):
    """The layer-norm kernel over each x into a new output starting
    `offset` floats into its memory (0: on a cache line; 4: off it, where
    the chunks of 16 take the ordinary store)."""
    rows, n = xs[0].shape
    outs = []
    for x in xs:
        y = torch.empty(rows * n + offset, device="loom")[offset:].view(rows, n)
        mean, rstd = (torch.empty(rows, device="loom") for _ in range(2))
        layer_norm._layer_norm_fwd[(rows,)](x, y, w, b, mean, rstd, n, n, 1e-5, BLOCK_N=n)
        outs += [y, mean, rstd]
    return outs


def test_streamed_tile_rows_have_the_bytes_of_one_by_one(no_fallback):
    """Tile layer norms on new inputs, grouped with 40 MB of outputs
    (streamed), against LOOM_FUSE=0."""
    g = torch.Generator().manual_seed(11)
    rows, n = 1024, 2048
    xs = [torch.randn(rows, n, generator=g).to("loom") for _ in range(5)]
    w, b = (torch.randn(n, generator=g).to("loom") for _ in range(2))
    for offset in (0, 4):
        out = {}
        for mode in (0, 1):
            before = fusion.counters()
            with fusion.mode(mode):
                with held():
                    ys = _layer_norms(xs, w, b, offset)
                out[mode] = [raw(t) for t in ys]
            after = fusion.counters()
            if mode == 1:
                assert after["groups"] - before["groups"] == 1, (before, after)
                assert after["ops_fused"] - before["ops_fused"] == 5, (before, after)
        assert all(torch.equal(a, c) for a, c in zip(out[0], out[1]))
