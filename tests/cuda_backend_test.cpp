// The CUDA backend against the scalar backend (the oracle), byte for byte, on fresh random heads
// and inputs every run, and against the golden files. Every test skips with a visible message on
// a machine without a usable GPU (CI compiles the kernels but has no GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/device_layout.hpp"
#include "cuda/kernels.hpp"
#include "cuda/stream_layout.hpp"
#include "gguf/gguf.hpp"
#include "lmhead/lmhead.hpp"
#include "random_head.hpp"
#include "test_util.hpp"
#include "ops/tanh.hpp"
#include "quant/blocks.hpp"
#include "quant/dequantize.hpp"

namespace lmhead {
namespace {

using testing::random_head;
using testing::random_hidden;
using testing::RandomHead;

#define SKIP_WITHOUT_GPU()                                              \
  do {                                                                  \
    std::string why_;                                                   \
    if (!cuda_available(&why_)) GTEST_SKIP() << "no usable GPU: " << why_; \
  } while (0)

using testing::data_dir;

uint64_t seed_of_this_run() {
  static const uint64_t seed = std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
  return seed;
}

uint32_t bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

::testing::AssertionResult same_floats(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << what << ": sizes " << a.size() << " vs " << b.size();
  size_t diffs = 0, first = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (bits(a[i]) != bits(b[i])) {
      if (diffs++ == 0) first = i;
    }
  if (diffs == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << diffs << " of " << a.size() << " differ; first at " << first
                                       << ": scalar " << a[first] << " (0x" << std::hex << bits(a[first]) << ") cuda "
                                       << std::dec << b[first] << " (0x" << std::hex << bits(b[first]) << ")";
}

void expect_same(const ForwardOutput& ref, const ForwardOutput& got, const ForwardRequest& req, const std::string& what) {
  SCOPED_TRACE(what + " (seed " + std::to_string(seed_of_this_run()) + ")");
  ASSERT_EQ(ref.summaries.size(), got.summaries.size());
  for (size_t t = 0; t < ref.summaries.size(); ++t) {
    const auto& a = ref.summaries[t];
    const auto& b = got.summaries[t];
    EXPECT_EQ(bits(a.max), bits(b.max)) << "token " << t << " max " << a.max << " vs " << b.max;
    EXPECT_EQ(a.argmax, b.argmax) << "token " << t;
    EXPECT_EQ(a.tie_count, b.tie_count) << "token " << t;
    EXPECT_EQ(a.tied_ids, b.tied_ids) << "token " << t;
    ASSERT_EQ(a.top.size(), b.top.size()) << "token " << t;
    for (size_t i = 0; i < a.top.size(); ++i) {
      EXPECT_EQ(a.top[i].id, b.top[i].id) << "token " << t << " rank " << i;
      EXPECT_EQ(bits(a.top[i].logit), bits(b.top[i].logit)) << "token " << t << " rank " << i;
    }
  }
  if (req.logprobs) {
    ASSERT_EQ(ref.sum_exp.size(), got.sum_exp.size());
    for (size_t t = 0; t < ref.sum_exp.size(); ++t)
      EXPECT_NEAR(ref.sum_exp[t], got.sum_exp[t], 1e-12 * ref.sum_exp[t]) << "token " << t;
  }
  if (req.want_logits || req.want_stages) {
    EXPECT_TRUE(same_floats(ref.logits, got.logits, "capped logits"));
  }
  if (req.want_stages) {
    EXPECT_TRUE(same_floats(ref.stages.normed, got.stages.normed, "normed"));
    EXPECT_TRUE(same_floats(ref.stages.raw, got.stages.raw, "raw"));
    EXPECT_TRUE(same_floats(ref.stages.scaled, got.stages.scaled, "scaled"));
    EXPECT_TRUE(same_floats(ref.stages.div, got.stages.div, "div"));
    EXPECT_TRUE(same_floats(ref.stages.tanh, got.stages.tanh, "tanh"));
    EXPECT_TRUE(same_floats(ref.stages.capped, got.stages.capped, "capped"));
  }
}

ForwardOutput run(Backend& b, const std::vector<float>& hidden, int T, const ForwardRequest& req) {
  ForwardOutput out;
  b.forward(hidden.data(), T, req, out);
  return out;
}

// Every kernel a plan can choose for a head of `type` on the q8 route, generic last.
std::vector<cuda::HeadKernel> kernels_for(TensorType type) {
  std::vector<cuda::HeadKernel> ks;
  for (cuda::HeadKernel k : cuda::kHeadKernels)
    if (cuda::kernel_reads_type(k, type)) ks.push_back(k);
  return ks;
}

// Whether a forced `k` runs a call of T tokens (else the plan's own kernel does).
bool runs_tokens(cuda::HeadKernel k, int T) { return T <= cuda::desc(k).max_tokens || cuda::desc(k).passes; }

std::string name_of(cuda::HeadKernel k) { return cuda::kernel_name(k); }

TEST(CudaBackend, Q5KMatchesScalarForEveryTokenCount) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run());
  const RandomHead head = random_head(TensorType::Q5_K, 1237, 512, rng);
  auto scalar = make_scalar_backend(head.view);
  auto gpu = make_cuda_backend(head.view, 1);
  ForwardRequest req;
  req.want_logits = true;
  for (int T = 1; T <= 16; ++T) {
    const std::vector<float> hidden = random_hidden(T, 512, rng);
    const ForwardOutput ref = run(*scalar, hidden, T, req);
    for (cuda::HeadKernel k : kernels_for(TensorType::Q5_K)) {
      if (!runs_tokens(k, T)) continue;
      cuda::Tuning tuning = cuda::force_kernel(k);
      tuning.hooks.check_guards = true;
      cuda::set_tuning(*gpu, tuning);
      for (int rep = 0; rep < 2; ++rep) {  // the first call runs directly, the second replays the graph
        const ForwardOutput got = run(*gpu, hidden, T, req);
        const cuda::CallInfo info = cuda::last_call(*gpu);
        EXPECT_EQ(info.kernel, k);
        EXPECT_TRUE(info.guards_intact) << "a kernel wrote outside the logits";
        expect_same(ref, got, req, "Q5_K T=" + std::to_string(T) + " kernel " + name_of(info.kernel) + " rep " + std::to_string(rep));
      }
    }
  }
}

TEST(CudaBackend, Q5KMmaConfigurationsAgree) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run() + 1);
  const RandomHead head = random_head(TensorType::Q5_K, 4099, 768, rng);
  auto scalar = make_scalar_backend(head.view);
  auto gpu = make_cuda_backend(head.view, 1);
  ForwardRequest req;
  req.want_logits = true;
  const struct { int warps; bool pdl, events; } configs[] = {{8, true, true}, {12, true, false}, {16, true, false}, {12, false, false}};
  for (int T : {1, 2, 9, 16}) {
    const std::vector<float> hidden = random_hidden(T, 768, rng);
    const ForwardOutput ref = run(*scalar, hidden, T, req);
    for (const auto& c : configs) {
      cuda::Tuning t = cuda::force_kernel(cuda::HeadKernel::q5k_mma, c.warps);
      t.hooks.pdl = c.pdl;
      t.hooks.stage_events = c.events;
      t.hooks.check_guards = true;
      cuda::set_tuning(*gpu, t);
      ForwardRequest timed = req;
      timed.want_stage_times = c.events;
      for (int rep = 0; rep < 2; ++rep) {
        const ForwardOutput got = run(*gpu, hidden, T, timed);
        EXPECT_EQ(cuda::last_call(*gpu).kernel, cuda::HeadKernel::q5k_mma);
        EXPECT_TRUE(cuda::last_call(*gpu).guards_intact);
        expect_same(ref, got, req, "T=" + std::to_string(T) + " warps " + std::to_string(c.warps));
      }
    }
  }
}

