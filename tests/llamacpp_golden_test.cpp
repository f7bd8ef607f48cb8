// lmhead's default route against llama.cpp itself, end to end: tests/data/llamacpp/ holds tiny
// heads, the hidden states that entered llama.cpp's final norm and llama.cpp's logits (its
// README says how they were made). Where llama.cpp runs the vec_dot order (numerics.md §5, §5b,
// §5c: K-quants below 8 tokens per matmul, Q8_0 at every T), the logits must be its bytes.
#include <gtest/gtest.h>

#include <string>

#include "io/npy.hpp"
#include "lmhead/lmhead.hpp"
#include "test_util.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

struct Case {
  const char* type;
  int tokens;
};

class LlamaCppGolden : public ::testing::TestWithParam<std::tuple<Case, BackendKind>> {};

TEST_P(LlamaCppGolden, DefaultRouteLogitsAreLlamaCppBytes) {
  const Case c = std::get<0>(GetParam());
  const std::string stem = data_path("llamacpp/muse-glimmer-" + std::string(c.type) + "-s101");
  const std::string at_t = stem + "-t" + std::to_string(c.tokens);
  auto model = Model::open(stem + ".gguf");
  const io::HiddenStates hidden = io::read_npy_f32(at_t + ".hidden.npy");
  const io::HiddenStates want = io::read_npy_f32(at_t + ".logits.npy");
  ASSERT_EQ(hidden.tokens, c.tokens);
  ASSERT_EQ(hidden.hidden, model->config().hidden);
  ASSERT_EQ(want.tokens, c.tokens);
  ASSERT_EQ(want.hidden, model->config().vocab);

  Engine engine(model, {.backend = std::get<1>(GetParam()), .threads = 2});
  RunOptions opts;  // the default route: q8 activations, the soft cap's node order
  opts.want_logits = true;
  const RunResult r = engine.run(hidden.values, c.tokens, opts);
  EXPECT_TRUE(same_bytes(r.logits, want.values)) << c.type << " at T = " << c.tokens;
}

// Q8_0 takes the vec_dot order at every T; the K-quants only below 8 tokens (from 8 on llama.cpp
// uses its tiled K-quant matmul, another order).
INSTANTIATE_TEST_SUITE_P(VecDotOrder, LlamaCppGolden,
                         ::testing::Combine(::testing::Values(Case{"q5_K", 1}, Case{"q5_K", 4}, Case{"q6_K", 1},
                                                              Case{"q6_K", 4}, Case{"q8_0", 1}, Case{"q8_0", 4},
                                                              Case{"q8_0", 8}, Case{"q8_0", 16}),
                                            ::testing::Values(BackendKind::scalar, BackendKind::cpu)),
                         [](const auto& info) {
                           const Case c = std::get<0>(info.param);
                           return std::string(c.type) + "_t" + std::to_string(c.tokens) + "_" +
                                  std::string(to_string(std::get<1>(info.param)));
                         });

}  // namespace
