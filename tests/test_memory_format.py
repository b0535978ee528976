"""Memory formats on loom as on the CPU, over PyTorch's OpInfo samples.

Every float32 OpInfo sample with a 4-d (5-d) tensor is rewritten with those
tensors in channels_last (channels_last_3d) and run on the CPU and on loom:
every tensor output must have the CPU's values and the CPU's strides (those
that matter: dimensions of size 1 carry none), whether loom ran the op
natively or on its CPU fallback. The backward sweep does the same for the
gradients, with output gradients laid out as the CPU's outputs.

`make test` runs the quick sweep: the first such sample of every op (and
the backward of the nn ops). LOOM_MEMFMT_FULL=1 (`make test-memory-format`)
runs every sample of every op, forward and backward.

An op whose format loom still gets wrong is listed in EXPECTED_WRONG with
the reason; the sweep asserts that it is still wrong there, so that a fix
is noticed (and the entry removed).
"""

import itertools
import os
import sys

import pytest
import torch
from torch._prims_common import check_significant_strides
from torch.utils._pytree import tree_leaves

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from tests.conformance import catalog  # noqa: E402
from tests.conformance.compare import ItemRun, assert_same, copy_sample, copy_tensor, to_cpu  # noqa: E402

DEVICE = "loom"
FULL = os.environ.get("LOOM_MEMFMT_FULL", "") not in ("", "0")

# Ops (OpInfo full names) whose loom results still differ in layout from
# the CPU's on channels-last samples: {name: why}. Each must still differ.
EXPECTED_WRONG = {}
# The same for gradients (first samples; with LOOM_MEMFMT_FULL the entries
# of EXPECTED_WRONG_BACKWARD_FULL too).
EXPECTED_WRONG_BACKWARD = {}

EXPECTED_WRONG_BACKWARD_FULL = {
    "linalg.matrix_norm": "the nuclear norm's gradient over dims (-1, 0) of one 2x2x2x2 sample "
                          "differs from the CPU's in values, in either layout (its strides "
                          "match): the sample's matrices have a zero singular value, where the "
                          "gradient U V^T depends on which singular vectors each SVD picks for "
                          "it (LAPACK's and loom's Jacobi pick differently)",
}


def expected_reason(name, table):
    """Why `name` is expected to differ (listed in `table`), or None."""
    return table.get(name)


# Ops the sweeps do not run: the CPU itself fails on channels-last samples.
CPU_FAILS = {
    "_segment_reduce.lengths": "the CPU's segment_reduce reads channels-last data as if it were "
                               "contiguous: its forward returns memory it never wrote and its "
                               "backward crashes the process",
}
CPU_FAILS["_segment_reduce.offsets"] = CPU_FAILS["_segment_reduce.lengths"]

# What the quick sweep must have compared (a sample with a channels_last
# tensor ran on both sides): convolution, normalization, pooling,
# upsampling, pointwise ops of one to three tensors, reductions keeping
# their dimensions, softmax, cat, copies, *_like and conversions.
REQUIRED = [
    "nn.functional.conv2d", "nn.functional.conv_transpose2d", "nn.functional.conv3d",
    "nn.functional.batch_norm", "nn.functional.group_norm", "nn.functional.layer_norm",
    "nn.functional.instance_norm",
    "nn.functional.max_pool2d", "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d",
    "nn.functional.adaptive_max_pool2d", "nn.functional.max_pool3d",
    "nn.functional.interpolate.nearest", "nn.functional.interpolate.bilinear",
    "nn.functional.interpolate.bicubic", "nn.functional.upsample_nearest",
    "nn.functional.relu", "sigmoid", "exp", "neg", "add", "mul", "where", "addcmul", "lerp",
    "clamp", "sum", "mean", "amax", "var", "softmax", "log_softmax", "cat", "stack",
    "clone", "contiguous", "empty_like", "zeros_like", "ones_like", "full_like", "rand_like",
    "randn_like", "to",
    "fft.fft", "fft.fft2", "fft.fftn", "fft.hfft", "fft.hfft2", "fft.hfftn", "fft.ifft",
    "fft.ifft2", "fft.ifftn", "fft.ihfft", "fft.ihfft2", "fft.ihfftn", "fft.irfft",
    "fft.irfft2", "fft.irfftn", "fft.rfft", "fft.rfft2", "fft.rfftn",
]

