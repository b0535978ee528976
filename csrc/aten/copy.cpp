// Copies that involve loom: host->device, device->host, device->device on
// one device and across devices, plus .item(). Bytes move with loom_memcpy
// in stream order; casts, broadcasts and strided layouts run as the copy
// kernel on the device. A pinned host side with non_blocking=True stays
// asynchronous; a pageable one is free for reuse when the call returns.
#include <ATen/MemoryOverlap.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "common.h"
#include "runtime/host_allocator.h"
#include "loom/kernels/copy.h"
#include "runtime/stream.h"
#include "register.h"

namespace torch_loom {
namespace {

bool dense_alike(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         a.is_contiguous() && b.is_contiguous();
}

size_t nbytes(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

void memcpy_on(loom_stream_t* stream, void* dst, const void* src, size_t n,
               const char* what) {
  if (n) check(loom_memcpy(stream, dst, src, n), what);
}

// The host side of an H2D or D2H transfer is done with: a pinned block stays
// reserved until the stream reaches the copy (non_blocking) or the stream is
// drained; pageable memory was already staged or written by loom_memcpy.
void finish_host_side(const at::Tensor& host, bool non_blocking,
                      const c10::Stream& stream) {
  if (!is_pinned_storage(host.storage())) return;
  if (non_blocking) {
    record_host_use(host.storage(), stream);
  } else {
    check(loom_stream_synchronize(native_stream(stream)), "copy_");
  }
}

// A view of t's memory without the conjugate / negative bits: what the
// bytes hold.
at::Tensor without_bits(const at::Tensor& t) {
  if (!t.is_conj() && !t.is_neg()) return t;
  at::Tensor raw = t.alias();
  raw._set_conj(false);
  raw._set_neg(false);
  return raw;
}

void copy_complex_half(const at::Tensor& dst, const at::Tensor& from);

// dst and src on the same loom device, src already of dst's sizes (stride 0
// where it broadcasts). The caller holds a guard for that device.
void copy_within(const at::Tensor& dst, const at::Tensor& src) {
  if (dst.numel() == 0) return;
  at::Tensor from = src;
  if (dst.storage().is_alias_of(src.storage()) &&
      at::get_overlap_status(dst, src) != at::MemOverlapStatus::No) {
    if (dst.is_same(src)) return;
    // Reading and writing the same bytes in one pass could see its own
    // writes: stage the source first.
    at::Tensor staged = at::empty(src.sizes(), src.options());
    copy_within(staged, src);
    from = staged;
  }
  if (dense_alike(dst, from)) {
    memcpy_on(current_stream(), dst.data_ptr(), from.data_ptr(), nbytes(dst),
              "copy_");
    return;
  }
  if (dst.scalar_type() == at::kComplexHalf || from.scalar_type() == at::kComplexHalf) {
    copy_complex_half(dst, from);
    return;
  }
  loom_tensor t[2] = {describe(dst, "copy_"), describe(from, "copy_")};
  launch("copy_", LOOM_KERNEL("copy.strided"), t, {}, dst.numel(), LOOM_COPY_GRAIN);
}

// complex32 (chalf) has no kernels of its own: its copies are the copies of
// its parts, float16 pairs (view_as_real), which the copy kernel casts; a
// real side is the real part (the imaginary part of a real source 0).
void copy_complex_half(const at::Tensor& dst, const at::Tensor& from) {
  if (dst.is_complex() && from.is_complex()) {
    copy_within(at::view_as_real(dst), at::view_as_real(from));
  } else if (dst.is_complex()) {
    const at::Tensor parts = at::view_as_real(dst);
    copy_within(parts.select(-1, 0), from);
    parts.select(-1, 1).zero_();
  } else if (dst.scalar_type() == at::kBool) {
    copy_within(dst, at::view_as_real(from).ne(0).any(-1));  // either part nonzero
  } else {
    copy_within(dst, at::view_as_real(from).select(-1, 0));
  }
}

void host_to_device(const at::Tensor& dst, const at::Tensor& src_cpu,
                    bool non_blocking) {
  c10::DeviceGuard guard(dst.device());
  c10::Stream stream = get_current_stream(dst.device().index());
  const at::Tensor& src = src_cpu;
  if (dense_alike(dst, src)) {
    memcpy_on(native_stream(stream), dst.data_ptr(), src.data_ptr(),
              nbytes(dst), "copy_ (host to loom)");
    finish_host_side(src, non_blocking, stream);
    return;
  }
  // Upload the source as it is (contiguous, own dtype, unbroadcast), then
  // cast and scatter on the device.
  at::Tensor staged = src.contiguous();
  at::Tensor landing = at::empty(staged.sizes(), dst.options().dtype(staged.scalar_type()));
  memcpy_on(native_stream(stream), landing.data_ptr(), staged.data_ptr(),
            nbytes(staged), "copy_ (host to loom)");
  finish_host_side(staged, non_blocking, stream);
  copy_within(dst, landing.expand(dst.sizes()));
}

void device_to_host(const at::Tensor& dst, const at::Tensor& src_loom,
                    bool non_blocking) {
  c10::DeviceGuard guard(src_loom.device());
  c10::Stream stream = get_current_stream(src_loom.device().index());
  const at::Tensor& src = src_loom;
  if (dense_alike(dst, src)) {
    memcpy_on(native_stream(stream), dst.data_ptr(), src.data_ptr(),
              nbytes(dst), "copy_ (loom to host)");
    finish_host_side(dst, non_blocking, stream);
    return;
  }
  at::Tensor packed = at::empty(dst.sizes(), src.options().dtype(dst.scalar_type()));
  copy_within(packed, src.expand(dst.sizes()));
  if (dst.is_contiguous()) {
    memcpy_on(native_stream(stream), dst.data_ptr(), packed.data_ptr(),
              nbytes(dst), "copy_ (loom to host)");
    finish_host_side(dst, non_blocking, stream);
    return;
  }
  at::Tensor host = at::empty(dst.sizes(), dst.options());
  memcpy_on(native_stream(stream), host.data_ptr(), packed.data_ptr(),
            nbytes(host), "copy_ (loom to host)");
  dst.copy_(host);
}

struct ScopedEvent {
  loom_event_t* event = nullptr;
  explicit ScopedEvent(int device) {
    check(loom_event_create(device, LOOM_EVENT_DEFAULT, &event), "copy_");
  }
  ~ScopedEvent() { loom_event_release(event); }
};

// `waiter` waits for the work enqueued on `signaller` so far.
void order_after(loom_stream_t* waiter, loom_stream_t* signaller, int device) {
  ScopedEvent e(device);
  check(loom_event_record(e.event, signaller), "copy_ (across devices)");
  check(loom_stream_wait_event(waiter, e.event), "copy_ (across devices)");
}

void device_to_device(const at::Tensor& dst, const at::Tensor& src_in) {
  if (dst.device() == src_in.device()) {
    c10::DeviceGuard guard(dst.device());
    copy_within(dst, src_in.expand(dst.sizes()));
    return;
  }
  int src_dev = src_in.device().index(), dst_dev = dst.device().index();
  at::Tensor src;
  {
    c10::DeviceGuard guard(src_in.device());
    src = src_in;
    if (!src.is_contiguous()) {
      at::Tensor packed = at::empty(src.sizes(), src.options());
      copy_within(packed, src);
      src = packed;
    }
  }
  c10::DeviceGuard guard(dst.device());
  loom_stream_t* from = current_stream(src_dev);
  loom_stream_t* to = current_stream(dst_dev);
  at::Tensor landing = dense_alike(dst, src)
                           ? dst
                           : at::empty(src.sizes(), dst.options().dtype(src.scalar_type()));
  // The copy runs on the destination's stream after the source's pending
  // work; the source's stream then waits for the copy, so the source's
  // memory is not reused under it.
  order_after(to, from, src_dev);
  memcpy_on(to, landing.data_ptr(), src.data_ptr(), nbytes(src),
            "copy_ (across loom devices)");
  order_after(from, to, dst_dev);
  if (!landing.is_same(dst)) copy_within(dst, landing.expand(dst.sizes()));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst,
                     bool non_blocking) {
  TORCH_CHECK(self.defined() && dst.defined(), "copy_: undefined tensor");
  if (dst.numel() == 0) return dst;
  at::assert_no_internal_overlap(dst);
  const bool src_loom = self.device().type() == c10::DeviceType::PrivateUse1;
  const bool dst_loom = dst.device().type() == c10::DeviceType::PrivateUse1;
  // Bytes move as they are; a conjugate or negative view that differs
  // between the two sides is applied to the destination afterwards, as the
  // CPU's copy_ does (resolving the source would copy through here again).
  const at::Tensor src = without_bits(self), out = without_bits(dst);
  if (src_loom && dst_loom) {
    device_to_device(out, src);
  } else if (dst_loom) {
    TORCH_CHECK(self.device().is_cpu(), "copy_: cannot copy from ",
                self.device(), " to ", dst.device());
    host_to_device(out, src, non_blocking);
  } else {
    TORCH_CHECK(dst.device().is_cpu(), "copy_: cannot copy from ",
                self.device(), " to ", dst.device());
    device_to_host(out, src, non_blocking);
  }
  const bool conj = self.is_conj() != dst.is_conj(), neg = self.is_neg() != dst.is_neg();
  if (conj || neg) {
    if (conj) out.conj_physical_();
    if (neg) out.neg_();
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  c10::DeviceGuard guard(self.device());
  at::Tensor host = at::empty({}, self.options().device(at::kCPU));
  // Pageable destination: loom_memcpy returns once the value has arrived,
  // and reports an asynchronous error of earlier work.
  memcpy_on(current_stream(), host.data_ptr(), self.data_ptr(),
            self.element_size(), "item");
  return at::_local_scalar_dense(host);
}

}  // namespace

// The conjugate / negative-view fallbacks would resolve a lazy view with a
// clone, which copies through _copy_from again, without end; copy_from
// resolves the bits itself.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  LOOM_IMPL(m, "_copy_from", copy_from);
  LOOM_IMPL(m, "_copy_from_and_resize", copy_from_and_resize);
  LOOM_IMPL(m, "_local_scalar_dense", local_scalar_dense);
}

}  // namespace torch_loom
