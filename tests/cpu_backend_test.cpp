// The CPU backend against the scalar backend (the oracle), byte for byte: every stage, the token
// summaries and the sums of exponentials, over head types, routes, thread counts 1..8 and batches of
// 1..16 tokens; and batch invariance (a token's bytes alone equal its bytes inside any batch).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/kernels.hpp"
#include "cpu/thread_pool.hpp"
#include "lmhead/lmhead.hpp"
#include "synth/synthetic_head.hpp"

namespace lmhead::cpu {
namespace {

using synth::fill_synthetic_rows;
using synth::row_bytes_of;

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

::testing::AssertionResult same_floats_report(const char* what, const std::vector<float>& got,
                                              const std::vector<float>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " != " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], 4) != 0)
      return ::testing::AssertionFailure() << what << ": first difference at " << i << ": " << got[i]
                                           << " vs " << want[i];
  return ::testing::AssertionSuccess();
}

struct TestHead {
  std::vector<uint8_t> weights;
  std::vector<float> gamma;
  HeadView view;
};

TestHead make_head(TensorType type, int64_t vocab, int64_t hidden, float softcap, uint64_t seed) {
  TestHead h;
  const uint64_t rb = row_bytes_of(type, hidden);
  h.weights.resize(rb * vocab);
  fill_synthetic_rows(type, vocab, hidden, seed, h.weights.data());
  std::mt19937 rng{uint32_t(seed)};
  std::uniform_real_distribution<float> g(0.5f, 1.5f);
  h.gamma.resize(hidden);
  for (float& v : h.gamma) v = g(rng);
  h.view.type = type;
  h.view.weights = h.weights.data();
  h.view.vocab = vocab;
  h.view.hidden = hidden;
  h.view.row_bytes = rb;
  h.view.gamma = h.gamma.data();
  h.view.eps = 1e-5f;
  h.view.logit_scale = 0.196116f;
  h.view.softcap = softcap;
  return h;
}

std::vector<float> random_hidden(int tokens, int64_t hidden, uint64_t seed, float amplitude = 3.0f) {
  return synth::normal_floats(size_t(tokens) * hidden, uint32_t(seed), amplitude);
}

void expect_same_outputs(const ForwardOutput& got, const ForwardOutput& want, const ForwardRequest& req) {
  ASSERT_EQ(got.summaries.size(), want.summaries.size());
  for (size_t t = 0; t < want.summaries.size(); ++t) {
    SCOPED_TRACE("token " + std::to_string(t));
    const auto& g = got.summaries[t];
    const auto& w = want.summaries[t];
    EXPECT_EQ(g.argmax, w.argmax);
    EXPECT_EQ(std::memcmp(&g.max, &w.max, 4), 0);
    EXPECT_EQ(g.tie_count, w.tie_count);
    EXPECT_EQ(g.tied_ids, w.tied_ids);
    ASSERT_EQ(g.top.size(), w.top.size());
    for (size_t i = 0; i < w.top.size(); ++i) {
      EXPECT_EQ(g.top[i].id, w.top[i].id);
      EXPECT_EQ(std::memcmp(&g.top[i].logit, &w.top[i].logit, 4), 0);
    }
  }
  if (req.logprobs) {
    ASSERT_EQ(got.sum_exp.size(), want.sum_exp.size());
    for (size_t t = 0; t < want.sum_exp.size(); ++t)
      EXPECT_EQ(std::memcmp(&got.sum_exp[t], &want.sum_exp[t], 8), 0) << "sum_exp of token " << t;
  }
  if (req.want_logits || req.want_stages) {
    EXPECT_TRUE(same_floats_report("logits", got.logits, want.logits));
  }
  if (req.want_stages) {
    EXPECT_TRUE(same_floats_report("normed", got.stages.normed, want.stages.normed));
    EXPECT_TRUE(same_floats_report("raw", got.stages.raw, want.stages.raw));
    EXPECT_TRUE(same_floats_report("scaled", got.stages.scaled, want.stages.scaled));
    EXPECT_TRUE(same_floats_report("div", got.stages.div, want.stages.div));
    EXPECT_TRUE(same_floats_report("tanh", got.stages.tanh, want.stages.tanh));
    EXPECT_TRUE(same_floats_report("capped", got.stages.capped, want.stages.capped));
  }
}

struct BackendCase {
  TensorType type;
  int64_t vocab, hidden;
  float softcap;
  int threads, tokens;
  ForwardRequest req;
};

void check_against_scalar(const BackendCase& c, uint64_t seed) {
  SCOPED_TRACE(std::string(tensor_type_name(c.type)) + " vocab " + std::to_string(c.vocab) + " hidden " +
               std::to_string(c.hidden) + " cap " + std::to_string(c.softcap) + " threads " +
               std::to_string(c.threads) + " tokens " + std::to_string(c.tokens) +
               (c.req.activations == ActivationRoute::q8 ? " q8" : " f32") +
               (c.req.softcap == SoftcapRoute::nodes ? " nodes" : " fused") + " top_k " +
               std::to_string(c.req.top_k));
  const TestHead head = make_head(c.type, c.vocab, c.hidden, c.softcap, seed);
  const std::vector<float> hidden = random_hidden(c.tokens, c.hidden, seed + 7);
  ForwardOutput want, got;
  make_scalar_backend(head.view)->forward(hidden.data(), c.tokens, c.req, want);
  make_cpu_backend(head.view, c.threads)->forward(hidden.data(), c.tokens, c.req, got);
  expect_same_outputs(got, want, c.req);
}

