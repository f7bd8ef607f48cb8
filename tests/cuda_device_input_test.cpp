// Hidden states already in GPU memory (Engine::run_device, lmhead_engine_run_device): the same
// bytes as run() on the host copy, read only after the caller's stream has written them, checked
// for NaN and infinity on the device, and refused with a clear Error where they cannot be read.
// GPU halves note a missing GPU and check only what a CPU machine can (the refusals).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lmhead/lmhead.h"
#include "lmhead/lmhead.hpp"
#include "backend/backend.hpp"  // cuda_available
#include "synth/synthetic_head.hpp"
#include "test_util.hpp"

#if LMHEAD_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace lmhead {
namespace {

using testing::data_path;
using testing::same_bytes;

const std::string kSmall = "tail-q5k-v4096-h256.gguf";

bool have_gpu() {
  std::string why;
  if (cuda_available(&why)) return true;
  std::printf("[ note ] no usable GPU (%s): only the refusals are checked\n", why.c_str());
  return false;
}

[[maybe_unused]] void expect_same_run(const RunResult& want, const RunResult& got, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(want.choices.size(), got.choices.size());
  for (size_t t = 0; t < want.choices.size(); ++t) {
    const TokenChoice &a = want.choices[t], &b = got.choices[t];
    EXPECT_EQ(a.argmax, b.argmax) << "token " << t;
    EXPECT_EQ(testing::bits_of(a.value), testing::bits_of(b.value)) << "token " << t;
    EXPECT_EQ(testing::bits_of(a.logprob), testing::bits_of(b.logprob)) << "token " << t;
    EXPECT_EQ(a.tie_count, b.tie_count) << "token " << t;
    ASSERT_EQ(a.top.size(), b.top.size()) << "token " << t;
    for (size_t i = 0; i < a.top.size(); ++i) {
      EXPECT_EQ(a.top[i].id, b.top[i].id) << "token " << t << " rank " << i;
      EXPECT_EQ(testing::bits_of(a.top[i].logit), testing::bits_of(b.top[i].logit)) << "token " << t << " rank " << i;
    }
  }
  EXPECT_TRUE(same_bytes(got.logits, want.logits));
}

TEST(DeviceInput, HostBackendsAndHostPointersAreRefused) {
  auto model = Model::open(data_path(kSmall));
  std::vector<float> hidden = synth::normal_floats(size_t(model->config().hidden), 3);
  Engine cpu(model, {.backend = BackendKind::cpu});
  try {
    cpu.run_device(hidden.data(), 1);
    ADD_FAILURE() << "a cpu engine read device rows";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda backend"), std::string::npos) << e.what();
  }
  lmhead_model* m = nullptr;
  lmhead_engine* engine = nullptr;
  ASSERT_EQ(lmhead_model_open(data_path(kSmall).c_str(), &m), LMHEAD_OK);
  ASSERT_EQ(lmhead_engine_create(m, "cpu", 1, &engine), LMHEAD_OK);
  int32_t token = -1;
  lmhead_run_outputs out;
  std::memset(&out, 0, sizeof out);
  out.size = sizeof out;
  out.argmax = &token;
  EXPECT_NE(lmhead_engine_run_device(engine, hidden.data(), 1, nullptr, nullptr, &out), LMHEAD_OK);
  EXPECT_NE(std::string(lmhead_last_error()).find("cuda backend"), std::string::npos) << lmhead_last_error();
  EXPECT_EQ(token, -1);  // outputs untouched on failure
  lmhead_engine_destroy(engine);
  lmhead_model_close(m);

  if (!have_gpu()) return;
  Engine gpu(model, {.backend = BackendKind::cuda});
  try {
    gpu.run_device(hidden.data(), 1);
    ADD_FAILURE() << "a host pointer was read as device rows";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not GPU memory"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gpu.run_device(nullptr, 1), Error);
}

#if LMHEAD_HAVE_CUDA

// Device rows that free themselves.
struct DeviceRows {
  float* ptr = nullptr;
  explicit DeviceRows(const std::vector<float>& host) {
    EXPECT_EQ(cudaMalloc(&ptr, host.size() * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceRows() { cudaFree(ptr); }
};

TEST(DeviceInput, DeviceRowsGiveTheHostBytes) {
  if (!have_gpu()) return;
  auto model = Model::open(data_path(kSmall));
  const int64_t H = model->config().hidden;
  Engine gpu(model, {.backend = BackendKind::cuda});
  Engine split(model, {.backend = BackendKind::cuda, .shards = 2});  // reads host rows: copies them over
  for (int tokens : {1, 3, 16, 21}) {
    std::vector<float> hidden = synth::normal_floats(size_t(tokens * H), 100 + tokens);
    DeviceRows rows(hidden);
    for (bool normed : {false, true}) {
      RunOptions o;
      o.top_k = 3;
      o.logprobs = true;
      o.want_logits = true;
      o.input = normed ? InputKind::normed : InputKind::hidden;
      const RunResult want = gpu.run(hidden, tokens, o);
      const std::string what = "T=" + std::to_string(tokens) + (normed ? " normed" : "");
      expect_same_run(want, gpu.run_device(rows.ptr, tokens, nullptr, o), what + " (one GPU)");
      expect_same_run(want, split.run_device(rows.ptr, tokens, nullptr, o), what + " (2 shards)");
      // And the argmax-only call (the head kernel's done flag, no logits).
      const RunResult a = gpu.run(hidden, tokens), b = gpu.run_device(rows.ptr, tokens);
      for (int t = 0; t < tokens; ++t) EXPECT_EQ(a.choices[t].argmax, b.choices[t].argmax) << what << " token " << t;
    }
    // Route llamacpp (the tiled order from 8 tokens on) reads the same rows.
    RunOptions l;
    l.route = Route::llamacpp;
    l.want_logits = true;
    expect_same_run(gpu.run(hidden, tokens, l), gpu.run_device(rows.ptr, tokens, nullptr, l),
                    "route llamacpp T=" + std::to_string(tokens));
  }
}

// The rows are written by a copy queued behind 200 ms of host work on the caller's stream; a read
// that did not wait for the stream would see the first rows, not the second.
TEST(DeviceInput, ReadsAfterTheCallersStream) {
  if (!have_gpu()) return;
  auto model = Model::open(data_path(kSmall));
  const int64_t H = model->config().hidden;
  const int tokens = 4;
  const std::vector<float> first = synth::normal_floats(size_t(tokens * H), 7);
  const std::vector<float> second = synth::normal_floats(size_t(tokens * H), 8);
  Engine gpu(model, {.backend = BackendKind::cuda});
  RunOptions o;
  o.want_logits = true;
  const RunResult want_first = gpu.run(first, tokens, o), want_second = gpu.run(second, tokens, o);
  ASSERT_FALSE(same_bytes(want_first.logits, want_second.logits));

  DeviceRows rows(first);
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, second.size() * sizeof(float)), cudaSuccess);
  std::memcpy(pinned, second.data(), second.size() * sizeof(float));
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (int round = 0; round < 2; ++round) {
    ASSERT_EQ(cudaMemcpy(rows.ptr, first.data(), first.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaLaunchHostFunc(stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); }, nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(rows.ptr, pinned, second.size() * sizeof(float), cudaMemcpyHostToDevice, stream),
              cudaSuccess);
    // Round 0 captures the call's graph, round 1 replays it.
    expect_same_run(want_second, gpu.run_device(rows.ptr, tokens, stream, o), "round " + std::to_string(round));
  }
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  cudaFreeHost(pinned);
}

TEST(DeviceInput, NonFiniteRowsAreRefusedOnTheDevice) {
  if (!have_gpu()) return;
  auto model = Model::open(data_path(kSmall));
  const int64_t H = model->config().hidden;
  Engine gpu(model, {.backend = BackendKind::cuda});
  const int tokens = 21;  // two passes: the second pass's token names the call's index
  const std::vector<float> good = synth::normal_floats(size_t(tokens * H), 21);
  struct Case { int token; int index; float value; const char* shown; };
  for (const Case c : {Case{18, 7, std::numeric_limits<float>::quiet_NaN(), "nan"},
                       Case{0, 0, std::numeric_limits<float>::infinity(), "inf"},
                       Case{5, int(H) - 1, -std::numeric_limits<float>::infinity(), "-inf"}}) {
    std::vector<float> bad = good;
    bad[size_t(c.token) * size_t(H) + size_t(c.index)] = c.value;
    bad[size_t(c.token) * size_t(H) + size_t(c.index) / 2 + size_t(H) / 2] = c.value;  // a later one too
    DeviceRows rows(bad);
    const std::string want = "hidden state of token " + std::to_string(c.token) + " has a non-finite value (" +
                             c.shown + ") at index " + std::to_string(c.index);
    try {
      gpu.run_device(rows.ptr, tokens);
      ADD_FAILURE() << "no error for " << want;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    // The host check says the same of the host copy.
    try {
      gpu.run(bad, tokens);
      ADD_FAILURE() << "no error on the host for " << want;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  // The engine is whole afterwards: good rows give the host bytes.
  DeviceRows rows(good);
  RunOptions o;
  o.want_logits = true;
  expect_same_run(gpu.run(good, tokens, o), gpu.run_device(rows.ptr, tokens, nullptr, o), "after the refusals");

  // Through the C API: LMHEAD_ERR_INPUT with the same message.
  lmhead_model* m = nullptr;
  lmhead_engine* engine = nullptr;
  ASSERT_EQ(lmhead_model_open(data_path(kSmall).c_str(), &m), LMHEAD_OK);
  ASSERT_EQ(lmhead_engine_create(m, "cuda", 0, &engine), LMHEAD_OK) << lmhead_last_error();
  std::vector<float> bad = good;
  bad[size_t(2 * H + 9)] = std::numeric_limits<float>::quiet_NaN();
  DeviceRows bad_rows(bad);
  std::vector<int32_t> tokens_out(tokens, -1), want_tokens(tokens, -2);
  lmhead_run_outputs out;
  std::memset(&out, 0, sizeof out);
  out.size = sizeof out;
  out.argmax = tokens_out.data();
  EXPECT_EQ(lmhead_engine_run_device(engine, bad_rows.ptr, tokens, nullptr, nullptr, &out), LMHEAD_ERR_INPUT);
  EXPECT_NE(std::string(lmhead_last_error()).find("token 2 has a non-finite value (nan) at index 9"), std::string::npos)
      << lmhead_last_error();
  EXPECT_EQ(tokens_out[0], -1);
  ASSERT_EQ(lmhead_engine_run_device(engine, rows.ptr, tokens, nullptr, nullptr, &out), LMHEAD_OK) << lmhead_last_error();
  out.argmax = want_tokens.data();
  ASSERT_EQ(lmhead_engine_run_ex(engine, good.data(), tokens, nullptr, &out), LMHEAD_OK);
  EXPECT_EQ(tokens_out, want_tokens);
  lmhead_engine_destroy(engine);
  lmhead_model_close(m);
}

// Several engines on one GPU, each fed device rows from its own thread and stream.
TEST(DeviceInput, EnginesOnThreadsKeepTheirBytes) {
  if (!have_gpu()) return;
  auto model = Model::open(data_path(kSmall));
  const int64_t H = model->config().hidden;
  constexpr int kThreads = 4, kCalls = 50;
  std::vector<std::thread> threads;
  std::vector<int> mismatches(kThreads, 0);
  for (int w = 0; w < kThreads; ++w)
    threads.emplace_back([&, w] {
      Engine gpu(model, {.backend = BackendKind::cuda});
      const int tokens = 1 + w * 5;
      const std::vector<float> hidden = synth::normal_floats(size_t(tokens * H), 300 + w);
      RunOptions o;
      o.want_logits = true;
      o.top_k = 2;
      const RunResult want = gpu.run(hidden, tokens, o);
      DeviceRows rows(hidden);
      cudaStream_t stream = nullptr;
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      for (int i = 0; i < kCalls; ++i) {
        const RunResult got = gpu.run_device(rows.ptr, tokens, stream, o);
        if (!same_bytes(got.logits, want.logits) || got.choices[0].top[1].id != want.choices[0].top[1].id)
          ++mismatches[w];
      }
      cudaStreamDestroy(stream);
    });
  for (auto& t : threads) t.join();
  for (int w = 0; w < kThreads; ++w) EXPECT_EQ(mismatches[w], 0) << "engine " << w;
}

#endif  // LMHEAD_HAVE_CUDA

}  // namespace
}  // namespace lmhead
