// The C API (include/lmhead/lmhead.h) against the C++ engine it wraps: the same bytes, every
// failure a return code plus this thread's message, no exception escaping. Part of lmhead_tests,
// so scripts/sanitizers.sh runs it under ASan/UBSan.
#include "lmhead/lmhead.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <span>
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

// Sampling and verification through the C structs: the C++ engine's tokens for the same options.
TEST(CApi, SamplingAndVerificationAreTheCppEnginesTokens) {
  Handles h;
  ASSERT_EQ(lmhead_model_open(data_path(kSmall).c_str(), &h.model), LMHEAD_OK) << lmhead_last_error();
  ASSERT_EQ(lmhead_engine_create(h.model, "cpu", 2, &h.engine), LMHEAD_OK) << lmhead_last_error();
  auto model = lmhead::Model::open(data_path(kSmall));
  lmhead::Engine engine(model, {.backend = lmhead::BackendKind::cpu, .threads = 2});
  const int T = 5, V = 4096, words = V / 32;
  const std::vector<float> hidden = random_hidden(T * 256, 11);

  const int32_t bias_ids[] = {7, 4000};
  const float bias_values[] = {6.0f, -2.5f};
  std::vector<uint32_t> masks(size_t(T) * words, 0xffffffffu);
  for (int t = 0; t < T; ++t) masks[size_t(t) * words + size_t(t)] = 0x0000ff00u;  // one row per token
  lmhead_sampling_options so;
  lmhead_sampling_options_init(&so);
  EXPECT_EQ(so.top_p, 1.0f);
  so.temperature = 0.8f;
  so.top_p = 0.9f;
  so.min_p = 0.02f;
  so.seed = 1234;
  so.position = 50;
  so.bias_ids = bias_ids;
  so.bias_values = bias_values;
  so.bias_count = 2;
  so.allowed = masks.data();
  so.allowed_words = masks.size();
  lmhead_run_options o;
  lmhead_run_options_init(&o);
  o.sampling = &so;
  std::vector<int32_t> sampled(T, -1), argmax(T, -1);
  lmhead_run_outputs out;
  std::memset(&out, 0, sizeof out);
  out.size = sizeof out;
  out.sampled = sampled.data();
  out.argmax = argmax.data();
  ASSERT_EQ(lmhead_engine_run_ex(h.engine, hidden.data(), T, &o, &out), LMHEAD_OK) << lmhead_last_error();

  lmhead::RunOptions ro;
  ro.sampling.temperature = 0.8f;
  ro.sampling.top_p = 0.9f;
  ro.sampling.min_p = 0.02f;
  ro.sampling.seed = 1234;
  ro.sampling.position = 50;
  ro.sampling.logit_bias = {{7, 6.0f}, {4000, -2.5f}};
  ro.sampling.allowed = masks;
  const lmhead::RunResult want = engine.run(hidden, T, ro);
  for (int t = 0; t < T; ++t) {
    EXPECT_EQ(sampled[t], want.choices[t].sampled) << "token " << t;
    EXPECT_EQ(argmax[t], want.choices[t].argmax) << "token " << t;
  }
  // Without sampling options `sampled` is the argmax.
  o.sampling = nullptr;
  ASSERT_EQ(lmhead_engine_run_ex(h.engine, hidden.data(), T, &o, &out), LMHEAD_OK) << lmhead_last_error();
  EXPECT_EQ(sampled, argmax);

  // Verification: greedy and sampled, drafts that the target accepts and one it rejects, with and
  // without the draft model's probabilities.
  ro.sampling.allowed.clear();
  so.allowed = nullptr;
  so.allowed_words = 0;
  o.sampling = &so;
  const lmhead::RunResult target = engine.run(hidden, T, ro);
  std::vector<int32_t> draft;
  for (int t = 0; t + 1 < T; ++t) draft.push_back(target.choices[t].sampled);
  std::vector<int32_t> wrong = draft;
  wrong[2] = (wrong[2] + 1) % V;
  std::vector<float> probs(size_t(T - 1) * V, 1.0f / V);
  for (const std::vector<int32_t>* d : {&draft, &wrong})
    for (const float* q : {static_cast<const float*>(nullptr), static_cast<const float*>(probs.data())})
      for (float temperature : {0.0f, 0.8f}) {
        so.temperature = temperature;
        ro.sampling.temperature = temperature;
        int accepted = -1;
        int32_t next = -1;
        ASSERT_EQ(lmhead_engine_verify(h.engine, hidden.data(), d->data(), T - 1, q, &o, &accepted, &next), LMHEAD_OK)
            << lmhead_last_error();
        const lmhead::VerifyResult v =
            engine.verify(hidden, *d, ro, q ? std::span<const float>(probs) : std::span<const float>());
        EXPECT_EQ(accepted, v.accepted) << "temperature " << temperature << (q ? ", draft probs" : "");
        EXPECT_EQ(next, v.next) << "temperature " << temperature << (q ? ", draft probs" : "");
        if (d == &draft && temperature == 0.8f && !q) {
          EXPECT_EQ(accepted, T - 1);
        }
        if (d == &wrong && !q) {
          EXPECT_LE(accepted, 2);
        }
      }
}