// The stream kernel over its knobs, on shapes that exercise its edges: an odd number of
// super-blocks per row (the last pair has no odd block), one super-block per row, vocabularies
// that end inside a 16-row tile, and tiles handed out dynamically to many warps.
TEST(CudaBackend, Q5KStreamConfigurationsAgree) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run() + 11);
  const struct { int64_t V, H; } shapes[] = {{4099, 768}, {1, 256}, {17, 512}, {70001, 1280}, {3000, 256}};
  for (const auto& sh : shapes) {
    const RandomHead head = random_head(TensorType::Q5_K, sh.V, sh.H, rng);
    auto scalar = make_scalar_backend(head.view);
    auto gpu = make_cuda_backend(head.view, 1);
    ForwardRequest req;
    req.want_logits = true;
    req.top_k = int(std::min<int64_t>(5, sh.V));
    using cuda::HeadKernel;
    const struct { HeadKernel kernel; int warps; bool pdl, events; } configs[] = {
        {HeadKernel::q5k_tma, 16, true, false},    {HeadKernel::q5k_tma, 16, true, true},
        {HeadKernel::q5k_tma, 16, false, false},   {HeadKernel::q5k_stream, 16, true, false},
        {HeadKernel::q5k_stream, 12, true, true},  {HeadKernel::q5k_stream, 8, false, false},
        {HeadKernel::q5k_stream, 12, true, false}};
    for (int T = 1; T <= 2; ++T) {
      const std::vector<float> hidden = random_hidden(T, sh.H, rng);
      const ForwardOutput ref = run(*scalar, hidden, T, req);
      for (const auto& c : configs) {
        cuda::Tuning t = cuda::force_kernel(c.kernel, c.warps);
        t.hooks.pdl = c.pdl;
        t.hooks.stage_events = c.events;
        t.hooks.check_guards = true;
        cuda::set_tuning(*gpu, t);
        ForwardRequest timed = req;
        timed.want_stage_times = c.events;
        for (int rep = 0; rep < 2; ++rep) {
          const ForwardOutput got = run(*gpu, hidden, T, timed);
          const cuda::CallInfo info = cuda::last_call(*gpu);
          EXPECT_EQ(info.kernel, c.kernel);
          EXPECT_TRUE(info.guards_intact) << name_of(info.kernel) << " wrote outside the logits";
          expect_same(ref, got, req,
                      "V=" + std::to_string(sh.V) + " H=" + std::to_string(sh.H) + " T=" + std::to_string(T) + " " +
                          name_of(c.kernel) + " warps " + std::to_string(c.warps));
        }
      }
    }
  }
}

// The tokens-in-N stream kernel over its warps and both token tiles, on shapes with an odd number of
// super-blocks, one super-block, and vocabularies that end inside a tile.
TEST(CudaBackend, Q5KStreamTokensInNAgrees) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run() + 12);
  const struct { int64_t V, H; } shapes[] = {{4099, 768}, {1, 256}, {37, 512}, {20011, 1280}};
  for (const auto& sh : shapes) {
    const RandomHead head = random_head(TensorType::Q5_K, sh.V, sh.H, rng);
    auto scalar = make_scalar_backend(head.view);
    auto gpu = make_cuda_backend(head.view, 1);
    ForwardRequest req;
    req.want_logits = true;
    req.top_k = int(std::min<int64_t>(3, sh.V));
    for (int T : {1, 3, 5, 8, 9, 16}) {
      const std::vector<float> hidden = random_hidden(T, sh.H, rng);
      const ForwardOutput ref = run(*scalar, hidden, T, req);
      for (int warps : {8, 12, 16}) {
        if (T > 8 && warps != 8) continue;  // two token tiles always run 8 warps
        cuda::Tuning t = cuda::force_kernel(cuda::HeadKernel::q5k_stream_n, warps);
        t.hooks.check_guards = true;
        cuda::set_tuning(*gpu, t);
        for (int rep = 0; rep < 2; ++rep) {
          const ForwardOutput got = run(*gpu, hidden, T, req);
          const cuda::CallInfo info = cuda::last_call(*gpu);
          EXPECT_EQ(info.kernel, cuda::HeadKernel::q5k_stream_n);
          EXPECT_TRUE(info.guards_intact) << "the tokens-in-N stream kernel wrote outside the logits";
          expect_same(ref, got, req,
                      "V=" + std::to_string(sh.V) + " H=" + std::to_string(sh.H) + " T=" + std::to_string(T) +
                          " warps " + std::to_string(warps));
        }
      }
    }
  }
}

