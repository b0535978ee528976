// PyTorch's inference fast paths for transformers on loom:
// nn.TransformerEncoderLayer's _transformer_encoder_layer_fwd and
// nn.MultiheadAttention's _native_multi_head_attention. ATen's own
// implementations of those two are written against device-generic ATen
// calls, so loom runs them as they are; what they reach that loom lacked
// (_transform_bias_rescale_qkv, _masked_softmax, _addmm_activation) is
// composed here from loom ops, each rounding where the CPU kernel rounds.
#include <ATen/ATen.h>
#include <ATen/ops/_native_multi_head_attention_native.h>
#include <ATen/ops/_transformer_encoder_layer_fwd_native.h>
#include <c10/core/WrapDimMinimal.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

#include "ops/nn/nn_util.h"
#include "register.h"

namespace torch_loom::nn {
namespace {

void check_dense(const at::Tensor& t, const char* op, const char* what) {
  TORCH_CHECK(!t.is_nested(), op, ": nested tensors are not supported on loom (", what, ")");
}

// ---- _transform_bias_rescale_qkv --------------------------------------------

// The CPU kernel computes in the op-math type (float for half and bfloat16)
// and rounds once to the input's type at the end: q = (x + b) * s with
// s = 1 / sqrt(dim_per_head) in that type, k = x + b, v = x + b.
at::ScalarType opmath_type(at::ScalarType type) {
  return type == at::kHalf || type == at::kBFloat16 ? at::kFloat : type;
}

double inv_sqrt_head_dim(at::ScalarType opmath, int64_t dim_per_head) {
  if (opmath == at::kFloat)
    return static_cast<float>(1.0 / std::sqrt(static_cast<float>(dim_per_head)));
  return 1.0 / std::sqrt(static_cast<double>(dim_per_head));
}

// qkv [B, T, 3D] + bias [3D] -> q, k, v, each [B, num_heads, T, D / num_heads]
// and q scaled, rounding as the CPU does. The three are views of one
// buffer, as on the CPU.
std::tuple<at::Tensor, at::Tensor, at::Tensor> transform_bias_rescale_qkv(
    const at::Tensor& qkv, const at::Tensor& qkv_bias, int64_t num_heads) {
  constexpr const char* op = "_transform_bias_rescale_qkv";
  check_dense(qkv, op, "qkv");
  check_float(qkv, op);
  TORCH_CHECK(qkv.dim() == 3, op, ": expected a 3-D qkv [B, T, 3 * D], got ", qkv.dim(), "-D");
  TORCH_CHECK(qkv_bias.scalar_type() == qkv.scalar_type(), op, ": expected qkv_bias of dtype ",
              qkv.scalar_type(), " but got ", qkv_bias.scalar_type());
  check_loom(qkv_bias, qkv, op, "qkv_bias");
  const int64_t B = qkv.size(0), T = qkv.size(1), three_d = qkv.size(2);
  TORCH_CHECK(three_d % 3 == 0, op, ": the last dim of qkv (", three_d,
              ") is not a multiple of 3");
  const int64_t D = three_d / 3;
  TORCH_CHECK(num_heads > 0 && D % num_heads == 0, op, ": embed_dim ", D,
              " does not divide into num_heads = ", num_heads);
  TORCH_CHECK(qkv_bias.dim() == 1 && qkv_bias.size(0) == three_d, op,
              ": expected qkv_bias of shape [", three_d, "], got ", qkv_bias.sizes());
  const int64_t dh = D / num_heads;
  const at::ScalarType acc = opmath_type(qkv.scalar_type());
  at::Tensor x = at::add(qkv.to(acc), qkv_bias.to(acc));
  x.narrow(2, 0, D).mul_(inv_sqrt_head_dim(acc, dh));
  at::Tensor q_k_v = at::empty({3, B, num_heads, T, dh}, qkv.options());
  q_k_v.copy_(x.reshape({B, T, 3, num_heads, dh}).permute({2, 0, 3, 1, 4}));
  return std::make_tuple(q_k_v[0], q_k_v[1], q_k_v[2]);
}

// ---- _masked_softmax --------------------------------------------------------

// The mask as a bool view of input's shape (no copy): mask_type 0 is an
// attention mask [L, L] over [B, H, L, L] scores, 1 a key padding mask
// [B, L], 2 a mask of the input's own shape; a mask that is not 2-D, or an
// input that is not 4-D, is always of type 2 (the CPU's rules).
at::Tensor mask_like(const at::Tensor& input, const at::Tensor& mask,
                     std::optional<int64_t> mask_type) {
  constexpr const char* op = "_masked_softmax";
  TORCH_CHECK(mask.scalar_type() == at::kBool, op, ": mask should be a boolean tensor, got ",
              mask.scalar_type());
  if (mask.dim() != 2 || input.dim() != 4) mask_type = 2;
  TORCH_CHECK(mask_type.has_value(), op, ": mask_type should be defined for a 2-D mask over "
              "4-D input: 0 (src_mask), 1 (src_key_padding_mask) or 2 (default_mask)");
  const int64_t type = *mask_type;
  TORCH_CHECK(type == 0 || type == 1 || type == 2, op,
              ": mask_type should be 0 (src_mask), 1 (src_key_padding_mask) or 2 "
              "(default_mask), got ", type);
  if (type == 2) {
    TORCH_CHECK(input.sizes() == mask.sizes(), op,
                ": for mask_type == 2 the mask shape should match the input shape ",
                input.sizes(), ", got ", mask.sizes());
    return mask;
  }
  const int64_t B = input.size(0), L = input.size(2), S = input.size(3);
  if (type == 1) {
    TORCH_CHECK(mask.size(0) == B && mask.size(1) == L && L == S, op,
                ": for mask_type == 1 the mask shape should be (B, L) = (", B, ", ", L,
                ") over input [B, H, L, L], got mask ", mask.sizes(), " over input ",
                input.sizes());
    return mask.view({B, 1, 1, S}).expand(input.sizes());
  }
  TORCH_CHECK(mask.size(0) == L && mask.size(1) == L && L == S, op,
              ": for mask_type == 0 the mask shape should be (L, L) = (", L, ", ", L,
              ") over input [B, H, L, L], got mask ", mask.sizes(), " over input ",
              input.sizes());
  return mask.view({1, 1, L, S}).expand(input.sizes());
}

// Softmax over the entries the mask leaves (mask true = left out). Masked
// entries become -inf, whose exp is exactly 0, and loom's softmax then gives
// what the CPU's masked kernel gives, edge cases included: a row with
// nothing left, a NaN left, or a largest entry left that is +-inf, is NaN
// throughout; masked entries are 0 in every other row.
at::Tensor masked_softmax(const at::Tensor& input, const at::Tensor& mask,
                          std::optional<int64_t> dim, std::optional<int64_t> mask_type) {
  constexpr const char* op = "_masked_softmax";
  check_dense(input, op, "input");
  check_float(input, op);
  check_loom(mask, input, op, "mask");
  const at::Tensor m = mask_like(input, mask, mask_type);
  const int64_t d = c10::maybe_wrap_dim(dim.value_or(input.dim() - 1), input.dim());
  at::Tensor out =
      at::where(m, at::scalar_tensor(-std::numeric_limits<double>::infinity(), input.options()),
                input);
  return at::_softmax_out(out, out, d, false);
}

// ---- _addmm_activation ------------------------------------------------------

// addmm followed by GELU (exact, the erf form) or ReLU, in place on the
// result: what the CPU kernel does, the FFN of the encoder fast path.
at::Tensor& addmm_activation_out(const at::Tensor& self, const at::Tensor& mat1,
                                 const at::Tensor& mat2, const at::Scalar& beta,
                                 const at::Scalar& alpha, bool use_gelu, at::Tensor& out) {
  at::addmm_out(out, self, mat1, mat2, beta, alpha);
  return use_gelu ? at::gelu_(out) : at::relu_(out);
}

at::Tensor addmm_activation(const at::Tensor& self, const at::Tensor& mat1,
                            const at::Tensor& mat2, const at::Scalar& beta,
                            const at::Scalar& alpha, bool use_gelu) {
  at::Tensor out = at::addmm(self, mat1, mat2, beta, alpha);
  return use_gelu ? at::gelu_(out) : at::relu_(out);
}

// ---- the fast paths themselves ----------------------------------------------

std::tuple<at::Tensor, at::Tensor> native_multi_head_attention(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, int64_t embed_dim,
    int64_t num_head, const at::Tensor& qkv_weight, const at::Tensor& qkv_bias,
    const at::Tensor& proj_weight, const at::Tensor& proj_bias,
    const std::optional<at::Tensor>& mask, bool need_weights, bool average_attn_weights,
    std::optional<int64_t> mask_type) {
  constexpr const char* op = "_native_multi_head_attention";
  check_dense(query, op, "query");
  check_dense(key, op, "key");
  check_dense(value, op, "value");
  check_float(query, op);
  TORCH_CHECK(num_head > 0, op, ": num_head must be positive, got ", num_head);
  for (const at::Tensor* t : {&key, &value, &qkv_weight, &qkv_bias, &proj_weight, &proj_bias})
    check_loom(*t, query, op, "every tensor argument");
  if (mask.has_value()) check_loom(*mask, query, op, "mask");
  return at::native::native_multi_head_attention_cpu(
      query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight, proj_bias,
      mask, need_weights, average_attn_weights, mask_type);
}

at::Tensor transformer_encoder_layer_fwd(
    const at::Tensor& src, int64_t embed_dim, int64_t num_heads, const at::Tensor& qkv_weight,
    const at::Tensor& qkv_bias, const at::Tensor& proj_weight, const at::Tensor& proj_bias,
    bool use_gelu, bool norm_first, double eps, const at::Tensor& norm_weight_1,
    const at::Tensor& norm_bias_1, const at::Tensor& norm_weight_2,
    const at::Tensor& norm_bias_2, const at::Tensor& ffn_weight_1,
    const at::Tensor& ffn_bias_1, const at::Tensor& ffn_weight_2,
    const at::Tensor& ffn_bias_2, const std::optional<at::Tensor>& mask,
    std::optional<int64_t> mask_type) {
  constexpr const char* op = "_transformer_encoder_layer_fwd";
  check_dense(src, op, "src");
  check_float(src, op);
  TORCH_CHECK(src.dim() == 3, op, ": expected a 3-D src [B, T, D], got ", src.dim(), "-D");
  for (const at::Tensor* t : {&qkv_weight, &qkv_bias, &proj_weight, &proj_bias, &norm_weight_1,
                              &norm_bias_1, &norm_weight_2, &norm_bias_2, &ffn_weight_1,
                              &ffn_bias_1, &ffn_weight_2, &ffn_bias_2})
    check_loom(*t, src, op, "every tensor argument");
  if (mask.has_value()) check_loom(*mask, src, op, "mask");
  return at::native::transformer_encoder_layer_forward(
      src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu,
      norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1,
      ffn_bias_1, ffn_weight_2, ffn_bias_2, mask, mask_type);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "_transform_bias_rescale_qkv", transform_bias_rescale_qkv);
  LOOM_IMPL(m, "_masked_softmax", masked_softmax);
  LOOM_IMPL(m, "_addmm_activation", addmm_activation);
  LOOM_IMPL(m, "_addmm_activation.out", addmm_activation_out);
  LOOM_IMPL(m, "_native_multi_head_attention", native_multi_head_attention);
  LOOM_IMPL(m, "_transformer_encoder_layer_fwd", transformer_encoder_layer_fwd);
}

}  // namespace torch_loom::nn
