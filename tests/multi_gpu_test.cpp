// The vocabulary-parallel CUDA head: several shards on one GPU, one shard per GPU, and one process
// per GPU over NCCL must all give the one-GPU bytes (argmax, ties, top-k, logprobs, logits, stages).
// GPU tests skip with a visible message when the machine has no GPU, or fewer than two.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "backend/backend.hpp"
#include "cuda/multi_gpu.hpp"
#include "dist/rendezvous.hpp"
#include "io/npy.hpp"
#include "lmhead/lmhead.hpp"
#include "test_util.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

#define SKIP_WITH_FEWER_GPUS(n)                                                                        \
  do {                                                                                                  \
    std::string why_;                                                                                   \
    if (!cuda_available(&why_)) GTEST_SKIP() << "no usable GPU: " << why_;                              \
    if (cuda::device_count() < (n))                                                                     \
      GTEST_SKIP() << "needs " << (n) << " GPUs, this machine has " << cuda::device_count();           \
  } while (0)

void expect_same(const RunResult& a, const RunResult& b, const std::string& what) {
  ASSERT_EQ(a.choices.size(), b.choices.size()) << what;
  for (size_t t = 0; t < a.choices.size(); ++t) {
    const TokenChoice &x = a.choices[t], &y = b.choices[t];
    EXPECT_EQ(x.argmax, y.argmax) << what << " token " << t;
    EXPECT_EQ(bits_of(x.value), bits_of(y.value)) << what;
    EXPECT_EQ(bits_of(x.logprob), bits_of(y.logprob)) << what << " token " << t;
    EXPECT_EQ(x.tie_count, y.tie_count) << what;
    EXPECT_EQ(x.tied_ids, y.tied_ids) << what;
    ASSERT_EQ(x.top.size(), y.top.size()) << what;
    for (size_t i = 0; i < x.top.size(); ++i) {
      EXPECT_EQ(x.top[i].id, y.top[i].id) << what;
      EXPECT_EQ(bits_of(x.top[i].logit), bits_of(y.top[i].logit)) << what;
      EXPECT_EQ(bits_of(x.top[i].logprob), bits_of(y.top[i].logprob)) << what;
    }
  }
  EXPECT_TRUE(same_bytes(a.logits, b.logits)) << what;
  EXPECT_TRUE(same_bytes(a.stages.raw, b.stages.raw)) << what;
  EXPECT_TRUE(same_bytes(a.stages.capped, b.stages.capped)) << what;
  EXPECT_TRUE(same_bytes(a.stages.normed, b.stages.normed)) << what;
}

std::vector<float> test_hidden(int tokens, int hidden) {
  std::vector<float> h(size_t(tokens) * size_t(hidden));
  for (size_t i = 0; i < h.size(); ++i) h[i] = float(int(i * 37 % 101) - 50) / 7.0f;
  return h;
}

// A Q5_K head (the tensor-core kernels) with an odd vocabulary, so the last shard is partial.
std::string make_model(const TempDir& dir) {
  const std::string m = dir.file("m.gguf");
  const CommandResult r = run_command(cli() + " make " + m + " --vocab 20011 --hidden 512 --quiet");
  if (r.status != 0) throw Error("lmhead make failed: " + r.output);
  return m;
}

void compare_shardings(int gpus, const std::vector<int>& shard_counts) {
  TempDir dir;
  auto model = Model::open(make_model(dir));
  Engine one(model, {.backend = BackendKind::cuda});
  for (int T : {1, 3, 16}) {
    const std::vector<float> hidden = test_hidden(T, 512);
    for (const RunOptions& opts : {RunOptions{.top_k = 7, .logprobs = true, .want_logits = true, .want_stages = true},
                                   RunOptions{.top_k = 0, .logprobs = false}, RunOptions{.top_k = 3, .logprobs = true}}) {
      const RunResult ref = one.run(hidden, T, opts);
      for (int shards : shard_counts) {
        Engine split(model, {.backend = BackendKind::cuda, .gpus = gpus, .shards = shards});
        expect_same(split.run(hidden, T, opts), ref,
                    split.backend_name() + " T=" + std::to_string(T) + " k=" + std::to_string(opts.top_k));
      }
    }
  }
}

TEST(MultiGpu, ShardsOnOneGpuGiveTheOneGpuBytes) {
  SKIP_WITH_FEWER_GPUS(1);
  compare_shardings(1, {2, 3, 4});
}