// The tokens-in-N kernels with their items staged by bulk copies (TMA rings sized to the shared
// memory left beside the token runs) and the register kernels of the same orders: every tensor-core
// kernel of route tiled (llama.cpp's tiled K-quant order) for Q4_K, Q5_K and Q6_K, and vec_dot's
// Q5_K order staged, at each warp configuration, against the scalar backend's bytes. Shapes with an
// odd number of super-blocks, one super-block, and vocabularies that end inside a tile.
struct HeadShape {
  int64_t V, H;
};
void expect_tokens_in_n_kernels_agree(std::initializer_list<HeadShape> shapes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (TensorType type : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K})
    for (const auto& sh : shapes) {
      const RandomHead head = random_head(type, sh.V, sh.H, rng);
      auto scalar = make_scalar_backend(head.view);
      auto gpu = make_cuda_backend(head.view, 1);
      for (bool tiled : {true, false}) {
        std::vector<cuda::HeadKernel> kernels;
        for (cuda::HeadKernel k : cuda::kHeadKernels) {
          const bool tensor_core_tiled = cuda::is_llamacpp_kernel(k) && cuda::desc(k).type == type &&
                                         k != cuda::HeadKernel::llamacpp_repack;
          if (tiled ? tensor_core_tiled : k == cuda::HeadKernel::q5k_tma_n && type == TensorType::Q5_K) kernels.push_back(k);
        }
        if (kernels.empty()) continue;
        ForwardRequest req;
        req.want_logits = true;
        req.top_k = int(std::min<int64_t>(3, sh.V));
        if (tiled) {
          req.route = Route::llamacpp;
          req.llamacpp_path = quant::LlamaCppPath::tiled_kquant;
        }
        for (int T : {1, 3, 8, 9, 16}) {
          const std::vector<float> hidden = random_hidden(T, sh.H, rng);
          const ForwardOutput ref = run(*scalar, hidden, T, req);
          for (cuda::HeadKernel k : kernels)
            for (int warps : cuda::desc(k).warps) {
              if (warps == 0) continue;
              cuda::Tuning t = cuda::force_kernel(k, warps);
              t.hooks.check_guards = true;
              cuda::set_tuning(*gpu, t);
              for (int rep = 0; rep < 2; ++rep) {
                const ForwardOutput got = run(*gpu, hidden, T, req);
                const cuda::CallInfo info = cuda::last_call(*gpu);
                EXPECT_EQ(info.kernel, k);
                EXPECT_TRUE(info.guards_intact) << name_of(k) << " wrote outside the logits";
                expect_same(ref, got, req,
                            std::string(tensor_type_name(type)) + " V=" + std::to_string(sh.V) + " H=" +
                                std::to_string(sh.H) + " T=" + std::to_string(T) + " " + name_of(k) + " warps " +
                                std::to_string(warps) + " rep " + std::to_string(rep));
              }
            }
        }
      }
    }
}

TEST(CudaBackend, TokensInNKernelsStagedOrNotAgree) {
  SKIP_WITHOUT_GPU();
  expect_tokens_in_n_kernels_agree({{4099, 768}, {20011, 1280}}, seed_of_this_run() + 14);
}

// Each staged kernel once per token tile count on one small head: short enough for
// compute-sanitizer's racecheck (bench/gpu.sh), which watches their rings and barriers.
TEST(CudaBackend, StagedKernelsOnceEach) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run() + 17);
  const struct { TensorType type; cuda::HeadKernel kernel; } staged[] = {
      {TensorType::Q5_K, cuda::HeadKernel::q5k_tma_n},     {TensorType::Q5_K, cuda::HeadKernel::q5k_tma_n_tiled},
      {TensorType::Q5_K, cuda::HeadKernel::q5k_tma_tiled}, {TensorType::Q4_K, cuda::HeadKernel::q4k_tma_tiled},
      {TensorType::Q6_K, cuda::HeadKernel::q6k_tma_tiled}};
  for (const auto& s : staged) {
    const RandomHead head = random_head(s.type, 37, 512, rng);
    auto scalar = make_scalar_backend(head.view);
    auto gpu = make_cuda_backend(head.view, 1);
    ForwardRequest req;
    req.want_logits = true;
    if (cuda::is_llamacpp_kernel(s.kernel)) {
      req.route = Route::llamacpp;
      req.llamacpp_path = quant::LlamaCppPath::tiled_kquant;
    }
    cuda::set_tuning(*gpu, cuda::force_kernel(s.kernel, 16));
    for (int T : {3, 9}) {
      const std::vector<float> hidden = random_hidden(T, 512, rng);
      const ForwardOutput got = run(*gpu, hidden, T, req);
      EXPECT_EQ(cuda::last_call(*gpu).kernel, s.kernel);
      expect_same(run(*scalar, hidden, T, req), got, req, name_of(s.kernel) + " T=" + std::to_string(T));
    }
  }
}

// The same on two small heads (bench/gpu.sh runs it under memcheck).
TEST(CudaBackend, TokensInNKernelsOnSmallHeads) {
  SKIP_WITHOUT_GPU();
  expect_tokens_in_n_kernels_agree({{1, 256}, {37, 512}}, seed_of_this_run() + 15);
}

// The register stream kernel on the other stream layouts (Q4_K: four min lanes; Q6_K: signed
// scales, unsigned levels, each lane's offset share from the bsums (§5b); Q8_0: per-block d
// products): odd super-block counts, one super-block, vocabularies ending inside a tile, every warp
// configuration, T = 1..4 in one pass and T = 5, 9 in passes of four.
TEST(CudaBackend, StreamKernelAgreesOnQ4KQ6KQ80) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run() + 13);
  const struct { TensorType type; cuda::HeadKernel kernel; } types[] = {{TensorType::Q4_K, cuda::HeadKernel::q4k_stream},
                                                                       {TensorType::Q6_K, cuda::HeadKernel::q6k_stream},
                                                                       {TensorType::Q8_0, cuda::HeadKernel::q8_0_stream}};
  const struct { int64_t V, H; } shapes[] = {{4099, 768}, {1, 256}, {17, 512}, {30011, 1280}};
  for (const auto& ty : types)
    for (const auto& sh : shapes) {
      const RandomHead head = random_head(ty.type, sh.V, sh.H, rng);
      auto scalar = make_scalar_backend(head.view);
      auto gpu = make_cuda_backend(head.view, 1);
      ForwardRequest req;
      req.want_logits = true;
      req.top_k = int(std::min<int64_t>(4, sh.V));
      for (int T : {1, 2, 3, 4, 5, 9}) {
        const std::vector<float> hidden = random_hidden(T, sh.H, rng);
        const ForwardOutput ref = run(*scalar, hidden, T, req);
        for (int warps : {16, 12, 8}) {
          if (T > 2 && warps != 16) continue;  // T > 2 always runs 8 warps
          cuda::Tuning t = cuda::force_kernel(ty.kernel, warps);  // every pass, T = 2 as well
          t.hooks.check_guards = true;
          cuda::set_tuning(*gpu, t);
          const ForwardOutput got = run(*gpu, hidden, T, req);
          const cuda::CallInfo info = cuda::last_call(*gpu);
          EXPECT_EQ(info.kernel, ty.kernel);
          EXPECT_TRUE(info.guards_intact) << "the " << name_of(ty.kernel) << " kernel wrote outside the logits";
          expect_same(ref, got, req,
                      std::string(tensor_type_name(ty.type)) + " V=" + std::to_string(sh.V) + " H=" +
                          std::to_string(sh.H) + " T=" + std::to_string(T) + " warps " + std::to_string(warps));
        }
      }
    }
}

