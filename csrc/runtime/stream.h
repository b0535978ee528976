// Streams as PyTorch sees them: c10::Stream values whose StreamId names a
// loom stream of a per-device pool, and the thread-local current stream.
//
// StreamId 0 is the device's default stream. Id k > 0 is pool stream k - 1:
// the first kStreamsPerPool ids are normal priority, the next as many high
// priority. Pool streams are created on first use and live until exit.
#pragma once

#include <c10/core/Stream.h>

#include "loom/hal.h"

namespace torch_loom {

constexpr int kStreamsPerPool = 32;

c10::Stream default_stream(c10::DeviceIndex device);
// The next stream of the pool for `priority` (< 0: high), round-robin.
c10::Stream stream_from_pool(c10::DeviceIndex device, int priority);
// The thread's current stream on `device` (the default stream unless set).
c10::Stream get_current_stream(c10::DeviceIndex device);
// Makes `stream` current for its device on this thread; returns the old one.
c10::Stream exchange_current_stream(c10::Stream stream);
// The loom stream behind a c10::Stream of the loom device (borrowed).
loom_stream_t* native_stream(const c10::Stream& stream);
// Priority of a loom c10::Stream (0 or -1).
int stream_priority(const c10::Stream& stream);
// The StreamId of the c10 stream of `device` whose loom stream has
// loom_stream_id `native_id`, or -1 if none has (never creates a stream).
c10::StreamId stream_id_of_native(c10::DeviceIndex device, uint64_t native_id);

}  // namespace torch_loom