ForwardRequest full_request(ActivationRoute route, SoftcapRoute cap, int top_k) {
  ForwardRequest r;
  r.activations = route;
  r.softcap = cap;
  r.top_k = top_k;
  r.logprobs = true;
  r.want_stages = true;
  return r;
}

TEST(CpuBackend, MatchesScalarOnEveryTypeAndRoute) {
  const TensorType types[] = {TensorType::Q5_K, TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0,
                              TensorType::F16,  TensorType::BF16, TensorType::F32};
  uint64_t seed = 10;
  for (TensorType type : types)
    for (ActivationRoute route : {ActivationRoute::q8, ActivationRoute::f32}) {
      const SoftcapRoute cap = seed % 2 ? SoftcapRoute::nodes : SoftcapRoute::fused;
      check_against_scalar({type, 4099, 512, 20.0f, int(1 + seed % 3), int(1 + seed % 5),
                            full_request(route, cap, 5)}, seed);
      ++seed;
    }
}

TEST(CpuBackend, MatchesScalarAcrossThreadsAndTokens) {
  // Vocab 1,237 splits unevenly over any thread count; 1..8 threads on 2 cores is still correct.
  for (int threads = 1; threads <= 8; ++threads)
    for (int tokens : {1, 2, 3, 5, 8, 16}) {
      if ((threads + tokens) % 2) continue;  // half the grid keeps the suite quick; every pair of parities runs
      check_against_scalar({TensorType::Q5_K, 1237, 768, 20.0f, threads, tokens,
                            full_request(ActivationRoute::q8, SoftcapRoute::nodes, 3)}, 100 + threads * 17 + tokens);
    }
}

TEST(CpuBackend, ScaleOnlyWhenCapIsZero) {
  check_against_scalar({TensorType::Q5_K, 999, 256, 0.0f, 2, 3, full_request(ActivationRoute::q8, SoftcapRoute::nodes, 4)}, 5);
  check_against_scalar({TensorType::Q4_K, 999, 256, 0.0f, 3, 2, full_request(ActivationRoute::f32, SoftcapRoute::fused, 0)}, 6);
}

TEST(CpuBackend, SummariesOnlyNeedNoLogits) {
  for (int top_k : {0, 1, 7}) {
    ForwardRequest req;
    req.top_k = top_k;
    check_against_scalar({TensorType::Q5_K, 3001, 512, 20.0f, 2, 4, req}, 40 + top_k);
    req.logprobs = true;
    check_against_scalar({TensorType::Q5_K, 3001, 512, 20.0f, 2, 4, req}, 50 + top_k);
  }
}

TEST(CpuBackend, SaturatedTiesResolveToTheLowestId) {
  // Huge hidden values saturate the cap: many ids tie at exactly the cap and must merge across
  // threads into the same tie report as the scalar backend's.
  const TestHead head = make_head(TensorType::Q8_0, 2000, 256, 1.0f, 77);
  const std::vector<float> hidden = random_hidden(2, 256, 78, 1.0f);
  ForwardRequest req = full_request(ActivationRoute::q8, SoftcapRoute::nodes, 20);
  HeadView view = head.view;
  view.logit_scale = 1000.0f;
  ForwardOutput want, got;
  make_scalar_backend(view)->forward(hidden.data(), 2, req, want);
  make_cpu_backend(view, 3)->forward(hidden.data(), 2, req, got);
  ASSERT_GT(want.summaries[0].tie_count, 1);
  expect_same_outputs(got, want, req);
}

TEST(CpuBackend, MoreThanSixteenTokensInOneCall) {
  // The backend hands kernels at most 16 tokens at a time; a 21-token call must still equal the
  // scalar backend (the engine splits calls itself, but the backend takes any count).
  check_against_scalar({TensorType::Q5_K, 301, 256, 20.0f, 2, 21, full_request(ActivationRoute::q8, SoftcapRoute::nodes, 3)}, 61);
  check_against_scalar({TensorType::Q6_K, 129, 256, 20.0f, 3, 17, full_request(ActivationRoute::f32, SoftcapRoute::fused, 0)}, 62);
}

