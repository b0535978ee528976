// Reductions on loom: sum, mean, nansum, prod, max/min (values and indices),
// amax/amin (and aminmax), argmax/argmin, var/std (and with mean), norm,
// logsumexp, all/any; and mvlgamma (a sum of lgammas) and trace. The adapter
// resolves dims, output shape and dtype as the CPU backend does, presents
// the input with the reduced dims last and launches "reduce.trailing_dims"; a
// large reduction into few outputs runs in two launches (per-part partials,
// then an ordered combine), so the result never depends on the thread count.
#include <ATen/ATen.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/Resize.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <bitset>
#include <cmath>
#include <cstring>

#include "loom/kernels/reduce.h"
#include "ops/pointwise/pointwise_iter.h"
#include "ops/reduce/reduce_complex.h"
#include "register.h"

namespace torch_loom::reduce {
namespace {

using pw::Args;

enum class Kind {
  kSum, kMean, kNansum, kProd, kMaxMin, kMaxMinAll, kAminmax, kArg,
  kVar, kVarMean, kNorm, kLogsumexp, kAllAny,
};

struct Entry {
  const char* name;
  const char* overloads;
  Kind kind;
  int op;  // loom_reduce_op
};

const Entry kEntries[] = {
    {"sum", "- dim_IntList IntList_out out", Kind::kSum, LOOM_REDUCE_SUM},
    {"mean", "- dim out dtype_out", Kind::kMean, LOOM_REDUCE_MEAN},
    {"nansum", "- out", Kind::kNansum, LOOM_REDUCE_NANSUM},
    {"prod", "- dim_int int_out out", Kind::kProd, LOOM_REDUCE_PROD},
    {"max", "dim dim_max", Kind::kMaxMin, LOOM_REDUCE_MAX},
    {"min", "dim dim_min", Kind::kMaxMin, LOOM_REDUCE_MIN},
    {"max", "- unary_out", Kind::kMaxMinAll, LOOM_REDUCE_MAX},
    {"min", "- unary_out", Kind::kMaxMinAll, LOOM_REDUCE_MIN},
    {"amax", "- out", Kind::kAminmax, LOOM_REDUCE_MAX},
    {"amin", "- out", Kind::kAminmax, LOOM_REDUCE_MIN},
    {"argmax", "- out", Kind::kArg, LOOM_REDUCE_MAX},
    {"argmin", "- out", Kind::kArg, LOOM_REDUCE_MIN},
    {"var", "correction correction_out", Kind::kVar, LOOM_REDUCE_VAR},
    {"std", "correction correction_out", Kind::kVar, LOOM_REDUCE_STD},
    {"var_mean", "correction correction_out", Kind::kVarMean, LOOM_REDUCE_VAR},
    {"std_mean", "correction correction_out", Kind::kVarMean, LOOM_REDUCE_STD},
    {"norm", "Scalar ScalarOpt_dim ScalarOpt_dim_dtype dtype_out out ScalarOpt_dtype ScalarOpt_dtype_out Scalar_out",
     Kind::kNorm, LOOM_REDUCE_NORM},
    {"linalg_vector_norm", "- out", Kind::kNorm, LOOM_REDUCE_NORM},
    {"logsumexp", "- out", Kind::kLogsumexp, LOOM_REDUCE_LOGSUMEXP},
    {"all", "- dim dims out dims_out all_out", Kind::kAllAny, LOOM_REDUCE_ALL},
    {"any", "- dim dims out dims_out all_out", Kind::kAllAny, LOOM_REDUCE_ANY},
};

using DimMask = std::bitset<64>;

// The reduced dims: an int, a list, or absent / empty (all dims).
DimMask dims_of(const Args& a, int64_t ndim) {
  const c10::IValue* v = a.find("dim");
  DimMask mask;
  if (!v || v->isNone()) {
    mask.set();
    return mask;
  }
  if (v->isInt()) {
    mask.set(c10::maybe_wrap_dim(v->toInt(), ndim));
    return mask;
  }
  const auto list = v->toDimVector();
  if (list.empty()) {
    mask.set();
    return mask;
  }
  return at::dim_list_to_bitset(list, ndim);
}

std::vector<int64_t> out_shape(const at::Tensor& self, const DimMask& mask,
                               bool keepdim) {
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (!mask[d]) shape.push_back(self.size(d));
    else if (keepdim) shape.push_back(1);
  }
  return shape;
}

// A result tensor: the given out= (checked and resized) or a new one.
at::Tensor prepare(const at::Tensor& given, const at::Tensor& self,
                   c10::IntArrayRef shape, at::ScalarType dtype,
                   const char* name) {
  if (!given.defined()) return at::empty(shape, self.options().dtype(dtype));
  TORCH_CHECK(given.scalar_type() == dtype, name, ": Expected out tensor to have dtype ",
              dtype, ", but got ", given.scalar_type(), " instead");
  TORCH_CHECK(given.device() == self.device(), name,
              ": Expected out tensor on ", self.device(), " but got ", given.device());
  at::native::resize_output(given, shape);
  return given;
}

// Descriptor of `t`'s kept dims only (t has the output's shape, with or
// without the kept size-1 dims).
loom_tensor describe_kept(const at::Tensor& t, const at::Tensor& self,
                          const DimMask& mask, const char* name) {
  if (!t.defined()) return loom_tensor{};
  loom_tensor d = describe(t, name);
  const bool keepdim = t.dim() == self.dim() && self.dim() > 0 &&
                       (int64_t)(self.dim() - mask.count()) != t.dim();
  if (!keepdim) return d;
  int32_t r = 0;
  for (int64_t k = 0; k < self.dim(); ++k) {
    if (mask[k]) continue;
    d.sizes[r] = t.size(k);
    d.strides[r] = t.stride(k);
    ++r;
  }
  d.rank = r;
  return d;
}

// Runs "reduce.trailing_dims": `out` (values, may be undefined) and `second`
// (indices or mean, may be undefined) have the output shape.
void run(const char* name, int op, double param, const at::Tensor& self,
         const DimMask& mask, const at::Tensor& out, const at::Tensor& second) {
  const at::Tensor& shape_of = out.defined() ? out : second;
  if (shape_of.numel() == 0) return;
  // Input with the kept dims first, then the reduced ones, in order.
  loom_tensor in = describe(self, name);
  int32_t r = 0, nred = 0;
  for (int64_t d = 0; d < self.dim(); ++d)
    if (!mask[d]) { in.sizes[r] = self.size(d); in.strides[r] = self.stride(d); ++r; }
  for (int64_t d = 0; d < self.dim(); ++d)
    if (mask[d]) { in.sizes[r] = self.size(d); in.strides[r] = self.stride(d); ++r; ++nred; }
  in.rank = r;
  if (self.numel() == 0) in.data = nullptr;
  loom_tensor t[4] = {describe_kept(out, self, mask, name), in,
                      describe_kept(second, self, mask, name), loom_tensor{}};
  if (!out.defined()) { t[0] = t[2]; t[0].data = nullptr; }
  if (!second.defined()) { t[2] = t[0]; t[2].data = nullptr; }
  const int64_t outputs = shape_of.numel();
  int64_t count = 1;
  for (int32_t d = in.rank - nred; d < in.rank; ++d) count *= in.sizes[d];
  loom_scalar s[5] = {scalar_i(op), scalar_i(nred), scalar_f(param), scalar_i(1), scalar_i(0)};
  const c10::DeviceIndex dev = self.device().index();
  // Two stages when few outputs each reduce many elements, so the work
  // spreads over the workers; the split depends on the shape alone.
  const int64_t part = loom_reduce_part(count), parts = (count + part - 1) / part;
  if (parts >= 2 && outputs < 256) {
    at::Tensor scratch = at::empty({outputs * parts * LOOM_REDUCE_STATE_DOUBLES},
                                   self.options().dtype(at::kDouble));
    t[3] = describe(scratch, name);
    s[3] = scalar_i(parts);
    s[4] = scalar_i(1);
    // Stage 1 takes the parts in order, each for every output. Outputs next
    // to each other in memory (a column sum: [1M, 16] over dim 0) share a
    // chunk, which reads the part's rows once for all of them: one item per
    // chunk read each line once per output ([1M, 16]: 168 -> 12 ms,
    // [256K, 64]: 326 -> 11 ms, 2 threads, a loaded machine).
    const int32_t keep = in.rank - nred;
    const bool columns = keep > 0 && nred > 0 && in.strides[keep - 1] == 1;
    launch(name, LOOM_KERNEL("reduce.trailing_dims"), t, s, outputs * parts,
           columns ? outputs : 1, dev);
    s[4] = scalar_i(2);
    launch(name, LOOM_KERNEL("reduce.trailing_dims"), t, s, outputs, 64, dev);
    return;
  }
  // About 32K elements per chunk, but runs of neighbouring outputs (a
  // quarter of them, up to 256) when there are plenty, so column sums read
  // long runs of each row in order ([1024, 768] over dim 0: 79 -> 66 us with
  // a quarter rather than a sixteenth). Each output still takes its
  // elements in index order: the chunking never changes a result.
  const int64_t grain = std::max<int64_t>(
      {int64_t{1}, 32768 / std::max<int64_t>(1, count), std::min<int64_t>(256, outputs / 4)});
  launch(name, LOOM_KERNEL("reduce.trailing_dims"), t, s, outputs, grain, dev);
}

// dtype= wins, then an out= tensor's dtype, then the promoted input dtype.
at::ScalarType sum_type(const at::Tensor& self, const Args& a) {
  const c10::IValue* v = a.find("dtype");
  if (v && !v->isNone()) return v->toScalarType();
  const at::Tensor out = a.out();
  if (out.defined()) return out.scalar_type();
  return at::isIntegralType(self.scalar_type(), true) ? at::kLong : self.scalar_type();
}

// Throws for complex input, except to sum and mean.
void check_supported(const at::Tensor& self, const Entry& e) {
  if (self.is_complex() && (e.kind == Kind::kSum || e.kind == Kind::kMean)) return;
  pw::kind_of(self.scalar_type(), e.name);
}

std::vector<at::Tensor> run_entry(const Entry& e, const Args& a) {
  at::Tensor self = a.tensor("self");
  check_supported(self, e);
  const bool keepdim = a.flag("keepdim");
  const int64_t ndim = self.dim();
  switch (e.kind) {
    case Kind::kSum:
    case Kind::kNansum:
    case Kind::kProd:
    case Kind::kMean: {
      const DimMask mask = dims_of(a, ndim);
      at::ScalarType type = sum_type(self, a);
      if (e.kind == Kind::kMean) {
        const c10::IValue* v = a.find("dtype");
        type = v && !v->isNone() ? v->toScalarType()
               : a.out().defined() ? a.out().scalar_type() : self.scalar_type();
        TORCH_CHECK(at::isFloatingType(type) || at::isComplexType(type),
                    "mean(): could not infer output dtype. ",
                    (v && !v->isNone() ? "Optional" : "Input"),
                    " dtype must be either a floating point or complex dtype. ",
                    "Got: ", type);
      }
      // Integral input of a floating mean is converted first: the kernel
      // averages in the float path only.
      // As the CPU backend, elements are cast to an integral result type
      // before summing.
      if (at::isComplexType(type) && (e.kind == Kind::kSum || e.kind == Kind::kMean)) {
        // Complex sums are the sums of the real and imaginary parts: the
        // real reduction over the pairs' view, with its pair dim kept.
        const at::Tensor src = self.to(type).resolve_conj().resolve_neg();
        at::Tensor out = prepare(a.out(), self, out_shape(self, mask, keepdim), type, e.name);
        DimMask pairs = mask;
        for (int64_t d = ndim; d < 64; ++d) pairs.reset(d);
        run(e.name, e.op, 0.0, at::view_as_real(src), pairs, at::view_as_real(out),
            at::Tensor());
        return {out};
      }
      at::Tensor src = self;
      if ((e.kind == Kind::kMean && !at::isFloatingType(self.scalar_type())) ||
          (at::isIntegralType(type, true) && at::isFloatingType(self.scalar_type())))
        src = self.to(type);
      at::Tensor out = prepare(a.out(), self, out_shape(self, mask, keepdim), type, e.name);
      run(e.name, e.op, 0.0, src, mask, out, at::Tensor());
      return {out};
    }
    case Kind::kMaxMin: {
      const int64_t dim = c10::maybe_wrap_dim(a.find("dim")->toInt(), ndim);
      TORCH_CHECK_INDEX(self.dim() == 0 || self.size(dim) != 0, e.name,
                        "(): Expected reduction dim ", dim, " to have non-zero size.");
      DimMask mask;
      if (ndim > 0) mask.set(dim);
      const auto shape = out_shape(self, mask, keepdim);
      const bool is_max = e.op == LOOM_REDUCE_MAX;
      const at::Tensor given_v = a.has(is_max ? "max" : "min") ? a.find(is_max ? "max" : "min")->toTensor() : at::Tensor();
      const char* idx_name = is_max ? "max_values" : "min_indices";
      const at::Tensor given_i = a.has(idx_name) ? a.find(idx_name)->toTensor() : at::Tensor();
      at::Tensor values = prepare(given_v, self, shape, self.scalar_type(), e.name);
      at::Tensor indices = prepare(given_i, self, shape, at::kLong, e.name);
      run(e.name, e.op, 0.0, self, mask, values, indices);
      return {values, indices};
    }
    case Kind::kMaxMinAll: {
      TORCH_CHECK(self.numel() > 0, e.name,
                  "(): Expected reduction dim to be specified for input.numel() == 0. "
                  "Specify the reduction dim with the 'dim' argument.");
      DimMask mask;
      mask.set();
      at::Tensor out = prepare(a.out(), self, {}, self.scalar_type(), e.name);
      run(e.name, e.op, 0.0, self, mask, out, at::Tensor());
      return {out};
    }
    case Kind::kAminmax:
    case Kind::kArg: {
      DimMask mask = dims_of(a, ndim);
      const c10::IValue* dv = a.find("dim");
      const bool all = !dv || dv->isNone() || (dv->isIntList() && dv->toIntList().empty());
      const bool kd = keepdim;
      TORCH_CHECK(e.kind != Kind::kArg || self.scalar_type() != at::kBool, e.name,
                  "(): does not support bool input");
      // An empty tensor reduces only along given dims, and those must not
      // be empty; the others may be. (argmax/argmin over all of an empty
      // tensor fail on its empty dim instead, as on the CPU.)
      TORCH_CHECK(e.kind == Kind::kArg || !all || self.numel() > 0, e.name,
                  "(): Expected reduction dim to be specified for input.numel() == 0.");
      for (int64_t d = 0; d < ndim; ++d)
        if (mask[d])
          TORCH_CHECK_INDEX(self.size(d) != 0, e.name, "(): Expected reduction dim ",
                            d, " to have non-zero size.");
      auto shape = out_shape(self, mask, kd);
      if (e.kind == Kind::kArg) {
        at::Tensor idx = prepare(a.out(), self, shape, at::kLong, e.name);
        run(e.name, e.op, 0.0, self, mask, at::Tensor(), idx);
        return {idx};
      }
      at::Tensor out = prepare(a.out(), self, shape, self.scalar_type(), e.name);
      run(e.name, e.op, 0.0, self, mask, out, at::Tensor());
      return {out};
    }
    case Kind::kVar:
    case Kind::kVarMean: {
      TORCH_CHECK(at::isFloatingType(self.scalar_type()),
                  "std and var only support floating point and complex dtypes");
      const DimMask mask = dims_of(a, ndim);
      const double correction = a.scalar("correction", 1).toDouble();
      const auto shape = out_shape(self, mask, keepdim);
      if (e.kind == Kind::kVar) {
        at::Tensor out = prepare(a.out(), self, shape, self.scalar_type(), e.name);
        run(e.name, e.op, correction, self, mask, out, at::Tensor());
        return {out};
      }
      const at::Tensor g0 = a.has("out0") ? a.find("out0")->toTensor() : at::Tensor();
      const at::Tensor g1 = a.has("out1") ? a.find("out1")->toTensor() : at::Tensor();
      at::Tensor var = prepare(g0, self, shape, self.scalar_type(), e.name);
      at::Tensor mean = prepare(g1, self, shape, self.scalar_type(), e.name);
      run(e.name, e.op, correction, self, mask, var, mean);
      return {var, mean};
    }
    case Kind::kNorm: {
      const char* pname = a.find("ord") ? "ord" : "p";
      const double p = a.scalar(pname, 2).toDouble();
      const c10::IValue* dt = a.find("dtype");
      at::ScalarType type = dt && !dt->isNone() ? dt->toScalarType() : self.scalar_type();
      TORCH_CHECK(at::isFloatingType(type), "linalg.vector_norm: Expected a floating point or "
                  "complex tensor as input. Got ", type);
      const DimMask mask = dims_of(a, ndim);
      if (p < 0 || std::isinf(p)) {
        for (int64_t d = 0; d < ndim; ++d)
          if (mask[d])
            TORCH_CHECK(self.size(d) != 0, "linalg.vector_norm cannot compute the ", p,
                        " norm on an empty tensor because the operation does not have an identity");
      }
      at::Tensor out = prepare(a.out(), self, out_shape(self, mask, keepdim), type, e.name);
      run(e.name, e.op, p, self, mask, out, at::Tensor());
      return {out};
    }
    case Kind::kLogsumexp: {
      const DimMask mask = dims_of(a, ndim);
      at::Tensor src = self;
      at::ScalarType type = self.scalar_type();
      if (at::isIntegralType(type, true)) {
        type = at::typeMetaToScalarType(at::get_default_dtype());
        src = self.to(type);
      }
      at::Tensor out = prepare(a.out(), self, out_shape(self, mask, keepdim), type, e.name);
      run(e.name, e.op, 0.0, src, mask, out, at::Tensor());
      return {out};
    }
    case Kind::kAllAny: {
      const DimMask mask = dims_of(a, ndim);
      const at::ScalarType type = self.scalar_type() == at::kByte ? at::kByte : at::kBool;
      at::Tensor out = prepare(a.out(), self, out_shape(self, mask, keepdim), type, e.name);
      run(e.name, e.op, 0.0, self, mask, out, at::Tensor());
      return {out};
    }
  }
  TORCH_INTERNAL_ASSERT(false);
}

struct Kernel final : c10::OperatorKernel {
  explicit Kernel(const Entry* e) : entry(e) {}
  const Entry* entry;
  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet,
                  torch::jit::Stack* stack) {
    if (run_complex(entry->name, op, stack)) return;
    const Args a(op.schema(), stack);
    auto results = run_entry(*entry, a);
    torch::jit::drop(*stack, a.size());
    for (auto& r : results) torch::jit::push(*stack, std::move(r));
  }
};

