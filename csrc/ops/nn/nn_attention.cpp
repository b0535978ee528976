// Scaled dot-product attention on loom: SDPA asks _fused_sdp_choice (and,
// under fake tensors, _fused_sdp_choice_stub) which backend to use; we answer "overrideable" for
// what our flash-style kernel covers and "math" otherwise (dropout, grouped
// heads, a mask that needs a gradient), so every call still has a path.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "loom/kernels/attention.h"
#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

// Symbolic sizes throughout: SDPA asks this while torch.compile traces with
// symbolic shapes, and reading concrete sizes would specialize them.
bool same_batch(const at::Tensor& a, const at::Tensor& b) {
  return a.dim() == b.dim() &&
         a.sym_sizes().slice(0, a.dim() - 2) == b.sym_sizes().slice(0, b.dim() - 2);
}

bool kernel_covers(const at::Tensor& q, const at::Tensor& k,
                   const at::Tensor& v, const std::optional<at::Tensor>& mask,
                   double dropout_p) {
  if (dropout_p > 0.0) return false;
  if (!at::isFloatingType(q.scalar_type()) || k.scalar_type() != q.scalar_type() ||
      v.scalar_type() != q.scalar_type())
    return false;
  if (q.dim() < 2 || q.dim() > LOOM_MAX_DIMS || !same_batch(q, k) ||
      !same_batch(q, v))
    return false;
  if (k.sym_size(-1) != q.sym_size(-1) || v.sym_size(-2) != k.sym_size(-2)) return false;
  // As the CPU's and CUDA's fused kernels, only rows of unit stride: others
  // (a channels-last 4-d query) take the math path and its contiguous result.
  if (q.sym_stride(-1) != 1 || k.sym_stride(-1) != 1 || v.sym_stride(-1) != 1) return false;
  if (q.sym_size(-1) > LOOM_ATTENTION_MAX_HEAD_DIM ||
      v.sym_size(-1) > LOOM_ATTENTION_MAX_HEAD_DIM)
    return false;
  if (mask.has_value() && mask->defined()) {
    if (mask->requires_grad()) return false;
    if (mask->scalar_type() != at::kBool && !at::isFloatingType(mask->scalar_type()))
      return false;
  }
  return true;
}

int64_t sdp_choice(const at::Tensor& q, const at::Tensor& k,
                   const at::Tensor& v, const std::optional<at::Tensor>& mask,
                   double dropout_p, bool is_causal,
                   std::optional<double> scale, bool enable_gqa) {
  const bool ok = at::globalContext().userEnabledOverrideableSDP() &&
                  kernel_covers(q, k, v, mask, dropout_p);
  return static_cast<int64_t>(ok ? at::SDPBackend::overrideable
                                 : at::SDPBackend::math);
}

// [..., n, d] -> [BH, n, d]
at::Tensor flat3(const at::Tensor& t) {
  const int64_t n = t.size(-2), d = t.size(-1);
  int64_t bh = 1;
  for (int64_t i = 0; i < t.dim() - 2; ++i) bh *= t.size(i);
  return t.reshape({bh, n, d});
}

// The kernels' view of an operand: a 4-d [B, H, n, d] as it lies (the heads
// of a fused projection are strided views whose batch and head dims do not
// merge, which a flattening would copy), else [BH, n, d].
at::Tensor heads(const at::Tensor& t) { return t.dim() == 4 ? t : flat3(t); }

// Batch times heads: the leading dims of [..., n, d].
int64_t batch_heads(const at::Tensor& t) {
  int64_t bh = 1;
  for (int64_t i = 0; i < t.dim() - 2; ++i) bh *= t.size(i);
  return bh;
}

double scale_of(const at::Tensor& q, std::optional<double> scale) {
  return scale.has_value() ? *scale
                           : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
}

at::ScalarType lse_type(const at::Tensor& q) {
  return q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

std::vector<int64_t> with_last(const at::Tensor& t, int64_t drop,
                               std::initializer_list<int64_t> tail) {
  std::vector<int64_t> s(t.sizes().begin(), t.sizes().end() - drop);
  s.insert(s.end(), tail);
  return s;
}

at::Tensor mask3(const at::Tensor& mask, const at::Tensor& q, int64_t S) {
  if (!mask.defined()) return mask;
  return flat3(mask.expand(with_last(q, 1, {S})));
}

// An output of `sizes` in the layout the meta function gives it
// (empty_like(like) when the shapes agree, else like's stride order;
// torch/_meta_registrations.py, alloc_with_matching_layout and the
// backward's empty_like): compiled graphs are planned with the meta layout
// and check it.
at::Tensor meta_empty(at::IntArrayRef sizes, const at::Tensor& like) {
  if (sizes == like.sizes()) return at::empty_like(like);
  std::vector<int64_t> order(like.dim());
  for (int64_t i = 0; i < like.dim(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return like.stride(a) > like.stride(b); });
  std::vector<int64_t> strides(like.dim());
  int64_t stride = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = stride;
    stride *= sizes[*it];
  }
  return at::empty_strided(sizes, strides, like.options());
}

