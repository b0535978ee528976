"""bf16 scaled_dot_product_attention without a mask, fused on vdpbf16ps
(AVX512-BF16 CPUs without AMX; on AMX CPUs the same checks reach the tiles):
against the CPU's bf16 SDPA and a float64 reference, odd lengths, head dims
32/64/80, causal, head views of a fused projection, the bf16 rounding of the
weights, and the same bits on 1 and 2 threads."""
import pytest
import torch
import torch.nn.functional as F
from conftest import digest_with_threads, gemm_variant_here
from nn_compare import close, pair

pytestmark = [pytest.mark.usefixtures("no_fallback"), pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")]


def reference64(q, k, v, causal):
    """Attention in float64 of the bf16 inputs."""
    q, k, v = (t.double() for t in (q, k, v))
    s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        L, S = s.shape[-2:]
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("e", [32, 64, 80])
@pytest.mark.parametrize("L,S", [(333, 333), (70, 517), (600, 300), (129, 257)])
def test_bf16_sdpa_against_cpu_and_float64(causal, e, L, S):
    # lengths not multiples of the 32-query and 256-key blocks; Ev != E
    torch.manual_seed(L + S + e)
    ev = 48 if e == 80 else e
    qc, qd = pair(torch.randn(2, 3, L, e).bfloat16())
    kc, kd = pair(torch.randn(2, 3, S, e).bfloat16())
    vc, vd = pair(torch.randn(2, 3, S, ev).bfloat16())
    od = F.scaled_dot_product_attention(qd, kd, vd, is_causal=causal).cpu()
    oc = F.scaled_dot_product_attention(qc, kc, vc, is_causal=causal)
    assert od.dtype == torch.bfloat16 and od.shape == oc.shape
    close(od, oc, torch.bfloat16, scale=2.0)
    # bf16: the weights and the output rounded, each to 2^-9 relative; the
    # outputs are averages of values of size 1
    ref = reference64(qc, kc, vc, causal)
    err = (od.double() - ref).abs().max().item()
    assert err < 2e-2, err
    assert (oc.double() - ref).abs().max().item() < 2e-2


def test_bf16_sdpa_head_views_of_a_fused_projection():
    # q, k, v heads split from one (B, T, 3, H, D) projection: rows strided,
    # heads not mergeable into one stride
    torch.manual_seed(3)
    B, T, H, D = 2, 301, 4, 64
    xc, xd = pair(torch.randn(B, T, 3, H, D).bfloat16())
    parts = [[x[:, :, i].transpose(1, 2) for i in range(3)] for x in (xc, xd)]
    for causal in (False, True):
        oc = F.scaled_dot_product_attention(*parts[0], is_causal=causal)
        od = F.scaled_dot_product_attention(*parts[1], is_causal=causal).cpu()
        close(od, oc, torch.bfloat16, scale=2.0)
        assert (od.double() - reference64(*parts[0], causal)).abs().max().item() < 2e-2


@pytest.mark.skipif(not gemm_variant_here("avx512bf16"), reason="no bf16 pairs here")
def test_bf16_sdpa_rounds_the_weights_to_bf16():
    # one-hot values make each output a weight over its row's sum: with one
    # key block the fused kernel's weights are bf16(exp(s - max)), divided
    # by the sum of the unrounded ones and rounded once; a float64 model of
    # that gives its bits (the float path, unrounded weights, matches ~74%)
    torch.manual_seed(5)
    S, L, E = 200, 96, 64
    q = torch.randn(1, 2, L, E).bfloat16()
    k = torch.randn(1, 2, S, E).bfloat16()
    v = torch.eye(S).bfloat16().expand(1, 2, S, S).contiguous()
    od = F.scaled_dot_product_attention(q.to("loom"), k.to("loom"), v.to("loom")).cpu()
    s = q.double() @ k.double().transpose(-1, -2) / E ** 0.5
    p = torch.exp(s - s.amax(-1, keepdim=True))
    model = (p.bfloat16().double() / p.sum(-1, keepdim=True)).bfloat16()
    same = (od.view(torch.int16) == model.view(torch.int16)).double().mean().item()
    assert same > 0.995, same


_DIGEST_CODE = """
import torch.nn.functional as F
torch.manual_seed(0)
q, k, v = (torch.randn(2, 4, n, 80).bfloat16().to("loom") for n in (333, 333, 333))
add(F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True))
print("DIGEST", h.hexdigest())
"""


def test_bf16_sdpa_same_bits_on_1_and_2_threads():
    assert digest_with_threads(_DIGEST_CODE, 1) == digest_with_threads(_DIGEST_CODE, 2)