# The nn ops whose backward the quick sweep checks (all ops in the full sweep).
QUICK_BACKWARD = [
    "nn.functional.conv2d", "nn.functional.conv_transpose2d", "nn.functional.conv3d",
    "nn.functional.batch_norm", "nn.functional.group_norm", "nn.functional.layer_norm",
    "nn.functional.max_pool2d", "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d",
    "nn.functional.interpolate.nearest", "nn.functional.interpolate.bilinear",
    "nn.functional.relu", "nn.functional.gelu", "add", "mul", "softmax", "cat", "sum",
    "nn.functional.pad.constant", "nn.functional.pad.reflect",
    "fft.fft", "fft.hfft", "fft.ifft", "fft.ihfft", "fft.irfft", "fft.rfft",
]

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()), reason="loom device not built")


# --------------------------------------------------------------------------
# Samples


def _format_of(t):
    return {4: torch.channels_last, 5: torch.channels_last_3d}.get(t.dim())


def _to_format(t):
    """`t` with its 4-d/5-d tensors laid out channels-last (other values as they are)."""
    if not isinstance(t, torch.Tensor) or t.layout != torch.strided or _format_of(t) is None:
        return t
    out = t.detach().contiguous(memory_format=_format_of(t))
    return out.requires_grad_(t.requires_grad)


def _has_format_tensor(sample):
    return any(
        isinstance(t, torch.Tensor) and t.layout == torch.strided and _format_of(t) is not None
        and t.numel() > 1 and not t.is_contiguous(memory_format=_format_of(t))
        for t in tree_leaves((sample.input, sample.args, sample.kwargs))
    )


def _lift(sample, everywhere):
    """`sample` with its input (list of inputs) of 1 to 3 dimensions given
    leading dimensions of 2 up to 4-d (its values repeated), and with
    `everywhere` every other tensor of the input's shape too; None if there
    is no such input."""
    from torch.testing._internal.opinfo.core import SampleInput

    inputs = sample.input if isinstance(sample.input, (list, tuple)) else [sample.input]
    shapes = {tuple(t.shape) for t in inputs if isinstance(t, torch.Tensor)}
    if not inputs or not all(isinstance(t, torch.Tensor) and 1 <= t.dim() <= 3 and t.numel() > 1
                             for t in inputs):
        return None

    def up(t):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) not in shapes or t.layout != torch.strided:
            return t
        out = t.detach().expand((2,) * (4 - t.dim()) + tuple(t.shape)).clone()
        return out.requires_grad_(t.requires_grad)

    def walk(x, f):
        if isinstance(x, (list, tuple)):
            return type(x)(walk(v, f) for v in x)
        if isinstance(x, dict):
            return {k: walk(v, f) for k, v in x.items()}
        return f(x)

    keep = (lambda t: t) if not everywhere else up
    return SampleInput(walk(sample.input, up), args=walk(sample.args, keep),
                       kwargs=walk(sample.kwargs, keep),
                       output_process_fn_grad=sample.output_process_fn_grad,
                       broadcasts_input=sample.broadcasts_input, name=sample.name + "_lifted")


def format_samples(op, requires_grad):
    """Yields (index, sample, channels-last sample): the OpInfo's samples
    with a 4-d/5-d tensor that channels-last changes, or if it has none, its
    samples lifted to 4-d (_lift: every tensor of the input's shape, then
    the input alone)."""
    torch.manual_seed(0)
    plain, n = [], 0
    for s in op.sample_inputs("cpu", torch.float32, requires_grad=requires_grad):
        if _has_format_tensor(s):
            yield n, s, s.transform(_to_format)
            n += 1
        elif n == 0:
            plain.append(s)
    if n:
        return
    for s in plain:
        for lifted in (_lift(s, True), _lift(s, False)):
            if lifted is not None and _has_format_tensor(lifted):
                yield n, lifted, lifted.transform(_to_format)
                n += 1


