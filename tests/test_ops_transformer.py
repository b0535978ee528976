"""PyTorch's transformer inference fast paths on loom against the CPU:
nn.TransformerEncoder(Layer) (_transformer_encoder_layer_fwd),
nn.MultiheadAttention (_native_multi_head_attention) and what they reach
(_transform_bias_rescale_qkv, _masked_softmax, _addmm_activation), in eval
mode under torch.no_grad(), with the CPU fallback raising during every loom
call, and bad input."""
import contextlib
import copy
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5),
       torch.float64: dict(rtol=1e-10, atol=1e-10),
       torch.bfloat16: dict(rtol=3e-2, atol=3e-2),
       torch.float16: dict(rtol=4e-3, atol=4e-3)}
FLOATS = list(TOL)


class _Dispatched(TorchDispatchMode):
    """Records the name of every aten op that reaches the dispatcher."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def on_loom(expect=None):
    """A loom call under no_grad with the CPU fallback raising, so that any op
    on its path without a loom kernel fails the test; the mode is restored
    afterwards. With `expect`, that op must be among those dispatched: the
    module took its fast path, not the slow one."""
    mode = torch.loom.get_fallback_mode()
    torch.loom.set_fallback_mode("error")
    torch.loom.clear_fallback_ops()
    rec = _Dispatched()
    try:
        with torch.no_grad(), rec:
            yield rec
        torch.loom.synchronize()
    finally:
        torch.loom.set_fallback_mode(mode)
    assert torch.loom.fallback_ops() == {}
    if expect is not None:
        assert expect in rec.ops, f"{expect} was not called: {rec.ops}"


def to_loom(x):
    return x.to("loom") if isinstance(x, torch.Tensor) else x


def close(actual, expected, dtype=torch.float32, scale=1.0):
    tol = {k: v * scale for k, v in TOL[dtype].items()}
    assert actual.device.type == "loom"
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, **tol)


# ---- nn.TransformerEncoder ---------------------------------------------------


def encoder(batch_first, norm_first, activation, layers=2, d=32, heads=4, ff=48):
    torch.manual_seed(1)
    layer = torch.nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, activation=activation,
                                             batch_first=batch_first, norm_first=norm_first)
    return torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()


def encoder_masks(kind, B, T):
    """(mask, src_key_padding_mask) on the CPU for a named case."""
    pad = torch.zeros(B, T, dtype=torch.bool)
    pad[0, T - 2:] = True
    pad[-1, T - 1:] = True
    causal = torch.nn.Transformer.generate_square_subsequent_mask(T)  # float 0 / -inf
    return {"none": (None, None),
            "padding": (None, pad),
            "causal_bool": (causal.isinf(), None),
            "causal_float": (causal, None),
            "both": (causal.isinf(), pad),
            "float_padding": (None, torch.where(pad, float("-inf"), 0.0))}[kind]


@pytest.mark.parametrize("masks", ["none", "padding", "causal_bool", "causal_float", "both",
                                   "float_padding"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [True, False])
def test_encoder(batch_first, norm_first, activation, masks):
    enc = encoder(batch_first, norm_first, activation)
    B, T = 3, 6
    torch.manual_seed(2)
    x = torch.randn(B, T, 32) if batch_first else torch.randn(T, B, 32)
    mask, pad = encoder_masks(masks, B, T)
    with torch.no_grad():
        ref = enc(x, mask=mask, src_key_padding_mask=pad)
    dev = copy.deepcopy(enc).to("loom")
    # batch_first=False takes the modules' slow path, which must be native too
    with on_loom("_transformer_encoder_layer_fwd" if batch_first else None):
        out = dev(x.to("loom"), mask=to_loom(mask), src_key_padding_mask=to_loom(pad))
    close(out, ref)


def test_encoder_layer_with_final_norm_and_odd_sizes():
    # a head dim whose square root is irrational (5), one token, a final norm
    torch.manual_seed(3)
    layer = torch.nn.TransformerEncoderLayer(20, 4, 7, batch_first=True, activation="gelu")
    enc = torch.nn.TransformerEncoder(layer, 3, norm=torch.nn.LayerNorm(20),
                                      enable_nested_tensor=False).eval()
    dev = copy.deepcopy(enc).to("loom")
    for shape in [(2, 1, 20), (1, 9, 20)]:
        x = torch.randn(shape) * 3
        with torch.no_grad():
            ref = enc(x)
        with on_loom("_transformer_encoder_layer_fwd"):
            out = dev(x.to("loom"))
        close(out, ref)


def test_encoder_fully_padded_sequence_is_nan_as_on_the_cpu():
    # A sequence with every key padded has no keys to attend to: the CPU's
    # fast path gives NaN for all of it, and so does loom's.
    enc = encoder(True, False, "relu", layers=1)
    x = torch.randn(2, 4, 32)
    pad = torch.zeros(2, 4, dtype=torch.bool)
    pad[1] = True
    with torch.no_grad():
        ref = enc(x, src_key_padding_mask=pad)
    assert ref[1].isnan().all() and not ref[0].isnan().any()
    dev = copy.deepcopy(enc).to("loom")
    with on_loom("_transformer_encoder_layer_fwd"):
        out = dev(x.to("loom"), src_key_padding_mask=pad.to("loom"))
    close(out, ref)


def test_encoder_empty_batch():
    enc = encoder(True, False, "relu", layers=1)
    dev = copy.deepcopy(enc).to("loom")
    with on_loom():
        out = dev(torch.randn(0, 4, 32, device="loom"))
    assert out.shape == (0, 4, 32) and out.device.type == "loom"


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_encoder_dtypes(dtype):
    enc = encoder(True, False, "gelu").to(dtype)
    x = torch.randn(2, 5, 32).to(dtype)
    _, pad = encoder_masks("padding", 2, 5)
    with torch.no_grad():
        ref = enc(x, src_key_padding_mask=pad)
    dev = copy.deepcopy(enc).to("loom")
    with on_loom("_transformer_encoder_layer_fwd"):
        out = dev(x.to("loom"), src_key_padding_mask=pad.to("loom"))
    # bf16: two layers of rounded GEMMs and norms on either side
    close(out, ref, dtype, scale=2.0 if dtype == torch.bfloat16 else 1.0)


# ---- nn.MultiheadAttention ---------------------------------------------------


def mha_masks(kind, B, L, heads):
    pad = torch.zeros(B, L, dtype=torch.bool)
    pad[0, L - 3:] = True
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool), 1)
    per_head = torch.rand(B * heads, L, L) > 0.7
    per_head[..., 0] = False
    return {"none": (None, None),
            "padding": (None, pad),
            "attn_bool": (causal, None),
            "attn_bool_3d": (per_head, None),
            "both_bool": (causal, pad),
            "attn_float": (torch.randn(L, L), None),  # the slow path: float masks
            "both_float": (torch.where(causal, float("-inf"), 0.0),
                           torch.where(pad, float("-inf"), 0.0))}[kind]


@pytest.mark.parametrize("masks", ["none", "padding", "attn_bool", "attn_bool_3d", "both_bool",
                                   "attn_float", "both_float"])
@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
def test_multihead_attention(masks, need_weights, average):
    torch.manual_seed(4)
    B, L, E, H = 2, 7, 24, 4
    mha = torch.nn.MultiheadAttention(E, H, batch_first=True).eval()
    dev = copy.deepcopy(mha).to("loom")
    x = torch.randn(B, L, E)
    attn_mask, pad = mha_masks(masks, B, L, H)
    kw = dict(need_weights=need_weights, average_attn_weights=average)
    with torch.no_grad():
        ref, ref_w = mha(x, x, x, attn_mask=attn_mask, key_padding_mask=pad, **kw)
    xd = x.to("loom")
    fast = not masks.endswith("float")
    with on_loom("_native_multi_head_attention" if fast else None):
        out, w = dev(xd, xd, xd, attn_mask=to_loom(attn_mask), key_padding_mask=to_loom(pad), **kw)
    close(out, ref)
    if need_weights:
        close(w, ref_w)
    else:
        assert w is None and ref_w is None


def test_multihead_attention_not_batch_first_and_cross_attention():
    # neither takes the fast path; both must still run natively
    torch.manual_seed(5)
    mha = torch.nn.MultiheadAttention(16, 2).eval()
    dev = copy.deepcopy(mha).to("loom")
    q, kv = torch.randn(5, 2, 16), torch.randn(9, 2, 16)
    with torch.no_grad():
        ref = mha(q, q, q)[0], mha(q, kv, kv)[0]
    with on_loom():
        out = dev(*[q.to("loom")] * 3)[0], dev(q.to("loom"), kv.to("loom"), kv.to("loom"))[0]
    close(out[0], ref[0])
    close(out[1], ref[1])


@pytest.mark.parametrize("mask_type", [0, 1, 2])
@pytest.mark.parametrize("need_weights", [False, True])
def test_native_multi_head_attention_direct(mask_type, need_weights):
    # each mask type as the op takes it, float masks included (the op reads
    # nonzero as masked), and key/value that are not query: the projections
    # then go per chunk of the weight
    torch.manual_seed(6)
    B, L, E, H = 2, 5, 16, 2
    q, k, v = (torch.randn(B, L, E) for _ in range(3))
    w, b = torch.randn(3 * E, E) * 0.3, torch.randn(3 * E)
    pw, pb = torch.randn(E, E) * 0.3, torch.randn(E)
    mask = {0: torch.rand(L, L) > 0.6, 1: torch.rand(B, L) > 0.6,
            2: torch.where(torch.rand(B, H, L, L) > 0.6, float("-inf"), 0.0)}[mask_type]
    for args in [(q, q, q), (q, k, k), (q, k, v)]:
        full = args + (E, H, w, b, pw, pb, mask, need_weights, False, mask_type)
        ref = torch._native_multi_head_attention(*full)
        with on_loom("_native_multi_head_attention"):
            out = torch._native_multi_head_attention(*map(to_loom, full))
        close(out[0], ref[0])
        if need_weights:
            close(out[1], ref[1])


def test_multihead_attention_bf16():
    torch.manual_seed(7)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True).eval().bfloat16()
    dev = copy.deepcopy(mha).to("loom")
    x = torch.randn(2, 9, 32).bfloat16()
    pad = torch.zeros(2, 9, dtype=torch.bool)
    pad[1, 6:] = True
    with torch.no_grad():
        ref = mha(x, x, x, key_padding_mask=pad)
    xd = x.to("loom")
    with on_loom("_native_multi_head_attention"):
        out = dev(xd, xd, xd, key_padding_mask=pad.to("loom"))
    close(out[0], ref[0], torch.bfloat16, scale=2.0)
    close(out[1], ref[1], torch.bfloat16)


# ---- nn.TransformerDecoder ---------------------------------------------------


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder(batch_first, norm_first):
    torch.manual_seed(8)
    layer = torch.nn.TransformerDecoderLayer(32, 4, 40, batch_first=batch_first,
                                             norm_first=norm_first, activation="gelu")
    dec = torch.nn.TransformerDecoder(layer, 2).eval()
    dev = copy.deepcopy(dec).to("loom")
    B, T, S = 2, 6, 8
    tgt = torch.randn(B, T, 32) if batch_first else torch.randn(T, B, 32)
    mem = torch.randn(B, S, 32) if batch_first else torch.randn(S, B, 32)
    tgt_mask = torch.nn.Transformer.generate_square_subsequent_mask(T).isinf()
    tgt_pad = torch.zeros(B, T, dtype=torch.bool)
    tgt_pad[1, T - 1] = True
    mem_pad = torch.zeros(B, S, dtype=torch.bool)
    mem_pad[0, S - 3:] = True
    kw = dict(tgt_mask=tgt_mask, tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=mem_pad)
    with torch.no_grad():
        ref = dec(tgt, mem, **kw)
    # the self-attention blocks take the MHA fast path when batch_first
    with on_loom("_native_multi_head_attention" if batch_first else None):
        out = dev(tgt.to("loom"), mem.to("loom"), **{k: v.to("loom") for k, v in kw.items()})
    close(out, ref)


# ---- _masked_softmax ---------------------------------------------------------


def masked_softmax_agrees(x, mask, dim, mask_type, dtype=torch.float32):
    # The CPU kernel writes its result as if the input were contiguous into
    # an output laid out like the input, which scrambles a strided input's
    # result; it is compared here on contiguous copies, the op's meaning.
    ref = torch._masked_softmax(x.contiguous(), mask.contiguous(), dim, mask_type)
    with on_loom():
        out = torch._masked_softmax(x.to("loom"), mask.to("loom"), dim, mask_type)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    assert torch.equal(out.cpu().isnan(), ref.isnan())
    close(out, ref, dtype)
    return out


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mask_type", [0, 1, 2])
@pytest.mark.parametrize("dim", [3, -1, None, 2, 1])
def test_masked_softmax_mask_types(dtype, mask_type, dim):
    torch.manual_seed(9)
    B, H, L = 2, 3, 5
    x = (torch.randn(B, H, L, L) * 3).to(dtype)
    mask = {0: torch.rand(L, L) > 0.5, 1: torch.rand(B, L) > 0.5,
            2: torch.rand(B, H, L, L) > 0.5}[mask_type]
    masked_softmax_agrees(x, mask, dim, mask_type, dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_masked_softmax_fully_masked_rows_are_nan(dtype):
    # The CPU gives NaN for a row with nothing left to weigh (its sum is 0),
    # for the whole row; rows beside it are untouched.
    x = torch.randn(2, 2, 4, 4).to(dtype)
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[1] = True
    out = masked_softmax_agrees(x, mask, 3, 0, dtype).cpu()
    assert out[:, :, 1].isnan().all() and not out[:, :, [0, 2, 3]].isnan().any()
    pad = torch.zeros(2, 4, dtype=torch.bool)
    pad[0] = True  # every key of batch 0
    out = masked_softmax_agrees(x, pad, -1, 1, dtype).cpu()
    assert out[0].isnan().all() and not out[1].isnan().any()


@pytest.mark.parametrize("dtype", FLOATS)
def test_masked_softmax_special_values(dtype):
    # What the mask hides never matters (NaN, inf); what it leaves does: a NaN,
    # a largest entry of +inf, or only -inf left make the row NaN, as on the
    # CPU, while a -inf beside finite entries weighs 0.
    x = torch.randn(1, 1, 6, 5).to(dtype)
    mask = torch.zeros(1, 1, 6, 5, dtype=torch.bool)
    x[0, 0, 0, 1], mask[0, 0, 0, 1] = float("nan"), True
    x[0, 0, 1, 2], mask[0, 0, 1, 2] = float("inf"), True
    x[0, 0, 2, 3] = float("nan")
    x[0, 0, 3, 4] = float("inf")
    x[0, 0, 4, 0] = float("-inf")
    x[0, 0, 5, :2], mask[0, 0, 5, 2:] = float("-inf"), True
    out = masked_softmax_agrees(x, mask, -1, 2, dtype).cpu()
    assert [bool(out[0, 0, r].isnan().all()) for r in range(6)] == [False, False, True, True,
                                                                    False, True]
    assert out[0, 0, 4, 0] == 0 and out[0, 0, 0, 1] == 0


def test_masked_softmax_other_ranks_and_long_rows():
    # masks that are not 2-D, or input that is not 4-D, are generic whatever
    # mask_type says; rows longer than one launch chunk; a 0-d input
    torch.manual_seed(10)
    x = torch.randn(3, 4, 1000)
    mask = torch.rand(3, 4, 1000) > 0.3
    masked_softmax_agrees(x, mask, -1, 0)
    masked_softmax_agrees(x, mask, 1, None)
    x2, m2 = torch.randn(6, 7), torch.rand(6, 7) > 0.5
    masked_softmax_agrees(x2, m2, 0, 2)
    masked_softmax_agrees(torch.tensor(1.5), torch.tensor(False), None, None)
    masked_softmax_agrees(torch.randn(2, 0, 3), torch.zeros(2, 0, 3, dtype=torch.bool), -1, 2)


def test_masked_softmax_noncontiguous():
    torch.manual_seed(11)
    x = torch.randn(2, 5, 3, 5).transpose(1, 2)  # [2, 3, 5, 5], strided
    mask = (torch.rand(2, 5, 3, 5) > 0.5).transpose(1, 2)
    masked_softmax_agrees(x, mask, -1, 2)
    masked_softmax_agrees(x, mask, 1, 2)
    masked_softmax_agrees(x, (torch.rand(5, 5) > 0.4).t(), -1, 0)
    masked_softmax_agrees(x, (torch.rand(5, 2) > 0.4).t(), 2, 1)


# ---- _transform_bias_rescale_qkv and _addmm_activation ------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("heads,dh", [(2, 8), (4, 5), (3, 7), (1, 1)])
def test_transform_bias_rescale_qkv(dtype, heads, dh):
    # each value is (x + b) rounded, q's then times 1 / sqrt(dh) rounded:
    # the CPU's arithmetic exactly
    torch.manual_seed(12)
    D = heads * dh
    qkv, bias = torch.randn(2, 5, 3 * D).to(dtype), torch.randn(3 * D).to(dtype)
    ref = torch._transform_bias_rescale_qkv(qkv, bias, heads)
    with on_loom():
        out = torch._transform_bias_rescale_qkv(qkv.to("loom"), bias.to("loom"), heads)
    for a, b in zip(out, ref):
        assert a.shape == b.shape == (2, heads, 5, dh) and a.dtype == dtype
        assert torch.equal(a.cpu(), b)


@pytest.mark.parametrize("use_gelu", [False, True])
def test_addmm_activation(use_gelu):
    torch.manual_seed(13)
    b, m1, m2 = torch.randn(6), torch.randn(4, 9), torch.randn(6, 9).t()
    ref = torch._addmm_activation(b, m1, m2, beta=0.5, alpha=2.0, use_gelu=use_gelu)
    with on_loom():
        out = torch._addmm_activation(b.to("loom"), m1.to("loom"), m2.to("loom"), beta=0.5,
                                      alpha=2.0, use_gelu=use_gelu)
        res = torch.empty(0, device="loom")
        torch._addmm_activation(b.to("loom"), m1.to("loom"), m2.to("loom"), use_gelu=use_gelu,
                                out=res)
    close(out, ref)
    close(res, torch._addmm_activation(b, m1, m2, use_gelu=use_gelu))


# ---- bad input ----------------------------------------------------------------


def test_bad_input():
    x = torch.randn(2, 2, 4, 4, device="loom")
    with pytest.raises(RuntimeError, match="boolean"):
        torch._masked_softmax(x, torch.zeros(4, 4, device="loom"), -1, 0)
    with pytest.raises(RuntimeError, match=r"mask_type == 0 .*\(L, L\)"):
        torch._masked_softmax(x, torch.zeros(3, 4, dtype=torch.bool, device="loom"), -1, 0)
    with pytest.raises(RuntimeError, match=r"mask_type == 1 .*\(B, L\)"):
        torch._masked_softmax(x, torch.zeros(3, 4, dtype=torch.bool, device="loom"), -1, 1)
    with pytest.raises(RuntimeError, match="mask_type == 2 .*match"):
        torch._masked_softmax(x, torch.zeros(2, 2, 4, 3, dtype=torch.bool, device="loom"), -1, 2)
    with pytest.raises(RuntimeError, match="mask_type should be 0"):
        torch._masked_softmax(x, torch.zeros(4, 4, dtype=torch.bool, device="loom"), -1, 5)
    with pytest.raises(RuntimeError, match="mask_type should be defined"):
        torch._masked_softmax(x, torch.zeros(4, 4, dtype=torch.bool, device="loom"), -1, None)
    with pytest.raises(NotImplementedError, match="Long"):
        torch._masked_softmax(torch.ones(2, 2, dtype=torch.long, device="loom"),
                              torch.zeros(2, 2, dtype=torch.bool, device="loom"))
    with pytest.raises(RuntimeError, match="num_heads"):
        torch._transform_bias_rescale_qkv(torch.randn(1, 2, 12, device="loom"),
                                          torch.randn(12, device="loom"), 3)
    with pytest.raises(RuntimeError, match="multiple of 3"):
        torch._transform_bias_rescale_qkv(torch.randn(1, 2, 10, device="loom"),
                                          torch.randn(10, device="loom"), 1)
    with pytest.raises(RuntimeError, match="qkv_bias of shape"):
        torch._transform_bias_rescale_qkv(torch.randn(1, 2, 12, device="loom"),
                                          torch.randn(6, device="loom"), 2)
    E = 8
    w, b, pw, pb = (torch.randn(s, device="loom") for s in [(3 * E, E), (3 * E,), (E, E), (E,)])
    q = torch.randn(2, 3, E, device="loom")
    with pytest.raises(RuntimeError, match="embed_dim"):
        torch._native_multi_head_attention(q, q, q, E + 1, 2, w, b, pw, pb)
    with pytest.raises(RuntimeError, match="divide evenly"):
        torch._native_multi_head_attention(q, q, q, E, 3, w, b, pw, pb)
    with pytest.raises(RuntimeError, match="expected 3-D `query`"):
        torch._native_multi_head_attention(q[0], q[0], q[0], E, 2, w, b, pw, pb)
    with pytest.raises(RuntimeError, match="expected .* on loom"):
        torch._native_multi_head_attention(q, q, q, E, 2, w.cpu(), b, pw, pb)
    ln = torch.ones(E, device="loom")
    with pytest.raises(RuntimeError, match="3-D src"):
        torch._transformer_encoder_layer_fwd(q[0], E, 2, w, b, pw, pb, False, False, 1e-5,
                                             ln, ln, ln, ln, pw, pb, pw, pb)


# ---- thread-count independence ---------------------------------------------------

_THREADS_SCRIPT = """
import copy, hashlib, torch
torch.manual_seed(0)
layer = torch.nn.TransformerEncoderLayer(64, 4, 96, batch_first=True, activation="gelu")
enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval().to("loom")
x = torch.randn(4, 40, 64).to("loom")
pad = torch.zeros(4, 40, dtype=torch.bool)
pad[1, 30:] = True
mha = torch.nn.MultiheadAttention(64, 4, batch_first=True).eval().to("loom")
with torch.no_grad():
    outs = [enc(x, src_key_padding_mask=pad.to("loom")), *mha(x, x, x, average_attn_weights=False)]
print(hashlib.sha256(b"".join(o.cpu().numpy().tobytes() for o in outs)).hexdigest())
"""


def test_bitwise_identical_across_thread_counts():
    digests = []
    for threads in ("1", "2"):
        env = dict(os.environ, LOOM_NUM_THREADS=threads, LOOM_FALLBACK="error")
        r = subprocess.run([sys.executable, "-c", _THREADS_SCRIPT], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        digests.append(r.stdout.strip().splitlines()[-1])
    assert digests[0] == digests[1]
