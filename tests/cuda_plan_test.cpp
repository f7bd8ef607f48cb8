// The kernel plan (src/cuda/plan.hpp) on the host: which kernel each head type, route and token
// count gets with every copy of the head held, with the file's rows only, and with little shared
// memory. Runs without a GPU (the kernels' shared-memory sizes are host functions), so CI checks the
// dispatch the GPU tests and the benchmark rely on.
#include <gtest/gtest.h>

#include "cuda/plan.hpp"
#include "lmhead/error.hpp"

namespace lmhead {
namespace {

using cuda::HeadCopy;
using cuda::HeadKernel;

TEST(CudaPlan, EveryKernelHasItsRowInTheDescriptions) {
  for (size_t i = 0; i < std::size(cuda::kHeadKernels); ++i) {
    EXPECT_EQ(cuda::kHeadKernels[i], HeadKernel(i));
    EXPECT_EQ(cuda::desc(HeadKernel(i)).kernel, HeadKernel(i));
  }
}

#if LMHEAD_HAVE_CUDA
constexpr size_t kH200Smem = 232448;  // cudaDevAttrMaxSharedMemoryPerBlockOptin of sm_90

cuda::PlanDevice device(int hidden, unsigned copies) {
  cuda::PlanDevice d;
  d.groups = hidden / 256;
  d.smem_optin = kH200Smem;
  d.copies = copies;
  return d;
}

constexpr unsigned kAll = cuda::copy_bit(HeadCopy::rows) | cuda::copy_bit(HeadCopy::lanes) |
                          cuda::copy_bit(HeadCopy::subblocks);
constexpr unsigned kRows = cuda::copy_bit(HeadCopy::rows);

TEST(CudaPlan, Q5KDefaults) {
  for (int hidden : {512, 4096, 6656}) {  // 6656: the Muse head of the benchmarks
  SCOPED_TRACE(hidden);
  const cuda::PlanDevice all = device(hidden, kAll);
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, 1, all).kernel, HeadKernel::q5k_stream);
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, 1, all).warps, 16);
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, 2, all).kernel, HeadKernel::q5k_tma);
  // Tokens in N: staged by bulk copies up to 8 tokens, in registers above.
  for (int T = 3; T <= 16; ++T) {
    EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, T, all).kernel, T <= 8 ? HeadKernel::q5k_tma_n : HeadKernel::q5k_stream_n) << T;
    EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, T, all).warps, T <= 8 ? 16 : 12) << T;
  }
  // Without the stream copies: the staged kernels on the file's rows.
  const cuda::PlanDevice rows = device(hidden, kRows);
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, 1, rows).kernel, HeadKernel::q5k_lanes);
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, 2, rows).kernel, HeadKernel::q5k_lanes);
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, 3, rows).kernel, HeadKernel::q5k_mma);
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, 16, rows).kernel, HeadKernel::q5k_mma);
  // The float routes and a device without shared memory to spare: generic.
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, true, 1, all).kernel, HeadKernel::generic);
  cuda::PlanDevice tiny = all;
  tiny.smem_optin = 8192;  // only what the kernels keep for their static shared memory
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, 8, tiny).kernel, HeadKernel::generic);
  }
}

