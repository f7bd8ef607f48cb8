// The C API (include/lmhead/lmhead.h) against the C++ engine it wraps: the same bytes, every
// failure a return code plus this thread's message, no exception escaping. Part of lmhead_tests,
// so scripts/sanitizers.sh runs it under ASan/UBSan.
#include "lmhead/lmhead.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "lmhead/lmhead.hpp"
#include "synth/synthetic_head.hpp"
#include "test_util.hpp"

namespace {

using lmhead::testing::data_path;
using lmhead::testing::same_bytes;

const std::string kSmall = "tail-q5k-v4096-h256.gguf";

std::vector<float> random_hidden(size_t n, unsigned seed) { return lmhead::synth::normal_floats(n, seed); }

struct Handles {
  lmhead_model* model = nullptr;
  lmhead_engine* engine = nullptr;
  ~Handles() {
    lmhead_engine_destroy(engine);
    lmhead_model_close(model);
  }
};

TEST(CApi, RunMatchesTheCppEngineByteForByte) {
  Handles h;
  ASSERT_EQ(lmhead_model_open(data_path(kSmall).c_str(), &h.model), LMHEAD_OK) << lmhead_last_error();
  ASSERT_EQ(lmhead_model_vocab(h.model), 4096);
  ASSERT_EQ(lmhead_model_hidden(h.model), 256);
  ASSERT_EQ(lmhead_engine_create(h.model, "cpu", 2, &h.engine), LMHEAD_OK) << lmhead_last_error();
  EXPECT_EQ(std::string(lmhead_engine_backend_name(h.engine)).rfind("cpu", 0), 0u);

  const int T = 3, K = 5;
  const std::vector<float> hidden = random_hidden(T * 256, 3);
  std::vector<int32_t> argmax(T, -1);
  std::vector<float> logits(T * 4096);
  ASSERT_EQ(lmhead_engine_run(h.engine, hidden.data(), T, argmax.data(), logits.data()), LMHEAD_OK) << lmhead_last_error();

  auto model = lmhead::Model::open(data_path(kSmall));
  lmhead::Engine engine(model, {.backend = lmhead::BackendKind::cpu, .threads = 2});
  const lmhead::RunResult want = engine.run(hidden, T, {.top_k = K, .logprobs = true, .want_logits = true});
  EXPECT_TRUE(same_bytes(logits, want.logits));
  for (int t = 0; t < T; ++t) EXPECT_EQ(argmax[t], want.choices[t].argmax);

  // Every output of the extended call, against the C++ result.
  lmhead_run_options o;
  lmhead_run_options_init(&o);
  o.top_k = K;
  o.logprobs = 1;
  std::vector<int32_t> ids(T * K), am(T);
  std::vector<float> vals(T * K), lps(T * K), value(T), lp(T);
  std::vector<int64_t> ties(T);
  lmhead_run_outputs out;
  std::memset(&out, 0, sizeof out);
  out.size = sizeof out;
  out.argmax = am.data();
  out.value = value.data();
  out.logprob = lp.data();
  out.tie_count = ties.data();
  out.top_k_ids = ids.data();
  out.top_k_values = vals.data();
  out.top_k_logprobs = lps.data();
  ASSERT_EQ(lmhead_engine_run_ex(h.engine, hidden.data(), T, &o, &out), LMHEAD_OK) << lmhead_last_error();
  for (int t = 0; t < T; ++t) {
    const lmhead::TokenChoice& c = want.choices[t];
    EXPECT_EQ(am[t], c.argmax);
    EXPECT_EQ(value[t], c.value);
    EXPECT_EQ(lp[t], c.logprob);
    EXPECT_EQ(ties[t], c.tie_count);
    for (int j = 0; j < K; ++j) {
      EXPECT_EQ(ids[t * K + j], c.top[j].id);
      EXPECT_EQ(vals[t * K + j], c.top[j].logit);
      EXPECT_EQ(lps[t * K + j], c.top[j].logprob);
    }
  }
}

TEST(CApi, RoutesAndInputKindReachTheEngine) {
  Handles h;
  ASSERT_EQ(lmhead_model_open(data_path(kSmall).c_str(), &h.model), LMHEAD_OK) << lmhead_last_error();
  lmhead_engine_options eo;
  lmhead_engine_options_init(&eo);
  eo.backend = "scalar";
  eo.shards = 2;
  ASSERT_EQ(lmhead_engine_create_ex(h.model, &eo, &h.engine), LMHEAD_OK) << lmhead_last_error();
  const std::vector<float> hidden = random_hidden(2 * 256, 5);
  auto model = lmhead::Model::open(data_path(kSmall));
  lmhead::Engine engine(model, {.backend = lmhead::BackendKind::scalar});
  lmhead_run_options o;
  lmhead_run_options_init(&o);
  o.input = LMHEAD_INPUT_NORMED;
  o.activations = LMHEAD_ACTIVATIONS_F32;
  o.softcap = LMHEAD_SOFTCAP_FUSED;
  std::vector<float> logits(2 * 4096);
  lmhead_run_outputs out;
  std::memset(&out, 0, sizeof out);
  out.size = sizeof out;
  out.logits = logits.data();
  ASSERT_EQ(lmhead_engine_run_ex(h.engine, hidden.data(), 2, &o, &out), LMHEAD_OK) << lmhead_last_error();
  const lmhead::RunResult want = engine.run(hidden, 2, {.input = lmhead::InputKind::normed,
      .activations = lmhead::ActivationRoute::f32, .softcap = lmhead::SoftcapRoute::fused, .want_logits = true});
  EXPECT_TRUE(same_bytes(logits, want.logits));
  // The default route differs from this one somewhere: the options were not ignored.
  std::vector<float> defaults(2 * 4096);
  ASSERT_EQ(lmhead_engine_run(h.engine, hidden.data(), 2, nullptr, defaults.data()), LMHEAD_OK);
  EXPECT_NE(std::memcmp(defaults.data(), logits.data(), logits.size() * 4), 0);
}

TEST(CApi, ModelInfoOverridesAndTokenTexts) {
  Handles h;
  const char* overrides[] = {"muse-glimmer.final_logit_softcapping=float:0"};
  lmhead_model_options mo = {sizeof mo, overrides, 1};
  ASSERT_EQ(lmhead_model_open_ex(data_path(kSmall).c_str(), &mo, &h.model), LMHEAD_OK) << lmhead_last_error();
  lmhead_model_info info;
  std::memset(&info, 0, sizeof info);
  info.size = sizeof info;
  ASSERT_EQ(lmhead_model_get_info(h.model, &info), LMHEAD_OK);
  EXPECT_STREQ(info.architecture, "muse-glimmer");
  EXPECT_STREQ(info.head_type, "q5_K");
  EXPECT_STREQ(info.final_norm, "rmsnorm");
  EXPECT_EQ(info.vocab, 4096);
  EXPECT_EQ(info.softcap, 0.0f);
  size_t len = 99;
  const char* text = lmhead_model_token_text(h.model, 5, &len);
  auto model = lmhead::Model::open(data_path(kSmall));
  ASSERT_NE(text, nullptr);
  EXPECT_EQ(std::string(text, len), std::string(model->token_text(5)));
  EXPECT_EQ(lmhead_model_token_text(h.model, 4096, &len), nullptr);
  EXPECT_EQ(len, 0u);
}

TEST(CApi, FailuresAreCodesWithThisThreadsMessage) {
  lmhead_model* model = reinterpret_cast<lmhead_model*>(0x1);
  EXPECT_EQ(lmhead_model_open("/nonexistent/x.gguf", &model), LMHEAD_ERR_MODEL);
  EXPECT_EQ(model, nullptr);
  EXPECT_NE(std::string(lmhead_last_error()).find("/nonexistent/x.gguf"), std::string::npos) << lmhead_last_error();
  EXPECT_EQ(lmhead_model_open(nullptr, &model), LMHEAD_ERR_ARGUMENT);
  EXPECT_EQ(lmhead_model_open("x", nullptr), LMHEAD_ERR_ARGUMENT);
  const char* bad_override[] = {"no-equals"};
  lmhead_model_options mo = {sizeof mo, bad_override, 1};
  EXPECT_EQ(lmhead_model_open_ex(data_path(kSmall).c_str(), &mo, &model), LMHEAD_ERR_ARGUMENT);
  mo.size = sizeof mo + 8;  // a caller built against a newer header
  EXPECT_EQ(lmhead_model_open_ex(data_path(kSmall).c_str(), &mo, &model), LMHEAD_ERR_ARGUMENT);
  EXPECT_NE(std::string(lmhead_last_error()).find("lmhead_model_options.size"), std::string::npos) << lmhead_last_error();

  Handles h;
  ASSERT_EQ(lmhead_model_open(data_path(kSmall).c_str(), &h.model), LMHEAD_OK);
  lmhead_engine* engine = nullptr;
  EXPECT_EQ(lmhead_engine_create(h.model, "gpu", 0, &engine), LMHEAD_ERR_ARGUMENT);
  EXPECT_NE(std::string(lmhead_last_error()).find("unknown backend 'gpu'"), std::string::npos);
  EXPECT_EQ(lmhead_engine_create(h.model, "cpu", -1, &engine), LMHEAD_ERR_ARGUMENT);
  ASSERT_EQ(lmhead_engine_create(h.model, "scalar", 1, &h.engine), LMHEAD_OK);

  std::vector<float> hidden = random_hidden(2 * 256, 9);
  std::vector<int32_t> argmax(2, -7);
  hidden[256 + 17] = NAN;
  EXPECT_EQ(lmhead_engine_run(h.engine, hidden.data(), 2, argmax.data(), nullptr), LMHEAD_ERR_INPUT);
  EXPECT_NE(std::string(lmhead_last_error()).find("token 1 has a non-finite value"), std::string::npos) << lmhead_last_error();
  EXPECT_EQ(argmax[0], -7);  // a failed run writes nothing
  hidden[256 + 17] = 0;
  EXPECT_EQ(lmhead_engine_run(h.engine, hidden.data(), 0, argmax.data(), nullptr), LMHEAD_ERR_INPUT);
  EXPECT_EQ(lmhead_engine_run(h.engine, nullptr, 1, argmax.data(), nullptr), LMHEAD_ERR_ARGUMENT);
  EXPECT_EQ(lmhead_engine_run(nullptr, hidden.data(), 1, argmax.data(), nullptr), LMHEAD_ERR_ARGUMENT);

  lmhead_run_options o;
  lmhead_run_options_init(&o);
  lmhead_run_outputs out;
  std::memset(&out, 0, sizeof out);
  out.size = sizeof out;
  o.top_k = 4097;
  EXPECT_EQ(lmhead_engine_run_ex(h.engine, hidden.data(), 1, &o, &out), LMHEAD_ERR_ARGUMENT);
  o.top_k = 0;
  o.softcap = 7;
  EXPECT_EQ(lmhead_engine_run_ex(h.engine, hidden.data(), 1, &o, &out), LMHEAD_ERR_ARGUMENT);
  EXPECT_NE(std::string(lmhead_last_error()).find("soft-cap route 7"), std::string::npos);
  o.softcap = 0;
  float lp = 0;
  out.logprob = &lp;  // asked for without options.logprobs
  EXPECT_EQ(lmhead_engine_run_ex(h.engine, hidden.data(), 1, &o, &out), LMHEAD_ERR_ARGUMENT);
  out.logprob = nullptr;
  o.size = 4;
  EXPECT_EQ(lmhead_engine_run_ex(h.engine, hidden.data(), 1, &o, &out), LMHEAD_ERR_ARGUMENT);

#ifndef LMHEAD_HAVE_CUDA
  EXPECT_NE(lmhead_engine_create(h.model, "cuda", 0, &engine), LMHEAD_OK);
  EXPECT_EQ(engine, nullptr);
  EXPECT_NE(std::string(lmhead_last_error()), "");
#endif
}

TEST(CApi, LastErrorIsPerThread) {
  lmhead_model* main_model = nullptr;
  EXPECT_EQ(lmhead_model_open("/nonexistent/main.gguf", &main_model), LMHEAD_ERR_MODEL);
  std::string other;
  std::thread([&] {
    other = lmhead_last_error();  // nothing failed on this thread yet
    lmhead_model* m = nullptr;
    EXPECT_EQ(lmhead_model_open("/nonexistent/thread.gguf", &m), LMHEAD_ERR_MODEL);
  }).join();
  EXPECT_EQ(other, "");
  EXPECT_NE(std::string(lmhead_last_error()).find("main.gguf"), std::string::npos) << lmhead_last_error();
}

TEST(CApi, EngineOutlivesItsModelHandleAndServesThreads) {
  lmhead_model* model = nullptr;
  lmhead_engine* engine = nullptr;
  ASSERT_EQ(lmhead_model_open(data_path(kSmall).c_str(), &model), LMHEAD_OK);
  ASSERT_EQ(lmhead_engine_create(model, "cpu", 1, &engine), LMHEAD_OK);
  lmhead_model_close(model);  // the engine keeps the mapping
  std::vector<std::vector<float>> inputs;
  std::vector<int32_t> want;
  for (unsigned i = 0; i < 4; ++i) {
    inputs.push_back(random_hidden(256, 20 + i));
    int32_t a = -1;
    ASSERT_EQ(lmhead_engine_run(engine, inputs.back().data(), 1, &a, nullptr), LMHEAD_OK) << lmhead_last_error();
    want.push_back(a);
  }
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int r = 0; r < 8; ++r) {
        const size_t i = static_cast<size_t>(k + r) % inputs.size();
        int32_t a = -1;
        if (lmhead_engine_run(engine, inputs[i].data(), 1, &a, nullptr) != LMHEAD_OK || a != want[i]) ++wrong[k];
      }
    });
  for (auto& t : threads) t.join();
  lmhead_engine_destroy(engine);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(wrong[k], 0) << "thread " << k;
}

}  // namespace