TEST(CpuBackend, GoldenFileThroughTheEngineAtEveryThreadCount) {
  // The golden checkpoint's capped logits from the cpu backend equal the scalar backend's for
  // 1, 2, 3 and 5 threads (the golden bytes themselves are checked by golden_tail_test.cpp).
  const std::string path = std::string(LMHEAD_TEST_DATA) + "/tail-q5k-v4099-h512.gguf";
  auto model = Model::open(path);
  std::vector<float> hidden = random_hidden(3, model->config().hidden, 99, 2.0f);
  RunOptions opt;
  opt.want_logits = true;
  opt.top_k = 5;
  Engine reference(model, {.backend = BackendKind::scalar});
  const RunResult want = reference.run(hidden, 3, opt);
  for (int threads : {1, 2, 3, 5}) {
    Engine engine(model, {.backend = BackendKind::cpu, .threads = threads});
    const RunResult got = engine.run(hidden, 3, opt);
    EXPECT_TRUE(same_floats(got.logits, want.logits)) << threads << " threads";
    for (int t = 0; t < 3; ++t) EXPECT_EQ(got.choices[t].argmax, want.choices[t].argmax);
  }
}

TEST(CpuBackend, BatchInvariance) {
  // Token i's bytes computed alone, and at every position of batches of 2..16 tokens, are equal.
  const TestHead head = make_head(TensorType::Q5_K, 1500, 1024, 20.0f, 9);
  const int kTokens = 16;
  const std::vector<float> hidden = random_hidden(kTokens, 1024, 11);
  ForwardRequest req;
  req.want_logits = true;
  req.top_k = 4;
  auto backend = make_cpu_backend(head.view, 2);
  std::vector<std::vector<float>> alone(kTokens);
  for (int t = 0; t < kTokens; ++t) {
    ForwardOutput o;
    backend->forward(hidden.data() + t * 1024, 1, req, o);
    alone[t] = o.logits;
  }
  for (int batch : {2, 3, 4, 5, 7, 8, 16}) {
    for (int first = 0; first + batch <= kTokens; first += batch) {
      ForwardOutput o;
      backend->forward(hidden.data() + first * 1024, batch, req, o);
      for (int t = 0; t < batch; ++t) {
        const std::vector<float> row(o.logits.begin() + t * 1500, o.logits.begin() + (t + 1) * 1500);
        EXPECT_TRUE(same_floats(row, alone[first + t])) << "token " << first + t << " in a batch of " << batch;
      }
    }
  }
}

TEST(CpuBackend, LowerInstructionSetsMatchToo) {
  // The kernels a CPU without AVX-512 or without AVX2 would run, forced here, give the same bytes.
  const TestHead head = make_head(TensorType::Q5_K, 301, 512, 20.0f, 3);
  const std::vector<float> hidden = random_hidden(3, 512, 4);
  const KernelSet plain = kernels_for(TensorType::Q5_K, Isa::scalar);
  EXPECT_EQ(plain.q8_isa, Isa::scalar);
  EXPECT_EQ(plain.f32_isa, Isa::scalar);
  // Every lower level this CPU can run (AVX2 below AVX-512, scalar below both) against the best.
  for (ActivationRoute route : {ActivationRoute::q8, ActivationRoute::f32})
    for (int tokens : {1, 3}) {
      ForwardRequest req = full_request(route, SoftcapRoute::nodes, 2);
      ForwardOutput best;
      make_cpu_backend(head.view, 2)->forward(hidden.data(), tokens, req, best);
      for (Isa limit : {Isa::scalar, Isa::avx2}) {
        if (!cpu_supports(limit)) continue;
        SCOPED_TRACE(std::string("limited to ") + isa_name(limit));
        ForwardOutput lower;
        make_cpu_backend_limited(head.view, 2, limit)->forward(hidden.data(), tokens, req, lower);
        expect_same_outputs(lower, best, req);
      }
    }
}

TEST(CpuThreadPool, RunsEveryWorkerOncePerCallAndRethrows) {
  ThreadPool pool(4);
  ASSERT_EQ(pool.size(), 4);
  std::vector<int> hits(4, 0);
  for (int call = 0; call < 200; ++call) pool.run([&](int w) { hits[w] += 1; });
  for (int w = 0; w < 4; ++w) EXPECT_EQ(hits[w], 200) << "worker " << w;
  EXPECT_THROW(pool.run([](int w) { if (w == 2) throw Error("worker 2 failed"); }), Error);
  pool.run([&](int w) { hits[w] += 1; });  // still usable after an exception
  EXPECT_EQ(hits[3], 201);
}

TEST(CpuThreadPool, SplitRangeCoversEverythingOnce) {
  for (int64_t n : {0, 1, 7, 4096, 202048})
    for (int parts : {1, 2, 3, 8})
      for (int64_t align : {1, 64, 4096}) {
        int64_t next = 0;
        for (int p = 0; p < parts; ++p) {
          const Range r = split_range(n, parts, p, align);
          EXPECT_EQ(r.begin, next);
          if (p + 1 < parts) {
            EXPECT_TRUE(r.end % align == 0 || r.end == n);
          }
          next = r.end;
        }
        EXPECT_EQ(next, n);
      }
}

TEST(CpuReadCeiling, MeasuresAPlausibleBandwidth) {
  const double gbps = measure_cpu_read_ceiling_gbps(64u << 20, 1);
  EXPECT_GT(gbps, 0.5);
  EXPECT_LT(gbps, 2000.0);
}

}  // namespace
}  // namespace lmhead::cpu
