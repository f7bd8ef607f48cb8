// Determinism (issue 4): the bytes a caller sees (logits, token choices, logprobs, top-k) do not
// depend on the run, the thread count, or on which other tokens share the batch and where the
// token sits in it. Checked on both CPU backends, both activation routes and every head type,
// through the public API, and through the CLI's --out file.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hardening_util.hpp"
#include "lmhead/lmhead.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

// Vocab 300 leaves a partial 64-row tile and splits unevenly over 1..4 threads; hidden 256 is one
// K-quant super-block per row, so every head type runs at a size that keeps the suite quick.
constexpr int64_t kVocab = 300, kHidden = 256;

const std::vector<std::string>& head_types() {
  static const std::vector<std::string> types = {"q5_K", "q4_K", "q6_K", "q8_0", "f16", "bf16", "f32"};
  return types;
}

struct Checkpoints {
  TempDir dir;
  std::vector<std::pair<std::string, std::shared_ptr<const Model>>> models;
  Checkpoints() {
    for (const std::string& type : head_types())
      models.emplace_back(type, Model::open(make_checkpoint(dir, type, kVocab, kHidden, "--seed 11")));
  }
};

const Checkpoints& checkpoints() {
  static const Checkpoints c;
  return c;
}

RunOptions full_options(ActivationRoute route) {
  RunOptions o;
  o.activations = route;
  o.top_k = 5;
  o.logprobs = true;
  o.want_logits = true;
  return o;
}

// One token's slice of a result, as a fingerprint.
std::vector<uint32_t> token_fingerprint(const RunResult& r, int t, int64_t vocab) {
  RunResult one;
  one.tokens = 1;
  one.choices.push_back(r.choices.at(t));
  one.logits.assign(r.logits.begin() + t * vocab, r.logits.begin() + (t + 1) * vocab);
  return result_fingerprint(one);
}

TEST(Determinism, RepeatedRunsAndFreshEnginesGiveIdenticalBytes) {
  const std::vector<float> hidden = test_hidden(5, kHidden, 21);
  for (const auto& [type, model] : checkpoints().models)
    for (BackendKind backend : {BackendKind::scalar, BackendKind::cpu})
      for (ActivationRoute route : {ActivationRoute::q8, ActivationRoute::f32}) {
        Engine engine(model, {.backend = backend, .threads = 2});
        const auto first = result_fingerprint(engine.run(hidden, 5, full_options(route)));
        for (int repeat = 0; repeat < 2; ++repeat)
          EXPECT_EQ(result_fingerprint(engine.run(hidden, 5, full_options(route))), first)
              << type << " " << to_string(backend) << " " << to_string(route) << " repeat " << repeat;
        Engine fresh(model, {.backend = backend, .threads = 2});
        EXPECT_EQ(result_fingerprint(fresh.run(hidden, 5, full_options(route))), first)
            << type << " " << to_string(backend) << " " << to_string(route) << " fresh engine";
      }
}

// Thread counts 1..4 on the cpu backend, against the scalar reference (which has no threads).
TEST(Determinism, ThreadCountsOneToFourMatchTheScalarReference) {
  const int tokens = 3;
  const std::vector<float> hidden = test_hidden(tokens, kHidden, 22);
  for (const auto& [type, model] : checkpoints().models)
    for (ActivationRoute route : {ActivationRoute::q8, ActivationRoute::f32}) {
      Engine scalar(model, {.backend = BackendKind::scalar});
      const auto want = result_fingerprint(scalar.run(hidden, tokens, full_options(route)));
      for (int threads = 1; threads <= 4; ++threads) {
        Engine cpu(model, {.backend = BackendKind::cpu, .threads = threads});
        EXPECT_EQ(result_fingerprint(cpu.run(hidden, tokens, full_options(route))), want)
            << type << " " << to_string(route) << " threads " << threads;
      }
    }
}

// A token alone, then inside batches of 2..16 (one pass) and 17 and 33 (several passes), at the
// first, a middle and the last position, surrounded by other tokens: its bytes never change.
TEST(Determinism, TokenAloneOrAnywhereInABatchGivesIdenticalBytes) {
  const std::vector<float> target = test_hidden(1, kHidden, 23);
  const std::vector<float> others = test_hidden(33, kHidden, 24);
  std::vector<int> sizes;
  for (int b = 2; b <= 16; ++b) sizes.push_back(b);
  sizes.push_back(17);
  sizes.push_back(33);
  for (const auto& [type, model] : checkpoints().models)
    for (BackendKind backend : {BackendKind::scalar, BackendKind::cpu})
      for (ActivationRoute route : {ActivationRoute::q8, ActivationRoute::f32}) {
        Engine engine(model, {.backend = backend, .threads = 3});
        const auto alone = token_fingerprint(engine.run(target, 1, full_options(route)), 0, kVocab);
        for (int batch : sizes)
          for (int position : {0, batch / 2, batch - 1}) {
            std::vector<float> hidden(others.begin(), others.begin() + size_t(batch) * kHidden);
            std::copy(target.begin(), target.end(), hidden.begin() + size_t(position) * kHidden);
            const RunResult r = engine.run(hidden, batch, full_options(route));
            ASSERT_EQ(token_fingerprint(r, position, kVocab), alone)
                << type << " " << to_string(backend) << " " << to_string(route) << ": batch " << batch << ", position "
                << position;
          }
      }
}

// The CLI end to end: --out files are byte-identical across runs, thread counts and backends.
TEST(Determinism, CliOutFilesAreByteIdentical) {
  TempDir dir;
  const std::string model = data_path("tail-q5k-v4099-h512.gguf");
  const std::string hidden = data_path("tail-q5k-v4099-h512.vectors.gguf") + ":hidden";
  std::vector<uint8_t> first;
  int runs = 0;
  for (const char* backend : {"scalar", "cpu"})
    for (const char* threads : {"1", "2", "4"}) {
      if (std::string(backend) == "scalar" && std::string(threads) != "1") continue;
      const std::string out = dir.file(std::string("logits-") + backend + "-" + threads + ".npy");
      const CommandResult r = run_command(shell_quote(cli()) + " run " + shell_quote(model) + " --hidden " + shell_quote(hidden) +
                                          " --backend " + backend + " --threads " + threads + " --out " + shell_quote(out));
      ASSERT_EQ(r.status, 0) << r.output;
      const std::vector<uint8_t> bytes = read_bytes(out);
      ASSERT_GT(bytes.size(), 3u * 4099 * 4);
      if (runs++ == 0) first = bytes;
      else EXPECT_TRUE(bytes == first) << backend << " threads " << threads << " wrote different bytes";
    }
}

}  // namespace