void register_entry(torch::Library& m, const Entry& e) {
  pw::for_each_overload(e.name, e.overloads, [&](const std::string& full) {
    impl_boxed<Kernel>(m, full.c_str(), &e);
  });
}

// aminmax: amin and amax, with aminmax's own checks of empty reductions.
std::tuple<at::Tensor&, at::Tensor&> aminmax_out(const at::Tensor& self,
                                                 std::optional<int64_t> dim, bool keepdim,
                                                 at::Tensor& min, at::Tensor& max) {
  std::vector<int64_t> dims;
  if (dim) {
    const int64_t d = at::maybe_wrap_dim(*dim, self.dim());
    TORCH_CHECK_INDEX(self.dim() == 0 || self.size(d) > 0, "aminmax: Expected reduction dim ", d,
                      " to have non-zero size.");
    if (self.dim()) dims.push_back(d);
  } else {
    TORCH_CHECK(self.numel() > 0, "aminmax(): cannot compute aminmax over an empty dimension as "
                "the operation has no identity.");
  }
  at::amin_out(min, self, dims, keepdim);
  at::amax_out(max, self, dims, keepdim);
  return {min, max};
}

std::tuple<at::Tensor, at::Tensor> aminmax(const at::Tensor& self, std::optional<int64_t> dim,
                                           bool keepdim) {
  at::Tensor min = at::empty({0}, self.options()), max = at::empty({0}, self.options());
  aminmax_out(self, dim, keepdim, min, max);
  return {min, max};
}