TEST(MultiGpu, TwoGpusGiveTheOneGpuBytes) {
  SKIP_WITH_FEWER_GPUS(2);
  compare_shardings(2, {0, 3, 4});  // 0: one shard per GPU; 3 and 4: round-robin over the two
}

// The shards share one input buffer that each shard's thread fills in part before any launches:
// back-to-back calls with fresh inputs of changing sizes must each see their own input on every
// shard (a shard that launched early would read the previous call's values).
TEST(MultiGpu, EveryCallSeesItsOwnInput) {
  SKIP_WITH_FEWER_GPUS(1);
  TempDir dir;
  auto model = Model::open(make_model(dir));
  const HeadView h = head_view(*model);
  auto one = make_cuda_backend(h, 1);
  const int gpus = std::min(2, cuda::device_count());
  auto split = make_multi_gpu_backend(h, 3, gpus);
  std::mt19937_64 rng(11);
  std::normal_distribution<float> n(0.0f, 1.0f);
  {
    const std::vector<float> too_many(17 * 512, 1.0f);
    ForwardOutput out;
    EXPECT_THROW(split->forward(too_many.data(), 17, ForwardRequest{}, out), Error);
  }
  for (bool shared : {true, false}) {
    cuda::set_shared_input(*split, shared);
    for (int call = 0; call < 40; ++call) {
      const int T = 1 + int(rng() % 16);
      std::vector<float> hidden(size_t(T) * 512);
      for (float& v : hidden) v = n(rng);
      ForwardOutput a, b;
      one->forward(hidden.data(), T, ForwardRequest{}, a);
      split->forward(hidden.data(), T, ForwardRequest{}, b);
      ASSERT_EQ(a.summaries.size(), b.summaries.size());
      for (int t = 0; t < T; ++t) {
        EXPECT_EQ(a.summaries[size_t(t)].argmax, b.summaries[size_t(t)].argmax) << "call " << call << " token " << t;
        EXPECT_EQ(bits_of(a.summaries[size_t(t)].max), bits_of(b.summaries[size_t(t)].max)) << "call " << call;
      }
    }
  }
}

