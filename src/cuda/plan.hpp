#pragma once
// Which head kernel runs a call. Each head type and route has one table of rows (token range,
// kernel, warps per block); choose() takes the first row that covers the call and can run on the
// device (the copy of the head it reads is held, its shared memory fits). The launch,
// CallInfo::kernel, the timing label and the graph key all come from the Plan it returns, so the
// tables below are the whole answer to "which kernel runs". ggml's mmq/mmvq dispatch tables are the
// model. Host-only: the CPU tests read the tables without a GPU.
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>

#include "lmhead/lmhead.hpp"
#include "lmhead/tensor_type.hpp"
#include "quant/llamacpp_route.hpp"

namespace lmhead::cuda {

enum class HeadKernel : uint8_t {
  q5k_stream,    // Q5_K: weights streamed into registers from the lanes stream layout
  q5k_tma,       // Q5_K: the same arithmetic, items staged in shared memory by bulk copies (TMA)
  q5k_stream_n,  // Q5_K: tokens in the MMA's N, weights from the sub-blocks stream layout
  q4k_stream,    // the register stream kernel on Q4_K's stream layout
  q6k_stream,    // ... on Q6_K's
  q8_0_stream,   // ... on Q8_0's (hidden a multiple of 256)
  q5k_lanes,     // Q5_K on the file's rows, staged by cp.async, lanes in N (T <= 2)
  q5k_mma,       // Q5_K on the file's rows, staged by cp.async, tokens in N
  generic,       // every type and route, one thread per row
  // llama.cpp's own CPU orders (Route::llamacpp where its path is not vec_dot's): generic's
  // structure, one thread per row, with that path's roundings (numerics.md, "The llama.cpp route")
  llamacpp_tiled,       // the tiled K-quant matmul (Q4_K not repacked, Q5_K, Q6_K; from 8 tokens)
  llamacpp_repack,      // repacked Q4_K: gemm order for whole groups of 4 tokens, gemv for the rest
  llamacpp_float_vec,    // ggml_vec_dot_f16 / _bf16 / _f32 (one token per launch: up to 64 lanes per output)
  llamacpp_float_sgemm,  // llamafile's tinyBLAS for F16, BF16 and F32 heads
  q5k_stream_n_tiled,   // q5k_stream_n's walk, the lanes' MMAs chained: the tiled K-quant order (Q5_K)
  q6k_stream_tiled,     // q6k_stream's with the tiled K-quant order (Q6_K)
  q5k_stream_tiled,     // the tiled order on the lanes stream layout: K = one sub-block (Q5_K)
  q4k_stream_tiled,     // ... on Q4_K's (kquant_tiled.cu)
  q6k_tiled_n,          // ... on Q6_K's: tokens in N, K = one 16-element sub-block
  // The tokens-in-N kernels with their items staged in shared memory by bulk copies (TMA rings)
  q5k_tma_n,            // q5k_stream_n's (vec_dot's order, sub-blocks copy)
  q5k_tma_n_tiled,      // q5k_stream_n_tiled's (the tiled order, sub-blocks copy)
  q5k_tma_tiled,        // q5k_stream_tiled's (the tiled order, lanes copy)
  q4k_tma_tiled,        // q4k_stream_tiled's
  q6k_tma_tiled,        // q6k_tiled_n's
};

constexpr HeadKernel kHeadKernels[] = {
    HeadKernel::q5k_stream, HeadKernel::q5k_tma,   HeadKernel::q5k_stream_n, HeadKernel::q4k_stream, HeadKernel::q6k_stream,
    HeadKernel::q8_0_stream, HeadKernel::q5k_lanes, HeadKernel::q5k_mma,      HeadKernel::generic,
    HeadKernel::llamacpp_tiled, HeadKernel::llamacpp_repack, HeadKernel::llamacpp_float_vec, HeadKernel::llamacpp_float_sgemm,
    HeadKernel::q5k_stream_n_tiled, HeadKernel::q6k_stream_tiled, HeadKernel::q5k_stream_tiled,
    HeadKernel::q4k_stream_tiled, HeadKernel::q6k_tiled_n, HeadKernel::q5k_tma_n, HeadKernel::q5k_tma_n_tiled,
    HeadKernel::q5k_tma_tiled, HeadKernel::q4k_tma_tiled, HeadKernel::q6k_tma_tiled};

// The device copies of a head (docs/cuda.md, "Device layouts").
enum class HeadCopy : uint8_t {
  rows,       // the file's rows (device_layout.hpp)
  lanes,      // the stream layout, lanes split (Q5_K), or the type's only stream layout
  subblocks,  // Q5_K's stream layout, sub-blocks split
};
constexpr unsigned copy_bit(HeadCopy c) { return 1u << unsigned(c); }

// What a kernel is, independent of when it is chosen.
struct KernelDesc {
  HeadKernel kernel;
  const char* name;      // CallInfo::kernel
  const char* how;       // the head's timing label: "head+scale+cap+argmax (fused, <how>)"
  TensorType type;       // the head type it reads (generic: any, given as F32)
  HeadCopy reads;
  int max_tokens;        // tokens of one launch
  bool passes;           // a call of more tokens runs as several launches (else: not chosen)
  int warps[3];          // warps per block it is built for (0: one configuration only)
};

constexpr KernelDesc kKernelDescs[] = {
    {HeadKernel::q5k_stream, "q5k_stream", "int8 tensor cores, streamed weights", TensorType::Q5_K, HeadCopy::lanes, 2,
     false, {16, 12, 8}},
    {HeadKernel::q5k_tma, "q5k_tma", "int8 tensor cores, TMA-staged weights", TensorType::Q5_K, HeadCopy::lanes, 2, false,
     {16, 0, 0}},
    {HeadKernel::q5k_stream_n, "q5k_stream_n", "int8 tensor cores, tokens in N, streamed weights", TensorType::Q5_K,
     HeadCopy::subblocks, 16, false, {12, 8, 16}},
    {HeadKernel::q4k_stream, "q4k_stream", "int8 tensor cores, streamed weights", TensorType::Q4_K, HeadCopy::lanes, 2,
     true, {16, 12, 8}},
    {HeadKernel::q6k_stream, "q6k_stream", "int8 tensor cores, streamed weights", TensorType::Q6_K, HeadCopy::lanes, 4,
     true, {16, 12, 8}},
    {HeadKernel::q8_0_stream, "q8_0_stream", "int8 tensor cores, streamed weights", TensorType::Q8_0, HeadCopy::lanes, 4,
     true, {16, 12, 8}},
    {HeadKernel::q5k_lanes, "q5k_lanes", "int8 tensor cores", TensorType::Q5_K, HeadCopy::rows, 2, false, {0, 0, 0}},
    {HeadKernel::q5k_mma, "q5k_mma", "int8 tensor cores", TensorType::Q5_K, HeadCopy::rows, 16, false, {12, 8, 16}},
    {HeadKernel::generic, "generic", "generic kernel", TensorType::F32, HeadCopy::rows, 4, true, {0, 0, 0}},
    {HeadKernel::llamacpp_tiled, "llamacpp_tiled", "llama.cpp's tiled K-quant order", TensorType::F32, HeadCopy::rows, 4,
     true, {0, 0, 0}},
    {HeadKernel::llamacpp_repack, "llamacpp_repack", "llama.cpp's repacked Q4_K order", TensorType::Q4_K,
     HeadCopy::rows, 4, true, {0, 0, 0}},
    {HeadKernel::llamacpp_float_vec, "llamacpp_float_vec", "llama.cpp's vec_dot order", TensorType::F32,
     HeadCopy::rows, 1, true, {0, 0, 0}},
    {HeadKernel::llamacpp_float_sgemm, "llamacpp_float_sgemm", "llamafile's sgemm order", TensorType::F32, HeadCopy::rows,
     4, true, {0, 0, 0}},
    {HeadKernel::q5k_stream_n_tiled, "q5k_stream_n_tiled", "int8 tensor cores, tokens in N, llama.cpp's tiled order",
     TensorType::Q5_K, HeadCopy::subblocks, 16, false, {16, 12, 8}},
    {HeadKernel::q6k_stream_tiled, "q6k_stream_tiled", "int8 tensor cores, streamed weights, llama.cpp's tiled order",
     TensorType::Q6_K, HeadCopy::lanes, 4, true, {16, 12, 8}},
    {HeadKernel::q5k_stream_tiled, "q5k_stream_tiled", "int8 tensor cores, tokens in N, K = one sub-block, llama.cpp's tiled order",
     TensorType::Q5_K, HeadCopy::lanes, 16, false, {16, 12, 8}},
    {HeadKernel::q4k_stream_tiled, "q4k_stream_tiled", "int8 tensor cores, tokens in N, K = one sub-block, llama.cpp's tiled order",
     TensorType::Q4_K, HeadCopy::lanes, 16, false, {16, 12, 8}},
    {HeadKernel::q6k_tiled_n, "q6k_tiled_n", "int8 tensor cores, tokens in N, K = one sub-block, llama.cpp's tiled order",
     TensorType::Q6_K, HeadCopy::lanes, 16, false, {16, 12, 8}},
    {HeadKernel::q5k_tma_n, "q5k_tma_n", "int8 tensor cores, tokens in N, TMA-staged weights", TensorType::Q5_K,
     HeadCopy::subblocks, 16, false, {12, 8, 16}},
    {HeadKernel::q5k_tma_n_tiled, "q5k_tma_n_tiled", "int8 tensor cores, tokens in N, TMA-staged weights, llama.cpp's tiled order",
     TensorType::Q5_K, HeadCopy::subblocks, 16, false, {16, 12, 8}},
    {HeadKernel::q5k_tma_tiled, "q5k_tma_tiled", "int8 tensor cores, tokens in N, K = one sub-block, TMA-staged weights, llama.cpp's tiled order",
     TensorType::Q5_K, HeadCopy::lanes, 16, false, {16, 12, 8}},
    {HeadKernel::q4k_tma_tiled, "q4k_tma_tiled", "int8 tensor cores, tokens in N, K = one sub-block, TMA-staged weights, llama.cpp's tiled order",
     TensorType::Q4_K, HeadCopy::lanes, 16, false, {16, 12, 8}},
    {HeadKernel::q6k_tma_tiled, "q6k_tma_tiled", "int8 tensor cores, tokens in N, K = one sub-block, TMA-staged weights, llama.cpp's tiled order",
     TensorType::Q6_K, HeadCopy::lanes, 16, false, {16, 12, 8}},
};
static_assert(std::size(kKernelDescs) == std::size(kHeadKernels));

constexpr const KernelDesc& desc(HeadKernel k) { return kKernelDescs[size_t(k)]; }
constexpr const char* kernel_name(HeadKernel k) { return desc(k).name; }
// The activation layouts beyond the q8 groups that only the staged kernels read: the prep kernel
// writes them only for the calls whose plan runs those kernels.
constexpr bool reads_fragment_acts(HeadKernel k) { return k == HeadKernel::q5k_mma; }
constexpr bool reads_lanes_acts(HeadKernel k) { return k == HeadKernel::q5k_lanes; }

constexpr bool is_llamacpp_kernel(HeadKernel k) {
  return k == HeadKernel::llamacpp_tiled || k == HeadKernel::llamacpp_repack || k == HeadKernel::llamacpp_float_vec ||
         k == HeadKernel::llamacpp_float_sgemm || k == HeadKernel::q5k_stream_n_tiled ||
         k == HeadKernel::q6k_stream_tiled || k == HeadKernel::q5k_stream_tiled || k == HeadKernel::q4k_stream_tiled ||
         k == HeadKernel::q6k_tiled_n || k == HeadKernel::q5k_tma_n_tiled || k == HeadKernel::q5k_tma_tiled ||
         k == HeadKernel::q4k_tma_tiled || k == HeadKernel::q6k_tma_tiled;
}
// The kernels that compute the q8 and float routes of a head of type t (llama.cpp's orders are
// chosen only through their own tables).
constexpr bool kernel_reads_type(HeadKernel k, TensorType t) {
  return k == HeadKernel::generic || (!is_llamacpp_kernel(k) && desc(k).type == t);
}

// The order a call's dots follow: the q8 route's (vec_dot), the float activation routes, or one of
// llama.cpp's own paths (Route::llamacpp where llama.cpp does not take vec_dot's order).
enum class PlanRoute : uint8_t { q8, float_acts, llamacpp_tiled, llamacpp_repack, llamacpp_float_vec, llamacpp_float_sgemm };
// Throws Error for a llama.cpp path this backend does not reproduce.
PlanRoute plan_route(bool float_route, Route route, quant::LlamaCppPath path);

// One row of a dispatch table: calls of min_tokens..max_tokens tokens run `kernel` with `warps`
// warps per block (0: its first built configuration).
struct PlanRow {
  int min_tokens, max_tokens;
  HeadKernel kernel;
  int warps = 0;
};

// Q5_K, q8 route. With both stream copies held (EngineOptions::cuda_second_layout): T = 1 in
// registers, T = 2 through the TMA ring, T >= 3 tokens in N; with the sub-blocks copy alone (the
// default), tokens in N at every T: up to 8 tokens with the items staged by bulk copies, above in
// registers; the cp.async kernels on the file's rows only where no stream copy is held. Figures:
// docs/performance.md (CUDA attempts 7, 10-12, 24, 43; "One copy of the head").
constexpr PlanRow kQ5KPlan[] = {
    {1, 1, HeadKernel::q5k_stream, 16},  {2, 2, HeadKernel::q5k_tma, 16},       {1, 2, HeadKernel::q5k_stream, 16},
    {1, 8, HeadKernel::q5k_tma_n, 16},   {1, 16, HeadKernel::q5k_stream_n, 12}, {1, 2, HeadKernel::q5k_lanes, 0},
    {1, 16, HeadKernel::q5k_mma, 12},    {1, 16, HeadKernel::generic, 0}};
// Q4_K in passes of two tokens (two passes of two beat one of four).
constexpr PlanRow kQ4KPlan[] = {{1, 16, HeadKernel::q4k_stream, 16}, {1, 16, HeadKernel::generic, 0}};
constexpr PlanRow kQ6KPlan[] = {{1, 16, HeadKernel::q6k_stream, 16}, {1, 16, HeadKernel::generic, 0}};
// Q8_0: a pass of two tokens is fastest with 8 warps x 4 buffers.
constexpr PlanRow kQ80Plan[] = {{1, 1, HeadKernel::q8_0_stream, 16},
                                {2, 2, HeadKernel::q8_0_stream, 8},
                                {3, 16, HeadKernel::q8_0_stream, 16},
                                {1, 16, HeadKernel::generic, 0}};
constexpr PlanRow kGenericPlan[] = {{1, 16, HeadKernel::generic, 0}};
// llama.cpp's own orders (route llamacpp: their paths already depend on the token count; route
// tiled: the tiled K-quant order at every T). Q4_K's and Q5_K's tiled order run on the tensor cores
// from the lanes stream copy where it is held (K = one sub-block), else Q5_K's from the sub-blocks
// copy. The items are staged by bulk copies where that measured faster: from two tokens on the lanes
// copy (Q6_K above 8 tokens with 12 warps: two stages for 16 do not fit beside 16 tokens' runs),
// from nine on Q5_K's sub-blocks copy (warps and token ranges: docs/performance.md, CUDA attempts 39,
// 40, 43).
constexpr PlanRow kLlamaCppTiledPlan[] = {{1, 16, HeadKernel::llamacpp_tiled, 0}};
constexpr PlanRow kLlamaCppTiledQ4KPlan[] = {{2, 16, HeadKernel::q4k_tma_tiled, 16},
                                             {1, 16, HeadKernel::q4k_stream_tiled, 16},
                                             {1, 16, HeadKernel::llamacpp_tiled, 0}};
constexpr PlanRow kLlamaCppTiledQ5KPlan[] = {{2, 16, HeadKernel::q5k_tma_tiled, 16},
                                             {1, 16, HeadKernel::q5k_stream_tiled, 16},
                                             {9, 16, HeadKernel::q5k_tma_n_tiled, 16},
                                             {1, 16, HeadKernel::q5k_stream_n_tiled, 16},
                                             {1, 16, HeadKernel::llamacpp_tiled, 0}};
// At one token the passes kernel reads faster than the tokens-in-N one (performance.md, CUDA
// attempt 41); from two tokens on, tokens in N.
constexpr PlanRow kLlamaCppTiledQ6KPlan[] = {{1, 1, HeadKernel::q6k_stream_tiled, 16},
                                             {2, 8, HeadKernel::q6k_tma_tiled, 16},
                                             {9, 16, HeadKernel::q6k_tma_tiled, 12},
                                             {2, 16, HeadKernel::q6k_tiled_n, 16},
                                             {1, 16, HeadKernel::q6k_stream_tiled, 16},
                                             {1, 16, HeadKernel::llamacpp_tiled, 0}};
constexpr PlanRow kLlamaCppRepackPlan[] = {{1, 16, HeadKernel::llamacpp_repack, 0}};
constexpr PlanRow kLlamaCppFloatVecPlan[] = {{1, 16, HeadKernel::llamacpp_float_vec, 0}};
constexpr PlanRow kLlamaCppFloatSgemmPlan[] = {{1, 16, HeadKernel::llamacpp_float_sgemm, 0}};

// The table of a head type and route (float_acts: the f16 / bf16 / f32 activation routes).
constexpr std::span<const PlanRow> plan_table(TensorType type, PlanRoute route) {
  switch (route) {
    case PlanRoute::q8: break;
    case PlanRoute::float_acts: return kGenericPlan;
    case PlanRoute::llamacpp_tiled:
      if (type == TensorType::Q5_K) return kLlamaCppTiledQ5KPlan;
      if (type == TensorType::Q6_K) return kLlamaCppTiledQ6KPlan;
      if (type == TensorType::Q4_K) return kLlamaCppTiledQ4KPlan;
      return kLlamaCppTiledPlan;
    case PlanRoute::llamacpp_repack: return kLlamaCppRepackPlan;
    case PlanRoute::llamacpp_float_vec: return kLlamaCppFloatVecPlan;
    case PlanRoute::llamacpp_float_sgemm: return kLlamaCppFloatSgemmPlan;
  }
  switch (type) {
    case TensorType::Q5_K: return kQ5KPlan;
    case TensorType::Q4_K: return kQ4KPlan;
    case TensorType::Q6_K: return kQ6KPlan;
    case TensorType::Q8_0: return kQ80Plan;
    default: return kGenericPlan;
  }
}

// What choose() needs to know of the device and the head.
struct PlanDevice {
  int groups = 0;          // device-layout groups per row
  size_t smem_optin = 0;   // dynamic shared memory a block may opt in to
  unsigned copies = copy_bit(HeadCopy::rows);  // copy_bit()s of the copies held
  unsigned on_demand = 0;  // copies not held that an override row may still read (uploaded first)
};

struct Plan {
  HeadKernel kernel = HeadKernel::generic;
  int warps = 0;       // warps per block of its launches
  int last_warps = 0;  // ... of the last launch when it runs fewer tokens than the others (passes)
  int passes(int tokens) const {
    const KernelDesc& d = desc(kernel);
    return (tokens + d.max_tokens - 1) / d.max_tokens;
  }
};

// The dynamic shared memory of a launch of `kernel` for `tokens` tokens (CUDA builds only).
size_t plan_smem(HeadKernel kernel, int warps, int groups, int tokens);

// The first row of `override_rows`, then of the table of the type and route, that covers `tokens`,
// reads a held copy (an override row: or one uploaded on demand) and fits in shared memory (with 8 KiB to spare for the kernel's static shared
// memory). Override rows apply to the q8 and float routes with the kernels of the head's type, and
// to llama.cpp's orders with the kernels of that order's own table (a tuning picks their warps).
// CUDA builds only (it asks the kernels' shared-memory sizes).
Plan choose(TensorType type, PlanRoute route, int tokens, const PlanDevice& device,
            std::span<const PlanRow> override_rows = {});
inline Plan choose(TensorType type, bool float_route, int tokens, const PlanDevice& device,
                   std::span<const PlanRow> override_rows = {}) {
  return choose(type, float_route ? PlanRoute::float_acts : PlanRoute::q8, tokens, device, override_rows);
}

}  // namespace lmhead::cuda