TEST(CudaBackend, Q5KRoutesCapsAndSelections) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run() + 2);
  for (float cap : {20.0f, 0.0f}) {
    const RandomHead head = random_head(TensorType::Q5_K, 4099, 256, rng, 0.196116f, cap);
    auto scalar = make_scalar_backend(head.view);
    auto gpu = make_cuda_backend(head.view, 1);
    for (ActivationRoute route : {ActivationRoute::q8, ActivationRoute::f32})
      for (SoftcapRoute sc : {SoftcapRoute::nodes, SoftcapRoute::fused})
        for (int T : {1, 6, 16}) {
          const std::vector<float> hidden = random_hidden(T, 256, rng);
          ForwardRequest req;
          req.activations = route;
          req.softcap = sc;
          req.top_k = T == 6 ? 4099 : 7;  // 4099 > one 4096-id chunk
          req.logprobs = true;
          req.want_stages = T != 16;
          req.want_logits = true;
          const ForwardOutput ref = run(*scalar, hidden, T, req);
          const ForwardOutput got = run(*gpu, hidden, T, req);
          expect_same(ref, got, req,
                      std::string("cap ") + std::to_string(cap) + (route == ActivationRoute::q8 ? " q8" : " f32") +
                          (sc == SoftcapRoute::nodes ? " nodes" : " fused") + " T=" + std::to_string(T));
        }
  }
}

TEST(CudaBackend, WildScalesStayExact) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run() + 3);
  const RandomHead head = random_head(TensorType::Q5_K, 2053, 512, rng, 0.196116f, 20.0f, /*wild=*/true);
  auto scalar = make_scalar_backend(head.view);
  auto gpu = make_cuda_backend(head.view, 1);
  ForwardRequest req;
  req.want_logits = true;
  for (int T : {1, 8, 11}) {
    const std::vector<float> hidden = random_hidden(T, 512, rng);
    expect_same(run(*scalar, hidden, T, req), run(*gpu, hidden, T, req), req, "wild d/dmin T=" + std::to_string(T));
  }
}

TEST(CudaBackend, EveryHeadTypeOnBothRoutes) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run() + 4);
  const struct { TensorType type; int64_t H; } cases[] = {
      {TensorType::Q4_K, 512}, {TensorType::Q6_K, 512}, {TensorType::Q8_0, 544},
      {TensorType::F16, 300},  {TensorType::BF16, 100}, {TensorType::F32, 77}};
  for (const auto& c : cases) {
    const RandomHead head = random_head(c.type, 1031, c.H, rng);
    auto scalar = make_scalar_backend(head.view);
    auto gpu = make_cuda_backend(head.view, 1);
    for (ActivationRoute route : {ActivationRoute::q8, ActivationRoute::f32})
      for (int T : {1, 3, 6}) {
        const std::vector<float> hidden = random_hidden(T, c.H, rng);
        ForwardRequest req;
        req.activations = route;
        req.want_logits = true;
        req.top_k = 3;
        expect_same(run(*scalar, hidden, T, req), run(*gpu, hidden, T, req), req,
                    std::string(tensor_type_name(c.type)) + (route == ActivationRoute::q8 ? " q8" : " f32") +
                        " T=" + std::to_string(T));
      }
  }
}

TEST(CudaBackend, SaturatedCapTies) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run() + 5);
  // A huge logit scale saturates most capped logits at exactly +-cap: many-way ties.
  const RandomHead head = random_head(TensorType::Q5_K, 3001, 256, rng, 5000.0f, 20.0f);
  auto scalar = make_scalar_backend(head.view);
  auto gpu = make_cuda_backend(head.view, 1);
  ForwardRequest req;
  req.top_k = 20;
  for (cuda::HeadKernel k : kernels_for(TensorType::Q5_K)) {
    cuda::set_tuning(*gpu, cuda::force_kernel(k));
    for (int T : {1, 2, 3, 12}) {
      const std::vector<float> hidden = random_hidden(T, 256, rng);
      const ForwardOutput ref = run(*scalar, hidden, T, req);
      const ForwardOutput got = run(*gpu, hidden, T, req);
      EXPECT_GT(ref.summaries[0].tie_count, 16) << "the test should produce wide ties";
      expect_same(ref, got, req, "saturated ties " + name_of(cuda::last_call(*gpu).kernel) + " T=" + std::to_string(T));
    }
  }
}

