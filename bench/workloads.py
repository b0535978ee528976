"""The benchmark workloads.

Each workload is a function `build(ctx) -> Prepared`. It creates its inputs on
the CPU from a fixed seed (so every configuration computes the same thing and
the outputs can be compared against CPU eager), moves them to `ctx.device`,
compiles through `ctx.compile` when the configuration asks for it, and
returns a callable that runs one iteration. The work of one call is stated as
FLOPs (counted by PyTorch's FlopCounterMode on meta tensors, so it is the same
for every configuration) or as the minimum bytes moved, together with the
physical limit it is judged against.
"""

from __future__ import annotations

import collections
import functools
import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F

from bench import models

# limit names, matched by bench.limits
FMA_FP32, FMA_BF16 = "fma_fp32", "fma_bf16"
BW_READ, BW_COPY, BW_TRIAD = "bw_read", "bw_copy", "bw_triad"


@dataclass
class Ctx:
    device: torch.device
    backend: str | None  # None: eager; else the torch.compile backend
    quick: bool
    sync: Callable[[], None]

    def compile(self, obj):
        if self.backend is None:
            return obj
        return torch.compile(obj, backend=self.backend, dynamic=False)

    def to(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.device)


@dataclass
class Prepared:
    fn: Callable[[], Any]          # one iteration; returns its output
    items: int = 1                 # work items per call (ops, samples, tokens)
    flops: float | None = None     # per call
    bytes: float | None = None     # per call, minimum traffic
    limit: str | None = None       # which physical limit applies
    tol: float = 1e-3              # relative tolerance of the check vs CPU eager
    check: Callable[[Any], Any] | None = None  # output -> tensors to compare
    extra: dict = field(default_factory=dict)  # per-call phase timings etc.


class Skip(Exception):
    """Raised by a workload's build when it cannot run in a configuration,
    for the reason given: the item is reported as skipped with it."""


@dataclass(frozen=True)
class Workload:
    name: str
    group: str
    unit: str          # what `items` counts
    description: str
    build: Callable[[Ctx], Prepared]


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=_gen(seed)).to(dtype)