TEST(CudaPlan, OtherTypesAndOverrides) {
  const cuda::PlanDevice all = device(4096, kAll);
  EXPECT_EQ(cuda::choose(TensorType::Q4_K, false, 16, all).kernel, HeadKernel::q4k_stream);
  EXPECT_EQ(cuda::choose(TensorType::Q6_K, false, 5, all).kernel, HeadKernel::q6k_stream);
  EXPECT_EQ(cuda::choose(TensorType::Q8_0, false, 1, all).warps, 16);
  EXPECT_EQ(cuda::choose(TensorType::Q8_0, false, 2, all).warps, 8);
  EXPECT_EQ(cuda::choose(TensorType::Q8_0, false, 9, all).kernel, HeadKernel::q8_0_stream);
  // T = 6 runs passes of 4 and 2 tokens: the pass of two takes the two-token row's warps.
  EXPECT_EQ(cuda::choose(TensorType::Q8_0, false, 6, all).warps, 16);
  EXPECT_EQ(cuda::choose(TensorType::Q8_0, false, 6, all).last_warps, 8);
  EXPECT_EQ(cuda::choose(TensorType::Q8_0, false, 8, all).last_warps, 16);
  EXPECT_EQ(cuda::choose(TensorType::F16, false, 1, all).kernel, HeadKernel::generic);
  EXPECT_EQ(cuda::choose(TensorType::Q8_0, false, 1, device(4096, kRows)).kernel, HeadKernel::generic);
  // An override row runs where it can; a kernel of another head type, or one past its token limit
  // without passes, leaves the call to the type's table.
  const cuda::PlanRow mma[] = {{1, 16, HeadKernel::q5k_mma, 8}};
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, 4, all, mma).kernel, HeadKernel::q5k_mma);
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, 4, all, mma).warps, 8);
  EXPECT_EQ(cuda::choose(TensorType::Q6_K, false, 4, all, mma).kernel, HeadKernel::q6k_stream);
  const cuda::PlanRow tma[] = {{1, 16, HeadKernel::q5k_tma, 0}};
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, 1, all, tma).kernel, HeadKernel::q5k_tma);
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, 3, all, tma).kernel, HeadKernel::q5k_tma_n);
}

// One copy of a Q5_K head by default (the sub-blocks split): tokens in N at every T. A forced row
// may still ask for the lanes split, which the backend then uploads on demand.
TEST(CudaPlan, Q5KWithOneCopy) {
  cuda::PlanDevice one = device(6656, kRows | cuda::copy_bit(HeadCopy::subblocks));
  for (int T : {1, 2, 3, 8}) EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, T, one).kernel, HeadKernel::q5k_tma_n) << T;
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, 16, one).kernel, HeadKernel::q5k_stream_n);
  const cuda::PlanRow regs[] = {{1, 2, HeadKernel::q5k_stream, 16}};
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, 1, one, regs).kernel, HeadKernel::q5k_tma_n);
  one.on_demand = cuda::copy_bit(HeadCopy::lanes);
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, 1, one).kernel, HeadKernel::q5k_tma_n);  // tables: held copies only
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, false, 1, one, regs).kernel, HeadKernel::q5k_stream);
}

