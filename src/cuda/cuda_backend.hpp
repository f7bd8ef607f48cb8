#pragma once
// Knobs and diagnostics of the CUDA backend for its tests and its benchmark (not public API).
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/plan.hpp"

namespace lmhead::cuda {

// Test and benchmark hooks around the plan (none of them changes a byte of the answers).
struct TestHooks {
  bool pdl = true;                     // programmatic dependent launch prep -> head (only without stage events)
  bool stage_events = true;            // CUDA event nodes between the stages (norm, head, select, download)
                                       // when the request asks for stage times (want_stage_times)
  bool use_graph = true;               // replay the call as a CUDA graph
  bool poll_done = true;               // calls with nothing after the head kernel (argmax, ties; no
                                       // top-k, logprobs, logits or stage times) wait on the flag its
                                       // last block writes to mapped memory, not on the stream
  bool force_sequential_norm = false;  // RMSNorm always through the sequential double chain
  bool check_guards = false;           // verify the sentinel bands around the device logits
  bool block_clock = false;            // measuring: the head kernel's blocks stamp their start, staged
                                       // activations, last warp done and exit (last_block_clock)
};

struct Tuning {
  // Rows tried before the head type's own table (plan.hpp); a row that cannot run the call is
  // passed over, so the type's table still answers. Empty: the type's table alone.
  std::vector<PlanRow> rows;
  TestHooks hooks;
};

// A tuning that runs `kernel` for every call it can run (warps 0: its first configuration).
inline Tuning force_kernel(HeadKernel kernel, int warps = 0) {
  Tuning t;
  t.rows.push_back(PlanRow{1, 16, kernel, warps});
  return t;
}

struct CallInfo {
  HeadKernel kernel = HeadKernel::generic;
  int warps = 0;                    // the plan's warps per block
  int tokens = 0;
  int norm_path[16] = {};           // per token: 0 bounded parallel sum decided, 1 sequential chain
  bool graph_replayed = false;
  bool guards_intact = true;        // only checked with TestHooks::check_guards
  // The call's host side (steady clock, microseconds): copying the hidden states into the mapped
  // buffer, the launch (graph replay or direct launches), the wait for the stream, and the whole
  // forward() including the answers' bookkeeping.
  double copy_us = 0, launch_us = 0, wait_us = 0, total_us = 0;
  bool polled = false;              // waited on the kernel's done flag (TestHooks::poll_done)
  bool sampled_on_device = false;   // the sampling kernels ran (Backend::samples)
  int sampled_on_host = 0;          // tokens of it the device handed to the host sampler
};

// Throw Error when `backend` is not the CUDA backend.
void set_tuning(Backend& backend, const Tuning& tuning);
Tuning get_tuning(Backend& backend);
CallInfo last_call(Backend& backend);
// With TestHooks::block_clock: the last call's HeadParams::block_clock stamps, 4 per block for
// kBlockClockBlocks blocks (0 where a block did not run; the stream is synchronized first).
std::vector<uint64_t> last_block_clock(Backend& backend);
// The bytes of the head's copies the backend holds on its device now (the file's rows come only
// when a plan reads them).
uint64_t head_device_bytes(Backend& backend);
// Makes the backend read its input from `portable` (cudaHostAllocMapped | cudaHostAllocPortable,
// kMaxTokens x hidden floats, owned by the caller and outliving the backend's use of it); a
// forward() whose hidden pointer is `portable` itself skips the copy (nullptr: its own buffer again).
void use_input_buffer(Backend& backend, float* portable);

// The SM clock as a kernel sees it (clock64 against the global nanosecond timer over 0.2 ms).
double measure_sm_clock_mhz();

// The portable tanh computed on the device for the f32 bit patterns [first, first + count).
void tanh_sweep(uint64_t first, uint64_t count, uint32_t* host_out);

}  // namespace lmhead::cuda