// mvlgamma: sum_i lgamma(x - i / 2) over i < p, plus p (p - 1) / 4 log(pi),
// as the CPU composes it.
at::Tensor& mvlgamma_out(const at::Tensor& self, int64_t p, at::Tensor& out) {
  TORCH_CHECK(p >= 1, "p has to be greater than or equal to 1");
  const at::ScalarType type = at::isIntegralType(self.scalar_type(), /*includeBool=*/true)
                                  ? at::typeMetaToScalarType(c10::get_default_dtype())
                                  : self.scalar_type();
  at::Tensor args = at::arange(-p * 0.5 + 0.5, 0.5, 0.5, self.options().dtype(type))
                        .add(self.unsqueeze(-1));
  const double p2_sub_p = static_cast<double>(p * (p - 1));
  return copy_to_out(out, args.lgamma_().sum(-1).add_(p2_sub_p * std::log(M_PI) * 0.25),
                     "mvlgamma");
}

// trace: the sum of the diagonal, with sum's integer promotion.
at::Tensor trace(const at::Tensor& self) {
  TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with dim ", self.dim());
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != at::kBool,
                              "\"trace\" not implemented for 'Bool'");
  return self.diagonal().sum();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const Entry& e : kEntries) register_entry(m, e);
  LOOM_IMPL(m, "trace", trace);
  LOOM_IMPL(m, "mvlgamma.out", mvlgamma_out);
  LOOM_IMPL(m, "aminmax", aminmax);
  LOOM_IMPL(m, "aminmax.out", aminmax_out);
}

}  // namespace
}  // namespace torch_loom::reduce
