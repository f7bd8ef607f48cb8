#pragma once
// Knobs and diagnostics of the CUDA backend for its tests and its benchmark (not public API).
#include <cstdint>
#include <string>

#include "backend/backend.hpp"

namespace lmhead::cuda {

struct Tuning {
  bool use_mma = true;              // Q5_K q8 route on the tensor cores (else the generic kernel)
  int mma_warps = 12;               // warps per block of the MMA kernel for T = 3..8 (8, 12, 16; T > 8 uses 8)
  bool lanes_kernel = true;         // T <= 2: the kernel with the eight float lanes in the MMA's N
  bool stream_kernel = true;        // Q5_K, T <= stream_max_tokens: weights streamed into registers
  int stream_max_tokens = 2;        // 0..4 (T = 3, 4 measured slower than the tokens-in-N kernel)
  int stream_warps = 16;            // T <= 2: 16, 12 or 8 warps per block with 2, 3 or 4 items per warp in flight
  int stream_warps_t2 = -1;         // T = 2 passes: the same choice per head type (-1: the measured
                                    // default, see stream_warps_for; 0: stream_warps)
  bool stream_n_kernel = true;      // Q5_K, T > stream_max_tokens: tokens-in-N kernel on the sub-blocks stream layout
  int stream_n_warps = 12;          // its warps per block for T <= 8: 8, 12 or 16 (T > 8: 8)
  bool stream_tma = false;          // every stream call (T <= stream_max_tokens) through the TMA kernel
  int tma_from_tokens = 2;          // ... and the calls of at least this many tokens (0: none); measured:
                                    // T=1 0.2515 vs 0.2506 ms in registers, T=2 0.2858 vs 0.2993 ms
  int tma_ring = 0;                 // TMA kernel, T <= 2: 0 = 16 warps x 4 stages, 1 = 16 x 3, 2 = 12 x 5, 3 = 8 x 8
  bool pdl = true;                  // programmatic dependent launch prep -> head (only without stage events)
  bool prefetch_l2 = false;         // bulk-prefetch each warp's first tile into L2 while the prep runs
  bool stage_events = true;         // CUDA event nodes between the stages (norm, head, select, download)
                                    // when the request asks for stage times (want_stage_times)
  bool stream_walk_only = false;    // measuring tool: Q5_K stream walk without arithmetic (meaningless logits)
  bool use_graph = true;            // replay the call as a CUDA graph
  bool poll_done = true;            // calls with nothing after the head kernel (argmax, ties; no
                                    // top-k, logprobs, logits or stage times) wait on the flag its
                                    // last block writes to mapped memory, not on the stream
  bool force_sequential_norm = false;  // test hook: RMSNorm always through the sequential double chain
  bool check_guards = false;        // test hook: verify the sentinel bands around the device logits
};

struct CallInfo {
  std::string kernel;               // "q5k_stream_n", "q5k_tma", "q5k_stream", "q4k_stream",
                                    // "q6k_stream", "q8_0_stream", "q5k_lanes", "q5k_mma" or "generic"
  int tokens = 0;
  int norm_path[16] = {};           // per token: 0 bounded parallel sum decided, 1 sequential chain
  bool graph_replayed = false;
  bool guards_intact = true;        // only checked with Tuning::check_guards
  // The call's host side (steady clock, microseconds): copying the hidden states into the mapped
  // buffer, the launch (graph replay or direct launches), the wait for the stream, and the whole
  // forward() including the answers' bookkeeping.
  double copy_us = 0, launch_us = 0, wait_us = 0, total_us = 0;
  bool polled = false;              // waited on the kernel's done flag (Tuning::poll_done)
};

// Throw Error when `backend` is not the CUDA backend.
void set_tuning(Backend& backend, const Tuning& tuning);
Tuning get_tuning(Backend& backend);
CallInfo last_call(Backend& backend);
// Makes the backend read its input from `portable` (cudaHostAllocMapped | cudaHostAllocPortable,
// kMaxTokens x hidden floats, owned by the caller and outliving the backend's use of it); a
// forward() whose hidden pointer is `portable` itself skips the copy (nullptr: its own buffer again).
void use_input_buffer(Backend& backend, float* portable);

// The SM clock as a kernel sees it (clock64 against the global nanosecond timer over 0.2 ms).
double measure_sm_clock_mhz();

// The portable tanh computed on the device for the f32 bit patterns [first, first + count).
void tanh_sweep(uint64_t first, uint64_t count, uint32_t* host_out);

}  // namespace lmhead::cuda