# --------------------------------------------------------------------------
# Comparison


def layout_difference(dev, cpu):
    """None if every tensor of `dev` has the strides of its twin in `cpu`
    (the strides that matter), else a description of the first difference."""
    d, c = tree_leaves(dev), tree_leaves(cpu)
    if len(d) != len(c):
        return "%d outputs, the CPU has %d" % (len(d), len(c))
    for i, (x, y) in enumerate(zip(d, c)):
        if not isinstance(y, torch.Tensor) or y.layout != torch.strided:
            continue
        if not isinstance(x, torch.Tensor) or x.shape != y.shape:
            return "output %d: %r vs the CPU's %r" % (
                i, tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__, tuple(y.shape))
        ok, _ = check_significant_strides(x, y, only_cuda=False)
        if not ok:
            return "output %d of shape %s: strides %s, the CPU's %s" % (
                i, tuple(y.shape), x.stride(), y.stride())
    return None


class OpCheck:
    """One op's float32 samples in channels-last on the CPU and on loom."""

    def __init__(self, op):
        self.op = op
        self.item = ItemRun(op, "float32", DEVICE, 1 << 30, False)
        self.compared = 0
        self.problem = None
        self.grads = False

    def _note(self, idx, what):
        if self.problem is None:
            self.problem = "sample %d: %s" % (idx, what)

    def _close(self, a, b, atol, rtol=None):
        try:
            assert_same(a, b, torch.float32, rtol or self.item.rtol, atol, self.item.metadata_only)
            return True
        except AssertionError:
            return False

    def _values(self, idx, dev, cpu, reference, plain):
        """Notes values of `dev` that differ from the CPU's `cpu`, unless
        they are as close to a float64 `reference()` or equal the CPU's
        values for the sample in its original layout, `plain()` (values do
        not depend on the layout)."""
        it = self.item
        # Gradients sum in another order than the CPU's channels-last paths
        # (and go through the linear-algebra decompositions' other algorithms).
        atol = max(it.atol, 1e-4) if self.grads else it.atol
        rtol = max(it.rtol, 1e-3) if self.grads else it.rtol
        try:
            assert_same(dev, cpu, torch.float32, rtol, atol, it.metadata_only)
        except AssertionError as exc:
            if it._closer_than_cpu(dev, cpu, reference):
                return
            try:  # the CPU's values for the sample in its original layout
                same = plain()
            except Exception:  # noqa: BLE001 - none: the difference stands
                same = None
            if same is not None:
                if self._close(dev, same, atol, rtol):
                    return  # loom's values are the CPU's; its channels-last path rounds otherwise
                if not self._close(cpu, same, 1e-2, 1e-2):
                    return  # the CPU's channels-last values are wrong (_segment_reduce's): no reference
            self._note(idx, "values differ: " + " ".join(str(exc).split())[:300])

    def _judge(self, idx, run, original):
        """Runs `run(device, upcast) -> (outputs, outputs to compare the
        values of)` on both sides and notes any difference: the layouts of
        the outputs as returned (views included), the values after the
        OpInfo's processing."""
        cpu, cpu_exc = ItemRun._capture(lambda: run("cpu", False))
        if cpu_exc is not None or cpu is None:
            return  # the CPU refuses this sample (or it has no gradient): nothing to compare
        dev, dev_exc = ItemRun._capture(lambda: run(DEVICE, False))
        if dev_exc is not None:
            _, plain_exc = ItemRun._capture(lambda: run(DEVICE, False, original))
            if plain_exc is None:
                self._note(idx, "loom raised on the channels-last sample only: %s" % str(dev_exc)[:200])
            return  # raises on loom whatever the layout: not a layout question
        self.compared += 1
        layout = layout_difference(dev[0], cpu[0])
        if layout:
            self._note(idx, layout)
        self._values(idx, to_cpu(dev[1]), cpu[1], lambda up: run("cpu", up)[1],
                     lambda: run("cpu", False, original)[1])

    def forward(self, limit):
        op = self.op
        samples = format_samples(op, False)
        first = list(itertools.islice(samples, 3))
        if first and not self.item.metadata_only and self.item._rng_dependent([s for _, _, s in first]):
            self.item.metadata_only = True
        for idx, original, sample in itertools.chain(first, samples):
            if self.compared >= limit:
                break

            def run(device, upcast, which=sample):
                inp, args, kwargs = copy_sample(which, device, torch.float32 if upcast else None)
                out = op(inp, *args, **kwargs)
                return out, which.output_process_fn_grad(out)
            self._judge(idx, run, original)
        return self

    def backward(self, limit):
        op = self.op
        self.grads = True
        if not (op.supports_autograd and torch.float32 in op.supported_backward_dtypes("cpu")):
            return self
        first = [s for _, _, s in itertools.islice(format_samples(op, False), 3)]
        if not self.item.metadata_only and self.item._rng_dependent(first):
            self.item.metadata_only = True
        for idx, original, sample in format_samples(op, True):
            if self.compared >= limit:
                break
            cotangents = []

            def run(device, upcast, which=sample):
                inp, args, kwargs = copy_sample(which, device, torch.float32 if upcast else None)
                leaves = [t for t in tree_leaves((inp, args, kwargs))
                          if isinstance(t, torch.Tensor) and t.requires_grad]
                outs = [t for t in tree_leaves(which.output_process_fn_grad(op(inp, *args, **kwargs)))
                        if isinstance(t, torch.Tensor) and t.requires_grad]
                if not cotangents:  # the CPU's run: output gradients laid out as its outputs
                    gen = torch.Generator().manual_seed(idx)
                    for o in outs:
                        g = torch.empty_like(o.detach(), memory_format=torch.preserve_format)
                        g.copy_(torch.randn(o.shape, generator=gen, dtype=o.dtype))
                        cotangents.append(g)
                if not outs or not leaves or len(outs) != len(cotangents):
                    return None
                gos = [copy_tensor(g, device, torch.float32 if upcast else None) for g in cotangents]
                grads = list(torch.autograd.grad(outs, leaves, gos, allow_unused=True))
                return grads, grads
            self._judge(idx, run, original)
        return self