def count_flops(fn: Callable[[], Any]) -> float:
    """FLOPs of `fn` as PyTorch counts them (matmul, conv, attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return float(counter.get_total_flops())


# ---- per-op overhead ---------------------------------------------------------

def _overhead(ctx: Ctx) -> Prepared:
    a, b = ctx.to(torch.ones(1)), ctx.to(torch.full((1,), 2.0))
    n = 10 if ctx.quick else 200

    def add(x, y):
        return x + y

    add = ctx.compile(add)

    def fn():
        c = None
        for _ in range(n):
            c = add(a, b)
        return c

    return Prepared(fn, items=n)


# ---- memory-bound ------------------------------------------------------------

def _numel(ctx: Ctx) -> int:
    return 4096 if ctx.quick else 16 * 1024 * 1024


#: Inputs a memory workload cycles through, and outputs it keeps alive.
RING = 4


def rotating(ctx: Ctx, make: Callable[[int], tuple], call: Callable[..., Any]) -> Callable[[], Any]:
    """One call of `call` per invocation, on the next of RING argument tuples
    (make(k) for k = 0, 1, ..., made on the CPU, moved to the device), each
    output kept until the ring comes round: the memory workloads' calls, as
    every configuration runs them.

    Calls on one input into an output freed at once do not measure one
    call's traffic: a loom stream groups the calls queued on it (adaptive
    eager, level 1) and runs chunk k of each back to back, so the shared
    input is read from memory once per group and the output, the block the
    previous call freed, is rewritten in the cache (add_16M measured 35x
    CPU eager that way). With a new input per call and its output kept,
    calls share no memory: each reads and writes its own bytes (every ring
    is 64 MB or more, beyond the last-level cache, so unfused calls do not
    find them cached either). A sample's calls (50 ms of them, sync before
    and after) are the most a group can hold; these calls take 10 ms or
    more here, so RING calls in a row touch disjoint memory."""
    args = [tuple(ctx.to(t) for t in make(k)) for k in range(RING)]
    kept: collections.deque = collections.deque(maxlen=RING)
    turn = itertools.cycle(args).__next__

    def fn():
        out = call(*turn())
        kept.append(out)
        return out

    return fn


def _pointwise_add(ctx: Ctx) -> Prepared:
    """x + y over 16M float32, a new pair of inputs per call (rotating)."""
    n = _numel(ctx)

    def add(x, y):
        return x + y

    add = ctx.compile(add)
    fn = rotating(ctx, lambda k: (_randn(n, seed=1 + 100 * k), _randn(n, seed=2 + 100 * k)), add)
    return Prepared(fn, bytes=3 * 4 * n, limit=BW_TRIAD, tol=1e-6)


def _reduce_sum(ctx: Ctx) -> Prepared:
    n = _numel(ctx)
    a = ctx.to(_randn(n, seed=3))

    def total(x):
        return x.sum()

    total = ctx.compile(total)
    # summation order differs between implementations: the error grows with n
    return Prepared(lambda: total(a), bytes=4 * n, limit=BW_READ, tol=1e-3)


def _rows(ctx: Ctx) -> tuple[int, int]:
    return (16, 256) if ctx.quick else (16 * 1024, 1024)


def _softmax(ctx: Ctx) -> Prepared:
    """A new input per call (rotating: repeated calls on one input share
    its reads in a fused group)."""
    r, c = _rows(ctx)

    def softmax(t):
        return torch.softmax(t, dim=-1)

    softmax = ctx.compile(softmax)
    fn = rotating(ctx, lambda k: (_randn(r, c, seed=4 + 100 * k),), softmax)
    return Prepared(fn, bytes=2 * 4 * r * c, limit=BW_COPY, tol=1e-4)


def _layer_norm(ctx: Ctx) -> Prepared:
    """A new input per call (rotating), the same weight and bias."""
    r, c = _rows(ctx)
    w, b = ctx.to(1 + 0.1 * _randn(c, seed=6)), ctx.to(0.1 * _randn(c, seed=7))

    def layer_norm(t, weight, bias):
        return F.layer_norm(t, (c,), weight, bias)

    layer_norm = ctx.compile(layer_norm)
    fn = rotating(ctx, lambda k: (_randn(r, c, seed=5 + 100 * k),), lambda t: layer_norm(t, w, b))
    return Prepared(fn, bytes=2 * 4 * r * c, limit=BW_COPY, tol=1e-4)


# ---- GEMM --------------------------------------------------------------------

def _gemm(n: int, dtype: torch.dtype):
    def build(ctx: Ctx) -> Prepared:
        m = 32 if ctx.quick else n
        a = ctx.to(_randn(m, m, seed=8, dtype=dtype))
        b = ctx.to(_randn(m, m, seed=9, dtype=dtype))

        def mm(x, y):
            return x @ y

        mm = ctx.compile(mm)
        bf16 = dtype == torch.bfloat16
        return Prepared(lambda: mm(a, b), flops=2.0 * m ** 3,
                        limit=FMA_BF16 if bf16 else FMA_FP32, tol=2e-2 if bf16 else 1e-4)

    return build


def _gemm_medium(n: int):
    """float32 matmul under torch.set_float32_matmul_precision("medium"), which
    lets each configuration multiply as bfloat16 where it can."""
    def build(ctx: Ctx) -> Prepared:
        m = 32 if ctx.quick else n
        a, b = ctx.to(_randn(m, m, seed=8)), ctx.to(_randn(m, m, seed=9))
        mm = ctx.compile(lambda x, y: x @ y)

        def step():
            old = torch.get_float32_matmul_precision()
            torch.set_float32_matmul_precision("medium")
            try:
                return mm(a, b)
            finally:
                torch.set_float32_matmul_precision(old)

        return Prepared(step, flops=2.0 * m ** 3, limit=FMA_BF16, tol=2e-2)

    return build


# ---- convolution -------------------------------------------------------------

# (name, batch, c_in, c_out, spatial, kernel, stride): typical ResNet-50 layers
CONV_LAYERS = [
    ("c64_56_3x3", 8, 64, 64, 56, 3, 1),
    ("c128_28_3x3", 8, 128, 128, 28, 3, 1),
    ("c256_56_1x1", 8, 256, 64, 56, 1, 1),
]


def _conv(spec, backward: bool):
    _, batch, cin, cout, hw, k, stride = spec

    def shapes(ctx):
        if ctx.quick:
            return 1, min(cin, 8), min(cout, 8), 8
        return batch, cin, cout, hw

    def build(ctx: Ctx) -> Prepared:
        nb, ci, co, s = shapes(ctx)
        x = ctx.to(_randn(nb, ci, s, s, seed=10))
        w = ctx.to(0.1 * _randn(co, ci, k, k, seed=11))

        def conv(inp, weight):
            return F.conv2d(inp, weight, stride=stride, padding=k // 2)

        def fwd_flops(grad: bool):
            xm = torch.empty(nb, ci, s, s, device="meta", requires_grad=grad)
            wm = torch.empty(co, ci, k, k, device="meta", requires_grad=grad)
            y = conv(xm, wm)
            if grad:
                y.backward(torch.empty_like(y))

        flops = count_flops(lambda: fwd_flops(backward))
        cconv = ctx.compile(conv)
        if not backward:
            return Prepared(lambda: cconv(x, w), flops=flops, limit=FMA_FP32, tol=1e-4)
        x.requires_grad_(True)
        w.requires_grad_(True)
        with torch.no_grad():
            gy = torch.ones_like(conv(x.detach(), w.detach()))

        def step():
            x.grad = None
            w.grad = None
            y = cconv(x, w)
            y.backward(gy)
            return y.detach(), x.grad, w.grad

        return Prepared(step, flops=flops, limit=FMA_FP32, tol=1e-4)

    return build


# ResNet-18's distinct convolutions on a 224 x 224 batch of 8:
# (c_in, c_out, kernel, stride, input size)
RESNET18_CONVS = [
    (3, 64, 7, 2, 224), (64, 64, 3, 1, 56), (64, 128, 3, 2, 56), (64, 128, 1, 2, 56),
    (128, 128, 3, 1, 28), (128, 256, 3, 2, 28), (128, 256, 1, 2, 28), (256, 256, 3, 1, 14),
    (256, 512, 3, 2, 14), (256, 512, 1, 2, 14), (512, 512, 3, 1, 7),
]


def _conv_resnet18(dtype: torch.dtype):
    return lambda ctx: _resnet18_layers(ctx, dtype)


def _resnet18_layers(ctx: Ctx, dtype: torch.dtype) -> Prepared:
    """Every distinct conv layer of ResNet-18, forward and backward, once each."""
    batch = 1 if ctx.quick else 8
    layers, flops = [], 0.0
    for i, (ci, co, k, stride, hw) in enumerate(RESNET18_CONVS):
        name = f"{ci}->{co} {k}x{k}/{stride} at {hw}"  # the layer's, also when shrunk
        if ctx.quick:
            ci, co, hw = min(ci, 4), min(co, 8), max(hw // 16, k)
        x = ctx.to(_randn(batch, ci, hw, hw, seed=40 + i, dtype=dtype)).requires_grad_(True)
        w = ctx.to(0.1 * _randn(co, ci, k, k, seed=60 + i, dtype=dtype)).requires_grad_(True)

        def conv(inp, weight, stride=stride, k=k):
            return F.conv2d(inp, weight, stride=stride, padding=k // 2)

        def meta_step(conv=conv, shape=(batch, ci, hw, hw), wshape=(co, ci, k, k)):
            y = conv(torch.empty(*shape, device="meta", dtype=dtype, requires_grad=True),
                     torch.empty(*wshape, device="meta", dtype=dtype, requires_grad=True))
            y.backward(torch.empty_like(y))

        flops += count_flops(meta_step)
        with torch.no_grad():
            gy = torch.ones_like(conv(x.detach(), w.detach()))
        layers.append((name, ctx.compile(conv), x, w, gy))
    # Each layer's forward + backward on its own, so layers can be compared
    # one by one; the device is synchronized around each.
    phases = {name: [] for name, *_ in layers}

    def step():
        grads = []
        for name, cconv, x, w, gy in layers:
            x.grad = None
            w.grad = None
            ctx.sync()
            t0 = time.perf_counter()
            cconv(x, w).backward(gy)
            ctx.sync()
            phases[name].append(time.perf_counter() - t0)
            grads.append(w.grad)
        return tuple(grads)

    bf16 = dtype == torch.bfloat16
    return Prepared(step, flops=flops, limit=FMA_BF16 if bf16 else FMA_FP32,
                    tol=2e-2 if bf16 else 1e-3, extra=phases)


# ---- attention ---------------------------------------------------------------

def _sdpa(dtype: torch.dtype):
    def build(ctx: Ctx) -> Prepared:
        b, h, t, d = (1, 2, 16, 8) if ctx.quick else (4, 8, 512, 64)
        q, k, v = (ctx.to(_randn(b, h, t, d, seed=s, dtype=dtype)) for s in (12, 13, 14))

        def attention(q_, k_, v_):
            return F.scaled_dot_product_attention(q_, k_, v_)

        flops = count_flops(lambda: attention(
            *(torch.empty(b, h, t, d, device="meta", dtype=dtype) for _ in range(3))))
        attention = ctx.compile(attention)
        bf16 = dtype == torch.bfloat16
        return Prepared(lambda: attention(q, k, v), flops=flops,
                        limit=FMA_BF16 if bf16 else FMA_FP32, tol=2e-2 if bf16 else 1e-4)

    return build


# ---- whole training and inference steps --------------------------------------

def _model_on(ctx: Ctx, make):
    torch.manual_seed(0)
    return make().to(ctx.device)


def _train_flops(make, inputs_meta, loss_fn) -> float:
    with torch.device("meta"):
        model = make()

    def step():
        loss_fn(model(*inputs_meta[:-1]), inputs_meta[-1]).backward()

    return count_flops(step)


def _train_step(ctx: Ctx, make, inputs, loss_fn, opt_fn, items, flops) -> Prepared:
    model = _model_on(ctx, make)
    model.train()
    opt = opt_fn(model.parameters())
    cmodel = ctx.compile(model)
    dev_inputs = [ctx.to(t) for t in inputs]

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(cmodel(*dev_inputs[:-1]), dev_inputs[-1])
        loss.backward()
        opt.step()
        return loss.detach()

    return Prepared(step, items=items, flops=flops, limit=FMA_FP32, tol=1e-3)


def _meta_like(inputs):
    return [torch.empty(t.shape, dtype=t.dtype, device="meta") if t.is_floating_point()
            else torch.zeros(t.shape, dtype=t.dtype, device="meta") for t in inputs]


def _mlp_train(ctx: Ctx) -> Prepared:
    d, batch = (32, 8) if ctx.quick else (1024, 256)
    make = functools.partial(models.MLPNet, d_in=d, hidden=d, depth=3, num_classes=10)
    x = _randn(batch, d, seed=20)
    y = torch.randint(0, 10, (batch,), generator=_gen(21))
    flops = _train_flops(make, _meta_like([x, y]), F.cross_entropy)
    return _train_step(ctx, make, [x, y], F.cross_entropy,
                       lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9), batch, flops)


def _cnn_train(ctx: Ctx) -> Prepared:
    width, batch, s = (4, 2, 8) if ctx.quick else (32, 32, 32)
    make = functools.partial(models.SmallResNet, width=width, num_classes=10)
    x = _randn(batch, 3, s, s, seed=22)
    y = torch.randint(0, 10, (batch,), generator=_gen(23))
    flops = _train_flops(make, _meta_like([x, y]), F.cross_entropy)
    return _train_step(ctx, make, [x, y], F.cross_entropy,
                       lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9), batch, flops)


def _cnn_train_cl(ctx: Ctx) -> Prepared:
    """_cnn_train with the model's weights and the input laid out channels
    last (memory_format=torch.channels_last), as users train CNNs."""
    width, batch, s = (4, 2, 8) if ctx.quick else (32, 32, 32)

    def make():
        model = models.SmallResNet(width=width, num_classes=10)
        return model.to(memory_format=torch.channels_last)

    x = _randn(batch, 3, s, s, seed=22).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,), generator=_gen(23))
    flops = _train_flops(make, _meta_like([x, y]), F.cross_entropy)
    return _train_step(ctx, make, [x, y], F.cross_entropy,
                       lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9), batch, flops)


def _gpt_cfg(ctx: Ctx) -> models.GPTConfig:
    return models.GPTConfig.tiny() if ctx.quick else models.GPTConfig()


def _gpt_train(ctx: Ctx) -> Prepared:
    cfg = _gpt_cfg(ctx)
    batch, seq = (2, 16) if ctx.quick else (8, 128)
    make = functools.partial(models.GPT, cfg)
    idx = torch.randint(0, cfg.vocab_size, (batch, seq), generator=_gen(24))
    tgt = torch.randint(0, cfg.vocab_size, (batch, seq), generator=_gen(25))
    meta = _meta_like([idx, tgt])
    with torch.device("meta"):
        mmodel = make()
    flops = count_flops(lambda: mmodel(meta[0], meta[1])[1].backward())

    model = _model_on(ctx, make)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    cmodel = ctx.compile(model)
    di, dt = ctx.to(idx), ctx.to(tgt)

    def step():
        opt.zero_grad(set_to_none=True)
        _, loss = cmodel(di, dt)
        loss.backward()
        opt.step()
        return loss.detach()

    return Prepared(step, items=batch * seq, flops=flops, limit=FMA_FP32, tol=1e-3)


def _autocast_missing(device: torch.device, dtype: torch.dtype) -> str | None:
    """Why torch.autocast(device, dtype) cannot run a training step here
    (None when it casts a matmul to `dtype`)."""
    a = torch.ones(2, 2, device=device)
    try:
        with torch.autocast(device.type, dtype=dtype):
            out = a @ a
    except (RuntimeError, NotImplementedError) as exc:
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
        return f"torch.autocast({device.type!r}, {dtype}) fails: {type(exc).__name__}: {first[:200]}"
    if out.dtype != dtype:
        return f"torch.autocast({device.type!r}, {dtype}) leaves matmul in {out.dtype}"
    return None


def _gpt_char_train(amp: torch.dtype | None):
    """The training step of `make demo` (examples/train_gpt.py): the
    character-level GPT on the shipped text, AdamW, under autocast to `amp`
    when given (on every configuration, CPU eager included)."""
    def build(ctx: Ctx) -> Prepared:
        from examples import gpt

        if amp is not None:
            why = _autocast_missing(ctx.device, amp)
            if why:
                raise Skip(why)
        corpus = gpt.CharCorpus.load()
        if ctx.quick:
            cfg, batch = gpt.ModelConfig(n_layer=2, d_model=32, n_head=2, context=16), 2
        else:
            cfg, batch = gpt.ModelConfig(), 16
        x, y = gpt.get_batch(corpus.split()[0], batch, cfg.context, _gen(27))
        with torch.device("meta"):
            mmodel = models.GPT(cfg.gpt(corpus.vocab_size))
        meta = _meta_like([x, y])
        flops = count_flops(lambda: mmodel(meta[0], meta[1])[1].backward())

        model = gpt.make_model(corpus.vocab_size, cfg, ctx.device, seed=0)
        opt = gpt.make_optimizer(model, lr=3e-4)
        cmodel = ctx.compile(model)
        dx, dy = ctx.to(x), ctx.to(y)
        return Prepared(lambda: gpt.train_step(cmodel, opt, dx, dy, amp), items=batch * cfg.context,
                        flops=flops, limit=FMA_FP32 if amp is None else FMA_BF16,
                        tol=1e-3 if amp is None else 2e-2)

    return build


def _gpt_infer(ctx: Ctx) -> Prepared:
    cfg = _gpt_cfg(ctx)
    prompt_len, new_tokens = (8, 4) if ctx.quick else (512, 64)
    prompt = torch.randint(0, cfg.vocab_size, (1, prompt_len), generator=_gen(26))
    with torch.device("meta"):
        mmodel = models.GPT(cfg)
        mmodel.setup_cache(1)
    flops = count_flops(lambda: models.generate(mmodel, torch.zeros(1, prompt_len, dtype=torch.long, device="meta"),
                                                new_tokens))

    model = _model_on(ctx, lambda: models.GPT(cfg))
    model.eval()
    model.setup_cache(1)
    # one compiled callable per phase: each sees one static shape
    prefill = ctx.compile(model.forward_cached)
    decode = ctx.compile(model.forward_cached)
    p = ctx.to(prompt)
    phases = {"prefill_s": [], "decode_s_per_token": []}

    def run():
        with torch.no_grad():
            model.reset_cache()
            ctx.sync()
            t0 = time.perf_counter()
            first = prefill(p, torch.arange(prompt_len, device=ctx.device))
            ctx.sync()
            t1 = time.perf_counter()
            tokens, _ = models.generate(model, p, new_tokens,
                                        prefill=lambda *_: first, decode=decode)
            ctx.sync()
            t2 = time.perf_counter()
        phases["prefill_s"].append(t1 - t0)
        phases["decode_s_per_token"].append((t2 - t1) / max(new_tokens - 1, 1))
        return first

    return Prepared(run, items=prompt_len + new_tokens, flops=flops, limit=FMA_FP32,
                    tol=1e-3, extra=phases)


# ---- one decode step, eager and replayed as a graph --------------------------

def _gpt_decode(graphed: bool):
    """One greedy decode step (one token at position 128, KV cache) of a
    small GPT, where per-op overhead is what a step costs. `graphed`: the
    step captured once and replayed, through
    torch.loom.graph where the configuration is loom eager and through
    mode="reduce-overhead" where it is the loom backend (on the CPU, the
    plain step: the baseline)."""
    def build(ctx: Ctx) -> Prepared:
        cfg = models.GPTConfig.tiny() if ctx.quick else models.GPTConfig(
            vocab_size=2048, max_seq=256, n_layer=4, n_head=4, d_model=128)
        at = 16 if ctx.quick else 128
        tok = torch.randint(0, cfg.vocab_size, (1, 1), generator=_gen(27))
        with torch.device("meta"):
            mmodel = models.GPT(cfg)
            mmodel.setup_cache(1)
        flops = count_flops(lambda: mmodel.forward_cached(tok.to("meta"), torch.tensor([at], device="meta")))
        model = _model_on(ctx, lambda: models.GPT(cfg))
        model.eval()
        model.setup_cache(1)
        dtok, dpos = ctx.to(tok), ctx.to(torch.tensor([at]))
        step = model.forward_cached
        if graphed and ctx.device.type == "loom":
            if ctx.backend not in (None, "loom"):
                raise Skip("graph replay: loom eager (torch.loom.graph) or the loom backend "
                           "(mode='reduce-overhead')")
            if ctx.backend == "loom":
                step = torch.compile(step, backend="loom", mode="reduce-overhead", dynamic=False)
            else:
                with torch.no_grad():
                    step(dtok, dpos)  # warm-up: lazy initialisation outside the capture
                    g = torch.loom.Graph()
                    with torch.loom.graph(g):
                        out = step(dtok, dpos)

                def step(*_):
                    g.replay()
                    return out
        else:
            step = ctx.compile(step)

        def run():
            with torch.no_grad():
                return step(dtok, dpos)

        return Prepared(run, items=1, flops=flops, limit=FMA_FP32, tol=1e-3)
    return build


# ---- FFT ----------------------------------------------------------------------

def _fft(kind: str):
    """torch.fft.fft of 2^20 complex64 points (one transform), or
    torch.fft.rfft2 of a 1024 x 1024 float32 image."""
    def build(ctx: Ctx) -> Prepared:
        if kind == "c2c":
            n = 1 << (14 if ctx.quick else 20)
            x = ctx.to(torch.randn(n, dtype=torch.complex64, generator=_gen(31)))
            fn = ctx.compile(lambda t: torch.fft.fft(t))
            flops = 5.0 * n * math.log2(n)
        else:
            s = 128 if ctx.quick else 1024
            x = ctx.to(_randn(s, s, seed=32))
            fn = ctx.compile(lambda t: torch.fft.rfft2(t))
            flops = 2.5 * s * s * math.log2(s * s)
        return Prepared(lambda: fn(x), items=1, flops=flops, tol=1e-3)
    return build


# ---- batched small linear algebra --------------------------------------------

def _linalg_batch(op: str):
    """Cholesky or solve of 256 well-conditioned 64 x 64 float32 matrices."""
    def build(ctx: Ctx) -> Prepared:
        b, n = (8, 16) if ctx.quick else (256, 64)
        x = _randn(b, n, n, seed=11, dtype=torch.float64)
        a = ctx.to((x @ x.mT / n + torch.eye(n, dtype=torch.float64)).float())
        rhs = ctx.to(_randn(b, n, 1, seed=12))

        def cholesky(m):
            return torch.linalg.cholesky(m)

        def solve(m, y):
            return torch.linalg.solve(m, y)

        if op == "cholesky":
            f = ctx.compile(cholesky)
            return Prepared(lambda: f(a), items=b, flops=b * n ** 3 / 3, limit=FMA_FP32)
        f = ctx.compile(solve)
        return Prepared(lambda: f(a, rhs), items=b, flops=b * (2 * n ** 3 / 3 + 2 * n * n),
                        limit=FMA_FP32)
    return build


WORKLOADS: list[Workload] = [
    Workload("overhead_add", "overhead", "op", "per-op overhead: a + b on one-element float32 tensors",
             _overhead),
    Workload("add_16M", "memory", "call", "pointwise add, 2 x 16M float32", _pointwise_add),
    Workload("sum_16M", "memory", "call", "reduction: sum of 16M float32", _reduce_sum),
    Workload("softmax", "memory", "call", "softmax over the last dim of 16384 x 1024 float32", _softmax),
    Workload("layer_norm", "memory", "call", "layer_norm over the last dim of 16384 x 1024 float32",
             _layer_norm),
]
WORKLOADS += [
    Workload(f"gemm_{tag}_{n}", "gemm", "call", f"matmul {n} x {n} x {n} {dtype_name}", _gemm(n, dtype))
    for tag, dtype, dtype_name in (("fp32", torch.float32, "float32"), ("bf16", torch.bfloat16, "bfloat16"))
    for n in (256, 512, 1024, 2048)
]
WORKLOADS += [
    Workload("gemm_fp32_medium_2048", "gemm", "call",
             "matmul 2048 x 2048 x 2048 float32, float32 matmul precision \"medium\"",
             _gemm_medium(2048)),
]
WORKLOADS += [
    Workload(f"conv_{spec[0]}_{'fwdbwd' if bwd else 'fwd'}", "conv", "call",
             f"conv2d N={spec[1]} {spec[2]}->{spec[3]} {spec[4]}x{spec[4]} {spec[5]}x{spec[5]} "
             f"stride {spec[6]}, {'forward + backward' if bwd else 'forward'}",
             _conv(spec, bwd))
    for bwd in (False, True) for spec in CONV_LAYERS
]
WORKLOADS += [
    Workload("conv_resnet18", "conv", "call", "ResNet-18's 11 distinct conv layers, batch 8 of "
             "224 x 224, forward + backward each", _conv_resnet18(torch.float32)),
    Workload("conv_resnet18_bf16", "conv", "call", "ResNet-18's 11 distinct conv layers, batch 8 "
             "of 224 x 224, forward + backward each, bfloat16", _conv_resnet18(torch.bfloat16)),
]
WORKLOADS += [
    Workload("sdpa", "attention", "call", "scaled_dot_product_attention B=4 H=8 T=512 D=64 float32",
             _sdpa(torch.float32)),
    Workload("sdpa_bf16", "attention", "call",
             "scaled_dot_product_attention B=4 H=8 T=512 D=64 bfloat16", _sdpa(torch.bfloat16)),
    Workload("mlp_train", "training", "sample", "MLP 1024-1024x3-10 training step, batch 256, SGD",
             _mlp_train),
    Workload("cnn_train", "training", "sample", "ResNet-style CNN (3 stages, width 32) training step, "
             "batch 32 of 32x32, SGD", _cnn_train),
    Workload("cnn_train_cl", "training", "sample", "cnn_train with model and input in "
             "channels_last (memory_format=torch.channels_last)", _cnn_train_cl),
    Workload("gpt_train", "training", "token", "GPT (4 layers, d_model 256, 4 heads, vocab 2048) "
             "forward + backward + AdamW, batch 8 x 128 tokens", _gpt_train),
    Workload("gpt_char_train", "training", "token", "`make demo`'s step: character-level GPT (4 layers, "
             "d_model 256, 4 heads, vocab 65) forward + backward + AdamW, batch 16 x 128 characters",
             _gpt_char_train(None)),
    Workload("gpt_char_train_bf16", "training", "token", "gpt_char_train with the forward under "
             "torch.autocast(bfloat16) (examples/train_gpt.py --amp bf16)", _gpt_char_train(torch.bfloat16)),
    Workload("gpt_infer", "inference", "token", "GPT inference: prefill 512 tokens, then 64 greedy "
             "decode steps with a static KV cache", _gpt_infer),
    Workload("gpt_decode", "inference", "token", "small GPT (4 layers, d_model 128, 4 heads, vocab "
             "2048) one decode step: one token at position 128 through a 256-slot KV cache",
             _gpt_decode(False)),
    Workload("gpt_decode_graph", "inference", "token", "gpt_decode captured once and replayed: "
             "torch.loom.graph under loom eager, mode=\"reduce-overhead\" under the loom backend",
             _gpt_decode(True)),
]
WORKLOADS += [
    Workload("cholesky_256x64", "linalg", "matrix", "torch.linalg.cholesky of 256 x 64 x 64 "
             "float32 (symmetric positive-definite)", _linalg_batch("cholesky")),
    Workload("solve_256x64", "linalg", "matrix", "torch.linalg.solve of 256 x 64 x 64 float32 "
             "against one right-hand side each", _linalg_batch("solve")),
]
WORKLOADS += [
    Workload("fft_1d_2p20", "fft", "call", "torch.fft.fft of 2^20 complex64 points",
             _fft("c2c")),
    Workload("rfft2_1024", "fft", "call", "torch.fft.rfft2 of 1024 x 1024 float32", _fft("r2c")),
]

# adaptive eager's (loom eager with fusion on and off side by side)
from bench.fusion_workloads import WORKLOADS as _FUSION_WORKLOADS  # noqa: E402

WORKLOADS += _FUSION_WORKLOADS

BY_NAME = {w.name: w for w in WORKLOADS}