TEST(CApi, SamplingFailuresNameTheirOption) {
  Handles h;
  ASSERT_EQ(lmhead_model_open(data_path(kSmall).c_str(), &h.model), LMHEAD_OK) << lmhead_last_error();
  ASSERT_EQ(lmhead_engine_create(h.model, "cpu", 1, &h.engine), LMHEAD_OK) << lmhead_last_error();
  const std::vector<float> hidden = random_hidden(2 * 256, 5);
  std::vector<int32_t> sampled(2, -7);
  lmhead_run_outputs out;
  std::memset(&out, 0, sizeof out);
  out.size = sizeof out;
  out.sampled = sampled.data();
  lmhead_sampling_options so;
  lmhead_run_options o;
  lmhead_run_options_init(&o);
  o.sampling = &so;
  auto expect_refused = [&](const char* needle) {
    EXPECT_EQ(lmhead_engine_run_ex(h.engine, hidden.data(), 2, &o, &out), LMHEAD_ERR_ARGUMENT) << needle;
    EXPECT_NE(std::string(lmhead_last_error()).find(needle), std::string::npos) << lmhead_last_error();
    EXPECT_EQ(sampled[0], -7);  // nothing written
  };
  lmhead_sampling_options_init(&so);
  so.temperature = 1.0f;
  so.top_p = 0.0f;
  expect_refused("top-p");
  lmhead_sampling_options_init(&so);
  so.temperature = -1.0f;
  expect_refused("temperature");
  lmhead_sampling_options_init(&so);
  so.bias_count = 1;
  expect_refused("bias_ids");
  const int32_t far_id = 4096;
  const float one = 1.0f;
  so.bias_ids = &far_id;
  so.bias_values = &one;
  expect_refused("outside the vocabulary");
  lmhead_sampling_options_init(&so);
  const uint32_t short_mask[3] = {1, 1, 1};
  so.allowed = short_mask;
  so.allowed_words = 3;
  expect_refused("allowed-token mask");
  so.allowed_words = 0;
  expect_refused("allowed_words");
  lmhead_sampling_options_init(&so);
  so.size = sizeof so + 4;
  expect_refused("lmhead_sampling_options.size");

  lmhead_sampling_options_init(&so);
  int accepted = -1;
  int32_t next = -1;
  const int32_t bad_draft[1] = {-3};
  EXPECT_EQ(lmhead_engine_verify(h.engine, hidden.data(), bad_draft, 1, nullptr, &o, &accepted, &next), LMHEAD_ERR_ARGUMENT);
  EXPECT_NE(std::string(lmhead_last_error()).find("draft token 0"), std::string::npos) << lmhead_last_error();
  const int32_t good_draft[1] = {3};
  std::vector<float> probs(4096, 0.0f);
  probs[9] = -0.5f;
  EXPECT_EQ(lmhead_engine_verify(h.engine, hidden.data(), good_draft, 1, probs.data(), &o, &accepted, &next),
            LMHEAD_ERR_ARGUMENT);
  EXPECT_NE(std::string(lmhead_last_error()).find("draft probability"), std::string::npos) << lmhead_last_error();
  EXPECT_EQ(lmhead_engine_verify(h.engine, hidden.data(), nullptr, 1, nullptr, &o, &accepted, &next), LMHEAD_ERR_ARGUMENT);
  EXPECT_EQ(lmhead_engine_verify(h.engine, hidden.data(), good_draft, -1, nullptr, &o, &accepted, &next), LMHEAD_ERR_ARGUMENT);
  EXPECT_EQ(accepted, -1);
  EXPECT_EQ(next, -1);
  // No drafts: the one row's own token.
  ASSERT_EQ(lmhead_engine_verify(h.engine, hidden.data(), nullptr, 0, nullptr, nullptr, &accepted, &next), LMHEAD_OK)
      << lmhead_last_error();
  EXPECT_EQ(accepted, 0);
  std::vector<int32_t> argmax(1);
  ASSERT_EQ(lmhead_engine_run(h.engine, hidden.data(), 1, argmax.data(), nullptr), LMHEAD_OK);
  EXPECT_EQ(next, argmax[0]);
}

