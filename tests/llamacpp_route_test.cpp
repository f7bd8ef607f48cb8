// Route llamacpp beyond the public sets' shape (one super-block per row, 128 rows): heads of 1,024 columns
// (four super-blocks, 64 F16 / F32 sgemm steps, 32 BF16 ones), any token count. The cpu backend's kernels (rows
// unpacked once per call) must give the scalar backend's bytes, in shards too; and the engine's
// 16-token passes must not change the path's per-token order: the scalar backend's raw logits are
// recomputed here token by token from the call's token count (the repacked Q4_K path quantizes and
// multiplies whole groups of 4 of the call's tokens differently from the rest). The CUDA backend
// (one thread per row, tokens in launches of 4 or 1) must give the same bytes, alone and in shards.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "lmhead/lmhead.hpp"
#include "ops/rmsnorm.hpp"
#include "quant/llamacpp_route.hpp"
#include "test_util.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

std::vector<float> hidden_states(int tokens, int64_t H, uint64_t seed) {
  return varied_hidden_states(tokens, H, seed, 1, 5);
}

// The tests below check the cpu backend and, where a GPU is usable, the cuda backend. Without one
// they say so in a line that is not gtest's skip marker: ctest would report the whole test as
// skipped (its SKIP_REGULAR_EXPRESSION), hiding the CPU half's result.
void note_no_gpu(const std::string& why) { std::printf("[ no GPU   ] the cuda half of this test did not run: %s\n", why.c_str()); }

class LlamaCppRouteShapes : public ::testing::TestWithParam<const char*> {};

TEST_P(LlamaCppRouteShapes, CpuEqualsScalarAndPassesKeepTheCallsOrder) {
  const std::string type = GetParam();
  TempDir dir;
  const std::string m = dir.file("h.gguf");
  // 1,544 rows: a multiple of 8 (Q4_K repacked) and of 4 (the float sgemms), split into 3 shards of whole
  // 512-row chunks whose last one (520 rows) is neither: the path must stay the whole head's.
  const CommandResult made = run_command(cli() + " make " + m + " --vocab 1544 --hidden 1024 --type " + type + " --seed 5");
  ASSERT_EQ(made.status, 0) << made.output;
  auto model = Model::open(m);
  const HeadConfig& c = model->config();
  Engine scalar(model, {.backend = BackendKind::scalar});
  Engine cpu(model, {.backend = BackendKind::cpu, .threads = 2});
  Engine sharded(model, {.backend = BackendKind::cpu, .threads = 2, .shards = 3});
  std::string why;
  const bool gpu = cuda_available(&why);
  if (!gpu) note_no_gpu(why);
  std::unique_ptr<Engine> cuda, cuda_sharded;
  if (gpu) {
    cuda = std::make_unique<Engine>(model, EngineOptions{.backend = BackendKind::cuda});
    cuda_sharded = std::make_unique<Engine>(model, EngineOptions{.backend = BackendKind::cuda, .shards = 3});
  }
  for (int T : {1, 2, 4, 7, 8, 13, 21}) {
    const std::vector<float> h = hidden_states(T, c.hidden, uint64_t(T));
    RunOptions opts;
    opts.route = Route::llamacpp;
    opts.want_logits = true;
    opts.want_stages = true;
    const RunResult want = scalar.run(h, T, opts);
    EXPECT_EQ(want.llamacpp_path, llamacpp_path(c, T));
    EXPECT_TRUE(same_bytes(cpu.run(h, T, opts).logits, want.logits)) << type << " T = " << T;
    EXPECT_TRUE(same_bytes(sharded.run(h, T, opts).logits, want.logits)) << type << " T = " << T << ", 3 shards";
    if (gpu) {
      const RunResult got = cuda->run(h, T, opts);
      EXPECT_EQ(got.llamacpp_path, want.llamacpp_path);
      EXPECT_TRUE(same_bytes(got.logits, want.logits)) << type << " T = " << T << ", cuda";
      EXPECT_TRUE(same_bytes(got.stages.raw, want.stages.raw)) << type << " T = " << T << ", cuda";
      EXPECT_TRUE(same_bytes(cuda_sharded->run(h, T, opts).logits, want.logits)) << type << " T = " << T << ", cuda, 3 shards";
    }

    const quant::LlamaCppPath path = quant::llamacpp_path(c.head_type, c.vocab, c.hidden, T);
    const auto fmt = quant::llamacpp_activation_format(path, c.head_type);
    const size_t ab = quant::activation_bytes(fmt, c.hidden);
    std::vector<uint8_t> act(ab);
    std::vector<float> normed(c.hidden), raw(size_t(T) * c.vocab);
    for (int t = 0; t < T; ++t) {
      ops::rmsnorm(h.data() + size_t(t) * c.hidden, model->norm_weight(), c.hidden, c.eps, normed.data());
      quant::quantize_llamacpp_activations(path, c.head_type, normed.data(), c.hidden, t, T, act.data());
      for (int64_t r = 0; r < c.vocab; ++r)
        raw[size_t(t) * c.vocab + r] = quant::llamacpp_dot(path, c.head_type, model->head_weights() + r * c.row_bytes,
                                                           act.data(), c.hidden, quant::in_group_of_4(path, t, T));
    }
    EXPECT_TRUE(same_bytes(want.stages.raw, raw)) << type << " T = " << T;
  }
}