// With the shared input the shard threads check the values while they copy them and the engine
// does not: a bad value in any shard's share is refused with the engine's message, before any GPU
// runs, and the next call runs normally. (More than 16 tokens: the engine checks them all first.)
TEST(MultiGpu, SharedInputRefusesNonFiniteValuesLikeTheEngine) {
  SKIP_WITH_FEWER_GPUS(1);
  TempDir dir;
  auto model = Model::open(make_model(dir));
  Engine one(model, {.backend = BackendKind::cuda});
  Engine split(model, {.backend = BackendKind::cuda, .gpus = std::min(2, cuda::device_count()), .shards = 3});
  for (int T : {1, 3, 16, 20}) {
    const int n = T * 512;
    for (int pos : {0, 511, n / 3 - 1, n / 3, n / 2 + 7, 2 * n / 3, n - 1}) {
      std::vector<float> hidden = test_hidden(T, 512);
      hidden[size_t(pos)] = std::numeric_limits<float>::quiet_NaN();
      if (pos + 700 < n) hidden[size_t(pos) + 700] = std::numeric_limits<float>::infinity();
      try {
        split.run(hidden, T);
        ADD_FAILURE() << "T=" << T << ": a NaN at " << pos << " was accepted";
      } catch (const Error& e) {
        const std::string want = "hidden state of token " + std::to_string(pos / 512) + " has a non-finite value (nan) at index " +
                                 std::to_string(pos % 512);
        EXPECT_EQ(std::string(e.what()), want) << "T=" << T;
      }
      const std::vector<float> good = test_hidden(T, 512);
      expect_same(split.run(good, T), one.run(good, T), "after a refused call, T=" + std::to_string(T));
    }
  }
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Two processes, one per GPU, meeting through the id file: every rank prints the one-GPU answer
// (and writes the one-GPU logits with --out).
TEST(MultiGpu, TwoProcessesOverNcclGiveTheOneGpuBytes) {
#ifndef LMHEAD_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL: the one-process-per-GPU mode is not compiled";
#endif
  SKIP_WITH_FEWER_GPUS(2);
  TempDir dir;
  const std::string m = make_model(dir), h = dir.file("h.npy");
  const int T = 5;
  const std::vector<float> hidden = test_hidden(T, 512);
  io::write_npy_f32(h, {T, 512}, hidden.data());
  const std::string run = cli() + " run " + m + " --hidden " + h + " --backend cuda --top-k 6 --logprobs --json";
  const CommandResult ref = run_command(run + " --out " + dir.file("ref.npy"), false);
  ASSERT_EQ(ref.status, 0) << ref.output;
  const std::string id = dir.file("nccl.id");
  auto rank = [&](int r) {
    return run + " --nccl-ranks 2 --nccl-rank " + std::to_string(r) + " --nccl-id " + id + " --out " +
           dir.file("r" + std::to_string(r) + ".npy") + " > " + dir.file("r" + std::to_string(r) + ".json") + " 2> " +
           dir.file("r" + std::to_string(r) + ".err");
  };
  const CommandResult both = run_command("(" + rank(1) + ") & p1=$!; " + rank(0) + "; s0=$?; wait $p1; s1=$?; "
                                         "echo $s0 $s1; exit $((s0 + s1))");
  ASSERT_EQ(both.status, 0) << both.output << read_all(dir.file("r0.err")) << read_all(dir.file("r1.err"));
  auto strip = [](nlohmann::json j) {
    j.erase("backend");
    j.erase("times_ms");
    return j;
  };
  const nlohmann::json want = strip(nlohmann::json::parse(ref.output));
  for (int r : {0, 1}) {
    const nlohmann::json got = nlohmann::json::parse(read_all(dir.file("r" + std::to_string(r) + ".json")));
    EXPECT_NE(got["backend"].get<std::string>().find("rank " + std::to_string(r) + " of 2"), std::string::npos);
    EXPECT_EQ(strip(got).dump(), want.dump()) << "rank " << r;
    EXPECT_EQ(read_all(dir.file("r" + std::to_string(r) + ".npy")), read_all(dir.file("ref.npy"))) << "rank " << r;
  }
  EXPECT_FALSE(std::filesystem::exists(id)) << "rank 0 leaves no id file behind";
}

TEST(MultiGpuRendezvous, IdFileRoundTripAndStaleFileRefused) {
  TempDir dir;
  const std::string path = dir.file("id");
  const std::vector<uint8_t> id = {1, 2, 3, 250, 0, 7};
  dist::publish_id(path, id.data(), id.size());
  EXPECT_EQ(dist::wait_for_id(path, id.size(), 1.0, 1), id);
  EXPECT_THROW(dist::publish_id(path, id.data(), id.size()), Error);  // left from an earlier launch
  EXPECT_THROW(dist::wait_for_id(path, id.size() + 1, 1.0, 1), Error);  // not an id of this size
}

TEST(MultiGpuRendezvous, MissingRankZeroTimesOutWithAClearError) {
  TempDir dir;
  const std::string path = dir.file("never");
  const auto t0 = std::chrono::steady_clock::now();
  try {
    dist::wait_for_id(path, 128, 0.2, 3);
    FAIL() << "no id file, yet wait_for_id returned";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 3 waited"), std::string::npos) << what;
    EXPECT_NE(what.find(path), std::string::npos) << what;
  }
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.2);
}

// Through the CLI: a rank whose rank 0 never comes fails with a message (no GPU needed: the id
// file is awaited before any device work; a build without NCCL says it lacks NCCL).
TEST(MultiGpuRendezvous, CliRankWithoutRankZeroFails) {
  TempDir dir;
  const std::string m = make_model(dir), h = dir.file("h.npy");
  const std::vector<float> hidden = test_hidden(1, 512);
  io::write_npy_f32(h, {1, 512}, hidden.data());
  const CommandResult r = run_command("LMHEAD_NCCL_TIMEOUT_S=0.3 " + cli() + " run " + m + " --hidden " + h +
                                      " --backend cuda --nccl-ranks 2 --nccl-rank 1 --nccl-id " + dir.file("id"));
  EXPECT_NE(r.status, 0);
  const bool timed_out = r.output.find("waited") != std::string::npos && r.output.find(dir.file("id")) != std::string::npos;
  const bool no_nccl = r.output.find("needs NCCL") != std::string::npos;
  EXPECT_TRUE(timed_out || no_nccl) << r.output;
}

}  // namespace