// The measuring hook (TestHooks::block_clock, used by dev/cuda/call_floor.cu): every block of the
// tokens-in-N kernel stamps its start, activations staged, last warp done and exit, in that order,
// and the call's bytes are those of the same call without the hook.
TEST(CudaBackend, BlockClockStampsEveryBlockInOrder) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run() + 41);
  const RandomHead head = random_head(TensorType::Q5_K, 4099, 512, rng);
  auto gpu = make_cuda_backend(head.view, 1);
  ForwardRequest req;
  req.top_k = 5;
  for (int T : {1, 8}) {
    const std::vector<float> hidden = random_hidden(T, 512, rng);
    const ForwardOutput plain = run(*gpu, hidden, T, req);
    cuda::Tuning tuning = cuda::get_tuning(*gpu);
    tuning.hooks.block_clock = true;
    cuda::set_tuning(*gpu, tuning);
    const ForwardOutput clocked = run(*gpu, hidden, T, req);
    const std::vector<uint64_t> st = cuda::last_block_clock(*gpu);
    tuning.hooks.block_clock = false;
    cuda::set_tuning(*gpu, tuning);
    expect_same(plain, clocked, req, "with the block clock, T=" + std::to_string(T));
    ASSERT_EQ(st.size(), size_t(cuda::kBlockClockBlocks) * 4);
    int blocks = 0;
    while (blocks < cuda::kBlockClockBlocks && st[4 * size_t(blocks)] != 0) ++blocks;
    EXPECT_GT(blocks, 0) << "T=" << T << ": the plan's kernel (" << name_of(cuda::last_call(*gpu).kernel)
                         << ") stamped no block";
    for (int b = 0; b < blocks; ++b) {
      const uint64_t* s = &st[4 * size_t(b)];
      EXPECT_TRUE(s[0] <= s[1] && s[1] <= s[2] && s[2] <= s[3])
          << "T=" << T << " block " << b << ": " << s[0] << " " << s[1] << " " << s[2] << " " << s[3];
    }
    for (int b = blocks; b < cuda::kBlockClockBlocks; ++b) EXPECT_EQ(st[4 * size_t(b)], 0u) << "block " << b;
  }
}

// A few ids tied far apart (four copies of one row, every other row zero): the last block's tie scan
// must walk far to find them, in id order; the default kernel of every T.
TEST(CudaBackend, SparseTiesFarApart) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run() + 14);
  const int64_t V = 40099, H = 512;
  RandomHead head = random_head(TensorType::Q5_K, V, H, rng);
  const size_t rb = head.view.row_bytes;
  for (int64_t r = 1; r < V; ++r) std::memset(head.weights.data() + size_t(r) * rb, 0, rb);
  for (int64_t r : {int64_t(17), int64_t(20000), V - 1})
    std::memcpy(head.weights.data() + size_t(r) * rb, head.weights.data(), rb);
  auto scalar = make_scalar_backend(head.view);
  auto gpu = make_cuda_backend(head.view, 1);
  ForwardRequest req;
  req.want_logits = true;
  int sparse = 0;
  for (int T : {1, 2, 3, 8, 16}) {
    const std::vector<float> hidden = random_hidden(T, H, rng);
    const ForwardOutput ref = run(*scalar, hidden, T, req);
    const ForwardOutput got = run(*gpu, hidden, T, req);
    for (const auto& s : ref.summaries) sparse += s.tie_count == 4;
    expect_same(ref, got, req, "sparse ties " + name_of(cuda::last_call(*gpu).kernel) + " T=" + std::to_string(T));
  }
  EXPECT_GT(sparse, 0) << "no token had the four copies as its maximum";
}

// Argmax-only calls return when the last block's done flag reaches host memory, not when the
// stream reports completion: back-to-back calls of changing shapes (one pass, several passes,
// every head kernel) still give the scalar answers, ties included, and the same as waiting on
// the stream. Calls with work after the head kernel (top-k here) wait on the stream.
TEST(CudaBackend, ArgmaxOnlyCallsWaitOnTheDoneFlag) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run() + 15);
  for (TensorType type : {TensorType::Q5_K, TensorType::Q6_K, TensorType::Q8_0, TensorType::F16}) {
    const int64_t V = 5003, H = 512;
    RandomHead head = random_head(type, V, H, rng);
    // Two copies of row 0 far apart: some tokens tie, so the finalize's tie scan runs too.
    const size_t rb = head.view.row_bytes;
    for (int64_t r : {int64_t(2500), V - 1}) std::memcpy(head.weights.data() + size_t(r) * rb, head.weights.data(), rb);
    auto scalar = make_scalar_backend(head.view);
    auto gpu = make_cuda_backend(head.view, 1);
    for (int round = 0; round < 3; ++round)
      for (int T : {1, 16, 2, 9, 3, 4, 8, 5}) {
        const std::vector<float> hidden = random_hidden(T, H, rng);
        ForwardRequest req;
        const ForwardOutput ref = run(*scalar, hidden, T, req);
        for (bool poll : {true, false}) {
          cuda::Tuning t;
          t.hooks.poll_done = poll;
          cuda::set_tuning(*gpu, t);
          const ForwardOutput got = run(*gpu, hidden, T, req);
          const cuda::CallInfo info = cuda::last_call(*gpu);
          EXPECT_EQ(info.polled, poll) << tensor_type_name(type) << " T=" << T;
          expect_same(ref, got, req, std::string(tensor_type_name(type)) + " " + name_of(info.kernel) + " T=" + std::to_string(T) +
                                         (poll ? " polled" : " stream sync"));
        }
      }
    ForwardRequest topk;
    topk.top_k = 3;
    const std::vector<float> hidden = random_hidden(4, H, rng);
    expect_same(run(*scalar, hidden, 4, topk), run(*gpu, hidden, 4, topk), topk, "top-k after polled calls");
    EXPECT_FALSE(cuda::last_call(*gpu).polled);
  }
}