def sweep(names, backward):
    """({op: first difference}, {op: samples compared}) over `names`."""
    db = catalog.op_db()
    limit = 1 << 30 if FULL else 1
    wrong, compared = {}, {}
    for name in names:
        op = db[name]
        if torch.float32 not in op.supported_dtypes("cpu") or name in CPU_FAILS:
            continue
        check = OpCheck(op)
        check.backward(limit) if backward else check.forward(limit)
        if check.compared:
            compared[name] = check.compared
        if check.problem:
            wrong[name] = check.problem
    return wrong, compared


def verdict(wrong, compared, required, expected, expected_name):
    lines = []
    new = {k: v for k, v in wrong.items() if expected_reason(k, expected) is None}
    if new:
        lines.append("loom's layout or values differ from the CPU's on channels-last samples:")
        lines += ["  %s: %s" % kv for kv in sorted(new.items())]
    fixed = [k for k in expected if k in compared and k not in wrong]
    if fixed:
        lines.append("now as on the CPU, remove from %s: %s" % (expected_name, ", ".join(fixed)))
    missing = [k for k in required if k not in compared]
    if missing:
        lines.append("no channels-last sample compared for: %s" % ", ".join(missing))
    assert not lines, "\n".join(lines)


# --------------------------------------------------------------------------
# Tests


def test_every_op_keeps_the_cpus_memory_format():
    wrong, compared = sweep(list(catalog.op_db()), backward=False)
    verdict(wrong, compared, REQUIRED + list(EXPECTED_WRONG), EXPECTED_WRONG, "EXPECTED_WRONG")


