"""How Inductor lays out and launches a convolutional network's training
step on loom, read from the code it generates: the convolutions keep the
layout eager code gives them (no channels-last conversion and no copies
around loom's convolution, whatever Inductor's cuDNN-tuned heuristics would
choose), and the batch norm, ReLU and residual kernels between them are
vectorized loop nests split across loom's workers, never run as one chunk
and never waiting for the stream."""

import copy
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn


@pytest.fixture(autouse=True)
def _no_cpu_fallback(no_fallback):
    yield


class _Block(nn.Module):
    """A residual block wide enough (72 channels) that Inductor's layout
    heuristics would convert it to channels-last on a GPU."""

    def __init__(self, cin=8, c=72):
        super().__init__()
        self.conv0 = nn.Conv2d(cin, c, 3, padding=1, bias=False)
        self.bn0 = nn.BatchNorm2d(c)
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.fc = nn.Linear(c, 5)

    def forward(self, x):
        x = F.relu(self.bn0(self.conv0(x)))
        x = F.relu(self.bn1(self.conv1(x)) + x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


_CONV_SIZES = re.compile(
    r"assert_size_stride\(\w+, \(([\d, ]+)\), \(([\d, ]+)\), "
    r"'torch\.ops\.aten\.convolution(?:_backward)?\.default'\)")
_KERNEL = re.compile(r"loom_cpp_kernel\(async_compile, '\w+', '(\w*)', '(\w*)', r'''(.*?)'''\)", re.S)


def _ints(text):
    return [int(v) for v in text.replace(" ", "").split(",") if v]


def _contiguous(sizes):
    strides, step = [], 1
    for s in reversed(sizes):
        strides.append(step)
        step *= max(s, 1)
    return strides[::-1]


def _step(model, x, y):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss.detach()


def test_cnn_training_keeps_conv_layouts_and_splits_its_kernels_across_workers():
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    model = _Block().to("loom")
    eager = _Block().to("loom")
    eager.load_state_dict(model.state_dict())
    x, y = torch.randn(2, 8, 6, 6).to("loom"), torch.randint(0, 5, (2,)).to("loom")
    loss, codes = run_and_get_code(_step, torch.compile(model), x, y)
    code = "\n".join(codes)
    assert len(codes) == 2  # forward and backward

    # Convolutions (forward and both gradients) in the contiguous layout.
    convs = _CONV_SIZES.findall(code)
    assert len(convs) >= 4, code
    for sizes, strides in convs:
        sizes, strides = _ints(sizes), _ints(strides)
        if len(sizes) == 4:
            assert strides == _contiguous(sizes), (sizes, strides)
    assert "channels_last" not in code

    # Batch norms with their ReLUs are library calls (forward and backward),
    # not generated statistics; the generated kernels left: each loop nest
    # split across the workers, none waiting for the stream.
    assert code.count("torch.ops.loom.batch_norm_relu.default(") == 2, code
    assert code.count("torch.ops.loom.batch_norm_relu_backward.default(") >= 1, code
    kernels = _KERNEL.findall(code)
    assert kernels, code
    assert "torch.loom.synchronize()" not in code
    for _kinds, nests, source in kernels:
        assert set(nests) == {"p"}, nests  # no nest runs as one chunk
        assert "Welford" not in source

    ref = _step(eager, x, y)
    torch.testing.assert_close(loss.cpu(), ref.cpu(), rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-4, atol=1e-5, msg=name)


class _Attention(nn.Module):
    """Heads of a fused qkv projection, as GPT-style models write them:
    strided views of one product."""

    def __init__(self, c=32, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in self.qkv(x).split(c, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


def _attention_copies(fn):
    """(fn's result, how many tensor copies ran inside the attention ops)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = fn()
    copies = 0
    for e in prof.events():
        if e.name != "aten::copy_":
            continue
        parent = e.cpu_parent
        while parent is not None and "scaled_dot_product" not in parent.name:
            parent = parent.cpu_parent
        copies += parent is not None
    return out, copies


def test_attention_reads_its_heads_contiguous_without_copies_inside_the_op():
    """A compiled attention training step passes the attention ops their
    query, key, value (and in the backward the output and its gradient)
    contiguous, written by generated kernels, and the ops copy nothing
    themselves; eager's strided heads are read where they lie, so eager
    copies nothing inside the op either; values equal eager's."""
    from torch._inductor.utils import run_and_get_code

    torch.manual_seed(0)
    model, eager = _Attention().to("loom"), _Attention().to("loom")
    eager.load_state_dict(model.state_dict())
    x = torch.randn(2, 16, 32).to("loom")

    def step(m):
        out = m(x)
        out.square().mean().backward()
        return out.detach()

    compiled = torch.compile(model)
    got, codes = run_and_get_code(step, compiled)
    code = "\n".join(codes)
    calls = re.findall(r"_scaled_dot_product_fused_attention_overrideable(?:_backward)?\.default"
                       r"\((\w+), (\w+), (\w+), (\w+)", code)
    assert len(calls) == 2, code  # forward and backward, each on plain buffers
    for args in calls:
        assert not any(a.startswith("reinterpret_tensor") for a in args), args
    model.zero_grad()
    _, copies = _attention_copies(lambda: step(compiled))
    assert copies == 0
    want, eager_copies = _attention_copies(lambda: step(eager))
    assert eager_copies == 0  # the op reads strided heads through their strides
    torch.testing.assert_close(got.cpu(), want.cpu(), rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-4, atol=1e-5, msg=name)


# ---- channels-last convolutions ---------------------------------------------

_CL = {4: torch.channels_last, 5: torch.channels_last_3d}


def _same_layout(real, fake):
    """Equal sizes and equal strides on every dim of more than one element
    (the only strides that address memory, and the only ones Inductor's
    assert_size_stride checks)."""
    return real.shape == fake.shape and fake.device == real.device and all(
        r == f for r, f, s in zip(real.stride(), fake.stride(), real.shape) if s != 1)


@pytest.mark.parametrize("dims", [4, 5])
@pytest.mark.parametrize("transposed", [False, True])
def test_fake_convolution_strides_are_the_strides_loom_returns(dims, transposed):
    """What tracing sees of a convolution and its backward (fake tensors)
    has the strides loom's ops return, with the input, the weight and the
    output gradient each contiguous or channels last: loom lays its results
    out as the CPU does, not as PyTorch's fake rule for a PrivateUse1
    device (always contiguous). The rule is installed when Dynamo loads
    (the first torch.compile or torch.export)."""
    import itertools

    import torch._dynamo  # noqa: F401
    from torch._subclasses.fake_tensor import FakeTensorMode

    aten = torch.ops.aten
    grid, ones, zeros = (5,) * (dims - 2), [1] * (dims - 2), [0] * (dims - 2)
    checked = channels_last = 0
    for x_cl, w_cl, dy_cl, k, bias in itertools.product((0, 1), (0, 1), (0, 1), (1, 3), (0, 1)):
        lay = (lambda t, cl: t.contiguous(memory_format=_CL[dims]) if cl else t)
        x = lay(torch.randn(2, 4, *grid), x_cl).to("loom")
        w = lay(torch.randn(*((4, 6) if transposed else (6, 4)), *(k,) * (dims - 2)), w_cl).to("loom")
        b = torch.randn(6).to("loom") if bias else None
        args = (ones, [k // 2] * (dims - 2), ones, transposed, zeros, 1)
        out = aten.convolution(x, w, b, *args)
        dy = lay(torch.randn(out.shape), dy_cl).to("loom")
        grads = aten.convolution_backward(dy, x, w, [6], *args, [True, True, True])
        with FakeTensorMode() as mode:
            fx, fw, fdy = (mode.from_tensor(t) for t in (x, w, dy))
            fout = aten.convolution(fx, fw, mode.from_tensor(b) if bias else None, *args)
            fgrads = aten.convolution_backward(fdy, fx, fw, [6], *args, [True, True, True])
        for name, real, fake in zip(("out", "grad_input", "grad_weight", "grad_bias"),
                                    (out, *grads), (fout, *fgrads)):
            assert _same_layout(real, fake), (x_cl, w_cl, dy_cl, k, bias, name, real.stride(),
                                              fake.stride())
            checked += 1
            channels_last += real.dim() == dims and not real.is_contiguous()
    assert checked == 128 and channels_last > 0


def test_channels_last_cnn_training_compiles_and_matches_eager():
    """A channels-last CNN (model and input in torch.channels_last; conv ->
    BN -> ReLU, then conv -> BN -> (+x) -> ReLU, as a ResNet block) trained
    for three SGD steps with a plain torch.compile: the convolutions run in
    the layout eager gives them (channels last), and losses and parameters equal loom eager's and the
    CPU's. Compiled afresh (no cached graph), so that the layouts are the
    ones tracing decides now."""
    from torch._inductor.utils import fresh_cache, run_and_get_code

    torch.manual_seed(0)
    base = _Block(cin=3, c=8)
    x = torch.randn(2, 3, 6, 6).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 5, (2,))

    def train(device, compiled):
        model = copy.deepcopy(base).to(device).to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        run = torch.compile(model) if compiled else model
        losses, codes = [], []
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            loss, code = run_and_get_code(_step, run, x.to(device), y.to(device))
            opt.step()
            losses.append(loss.item())
            codes += code
        return torch.tensor(losses), {n: p.detach().cpu() for n, p in model.named_parameters()}, codes

    with fresh_cache():
        losses, params, codes = train("loom", True)
    code = "\n".join(codes)
    convs = _CONV_SIZES.findall(code)
    assert len(convs) >= 4, code
    for sizes, strides in convs:
        sizes, strides = _ints(sizes), _ints(strides)
        assert strides == list(torch.empty(sizes).contiguous(
            memory_format=torch.channels_last).stride()), (sizes, strides)
    for ref in (train("loom", False), train("cpu", False)):
        torch.testing.assert_close(losses, ref[0], rtol=1e-5, atol=1e-6)
        for name, p in params.items():
            torch.testing.assert_close(p, ref[1][name], rtol=1e-4, atol=1e-5, msg=name)