// One copy of the head by default: a Q5_K head holds its sub-blocks stream layout, whose kernel
// runs every T; the file's rows come with the first call whose plan reads them (the f32 route's
// generic kernel). With HeadView::cuda_second_layout it holds the lanes layout too, and 1- and
// 2-token calls take the kernels that read it; the bytes are the same either way.
TEST(CudaBackend, HeadCopiesFollowThePlans) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run() + 16);
  const int64_t V = 4099, H = 512;
  const RandomHead head = random_head(TensorType::Q5_K, V, H, rng);
  auto scalar = make_scalar_backend(head.view);
  auto gpu = make_cuda_backend(head.view, 1);
  HeadView both_view = head.view;
  both_view.cuda_second_layout = true;
  auto both = make_cuda_backend(both_view, 1);
  const cuda::DeviceLayout layout = cuda::device_layout(TensorType::Q5_K, H);
  const uint64_t stream_bytes = cuda::stream::bytes(V, layout.groups);
  EXPECT_EQ(cuda::head_device_bytes(*gpu), stream_bytes);
  EXPECT_EQ(gpu->device_bytes(), stream_bytes);
  EXPECT_EQ(both->device_bytes(), 2 * stream_bytes);
  ForwardRequest req;
  req.want_logits = true;
  for (int T : {1, 2, 5, 9}) {
    const std::vector<float> hidden = random_hidden(T, H, rng);
    const ForwardOutput want = run(*scalar, hidden, T, req);
    // Tokens in N on the one copy: staged by bulk copies up to 8 tokens, in registers above.
    const cuda::HeadKernel tokens_n = T <= 8 ? cuda::HeadKernel::q5k_tma_n : cuda::HeadKernel::q5k_stream_n;
    expect_same(want, run(*gpu, hidden, T, req), req, "q8 route T=" + std::to_string(T));
    EXPECT_EQ(cuda::last_call(*gpu).kernel, tokens_n);
    expect_same(want, run(*both, hidden, T, req), req, "q8 route, two layouts, T=" + std::to_string(T));
    EXPECT_EQ(cuda::last_call(*both).kernel, T == 1   ? cuda::HeadKernel::q5k_stream
                                             : T == 2 ? cuda::HeadKernel::q5k_tma
                                                      : tokens_n);
  }
  EXPECT_EQ(cuda::head_device_bytes(*gpu), stream_bytes);
  ForwardRequest f32 = req;
  f32.activations = ActivationRoute::f32;
  const std::vector<float> hidden = random_hidden(3, H, rng);
  expect_same(run(*scalar, hidden, 3, f32), run(*gpu, hidden, 3, f32), f32, "f32 route");
  EXPECT_EQ(cuda::last_call(*gpu).kernel, cuda::HeadKernel::generic);
  EXPECT_EQ(cuda::head_device_bytes(*gpu), stream_bytes + uint64_t(V) * uint64_t(layout.row_stride) + 256);
  // A forced kernel of the other layout uploads it on demand.
  cuda::set_tuning(*gpu, cuda::force_kernel(cuda::HeadKernel::q5k_stream));
  const std::vector<float> one = random_hidden(1, H, rng);
  expect_same(run(*scalar, one, 1, req), run(*gpu, one, 1, req), req, "forced q5k_stream");
  EXPECT_EQ(cuda::last_call(*gpu).kernel, cuda::HeadKernel::q5k_stream);
  EXPECT_EQ(cuda::head_device_bytes(*gpu), 2 * stream_bytes + uint64_t(V) * uint64_t(layout.row_stride) + 256);
}

TEST(CudaBackend, BatchInvariance) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run() + 6);
  const RandomHead head = random_head(TensorType::Q5_K, 1999, 512, rng);
  auto gpu = make_cuda_backend(head.view, 1);
  ForwardRequest req;
  req.want_logits = true;
  const std::vector<float> batch = random_hidden(16, 512, rng);
  for (bool mma : {true, false}) {
    cuda::set_tuning(*gpu, mma ? cuda::Tuning{} : cuda::force_kernel(cuda::HeadKernel::generic));
    const ForwardOutput all = run(*gpu, batch, 16, req);
    for (int T : {1, 2, 5, 9}) {
      for (int first = 0; first + T <= 16; first += T) {
        const std::vector<float> part(batch.begin() + first * 512, batch.begin() + (first + T) * 512);
        const ForwardOutput some = run(*gpu, part, T, req);
        const std::vector<float> expect(all.logits.begin() + size_t(first) * 1999,
                                        all.logits.begin() + size_t(first + T) * 1999);
        EXPECT_TRUE(same_floats(expect, some.logits, "batch vs sub-batch"))
            << (mma ? "mma" : "generic") << " tokens " << first << ".." << first + T - 1;
      }
    }
  }
}

TEST(CudaBackend, SequentialNormPathGivesSameBytes) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run() + 7);
  const RandomHead head = random_head(TensorType::Q5_K, 1500, 6656, rng);
  auto gpu = make_cuda_backend(head.view, 1);
  auto scalar = make_scalar_backend(head.view);
  ForwardRequest req;
  req.want_stages = true;
  int sequential = 0, tokens = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const std::vector<float> hidden = random_hidden(16, 6656, rng);
    const ForwardOutput ref = run(*scalar, hidden, 16, req);
    cuda::Tuning t;
    const ForwardOutput fast = run(*gpu, hidden, 16, req);
    const cuda::CallInfo info = cuda::last_call(*gpu);
    for (int i = 0; i < 16; ++i) sequential += info.norm_path[i];
    tokens += 16;
    t.hooks.force_sequential_norm = true;
    cuda::set_tuning(*gpu, t);
    const ForwardOutput slow = run(*gpu, hidden, 16, req);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(cuda::last_call(*gpu).norm_path[i], 1);
    cuda::set_tuning(*gpu, cuda::Tuning{});
    expect_same(ref, fast, req, "bounded parallel RMSNorm sum");
    expect_same(ref, slow, req, "sequential RMSNorm sum");
  }
  std::printf("[ info ] RMSNorm: %d of %d tokens needed the sequential chain\n", sequential, tokens);
  EXPECT_LT(sequential, tokens / 4);
}

TEST(CudaBackend, StageTimesNameTheHead) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run() + 8);
  const RandomHead head = random_head(TensorType::Q5_K, 50000, 2048, rng);
  auto gpu = make_cuda_backend(head.view, 1);
  const std::vector<float> hidden = random_hidden(4, 2048, rng);
  for (bool events : {true, false}) {
    cuda::Tuning t;
    t.hooks.stage_events = events;
    cuda::set_tuning(*gpu, t);
    ForwardRequest req;
    req.want_stage_times = true;
    for (int rep = 0; rep < 2; ++rep) {
      const ForwardOutput out = run(*gpu, hidden, 4, req);
      double head_ms = -1, total = 0;
      for (const StageTime& s : out.times) {
        total += s.ms;
        if (s.label.find("head") != std::string::npos) head_ms = s.ms;
        if (s.label.find("cap") != std::string::npos) {
          EXPECT_NE(s.label.find("head"), std::string::npos) << "the soft cap is booked apart from the head: " << s.label;
        }
      }
      // Only that a label names the head and has time: how much of the call it takes is a speed
      // claim (benchmarks), and under eight GPU test processes at once it read below 30 %.
      EXPECT_GT(head_ms, 0.0) << "no stage label names the head";
      EXPECT_LE(head_ms, total);
    }
  }
  // Without a request for stage times there are no event nodes: one total that still names the
  // head, or none at all when the call waits on the kernel's done flag (no events to time).
  cuda::Tuning t;
  t.hooks.poll_done = false;
  cuda::set_tuning(*gpu, t);
  const ForwardOutput out = run(*gpu, hidden, 4, ForwardRequest{});
  ASSERT_EQ(out.times.size(), 1u);
  EXPECT_NE(out.times[0].label.find("head"), std::string::npos) << out.times[0].label;
  EXPECT_GT(out.times[0].ms, 0.0);
  cuda::set_tuning(*gpu, cuda::Tuning{});
  EXPECT_TRUE(run(*gpu, hidden, 4, ForwardRequest{}).times.empty());
  EXPECT_TRUE(cuda::last_call(*gpu).polled);
}

