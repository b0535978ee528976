// Status -> exception, tensor -> descriptor, launch on the current stream.
#include "common.h"

#include <ATen/TensorIterator.h>
#include <ATen/native/Resize.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <string>

#include "runtime/device.h"
#include "runtime/stream.h"

namespace torch_loom {

void raise_status(loom_status status, const char* what) {
  std::string detail = loom_last_error();
  if (detail.empty()) detail = loom_status_name(status);
  switch (status) {
    case LOOM_ERROR_OUT_OF_MEMORY:
      TORCH_CHECK_WITH(OutOfMemoryError, false, "loom out of memory (",
                       what, "): ", detail);
    case LOOM_ERROR_NOT_SUPPORTED:
      TORCH_CHECK_NOT_IMPLEMENTED(false, what, ": not supported on loom: ",
                                  detail);
    case LOOM_ERROR_INDEX_OUT_OF_RANGE:
      // IndexError, as the CPU backend raises for a bad index.
      TORCH_CHECK_INDEX(false, what, ": ", detail);
    case LOOM_ERROR_INVALID_ARGUMENT:
      // RuntimeError, as the CPU backend raises for the same misuse.
      TORCH_CHECK(false, what, ": invalid argument: ", detail);
    default:
      TORCH_CHECK(false, what, ": ", detail, " (", loom_status_name(status),
                  ")");
  }
}

loom_dtype to_loom_dtype(at::ScalarType type, const char* op) {
  switch (type) {
    case at::kFloat: return LOOM_FLOAT32;
    case at::kDouble: return LOOM_FLOAT64;
    case at::kHalf: return LOOM_FLOAT16;
    case at::kBFloat16: return LOOM_BFLOAT16;
    case at::kChar: return LOOM_INT8;
    case at::kShort: return LOOM_INT16;
    case at::kInt: return LOOM_INT32;
    case at::kLong: return LOOM_INT64;
    case at::kByte: return LOOM_UINT8;
    case at::kBool: return LOOM_BOOL;
    case at::kComplexFloat: return LOOM_COMPLEX64;
    case at::kComplexDouble: return LOOM_COMPLEX128;
    default:
      TORCH_CHECK_TYPE(false, op, ": dtype ", type,
                       " is not supported on the loom device");
  }
}

loom_tensor describe(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.defined(), op, ": expected a defined tensor");
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, op,
              ": expected a tensor on loom but got one on ", t.device());
  TORCH_CHECK(t.dim() <= LOOM_MAX_DIMS, op, ": tensors of more than ",
              LOOM_MAX_DIMS, " dimensions are not supported on loom (got ",
              t.dim(), ")");
  loom_tensor d{};
  d.data = t.numel() == 0 ? nullptr : t.data_ptr();
  d.dtype = to_loom_dtype(t.scalar_type(), op);
  d.rank = static_cast<int32_t>(t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) {
    d.sizes[i] = t.size(i);
    d.strides[i] = t.stride(i);
  }
  return d;
}

loom_stream_t* current_stream(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  const c10::Stream stream = get_current_stream(device);
  if (stream.id() != 0) return native_stream(stream);
  // A default stream lives as long as the runtime, which the binding starts
  // once and never restarts: each is looked up once. (In a forked child the
  // runtime's own checks of the stream refuse it.)
  static std::array<std::atomic<loom_stream_t*>, kMaxDevices> defaults{};
  loom_stream_t* s = defaults[device].load(std::memory_order_acquire);
  if (C10_UNLIKELY(!s)) {
    s = native_stream(stream);
    defaults[device].store(s, std::memory_order_release);
  }
  return s;
}

const loom_kernel_t* kernel(const char* name) {
  const loom_kernel_t* k = nullptr;
  check(loom_kernel_lookup(name, &k), name);
  return k;
}

void launch(const char* name, const loom_kernel_t* kernel,
            c10::ArrayRef<loom_tensor> tensors,
            c10::ArrayRef<loom_scalar> scalars, int64_t range, int64_t grain,
            c10::DeviceIndex device, LaunchInfo info) {
  if (range <= 0) return;
  loom_launch_desc desc{};
  desc.name = name;
  desc.kernel = kernel;
  desc.tensors = tensors.data();
  desc.num_tensors = static_cast<uint32_t>(tensors.size());
  desc.scalars = scalars.data();
  desc.num_scalars = static_cast<uint32_t>(scalars.size());
  desc.range = range;
  desc.grain = grain < 1 ? 1 : grain;
  // ATen kernels never wait for the host: a tiny one may run right here.
  desc.flags = LOOM_LAUNCH_MAY_RUN_INLINE | (info.fill ? LOOM_LAUNCH_FILL : 0u);
  desc.flops = info.flops;
  check(loom_launch(current_stream(device), &desc), name);
}

void plan(const char* op, const loom_kernel_t* planner,
          c10::ArrayRef<loom_tensor> tensors, c10::ArrayRef<loom_scalar> scalars,
          void* out, size_t size) {
  loom_kernel_args args{};
  args.abi_version = LOOM_KERNEL_ABI_VERSION;
  args.num_tensors = static_cast<uint32_t>(tensors.size());
  args.tensors = tensors.data();
  args.num_scalars = static_cast<uint32_t>(scalars.size());
  args.scalars = scalars.data();
  check(loom_kernel_plan(planner, &args, out, size), op);
}

at::Tensor meta_like(const at::Tensor& t) {
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

void check_out_dtype(const at::Tensor& out, const at::Tensor& like, const char* op) {
  TORCH_CHECK(out.scalar_type() == like.scalar_type(), op,
              ": expected out tensor to have dtype ", like.scalar_type(),
              ", but got ", out.scalar_type(), " instead");
}

at::Tensor& copy_to_out(at::Tensor& out, const at::Tensor& r, const char* op) {
  check_out_dtype(out, r, op);
  resize_output_as(out, r);
  return out.copy_(r);
}

at::Tensor empty_elementwise(at::TensorList operands, at::ScalarType type) {
  TORCH_INTERNAL_ASSERT(!operands.empty());
  at::TensorIteratorConfig config;
  config.check_all_same_dtype(false)
      .declare_static_dtype_and_device(type, operands[0].device())
      .add_owned_output(at::Tensor());
  for (const at::Tensor& t : operands)
    if (t.defined()) config.add_const_input(t);
  return config.build().output(0);
}

bool resize_output_as(const at::Tensor& out, const at::Tensor& like) {
  if (!at::native::resize_output(out, like.sizes())) return false;
  if (like.is_non_overlapping_and_dense() && out.strides() != like.strides())
    out.unsafeGetTensorImpl()->set_sizes_and_strides(like.sizes(), like.strides());
  return true;
}

int64_t device_workers(const at::Tensor& t) {
  loom_device_props props{};
  return loom_device_properties(t.device().index(), &props) == LOOM_OK ? props.num_threads : 1;
}

}  // namespace torch_loom
