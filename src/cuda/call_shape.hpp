#pragma once
// One call as the launch and the graph cache see it: the plan and the request's outputs, and the
// timing events a call records.
#include <tuple>

#include "cuda/kernels.hpp"
#include "cuda/plan.hpp"

namespace lmhead::cuda {

struct Shape {
  int T = 0;
  Plan plan;
  bool float_route = false;
  ActFormat format = ActFormat::q8_K;
  int cap_mode = kScaleOnly;
  int k = 0;
  bool logprobs = false;
  bool logits = false;
  bool stages = false;
  bool events = false;  // event nodes between the stages (TestHooks::stage_events and the request asks for stage times)
  bool pdl = false;
  bool sequential_norm = false;
  bool input_normed = false;  // the prep kernel skips the norm (--input normed)
  bool device_input = false;  // the rows are the caller's device memory (Engine::run_device)
  // Seeded sampling on the device (sample.cu): its kernels run after the head's; the maximum from
  // the max kernel when a bias or mask can move it; the boundary kernel for top-p.
  bool sample = false;
  bool sample_max = false;
  bool sample_top_p = false;
  bool block_clock = false;   // TestHooks::block_clock

  auto key() const {
    const unsigned flags = unsigned(logprobs) | unsigned(logits) << 1 | unsigned(stages) << 2 | unsigned(events) << 3 |
                           unsigned(pdl) << 4 | unsigned(sequential_norm) << 5 | unsigned(input_normed) << 6 |
                           unsigned(device_input) << 7 | unsigned(sample) << 8 | unsigned(sample_max) << 9 |
                           unsigned(sample_top_p) << 10 | unsigned(block_clock) << 11;
    return std::tuple(T, plan.kernel, plan.warps, plan.last_warps, int(format), cap_mode, k, flags);
  }
};
using GraphKey = decltype(Shape{}.key());

// The timing events of a call, in the order they are recorded.
enum Event : int { kCallStart, kPrepDone, kHeadDone, kSelectDone, kCallEnd, kEvents };

}  // namespace lmhead::cuda