// A caller built against 0.1.0's header passes the shorter structs: they keep working, and the
// fields they lack keep their defaults (no sampling, no sampled output).
TEST(CApi, StructsOfTheEarlierLayoutStillWork) {
  Handles h;
  ASSERT_EQ(lmhead_model_open(data_path(kSmall).c_str(), &h.model), LMHEAD_OK) << lmhead_last_error();
  ASSERT_EQ(lmhead_engine_create(h.model, "cpu", 1, &h.engine), LMHEAD_OK) << lmhead_last_error();
  const std::vector<float> hidden = random_hidden(256, 8);
  lmhead_sampling_options so;
  lmhead_sampling_options_init(&so);
  so.temperature = 5.0f;  // would change the token if it were read
  lmhead_run_options o;
  lmhead_run_options_init(&o);
  o.size = offsetof(lmhead_run_options, sampling);
  o.top_k = 2;
  o.sampling = &so;  // beyond the caller's size: never read
  int32_t argmax = -1, sampled = -9;
  int32_t ids[2] = {-1, -1};
  lmhead_run_outputs out;
  std::memset(&out, 0, sizeof out);
  out.size = offsetof(lmhead_run_outputs, sampled);
  out.argmax = &argmax;
  out.top_k_ids = ids;
  out.sampled = &sampled;  // beyond the caller's size: never written
  ASSERT_EQ(lmhead_engine_run_ex(h.engine, hidden.data(), 1, &o, &out), LMHEAD_OK) << lmhead_last_error();
  EXPECT_EQ(ids[0], argmax);
  EXPECT_EQ(sampled, -9);
  o.size = offsetof(lmhead_run_options, sampling) + 4;  // neither layout
  EXPECT_EQ(lmhead_engine_run_ex(h.engine, hidden.data(), 1, &o, &out), LMHEAD_ERR_ARGUMENT);
  EXPECT_NE(std::string(lmhead_last_error()).find("lmhead_run_options.size"), std::string::npos) << lmhead_last_error();
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

// The dot order (lmhead_run_options.route, 0.3.0): route tiled gives the C++ engine's Route::tiled
// bytes, which differ from the default's on this head; a 0.2.0-sized struct keeps the default;
// an unknown route is refused by name.
TEST(CApi, RouteReachesTheEngine) {
  Handles h;
  ASSERT_EQ(lmhead_model_open(data_path(kSmall).c_str(), &h.model), LMHEAD_OK) << lmhead_last_error();
  ASSERT_EQ(lmhead_engine_create(h.model, "cpu", 2, &h.engine), LMHEAD_OK) << lmhead_last_error();
  const std::vector<float> hidden = random_hidden(3 * 256, 12);
  auto model = lmhead::Model::open(data_path(kSmall));
  lmhead::Engine engine(model, {.backend = lmhead::BackendKind::scalar});
  lmhead_run_options o;
  lmhead_run_options_init(&o);
  EXPECT_EQ(o.route, LMHEAD_ROUTE_VEC_DOT);
  o.route = LMHEAD_ROUTE_TILED;
  std::vector<float> logits(3 * 4096);
  lmhead_run_outputs out;
  std::memset(&out, 0, sizeof out);
  out.size = sizeof out;
  out.logits = logits.data();
  ASSERT_EQ(lmhead_engine_run_ex(h.engine, hidden.data(), 3, &o, &out), LMHEAD_OK) << lmhead_last_error();
  const lmhead::RunResult tiled = engine.run(hidden, 3, {.route = lmhead::Route::tiled, .want_logits = true});
  const lmhead::RunResult vec_dot = engine.run(hidden, 3, {.want_logits = true});
  EXPECT_TRUE(same_bytes(logits, tiled.logits));
  EXPECT_FALSE(same_bytes(tiled.logits, vec_dot.logits)) << "the two orders agree on every logit of this head";

  o.size = offsetof(lmhead_run_options, route);  // 0.2.0's layout: route never read
  ASSERT_EQ(lmhead_engine_run_ex(h.engine, hidden.data(), 3, &o, &out), LMHEAD_OK) << lmhead_last_error();
  EXPECT_TRUE(same_bytes(logits, vec_dot.logits));

  o.size = sizeof o;
  o.route = 7;
  EXPECT_EQ(lmhead_engine_run_ex(h.engine, hidden.data(), 3, &o, &out), LMHEAD_ERR_ARGUMENT);
  EXPECT_NE(std::string(lmhead_last_error()).find("unknown route 7"), std::string::npos) << lmhead_last_error();
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