// Every stage of a call against a golden vectors file, byte for byte.
void expect_golden_stages(const gguf::File& vectors, const ForwardOutput& out) {
  auto tensor = [&](const char* name) { return testing::golden_f32(vectors, name); };
  EXPECT_TRUE(same_floats(tensor("normed"), out.stages.normed, "normed vs golden"));
  EXPECT_TRUE(same_floats(tensor("logits_raw"), out.stages.raw, "raw vs golden"));
  EXPECT_TRUE(same_floats(tensor("logits_scaled"), out.stages.scaled, "scaled vs golden"));
  EXPECT_TRUE(same_floats(tensor("logits_div"), out.stages.div, "div vs golden"));
  EXPECT_TRUE(same_floats(tensor("logits_tanh"), out.stages.tanh, "tanh vs golden"));
  EXPECT_TRUE(same_floats(tensor("logits_capped"), out.logits, "capped vs golden"));
}

TEST(CudaBackend, GoldenFilesByteForByte) {
  SKIP_WITHOUT_GPU();
  for (const char* stem : {"tail-q5k-v4099-h512", "tail-q5k-v4096-h256", "tail-q6k-v4101-h768"}) {
    SCOPED_TRACE(stem);
    auto model = Model::open(data_dir() + "/" + stem + ".gguf");
    auto vectors = gguf::File::open(data_dir() + "/" + stem + ".vectors.gguf");
    const HeadConfig& c = model->config();
    const HeadView h = head_view(*model);
    auto tensor = [&](const char* name) { return testing::golden_f32(*vectors, name); };
    const std::vector<float> hidden = tensor("hidden");
    const int T = int(hidden.size() / size_t(c.hidden));
    for (cuda::HeadKernel k : kernels_for(h.type)) {
      if (!runs_tokens(k, T)) continue;
      auto gpu = make_cuda_backend(h, 1);
      cuda::set_tuning(*gpu, cuda::force_kernel(k));
      ForwardRequest req;
      req.want_stages = true;
      const ForwardOutput out = run(*gpu, hidden, T, req);
      expect_golden_stages(*vectors, out);
      if (std::string(stem) != "tail-q5k-v4096-h256") {
        // Rows 0, 7 and 14 saturate at exactly the cap for token 0: a three-way tie, lowest id wins.
        EXPECT_EQ(out.summaries[0].argmax, 0);
        EXPECT_EQ(out.summaries[0].tie_count, 3);
        EXPECT_EQ(out.summaries[0].tied_ids, (std::vector<int32_t>{0, 7, 14}));
      }
    }
  }
}

// LayerNorm (with and without bias) and head biases (tests/data/README.md: made by ggml's CPU
// backend): the file's scale and cap after the bias, every kernel variant, the bounded and the
// forced sequential variance sum, from the hidden state and from the golden `normed` (--input normed).
TEST(CudaBackend, LayerNormAndHeadBiasGoldenFilesByteForByte) {
  SKIP_WITHOUT_GPU();
  for (const char* stem : {"ln-phi2-q8_0-v301-h256", "ln-command-r-q5k-v263-h256", "bias-qwen2-q5k-v1031-h256"}) {
    SCOPED_TRACE(stem);
    auto model = Model::open(data_dir() + "/" + stem + ".gguf");
    auto vectors = gguf::File::open(data_dir() + "/" + stem + ".vectors.gguf");
    const HeadConfig& c = model->config();
    HeadView h = head_view(*model);
    h.logit_scale = float(vectors->find("tail.logit_scale")->as_number("tail.logit_scale"));
    h.softcap = float(vectors->find("tail.softcap")->as_number("tail.softcap"));
    auto tensor = [&](const char* name) { return testing::golden_f32(*vectors, name); };
    const std::vector<float> hidden = tensor("hidden");
    const int T = int(hidden.size() / size_t(c.hidden));
    // Every kernel of this head type, then the default plan with the norm's sequential fallback.
    std::vector<std::pair<cuda::Tuning, std::string>> variants;
    for (cuda::HeadKernel k : kernels_for(h.type))
      if (runs_tokens(k, T)) variants.emplace_back(cuda::force_kernel(k), std::string(cuda::kernel_name(k)));
    cuda::Tuning sequential;
    sequential.hooks.force_sequential_norm = true;
    variants.emplace_back(sequential, "default plan, sequential norm");
    for (const auto& [tuning, label] : variants) {
      auto gpu = make_cuda_backend(h, 1);
      cuda::set_tuning(*gpu, tuning);
      for (bool normed_input : {false, true}) {
        SCOPED_TRACE(label + (normed_input ? ", --input normed" : ", hidden"));
        ForwardRequest req;
        req.want_stages = true;
        req.input_normed = normed_input;
        const ForwardOutput out = run(*gpu, normed_input ? tensor("normed") : hidden, T, req);
        expect_golden_stages(*vectors, out);
      }
    }
  }
}

