#pragma once
// The work of one call, recorded on a stream (run directly, or captured as the call's graph):
// prep -> the plan's head kernel in passes -> select and the stage nodes -> the copies back.
#include <cuda_runtime.h>

#include "backend/backend.hpp"
#include "cuda/call_buffers.hpp"
#include "cuda/call_shape.hpp"
#include "cuda/device_head.hpp"

namespace lmhead::cuda {

// What a call reads and writes, and where it runs.
struct CallTarget {
  const HeadView& head;
  const DeviceHead& weights;
  const CallBuffers& buffers;
  int num_sms = 0;
  cudaStream_t stream = nullptr;
  const cudaEvent_t* events = nullptr;  // [kEvents]; the stage events are recorded when s.events
};

void record_call(const Shape& s, const CallTarget& c);

}  // namespace lmhead::cuda