def test_gradients_keep_the_cpus_memory_format():
    names = list(catalog.op_db()) if FULL else QUICK_BACKWARD + list(EXPECTED_WRONG_BACKWARD)
    wrong, compared = sweep(names, backward=True)
    expected = dict(EXPECTED_WRONG_BACKWARD, **(EXPECTED_WRONG_BACKWARD_FULL if FULL else {}))
    verdict(wrong, compared, names if not FULL else QUICK_BACKWARD + list(EXPECTED_WRONG_BACKWARD),
            expected, "EXPECTED_WRONG_BACKWARD")


def test_the_sweep_sees_a_wrong_layout(monkeypatch):
    """Sabotage: a loom result made contiguous where the CPU's is
    channels-last is reported (so the sweep cannot pass by not looking)."""
    op = catalog.op_db()["nn.functional.relu"]
    real = op.op
    monkeypatch.setattr(op, "op", lambda x, *a, **k: (
        real(x, *a, **k).contiguous() if x.device.type == DEVICE else real(x, *a, **k)))
    check = OpCheck(op).forward(1)
    assert check.compared == 1 and check.problem and "strides" in check.problem


def _cl(shape, fmt=torch.channels_last):
    return torch.randn(shape).contiguous(memory_format=fmt)


@pytest.mark.parametrize("fmt,shape", [(torch.channels_last, (2, 3, 4, 5)),
                                       (torch.channels_last_3d, (2, 3, 2, 4, 5))])
def test_copies_and_conversions_keep_the_format(fmt, shape):
    x = _cl(shape, fmt)
    xl = x.to(DEVICE)
    assert xl.stride() == x.stride()
    for fn in (lambda t: t.clone(), lambda t: torch.empty_like(t), lambda t: torch.zeros_like(t),
               lambda t: t.to(torch.float64), lambda t: t.contiguous(), lambda t: t + 1,
               lambda t: t.to(DEVICE) if t.device.type == "cpu" else t.cpu()):
        a, b = fn(x), fn(xl)
        assert b.stride() == a.stride()
    assert xl.cpu().stride() == x.stride()
    torch.testing.assert_close(xl.cpu(), x, rtol=0, atol=0)
    # copy_ into a channels-last destination, from either layout and device
    for src in (x, x.contiguous(), xl, xl.contiguous()):
        dst = torch.empty_like(xl)
        dst.copy_(src)
        assert dst.stride() == x.stride()
        torch.testing.assert_close(dst.cpu(), x, rtol=0, atol=0)
    # and the conversions to and from the format on loom
    c = xl.contiguous()
    assert c.is_contiguous() and c.stride() == x.contiguous().stride()
    back = c.to(memory_format=fmt)
    assert back.stride() == x.stride()
    torch.testing.assert_close(back.cpu(), x, rtol=0, atol=0)


