"""Row maps of torch_loom.tile kernels (rowmap.py): a kernel proved
row-wise declares one, so adaptive eager groups its launches by rows as it
groups the library's softmax and layer norm, with the bytes of running
them one by one; kernels whose programs may touch other rows declare none."""

import sys

import pytest
import torch

import torch_loom.tile as tl
from torch_loom import _C
from torch_loom.tile.examples import layer_norm, matmul, softmax, vector_add

from test_fusion import held, raw

fusion = torch.loom.fusion
tile_jit = sys.modules["torch_loom.tile.jit"]


def entry(kernel, *args, **kwargs):
    """The compiled specialisation these arguments select."""
    kernel.source(*args, **kwargs)
    return kernel._cache[kernel._key(kernel.bind(args, kwargs))]


# ---- kernels that are not row-wise ----------------------------------------------------

@tl.jit
def strided_rows(out_ptr, in_ptr, stride, n_rows, n_cols, BLOCK: tl.constexpr):
    # Triton's tutorial softmax: a program walks rows pid, pid + P, ...
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(in_ptr + row * stride + cols, mask=mask, other=0.0)
        tl.store(out_ptr + row * stride + cols, x * 2.0, mask=mask)


@tl.jit
def neighbour_row(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + (row + 1) * stride + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * stride + cols, x, mask=mask)


@tl.jit
def gathered_row(out_ptr, in_ptr, idx_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    src = tl.load(idx_ptr + row)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + src * stride + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * stride + cols, x, mask=mask)


@tl.jit
def shared_output(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * stride + cols, mask=mask, other=0.0)
    tl.store(out_ptr + cols, x, mask=mask)  # every program writes the same elements


@tl.jit
def conditional_row(out_ptr, in_ptr, stride, n_rows, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    if row < n_rows:
        x = tl.load(in_ptr + row * stride + cols, mask=mask, other=0.0)
        tl.store(out_ptr + row * stride + cols, x, mask=mask)


@tl.jit
def spread_row(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * stride + cols * 2, mask=mask, other=0.0)
    tl.store(out_ptr + row * stride + cols, x, mask=mask)


@tl.jit
def stat_read_back(out_ptr, in_ptr, stat_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * stride + cols, mask=mask, other=0.0)
    tl.store(stat_ptr + row, tl.sum(x, axis=0))
    s = tl.load(stat_ptr + row)
    tl.store(out_ptr + row * stride + cols, x * s, mask=mask)


@tl.jit
def second_axis(out_ptr, in_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0) + tl.program_id(1)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * stride + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * stride + cols, x, mask=mask)


def test_examples_declare_row_maps():
    x = torch.randn(8, 100, device="loom")
    y = torch.empty_like(x)
    w = torch.randn(100, device="loom")
    stat = torch.empty(8, device="loom")
    e = entry(softmax.softmax_kernel, y, x, 100, 100, 100, BLOCK_SIZE=128)
    assert e.rows is not None and sorted(e.rows.rows) == [0, 1] and sorted(e.rows.written) == [0]
    assert e.name + "_rows(" in e.source
    e = entry(layer_norm._layer_norm_fwd, x, y, w, w, stat, stat, 100, 100, 1e-5, BLOCK_N=128)
    assert e.rows is not None
    assert (sorted(e.rows.rows), sorted(e.rows.whole), sorted(e.rows.per_row)) == ([0, 1], [2, 3], [4, 5])
    assert sorted(e.rows.written) == [1, 4, 5]
    e = entry(layer_norm._layer_norm_bwd_dx, y, x, x, w, stat, stat, 100, 100, BLOCK_N=128)
    assert e.rows is not None and sorted(e.rows.per_row) == [4, 5] and sorted(e.rows.written) == [0]


def test_kernels_that_are_not_row_wise_declare_no_map():
    x = torch.randn(8, 100, device="loom")
    y = torch.empty_like(x)
    idx = torch.zeros(8, dtype=torch.int32, device="loom")
    stat = torch.empty(8, device="loom")
    cases = [
        entry(strided_rows, y, x, 100, 8, 100, BLOCK=128),
        entry(neighbour_row, y, x, 100, 100, BLOCK=128),
        entry(gathered_row, y, x, idx, 100, 100, BLOCK=128),
        entry(shared_output, y, x, 100, 100, BLOCK=128),
        entry(conditional_row, y, x, 100, 8, 100, BLOCK=128),
        entry(spread_row, y, x, 100, 50, BLOCK=64),
        entry(stat_read_back, y, x, stat, 100, 100, BLOCK=128),
        entry(second_axis, y, x, 100, 100, BLOCK=128),
        entry(vector_add.add_kernel, x, x, y, 800, BLOCK_SIZE=128),
        entry(layer_norm._layer_norm_bwd_dwdb, w := torch.empty(100, device="loom"), w, x, x, stat, stat,
              100, 8, 100, BLOCK_M=16, BLOCK_N=64),
    ]
    a = torch.randn(64, 64, device="loom")
    matmul.matmul(a, a)
    cases += list(matmul.matmul_kernel._cache.values())
    for e in cases:
        assert e.rows is None and "_rows(" not in e.source, e.name