// Route llamacpp: where llama.cpp's path has vec_dot's order the default tables answer; elsewhere
// the path's own kernel: override rows name only kernels of that path's table (they pick warps).
TEST(CudaPlan, LlamaCppRouteTakesThePathsKernel) {
  using quant::LlamaCppPath;
  const cuda::PlanDevice all = device(4096, kAll);
  EXPECT_EQ(cuda::plan_route(false, Route::llamacpp, LlamaCppPath::vec_dot), cuda::PlanRoute::q8);
  EXPECT_EQ(cuda::plan_route(false, Route::llamacpp, LlamaCppPath::sgemm_q8_0), cuda::PlanRoute::q8);
  EXPECT_EQ(cuda::plan_route(true, Route::vec_dot, LlamaCppPath::sgemm_f16), cuda::PlanRoute::float_acts);
  EXPECT_THROW(cuda::plan_route(false, Route::llamacpp, LlamaCppPath::unsupported), Error);
  const cuda::PlanRow mma[] = {{1, 16, HeadKernel::q5k_mma, 8}};
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, cuda::PlanRoute::llamacpp_tiled, 8, all, mma).kernel,
            HeadKernel::q5k_tma_tiled);
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, cuda::PlanRoute::llamacpp_tiled, 1, all).kernel, HeadKernel::q5k_stream_tiled);
  const cuda::PlanDevice subblocks = device(4096, kRows | cuda::copy_bit(HeadCopy::subblocks));
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, cuda::PlanRoute::llamacpp_tiled, 8, subblocks).kernel,
            HeadKernel::q5k_stream_n_tiled);
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, cuda::PlanRoute::llamacpp_tiled, 9, subblocks).kernel,
            HeadKernel::q5k_tma_n_tiled);
  const cuda::PlanRow tiled12[] = {{1, 16, HeadKernel::q5k_stream_n_tiled, 12}};
  const cuda::Plan tuned = cuda::choose(TensorType::Q5_K, cuda::PlanRoute::llamacpp_tiled, 8, all, tiled12);
  EXPECT_EQ(tuned.kernel, HeadKernel::q5k_stream_n_tiled);
  EXPECT_EQ(tuned.warps, 12);
  EXPECT_EQ(cuda::choose(TensorType::Q5_K, cuda::PlanRoute::llamacpp_tiled, 16, device(4096, kRows)).kernel,
            HeadKernel::llamacpp_tiled);
  EXPECT_EQ(cuda::choose(TensorType::Q6_K, cuda::PlanRoute::llamacpp_tiled, 8, all).kernel, HeadKernel::q6k_tma_tiled);
  EXPECT_EQ(cuda::choose(TensorType::Q6_K, cuda::PlanRoute::llamacpp_tiled, 2, all).kernel, HeadKernel::q6k_tma_tiled);
  EXPECT_EQ(cuda::choose(TensorType::Q6_K, cuda::PlanRoute::llamacpp_tiled, 16, all).warps, 12);
  // Without room for two stages per warp beside the runs: the register kernel.
  cuda::PlanDevice small = all;
  small.smem_optin = cuda::plan_smem(HeadKernel::q6k_tiled_n, 16, all.groups, 8) + 8192;
  EXPECT_EQ(cuda::choose(TensorType::Q6_K, cuda::PlanRoute::llamacpp_tiled, 8, small).kernel, HeadKernel::q6k_tiled_n);
  EXPECT_EQ(cuda::choose(TensorType::Q6_K, cuda::PlanRoute::llamacpp_tiled, 1, all).kernel, HeadKernel::q6k_stream_tiled);
  EXPECT_EQ(cuda::choose(TensorType::Q6_K, cuda::PlanRoute::llamacpp_tiled, 8, device(4096, kRows)).kernel,
            HeadKernel::llamacpp_tiled);
  EXPECT_EQ(cuda::choose(TensorType::Q4_K, cuda::PlanRoute::llamacpp_tiled, 8, all).kernel, HeadKernel::q4k_tma_tiled);
  EXPECT_EQ(cuda::choose(TensorType::Q4_K, cuda::PlanRoute::llamacpp_tiled, 1, all).kernel, HeadKernel::q4k_stream_tiled);
  EXPECT_EQ(cuda::choose(TensorType::Q4_K, cuda::PlanRoute::llamacpp_tiled, 8, device(4096, kRows)).kernel,
            HeadKernel::llamacpp_tiled);
  EXPECT_EQ(cuda::choose(TensorType::Q4_K, cuda::PlanRoute::llamacpp_repack, 16, all).kernel,
            HeadKernel::llamacpp_repack);
  const cuda::Plan vec = cuda::choose(TensorType::F16, cuda::PlanRoute::llamacpp_float_vec, 3, all);
  EXPECT_EQ(vec.kernel, HeadKernel::llamacpp_float_vec);
  EXPECT_EQ(vec.passes(3), 3);  // 64 lanes per output: one token per launch
  EXPECT_EQ(cuda::choose(TensorType::F16, cuda::PlanRoute::llamacpp_float_sgemm, 16, all).passes(16), 4);
  // The default route's loops over kernels never meet llama.cpp's.
  for (TensorType t : {TensorType::Q4_K, TensorType::F16, TensorType::F32})
    for (HeadKernel k : cuda::kHeadKernels)
      if (cuda::is_llamacpp_kernel(k)) {
        EXPECT_FALSE(cuda::kernel_reads_type(k, t));
      }
}
#endif

}  // namespace
}  // namespace lmhead