// An output the kernels wrote as [BH, n, d] rows (`r`, contiguous), in the
// meta layout: a copy unless the layouts agree.
at::Tensor in_meta_layout(const at::Tensor& r, const at::Tensor& like) {
  at::Tensor want = meta_empty(r.sizes(), like);
  if (want.strides() == r.strides()) return r;
  return want.copy_(r);
}

// A fresh output for the kernels to write: in the meta layout where they
// address it as it lies (4-d operands), else contiguous [..., n, d] rows for
// in_meta_layout.
at::Tensor output_like(at::IntArrayRef sizes, const at::Tensor& like) {
  return like.dim() == 4 ? meta_empty(sizes, like) : at::empty(sizes, like.options());
}

// The family's plan for q, k, v and the mask (loom/kernels/attention.h).
loom_attention_plan plan_for(const loom_tensor* qkvm, const char* op) {
  return plan<loom_attention_plan>(op, LOOM_KERNEL("attention.plan"),
                                   c10::ArrayRef<loom_tensor>(qkvm, 4), {});
}

// The bf16 forward over t (sdpa_forward's tensors; the plan chose it only
// without a mask), with the workspaces its plan asks for.
void forward_bf16(const loom_tensor (&t)[6], const loom_scalar (&s)[2],
                  const loom_attention_plan& p, const at::Tensor& q3, const char* op) {
  const int device = q3.device().index();
  const loom_tensor own[5] = {t[0], t[1], t[2], t[4], t[5]};  // no mask
  if (p.forward == LOOM_ATTENTION_BF16_DECODE) {
    launch(op, LOOM_KERNEL("attention.bf16_decode"), own, s, p.forward_range,
           p.forward_grain, device);
    return;
  }
  if (p.pack_range == 0) {
    launch(op, LOOM_KERNEL("attention.bf16_forward"), own, s, p.forward_range,
           p.forward_grain, device);
    return;
  }
  const at::Tensor kp = at::empty({p.k_pack}, q3.options());
  const at::Tensor vp = at::empty({p.v_pack}, q3.options());
  const loom_tensor fused[7] = {t[0], t[1], t[2], t[4], t[5], describe(kp, op), describe(vp, op)};
  launch(op, LOOM_KERNEL("attention.bf16_pack"), fused, s, p.pack_range, p.pack_grain, device);
  launch(op, LOOM_KERNEL("attention.bf16_forward"), fused, s, p.forward_range,
         p.forward_grain, device);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt,
           c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
sdpa_forward(const at::Tensor& query, const at::Tensor& key,
             const at::Tensor& value, const std::optional<at::Tensor>& bias,
             double dropout_p, bool is_causal, bool return_debug_mask,
             std::optional<double> scale) {
  static const char* op = "_scaled_dot_product_fused_attention_overrideable";
  TORCH_CHECK(kernel_covers(query, key, value, bias, dropout_p), op,
              ": unsupported arguments for the loom attention kernel (dtype ",
              query.scalar_type(), ", dropout_p ", dropout_p, ")");
  check_loom(key, query, op, "key");
  check_loom(value, query, op, "value");
  const int64_t L = query.size(-2), S = key.size(-2), Ev = value.size(-1);
  const at::Tensor mask = bias.has_value() ? mask3(*bias, query, S) : at::Tensor();
  check_loom(mask, query, op, "attn_mask");
  at::Tensor out = output_like(with_last(query, 1, {Ev}), query);
  bool placed = query.dim() == 4;  // out is in the meta layout already
  // [B, H, L] as the meta function sizes it (B = 1 for a 3-d query)
  std::vector<int64_t> lse_sizes = with_last(query, 1, {});
  if (query.dim() == 3) lse_sizes.insert(lse_sizes.begin(), 1);
  at::Tensor lse = at::empty(lse_sizes, query.options().dtype(lse_type(query)));
  const int64_t BH = batch_heads(query);
  if (BH * L > 0 && Ev > 0) {
    // held until the launches are enqueued: a flattening may be a copy
    const at::Tensor q4 = heads(query), k4 = heads(key), v4 = heads(value), o4 = heads(out);
    const loom_tensor t[6] = {describe(q4, op), describe(k4, op), describe(v4, op),
                              describe_opt(mask, op), describe(o4, op),
                              describe(lse.view({BH, L}), op)};
    const loom_scalar s[2] = {scalar_f(scale_of(query, scale)), scalar_i(is_causal)};
    const loom_attention_plan p = plan_for(t, op);
    if (p.forward == LOOM_ATTENTION_BF16 || p.forward == LOOM_ATTENTION_BF16_DECODE) {
      // the bf16 tiles read and write [BH, n, d] rows
      const at::Tensor q3 = flat3(query), k3 = flat3(key), v3 = flat3(value);
      const at::Tensor rows = at::empty(with_last(query, 1, {Ev}), query.options());
      const loom_tensor t3[6] = {describe(q3, op), describe(k3, op), describe(v3, op), t[3],
                                 describe(flat3(rows), op), t[5]};
      forward_bf16(t3, s, p, q3, op);
      out = rows, placed = false;
    } else {
      launch(op,
             p.forward == LOOM_ATTENTION_BLOCKED ? LOOM_KERNEL("attention.blocked_forward")
                                                 : LOOM_KERNEL("attention.forward"),
             t, s, p.forward_range, p.forward_grain, query.device().index());
    }
  }
  // The other outputs as the meta function gives them: no cumulative
  // sequence lengths or debug mask, and scalar (unused) Philox seed and offset.
  const auto scalar = at::empty({}, query.options().dtype(at::kLong));
  return {placed ? out : in_meta_layout(out, query), lse, at::Tensor(), at::Tensor(),
          c10::SymInt(L), c10::SymInt(S), scalar, scalar, at::Tensor()};
}

// The backward's kernels: dq, dk, dv written where they lie (4-d operands:
// any strides; else contiguous [..., n, d] rows, which flat3 views).
void backward_kernels(const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
                      const at::Tensor& value, const at::Tensor& bias, const at::Tensor& out,
                      const at::Tensor& logsumexp, bool is_causal, std::optional<double> scale,
                      const at::Tensor& dq, const at::Tensor& dk, const at::Tensor& dv,
                      const char* op) {
  const int64_t L = query.size(-2), S = key.size(-2);
  const at::Tensor q3 = heads(query), k3 = heads(key), v3 = heads(value);
  const at::Tensor mask = mask3(bias, query, S);
  const int64_t BH = batch_heads(query);
  const at::Tensor go3 = heads(grad_out), o3 = heads(out);
  const at::Tensor lse2 = logsumexp.reshape({BH, L});
  at::Tensor delta = at::empty({BH, L}, query.options().dtype(lse_type(query)));
  const loom_scalar s[2] = {scalar_f(scale_of(query, scale)), scalar_i(is_causal)};
  const auto dev = query.device().index();
  const loom_tensor qkvm[4] = {describe(q3, op), describe(k3, op), describe(v3, op),
                               describe_opt(mask, op)};
  const loom_attention_plan p = plan_for(qkvm, op);
  const bool blocked = p.backward == LOOM_ATTENTION_BLOCKED;
  {
    const loom_tensor t[9] = {describe(go3, op), describe(q3, op), describe(k3, op),
                              describe(v3, op), describe_opt(mask, op), describe(o3, op),
                              describe(lse2, op), describe(heads(dq), op),
                              describe(delta, op)};
    launch(op,
           blocked ? LOOM_KERNEL("attention.blocked_backward_q")
                   : LOOM_KERNEL("attention.backward_q"),
           t, s, p.backward_q_range, p.backward_q_grain, dev);
  }
  {
    const loom_tensor t[9] = {describe(go3, op), describe(q3, op), describe(k3, op),
                              describe(v3, op), describe_opt(mask, op), describe(lse2, op),
                              describe(delta, op), describe(heads(dk), op),
                              describe(heads(dv), op)};
    launch(op,
           blocked ? LOOM_KERNEL("attention.blocked_backward_kv")
                   : LOOM_KERNEL("attention.backward_kv"),
           t, s, p.backward_kv_range, p.backward_kv_grain, dev);
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& bias,
    std::array<bool, 4> grad_input_mask, const at::Tensor& out,
    const at::Tensor& logsumexp, const at::Tensor& cum_seq_q,
    const at::Tensor& cum_seq_k, c10::SymInt max_q, c10::SymInt max_k,
    double dropout_p, bool is_causal, const at::Tensor& philox_seed,
    const at::Tensor& philox_offset, std::optional<double> scale) {
  static const char* op = "_scaled_dot_product_fused_attention_overrideable_backward";
  TORCH_CHECK(dropout_p == 0.0, op, ": dropout is not supported by the loom kernel");
  at::Tensor dq = output_like(query.sizes(), query);
  at::Tensor dk = output_like(key.sizes(), key);
  at::Tensor dv = output_like(value.sizes(), value);
  if (batch_heads(query) == 0 || query.size(-2) == 0 || key.size(-2) == 0) {
    dq = at::zeros_like(query), dk = at::zeros_like(key), dv = at::zeros_like(value);
    return {dq, dk, dv, at::Tensor()};
  }
  backward_kernels(grad_out, query, key, value, bias, out, logsumexp, is_causal, scale, dq, dk,
                   dv, op);
  if (query.dim() == 4) return {dq, dk, dv, at::Tensor()};  // written in place
  return {in_meta_layout(dq, query), in_meta_layout(dk, key), in_meta_layout(dv, value),
          at::Tensor()};
}

// loom::sdpa_backward_into: the backward writing dq, dk, dv into tensors the
// caller gives (for the compiler: views of one buffer, the gradient of the
// fused projection the heads were split from, so that no concatenation
// copies them there).
void sdpa_backward_into(const at::Tensor& grad_out, const at::Tensor& query,
                        const at::Tensor& key, const at::Tensor& value,
                        const std::optional<at::Tensor>& bias_, const at::Tensor& out,
                        const at::Tensor& logsumexp, bool is_causal,
                        std::optional<double> scale, const at::Tensor& dq,
                        const at::Tensor& dk, const at::Tensor& dv) {
  static const char* op = "loom::sdpa_backward_into";
  const at::Tensor bias = value_or_undefined(bias_);
  TORCH_CHECK(kernel_covers(query, key, value, bias, 0.0), op,
              ": unsupported arguments for the loom attention kernel (dtype ",
              query.scalar_type(), ")");
  const std::pair<const at::Tensor*, const at::Tensor*> pairs[3] = {
      {&dq, &query}, {&dk, &key}, {&dv, &value}};
  const char* names[3] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; ++i) {
    const at::Tensor& g = *pairs[i].first;
    const at::Tensor& like = *pairs[i].second;
    check_loom(g, query, op, names[i]);
    TORCH_CHECK(g.scalar_type() == like.scalar_type() && g.sizes() == like.sizes(), op, ": ",
                names[i], " must be ", like.scalar_type(), " of size ", like.sizes(), ", got ",
                g.scalar_type(), " ", g.sizes());
    TORCH_CHECK(g.dim() == 4 || g.is_contiguous(), op, ": ", names[i],
                " must be 4-d or contiguous");
    TORCH_CHECK(at::has_internal_overlap(g) != at::MemOverlap::Yes, op, ": ", names[i],
                " overlaps itself");
  }
  // Full or partial overlap of dense tensors is refused; interleaved
  // slices of one buffer (not dense: "too hard" to tell) are the intended use.
  for (int i = 0; i < 3; ++i)
    for (int j = i + 1; j < 3; ++j) {
      const at::MemOverlapStatus o = at::get_overlap_status(*pairs[i].first, *pairs[j].first);
      TORCH_CHECK(o != at::MemOverlapStatus::Full && o != at::MemOverlapStatus::Partial, op, ": ",
                  names[i], " and ", names[j], " share memory");
    }
  for (const at::Tensor* t : {&grad_out, &out, &logsumexp}) check_loom(*t, query, op, "operand");
  if (batch_heads(query) == 0 || query.size(-2) == 0 || key.size(-2) == 0) {
    dq.zero_(), dk.zero_(), dv.zero_();
    return;
  }
  backward_kernels(grad_out, query, key, value, bias, out, logsumexp, is_causal, scale, dq, dk,
                   dv, op);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(loom, m) {
  m.def("sdpa_backward_into(Tensor grad_out, Tensor query, Tensor key, Tensor value, "
        "Tensor? attn_bias, Tensor out, Tensor logsumexp, bool is_causal, float? scale, "
        "Tensor(a!) dq, Tensor(b!) dk, Tensor(c!) dv) -> ()");
}

TORCH_LIBRARY_IMPL(loom, PrivateUse1, m) {
  LOOM_IMPL(m, "sdpa_backward_into", sdpa_backward_into);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "_fused_sdp_choice", sdp_choice);
  LOOM_IMPL(m, "_scaled_dot_product_fused_attention_overrideable", sdpa_forward);
  LOOM_IMPL(m, "_scaled_dot_product_fused_attention_overrideable_backward", sdpa_backward);
}

}  // namespace torch_loom::nn

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_loom::nn::sdp_choice)
}  // namespace at::native