// --input normed through the engine on the cuda backend, one shard and, where the vocabulary has
// two whole 512-row chunks, two (the multi-GPU wrapper, round-robin on the GPUs there are): the
// golden `normed` in, the golden logits out; then the same engine from the hidden state.
TEST(CudaBackend, NormedInputGivesTheGoldenLogits) {
  SKIP_WITHOUT_GPU();
  const std::pair<const char*, const char*> sets[] = {
      {"tail-q5k-v4099-h512", "logits_capped"}, {"tail-q5k-v4096-h256", "logits_capped"},
      {"tail-q6k-v4101-h768", "logits_capped"}, {"ln-phi2-q8_0-v301-h256", "logits_raw"},
      {"ln-command-r-q5k-v263-h256", "logits_scaled"}, {"bias-qwen2-q5k-v1031-h256", "logits_raw"}};
  for (const auto& [stem, final_stage] : sets) {
    SCOPED_TRACE(stem);
    auto model = Model::open(data_dir() + "/" + stem + ".gguf");
    auto vectors = gguf::File::open(data_dir() + "/" + stem + ".vectors.gguf");
    auto tensor = [&](const char* name) { return testing::golden_f32(*vectors, name); };
    const std::vector<float> normed = tensor("normed"), hidden = tensor("hidden");
    const int T = int(normed.size() / size_t(model->config().hidden));
    for (int shards : {1, 2}) {
      if (shards > 1 && model->config().vocab < 1024) continue;  // two shards need two whole 512-row chunks
      Engine engine(model, EngineOptions{.backend = BackendKind::cuda, .shards = shards});
      RunOptions opts;
      opts.input = InputKind::normed;
      opts.want_stages = shards == 1;
      opts.want_logits = true;
      const RunResult r = engine.run(normed, T, opts);
      EXPECT_TRUE(same_floats(tensor(final_stage), r.logits, "normed in: logits vs golden")) << shards << " shards";
      if (shards == 1) {
        EXPECT_TRUE(same_floats(normed, r.stages.normed, "normed in: normed stage"));
      }
      // The same engine from the hidden state: the architecture's own final norm.
      RunOptions from_hidden;
      from_hidden.want_logits = true;
      EXPECT_TRUE(same_floats(tensor(final_stage), engine.run(hidden, T, from_hidden).logits, "hidden in: logits vs golden"))
          << shards << " shards";
    }
  }
}

TEST(CudaBackend, EngineRefusesNonFiniteInput) {
  SKIP_WITHOUT_GPU();
  auto model = Model::open(data_dir() + "/tail-q5k-v4096-h256.gguf");
  Engine engine(model, EngineOptions{.backend = BackendKind::cuda});
  std::vector<float> hidden(256, 0.5f);
  hidden[17] = std::nanf("");
  EXPECT_THROW(engine.run(hidden, 1), Error);
  hidden[17] = 0.25f;
  const RunResult r = engine.run(hidden, 1);
  EXPECT_EQ(r.backend, "cuda");
}

TEST(CudaBackend, F32RouteAgainstDoubleOracle) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(seed_of_this_run() + 9);
  const int64_t V = 777, H = 512;
  const RandomHead head = random_head(TensorType::Q5_K, V, H, rng);
  auto gpu = make_cuda_backend(head.view, 1);
  const std::vector<float> hidden = random_hidden(2, H, rng);
  ForwardRequest req;
  req.activations = ActivationRoute::f32;
  req.want_stages = true;
  const ForwardOutput out = run(*gpu, hidden, 2, req);
  std::vector<float> row(static_cast<size_t>(H));
  double max_err = 0, sum_err = 0, max_mag = 0;
  for (int t = 0; t < 2; ++t)
    for (int64_t r = 0; r < V; ++r) {
      quant::dequantize_row(TensorType::Q5_K, head.weights.data() + size_t(r) * head.view.row_bytes, row.data(), H);
      double dot = 0;
      for (int64_t i = 0; i < H; ++i) dot += double(row[size_t(i)]) * double(out.stages.normed[size_t(t) * H + i]);
      const double err = std::fabs(dot - double(out.stages.raw[size_t(t) * V + r]));
      max_err = std::max(max_err, err);
      sum_err += err;
      max_mag = std::max(max_mag, std::fabs(dot));
    }
  std::printf("[ info ] f32 route vs f64 oracle: max |d| = %.3g, mean |d| = %.3g (max |logit| %.3g)\n", max_err,
              sum_err / double(2 * V), max_mag);
  EXPECT_LT(max_err, 1e-4 * std::max(1.0, max_mag));
}

TEST(CudaBackend, ReadCeilingIsMeasured) {
  SKIP_WITHOUT_GPU();
  const double gbps = measure_cuda_read_ceiling_gbps(uint64_t(256) << 20);
  std::printf("[ info ] device read ceiling over 256 MiB: %.1f GB/s\n", gbps);
  EXPECT_GT(gbps, 100.0);
}

// All 2^32 inputs of the portable tanh on the device against the host's portable tanh (and, for
// information, the C library's tanhf). Minutes of work: run with LMHEAD_CUDA_TANH_SWEEP=1.
TEST(CudaTanh, EveryFloatMatchesTheHost) {
  SKIP_WITHOUT_GPU();
  if (std::getenv("LMHEAD_CUDA_TANH_SWEEP") == nullptr)
    GTEST_SKIP() << "set LMHEAD_CUDA_TANH_SWEEP=1 to sweep all 2^32 floats (bench/gpu.sh does)";
  const uint64_t chunk = uint64_t(1) << 28;
  std::vector<uint32_t> dev(chunk);
  uint64_t mismatches = 0, nan_inputs = 0, libc_diffs = 0;
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  for (uint64_t first = 0; first < (uint64_t(1) << 32); first += chunk) {
    cuda::tanh_sweep(first, chunk, dev.data());
    std::vector<uint64_t> mm(threads), nn(threads), ll(threads);
    std::vector<std::thread> pool;
    for (unsigned w = 0; w < threads; ++w)
      pool.emplace_back([&, w] {
        for (uint64_t i = w; i < chunk; i += threads) {
          const uint32_t in = uint32_t(first + i);
          float x;
          std::memcpy(&x, &in, 4);
          const float host = ops::portable_tanhf(x);
          if (std::isnan(x)) {
            ++nn[w];
            float d;
            std::memcpy(&d, &dev[i], 4);
            if (!std::isnan(d)) ++mm[w];  // NaN payloads differ by design (device NaNs are canonical)
            continue;
          }
          if (bits(host) != dev[i]) ++mm[w];
          if (bits(host) != bits(std::tanh(x))) ++ll[w];
        }
      });
    for (auto& th : pool) th.join();
    for (unsigned w = 0; w < threads; ++w) { mismatches += mm[w]; nan_inputs += nn[w]; libc_diffs += ll[w]; }
  }
  std::printf("[ info ] tanh sweep: %llu device/host mismatches, %llu NaN inputs (NaN-ness compared), %llu "
              "differences between the portable tanh and this machine's C library tanhf\n",
              (unsigned long long)mismatches, (unsigned long long)nan_inputs, (unsigned long long)libc_diffs);
  EXPECT_EQ(mismatches, 0u);
}

}  // namespace
}  // namespace lmhead