INSTANTIATE_TEST_SUITE_P(HeadTypes, LlamaCppRouteShapes, ::testing::Values("q4_K", "q5_K", "q6_K", "q8_0", "f16", "bf16", "f32"));

// A Q4_K head whose rows are not a multiple of 8 is not repacked by llama.cpp: vec_dot below 8
// tokens, the tiled matmul from 8.
TEST(LlamaCppRouteShapes, Q4KWithoutRepackTakesTheTiledPath) {
  TempDir dir;
  const std::string m = dir.file("h.gguf");
  ASSERT_EQ(run_command(cli() + " make " + m + " --vocab 130 --hidden 256 --type q4_K --seed 2").status, 0);
  auto model = Model::open(m);
  EXPECT_EQ(llamacpp_path(model->config(), 4), "vec_dot");
  EXPECT_EQ(llamacpp_path(model->config(), 8), "tiled_kquant");
  Engine scalar(model, {.backend = BackendKind::scalar});
  Engine cpu(model, {.backend = BackendKind::cpu, .threads = 2});
  const std::vector<float> h = hidden_states(9, 256, 9);
  RunOptions opts;
  opts.route = Route::llamacpp;
  opts.want_logits = true;
  const std::vector<float> want = scalar.run(h, 9, opts).logits;
  EXPECT_TRUE(same_bytes(cpu.run(h, 9, opts).logits, want));
  std::string why;
  if (!cuda_available(&why)) return note_no_gpu(why);
  Engine cuda(model, {.backend = BackendKind::cuda});
  EXPECT_TRUE(same_bytes(cuda.run(h, 9, opts).logits, want));
}

// Float heads whose hidden size (1,004) is not a multiple of 16 and whose rows (1,543) are not a
// multiple of 4: llamafile's sgemm declines them at every T, so ggml_vec_dot_{f16,bf16,f32} runs,
// with a tail past the last 64-element step (F16, BF16: added in double; F32: 40 elements of f32
// adds of products, then 4 fused multiply-adds).
class LlamaCppVecDotTail : public ::testing::TestWithParam<const char*> {};

TEST_P(LlamaCppVecDotTail, EveryBackendGivesTheScalarBytes) {
  const std::string type = GetParam();
  TempDir dir;
  const std::string m = dir.file("h.gguf");
  ASSERT_EQ(run_command(cli() + " make " + m + " --vocab 1543 --hidden 1004 --type " + type + " --seed 4").status, 0);
  auto model = Model::open(m);
  EXPECT_EQ(llamacpp_path(model->config(), 5), "vec_dot_" + type);
  Engine scalar(model, {.backend = BackendKind::scalar});
  Engine cpu(model, {.backend = BackendKind::cpu, .threads = 2});
  std::string why;
  const bool gpu = cuda_available(&why);
  if (!gpu) note_no_gpu(why);
  std::unique_ptr<Engine> cuda;
  if (gpu) cuda = std::make_unique<Engine>(model, EngineOptions{.backend = BackendKind::cuda});
  for (int T : {1, 5}) {
    const std::vector<float> h = hidden_states(T, 1004, 11 + uint64_t(T));
    RunOptions opts;
    opts.route = Route::llamacpp;
    opts.want_logits = true;
    const std::vector<float> want = scalar.run(h, T, opts).logits;
    EXPECT_TRUE(same_bytes(cpu.run(h, T, opts).logits, want)) << type << " T = " << T;
    if (gpu) {
      EXPECT_TRUE(same_bytes(cuda->run(h, T, opts).logits, want)) << type << " T = " << T << ", cuda";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FloatHeads, LlamaCppVecDotTail, ::testing::Values("f16", "bf16", "f32"));

}  // namespace