# ---- the map at run time ------------------------------------------------------------

def _launch_softmax(y, x, grain):
    e = entry(softmax.softmax_kernel, y, x, x.stride(0), y.stride(0), x.shape[1], BLOCK_SIZE=128)
    rows = x.shape[0]
    _C._launch_kernel(e.name, [y, x], [rows, 1, 1, x.stride(0), y.stride(0), x.shape[1]], rows, grain)


def _launch_ln(x, y, w, b, mean, rstd, grain):
    n = x.shape[1]
    e = entry(layer_norm._layer_norm_fwd, x, y, w, b, mean, rstd, n, n, 1e-5, BLOCK_N=128)
    rows = x.shape[0]
    _C._launch_kernel(e.name, [x, y, w, b, mean, rstd], [rows, 1, 1, n, n, 1e-5], rows, grain)


def test_row_kernel_bytes_do_not_depend_on_the_grain():
    """Each program's row gets the same bytes however the programs are split."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(70, 100, generator=g).to("loom")
    w, b = (torch.randn(100, generator=g).to("loom") for _ in range(2))
    outs = []
    for grain in [70, 1, 3, 7, 64]:
        y, y2 = torch.zeros_like(x), torch.zeros_like(x)
        mean, rstd = torch.zeros(70, device="loom"), torch.zeros(70, device="loom")
        with fusion.mode(0):
            _launch_softmax(y, x, grain)
            _launch_ln(x, y2, w, b, mean, rstd, grain)
        outs.append([raw(t) for t in (y, y2, mean, rstd)])
    assert all(torch.equal(a, c) for r in outs[1:] for a, c in zip(outs[0], r))


def _tile_program(x, res, w, b):
    h = layer_norm.layer_norm(x + res, w, b)
    h = torch.tanh(h) * 2.0 + x
    h = softmax.softmax(h) * 3.0
    return torch.sigmoid(layer_norm.layer_norm(h, w, b) - 0.5)


def test_tile_row_kernels_join_the_group(no_fallback):
    """Layer norm and softmax written in tile run inside the group of the
    pointwise ops around them, with the bytes of running them one by one
    (and under verify, which reruns every group unfused and compares)."""
    g = torch.Generator().manual_seed(3)
    rows, d = 96, 130
    x, res = (torch.randn(rows, d, generator=g).to("loom") for _ in range(2))
    w, b = (torch.randn(d, generator=g).to("loom") for _ in range(2))
    _tile_program(x, res, w, b)  # compiled before the hold
    torch.loom.synchronize()
    results = {}
    for mode in (0, 1, "verify"):
        before = fusion.counters()
        with fusion.mode(mode):
            with held():
                y = _tile_program(x, res, w, b)
            results[mode] = y.cpu()
        after = fusion.counters()
        if mode == 0:
            assert after["groups"] == before["groups"]
        if mode == 1:
            # add, layer_norm, tanh, mul, add, softmax, mul, layer_norm, sub, sigmoid
            assert after["groups"] - before["groups"] == 1, (before, after)
            assert after["ops_fused"] - before["ops_fused"] == 10, (before, after)
        if mode == "verify":
            assert after["verified"] > before["verified"]
    assert torch.equal(raw(results[0]), raw(results[1]))
    assert torch.equal(raw(results[0]), raw(results["verify"]))


@pytest.mark.parametrize("mode", [1, "verify"])
def test_repeated_tile_softmax_groups(no_fallback, mode):
    """Several tile softmaxes of one input queued together form one group."""
    x = torch.randn(256, 100, device="loom")
    with fusion.mode(0):
        expected = softmax.softmax(x).cpu()
    before = fusion.counters()
    with fusion.mode(mode):
        with held():
            ys = [softmax.softmax(x) for _ in range(4)]
        got = [y.cpu() for y in ys]
    after = fusion.counters()
    assert all(torch.equal(raw(g_), raw(expected)) for g_ in got)
    if mode == 1:
        assert after["groups"] - before["groups"] == 1 and after["ops_fused"] - before["ops_fused"] == 4
    else:
        assert after["verified"] > before["verified"]


def test_launch_the_map_refuses_runs_unfused(no_fallback):
    """Rows that are not contiguous (a stride other than the row length) or
    longer than the block: the map declines at run time, the launch runs
    as it is, between the groups, with the same bytes."""
    wide = torch.randn(128, 200, device="loom")
    x = wide[:, :100]  # rows 200 apart
    out = {}
    for mode in (0, 1):
        before = fusion.counters()
        with fusion.mode(mode):
            with held():
                y = torch.empty(128, 100, device="loom")
                h = torch.sin(wide) * 2.0
                softmax.softmax_kernel[(128,)](y, x, 200, 100, 100, BLOCK_SIZE=128)
                z = torch.cos(y) + 1.0
            out[mode] = (h.cpu(), z.cpu())
        after = fusion.counters()
        if mode == 1:
            # sin, mul; cos, add: the softmax joins neither
            assert after["ops_fused"] - before["ops_fused"] == 4, (before, after)
            assert after["groups"] - before["groups"] == 2, (before, after)
    assert all(torch.equal(raw(a), raw(b_)) for a, b_ in zip(out[0], out[1]))