F = torch.nn.functional
# Calls whose layouts the quick sweep may meet in another form: reductions
# keeping their dimensions along each axis, softmax over channels, norms
# and resampling of a channels-last batch.
CALLS = {
    "sum_keepdim": lambda x: [x.sum(d, keepdim=True) for d in range(4)],
    "mean_keepdim": lambda x: [x.mean((2, 3), keepdim=True), x.mean(1, keepdim=True)],
    "amax_keepdim": lambda x: [x.amax(d, keepdim=True) for d in range(4)],
    "max_dim_keepdim": lambda x: list(x.max(1, keepdim=True)) + list(x.max(3, keepdim=True)),
    "var_std_keepdim": lambda x: [x.var(1, keepdim=True), x.std((2, 3), keepdim=True)],
    "logsumexp_keepdim": lambda x: [torch.logsumexp(x, 1, keepdim=True)],
    "norm_keepdim": lambda x: [torch.linalg.vector_norm(x, dim=1, keepdim=True)],
    "softmax": lambda x: [F.softmax(x, 1), F.log_softmax(x, 3)],
    "layer_norm": lambda x: [F.layer_norm(x, x.shape[-2:])],
    "batch_norm": lambda x: [F.batch_norm(x, None, None, training=True)],
    "group_norm": lambda x: [F.group_norm(x, 2)],
    "interpolate": lambda x: [F.interpolate(x, scale_factor=2, mode=m) for m in
                              ("nearest", "bilinear", "bicubic")],
    "pool": lambda x: [F.max_pool2d(x, 2), F.avg_pool2d(x, 3, 1, 1), F.adaptive_avg_pool2d(x, 3)],
    "pointwise": lambda x: [x.exp(), x * 2, x + x.contiguous(), torch.where(x > 0, x, x.flip(0)),
                            torch.addcmul(x, x, x), x.clamp(-0.5, 0.5)],
    "cat": lambda x: [torch.cat([x, x], 1), torch.cat([x, x], 3), torch.stack([x, x])],
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_channels_last_calls_keep_the_cpus_layout(name):
    x = _cl((2, 4, 6, 5))
    cpu, dev = CALLS[name](x), CALLS[name](x.to(DEVICE))
    assert layout_difference(dev, cpu) is None
    torch.testing.assert_close(to_cpu(dev), cpu, rtol=1e-5, atol=1e-5)


def test_channels_last_model_step_keeps_the_format():
    """A conv-norm-relu-pool block trained in channels_last: its activations
    and every gradient as on the CPU."""
    torch.manual_seed(0)
    block = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 4, 1), torch.nn.AdaptiveAvgPool2d(1))
    cpu = block.to(memory_format=torch.channels_last)
    dev = __import__("copy").deepcopy(cpu).to(DEVICE)
    x = _cl((2, 3, 8, 8))
    xc, xd = x.clone().requires_grad_(), x.to(DEVICE).requires_grad_()
    acts_c, acts_d, h_c, h_d = [], [], xc, xd
    for mc, md in zip(cpu, dev):
        h_c, h_d = mc(h_c), md(h_d)
        acts_c.append(h_c)
        acts_d.append(h_d)
    assert layout_difference(acts_d, acts_c) is None
    h_c.sum().backward()
    h_d.sum().backward()
    assert layout_difference(xd.grad, xc.grad) is None
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
    for (n, pc), pd in zip(cpu.named_parameters(), dev.parameters()):
        assert layout_difference(pd.grad, pc.grad) is None, n
        torch.testing.assert_close(pd.grad.cpu(), pc.grad, rtol=1e-4, atol=1e-4)


# The FFT primitives every torch.fft function reaches, over transformed dims
# in and against the input's stride order: the CPU lays the untransformed
# dims out in the input's stride order around the transformed ones, packed
# in the order it sorts them (a one-sided transform's last dim kept last;
# c2r's other dims as a c2c of their own first).
FFT_DIMS = [(), (3,), (1,), (0,), (2,), (1, 2), (2, 1), (2, 3), (3, 0), (0, 2), (1, 2, 3),
            (0, 1, 2, 3)]


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3, 5, 4), (1, 3, 4, 4), (2, 1, 4, 6)])
def test_fft_primitives_keep_the_cpus_layout(shape):
    torch.manual_seed(0)
    x = _cl(shape)
    xc = torch.randn(shape, dtype=torch.complex64).contiguous(memory_format=torch.channels_last)
    calls = []
    for dims in FFT_DIMS:
        d = list(dims)
        calls.append((xc, lambda t, d=d: torch._fft_c2c(t, d, 1, True)))
        if not d:
            continue
        calls.append((x, lambda t, d=d: torch._fft_r2c(t, d, 2, True)))
        calls.append((x, lambda t, d=d: torch._fft_r2c(t, d, 0, False)))
        if shape[d[-1]] > 1:
            calls.append((xc, lambda t, d=d: torch._fft_c2r(t, d, 0, 2 * (t.size(d[-1]) - 1))))
    for inp, fn in calls:
        cpu, dev = fn(inp), fn(inp.to(DEVICE))
        assert layout_difference(dev, cpu) is None, (shape, cpu.stride(), dev.stride())
        torch.testing.assert_close(dev.cpu(), cpu, rtol=1e-4, atol=1e-4)
