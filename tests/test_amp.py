"""Automatic mixed precision on loom: torch.autocast("loom") with CUDA's cast
policy, bfloat16 by default, and torch.amp.GradScaler("loom") on loom's own
kernels, trained against the CPU's autocast runs of the same weights."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

LOW = "low"  # the autocast dtype of the case at hand
F32, F64 = torch.float32, torch.float64


# ---- the device module and the defaults --------------------------------------

def test_default_dtype_is_bfloat16(py):
    assert torch.get_autocast_dtype("loom") == torch.bfloat16
    assert torch.loom.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    # in a fresh process, from `import torch` alone (PyTorch's own default for
    # a PrivateUse1 device is float16)
    py("""
        import torch
        assert torch.get_autocast_dtype("loom") == torch.bfloat16
        with torch.autocast("loom"):
            x = torch.ones(4, 4, device="loom")
            assert (x @ x).dtype == torch.bfloat16
    """)


def test_loom_amp_module_is_cuda_amp_for_loom():
    amp = torch.loom.amp
    assert amp.autocast().fast_dtype == torch.bfloat16 and amp.autocast().device == "loom"
    assert amp.autocast(dtype=torch.float16).fast_dtype == torch.float16
    assert isinstance(amp.GradScaler(), torch.amp.GradScaler)
    assert amp.GradScaler()._device == "loom"
    x = torch.ones(4, 4, device="loom")

    @amp.autocast()
    def f(a):
        return a @ a
    assert f(x).dtype == torch.bfloat16
    assert (x @ x).dtype == torch.float32


def test_unsupported_dtype_warns_and_disables(no_fallback):
    x = torch.ones(4, 4, device="loom")
    with pytest.warns(UserWarning, match="loom Autocast only supports dtypes of torch.bfloat16, "
                                         "torch.float16"):
        with torch.autocast("loom", dtype=torch.float64):
            assert not torch.is_autocast_enabled("loom")
            assert (x @ x).dtype == torch.float32


def test_loom_registers_cudas_cast_policies():
    # Every aten op CUDA autocasts, loom autocasts the same way (the lists are
    # PyTorch's own), except CUDA's two cuDNN convolutions, which loom never runs.
    names = [n for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")]
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    cuda = {n for n in names if has(n, "AutocastCUDA")}
    loom = {n for n in names if has(n, "AutocastPrivateUse1")}
    assert cuda - loom == {"aten::cudnn_convolution", "aten::cudnn_convolution_transpose"}
    assert loom <= cuda
    assert torch._C._dispatch_has_backend_fallback(torch._C.DispatchKey.AutocastPrivateUse1)


# ---- the dtypes ops produce inside autocast ----------------------------------

def _inputs(low):
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    x, w, b = r(8, 16), r(16, 16), r(16)
    img = r(2, 4, 6, 6)
    return dict(
        x=x, w=w, b=b, x_low=x.to(low), b3=r(2, 8, 16), img=img, img_low=img.to(low),
        k=r(4, 4, 3, 3), q=r(2, 2, 8, 4), c4=r(4), tgt=torch.randint(0, 16, (8,), generator=g),
        logp_low=torch.log_softmax(x, -1).to(low), rm=torch.zeros(4), rv=torch.ones(4))


# (name, op, loom's dtype = CUDA's policy, CPU autocast's dtype, why they differ)
CASES = [
    ("mm", lambda t: torch.mm(t["x"], t["w"]), LOW, LOW, ""),
    ("linear", lambda t: F.linear(t["x"], t["w"], t["b"]), LOW, LOW, ""),
    ("matmul", lambda t: t["x"] @ t["w"], LOW, LOW, ""),
    ("bmm", lambda t: torch.bmm(t["b3"], t["b3"].transpose(1, 2)), LOW, LOW, ""),
    ("conv2d", lambda t: F.conv2d(t["img"], t["k"], padding=1), LOW, LOW, ""),
    ("sdpa", lambda t: F.scaled_dot_product_attention(t["q"], t["q"], t["q"], is_causal=True),
     LOW, LOW, ""),
    ("softmax fp32", lambda t: torch.softmax(t["x"], -1), F32, F32, ""),
    ("softmax", lambda t: torch.softmax(t["x_low"], -1), F32, LOW,
     "CUDA computes softmax in fp32 (fp32_set_opt_dtype); CPU autocast has no softmax policy"),
    ("log_softmax", lambda t: torch.log_softmax(t["x_low"], -1), F32, LOW,
     "CUDA computes log_softmax in fp32 (fp32_set_opt_dtype); CPU autocast has no policy"),
    ("layer_norm", lambda t: F.layer_norm(t["x_low"], (16,), t["b"], t["b"]), F32, LOW,
     "CUDA's layer_norm runs in fp32 (fp32 policy); CPU autocast has none"),
    ("group_norm", lambda t: F.group_norm(t["img_low"], 2, t["c4"], t["c4"]), F32, LOW,
     "CUDA's group_norm runs in fp32 (fp32 policy); CPU autocast has none"),
    ("batch_norm", lambda t: F.batch_norm(t["img_low"], t["rm"].clone(), t["rv"].clone(),
                                          t["c4"], t["c4"], training=True), LOW, LOW, ""),
    ("cross_entropy", lambda t: F.cross_entropy(t["x_low"], t["tgt"]), F32, F32, ""),
    ("mse_loss", lambda t: F.mse_loss(t["x_low"], t["x"]), F32, F32, ""),
    ("nll_loss", lambda t: F.nll_loss(t["logp_low"], t["tgt"]), F32, F32, ""),
    ("addcmul (promote)", lambda t: torch.addcmul(t["x"], t["x_low"], t["x_low"]), F32, F32, ""),
    ("cat", lambda t: torch.cat([t["x_low"], t["x"]]), F32, F32, ""),
    ("stack", lambda t: torch.stack([t["x_low"], t["x"]]), F32, F32, ""),
    ("sum", lambda t: t["x_low"].sum(), F32, LOW,
     "CUDA sums into fp32 (fp32_set_opt_dtype); CPU autocast has no sum policy"),
    ("cumsum", lambda t: torch.cumsum(t["x_low"], 0), F32, LOW,
     "CUDA accumulates in fp32 (fp32_set_opt_dtype); CPU autocast has no cumsum policy"),
    ("softmax with dtype", lambda t: torch.softmax(t["x_low"], -1, dtype=F64), F64, F64, ""),
    ("sum of float64", lambda t: t["x"].double().sum(), F64, F64, ""),
]


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16])
def test_op_dtypes_inside_autocast(low, no_fallback):
    resolve = lambda d: low if d == LOW else d  # noqa: E731
    cpu_inputs = _inputs(low)
    loom_inputs = {k: v.to("loom") for k, v in cpu_inputs.items()}
    for name, op, loom_dtype, cpu_dtype, why in CASES:
        assert (loom_dtype != cpu_dtype) == bool(why), name
        with torch.autocast("cpu", dtype=low):
            got_cpu = op(cpu_inputs).dtype
        with torch.autocast("loom", dtype=low):
            got_loom = op(loom_inputs)
        assert got_loom.device.type == "loom"
        assert got_cpu == resolve(cpu_dtype), f"{name}: CPU autocast now gives {got_cpu}"
        assert got_loom.dtype == resolve(loom_dtype), f"{name}: loom gives {got_loom.dtype}"


def test_binary_cross_entropy_is_banned_as_on_cuda(no_fallback):
    p = torch.rand(6, device="loom")
    t = torch.rand(6, device="loom")
    with torch.autocast("loom"):
        with pytest.raises(RuntimeError,
                           match="(?s)unsafe to autocast.*binary_cross_entropy_with_logits"):
            F.binary_cross_entropy(p, t)
        with pytest.raises(RuntimeError, match="BCELoss are unsafe to autocast"):
            nn.BCELoss()(p, t)
        assert F.binary_cross_entropy_with_logits(p, t).dtype == torch.float32
    assert F.binary_cross_entropy(p, t).dtype == torch.float32  # outside autocast: allowed


@torch.library.custom_op("loom_amp_test::scaled_add", mutates_args=(), device_types="loom")
def scaled_add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + 2 * b


@scaled_add.register_fake
def _(a, b):
    return torch.empty_like(a)


def test_register_autocast_on_a_custom_op(no_fallback):
    a = torch.randn(5, device="loom")
    b = torch.randn(5, device="loom")
    with torch.autocast("loom"):
        assert scaled_add(a, b).dtype == torch.float32  # no rule yet: no cast
    torch.library.register_autocast("loom_amp_test::scaled_add", "loom", torch.float16)
    with torch.autocast("loom"):  # the rule casts, whatever autocast's own dtype
        out = scaled_add(a, b)
    assert out.dtype == torch.float16 and out.device.type == "loom"
    torch.testing.assert_close(out.cpu(), a.cpu().half() + 2 * b.cpu().half())
    assert scaled_add(a, b).dtype == torch.float32  # outside autocast


# ---- training under autocast against the CPU ---------------------------------

class TinyGPT(nn.Module):
    """Token and position embeddings, one pre-norm block with causal
    attention and a GELU MLP, a final norm and an untied head."""

    def __init__(self, vocab=48, d=32, heads=2, seq=12):
        super().__init__()
        self.heads = heads
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.ln1, self.ln2, self.lnf = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        # No bias on the keys: softmax ignores it, so its gradient is pure
        # rounding noise, which AdamW would turn into updates of random sign.
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        B, T = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, -1))
        x = x + self.out(F.gelu(self.fc(self.ln2(x))))
        return self.head(self.lnf(x)).flatten(0, 1)


def tiny_cnn():
    # The convolutions before batch norm have no bias, which the norm would
    # cancel (its gradient would be rounding noise).
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))


def gpt_batches(steps=4):
    g = torch.Generator().manual_seed(5)
    return [(torch.randint(0, 48, (4, 12), generator=g),
             torch.randint(0, 48, (48,), generator=g)) for _ in range(steps)]


def cnn_batches(steps=4):
    g = torch.Generator().manual_seed(6)
    return [(torch.randn(6, 3, 12, 12, generator=g), torch.randint(0, 10, (6,), generator=g))
            for _ in range(steps)]


def train(model, device, batches, dtype, make_opt, scaled, amp=True):
    """A few steps under autocast (with a GradScaler for float16), or in plain
    fp32 with amp=False: the losses, the parameter updates (final minus
    initial, all parameters in one vector), the scale at the end."""
    initial = [p.detach().clone() for p in model.parameters()]
    model = copy.deepcopy(model).to(device)
    opt = make_opt(model.parameters())
    # 2**8 keeps the scaled fp16 gradients of these models far from overflow,
    # so neither run skips a step; growth every 2 steps exercises the update.
    scaler = torch.amp.GradScaler(device, init_scale=2.0**8, growth_interval=2, enabled=scaled)
    losses = []
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=dtype, enabled=amp):
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
        assert loss.dtype == torch.float32
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    update = torch.cat([(p.detach().cpu() - p0).flatten()
                        for p, p0 in zip(model.parameters(), initial)])
    return torch.tensor(losses), update, scaler.get_scale() if scaled else None


# The tolerances come from the lower precision itself. The two runs round
# differently, not by accident: the CPU's autocast keeps softmax and the
# norms in the low precision where loom, as CUDA, computes them in fp32, and
# the matmuls accumulate in other orders.
# - Losses: each comes out of a few roundings of O(1) quantities to the unit
#   roundoff u (2**-8 for bfloat16, 2**-11 for float16) plus the drift of the
#   weights over the steps before it: rtol 2u (they agree to about 0.3u).
# - Parameters: the gradients carry about u of relative noise per element,
#   which AdamW amplifies where a gradient is small, so a bound in u alone
#   would depend on the model. The CPU's own autocast run measures it: its
#   update departs from its fp32 run's by the effect of the low precision.
#   loom's update must lie within twice that distance of the CPU autocast
#   run's (it lies within about 1x for the GPT, 0.5x and 0.1x for the CNN).
UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def check_against_cpu(model, batches, dtype, make_opt):
    scaled = dtype == torch.float16
    u = UNIT_ROUNDOFF[dtype]
    lc, dc, sc = train(model, "cpu", batches, dtype, make_opt, scaled)
    ll, dl, sl = train(model, "loom", batches, dtype, make_opt, scaled)
    _, d32, _ = train(model, "cpu", batches, dtype, make_opt, False, amp=False)
    torch.testing.assert_close(ll, lc, rtol=2 * u, atol=0)
    assert sl == sc  # the same scale: growth on the same steps, no skipped step
    noise = (dc - d32).norm()
    assert noise > 0  # the CPU's autocast run did round
    assert (dl - dc).norm() <= 2 * noise, (
        f"loom's update is {(dl - dc).norm() / noise:.2f}x the low precision's own effect "
        "away from the CPU autocast run's")
    return ll


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpt_trains_under_autocast_like_cpu(dtype, no_fallback):
    torch.manual_seed(0)
    losses = check_against_cpu(TinyGPT(), gpt_batches(), dtype,
                               lambda p: torch.optim.AdamW(p, lr=3e-3))
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cnn_with_batch_norm_trains_under_autocast_like_cpu(dtype, no_fallback):
    torch.manual_seed(0)
    losses = check_against_cpu(tiny_cnn(), cnn_batches(), dtype,
                               lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9))
    assert losses[-1] < losses[0]


# ---- GradScaler: skipped steps, backoff and growth ----------------------------

# growth_interval 2: two clean steps double the scale, a bad one halves it.
SCHEDULE = ["ok", "ok", "bad", "ok", "ok", "ok", "bad", "bad", "ok"]
EXPECTED_SCALE = [1024, 2048, 1024, 1024, 2048, 2048, 1024, 512, 512]
EXPECTED_TRACKER = [1, 0, 0, 1, 0, 1, 0, 0, 1]


@pytest.mark.parametrize("make_opt", [
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    lambda p: torch.optim.AdamW(p, lr=1e-2, fused=True),  # takes found_inf itself
], ids=["sgd", "fused_adamw"])
@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_grad_scaler_skips_bad_steps_like_cpu(bad, make_opt, no_fallback):
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(8, 6), nn.Tanh(), nn.Linear(6, 4))
    x, y = torch.randn(16, 8), torch.randn(16, 4)
    history = {}
    for device in ("cpu", "loom"):
        m = copy.deepcopy(model).to(device)
        opt = make_opt(m.parameters())
        scaler = torch.amp.GradScaler(device, init_scale=1024.0, growth_interval=2)
        steps = []
        for kind in SCHEDULE:
            opt.zero_grad()
            loss = F.mse_loss(m(x.to(device)), y.to(device))
            scaler.scale(loss).backward()
            if kind == "bad":
                m[2].weight.grad[1, 2] = bad
            before = [p.detach().clone() for p in m.parameters()]
            scaler.step(opt)
            scaler.update()
            after = [p.detach().clone() for p in m.parameters()]
            moved = any(not torch.equal(a, b) for a, b in zip(after, before))
            assert moved == (kind == "ok"), (device, kind)
            steps.append((scaler.get_scale(), scaler._growth_tracker.item(),
                          [p.cpu() for p in after]))
        history[device] = steps
    assert [s for s, _, _ in history["loom"]] == EXPECTED_SCALE
    assert [t for _, t, _ in history["loom"]] == EXPECTED_TRACKER
    for (sl, tl, pl), (sc, tc, pc) in zip(history["loom"], history["cpu"]):
        assert (sl, tl) == (sc, tc)
        for a, b in zip(pl, pc):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
