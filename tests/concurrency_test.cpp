// Concurrency (issue 4): one Model is immutable after open and may be shared read-only by any
// number of threads, each with its own Engine. Every thread's results must equal the serial ones
// byte for byte. scripts/sanitizers.sh runs this suite under ThreadSanitizer, which is what turns
// "no data race" from a hope into a check.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "hardening_util.hpp"
#include "lmhead/lmhead.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

constexpr int kThreads = 4;

struct Job {
  BackendKind backend;
  ActivationRoute route;
  int tokens;
  uint64_t seed;
};

// Each thread runs a different mix of backends, routes and batch sizes, several times.
std::vector<Job> jobs_for(int thread) {
  std::vector<Job> jobs;
  for (int k = 0; k < 6; ++k) {
    const int i = thread * 6 + k;
    jobs.push_back({i % 2 ? BackendKind::cpu : BackendKind::scalar, (i / 2) % 2 ? ActivationRoute::f32 : ActivationRoute::q8,
                    1 + (i * 5) % 7, uint64_t(100 + i)});
  }
  return jobs;
}

std::vector<uint32_t> run_job(const std::shared_ptr<const Model>& model, const Job& job) {
  const int64_t hidden = model->config().hidden;
  Engine engine(model, {.backend = job.backend, .threads = 2});
  RunOptions o;
  o.activations = job.route;
  o.top_k = 4;
  o.logprobs = true;
  o.want_logits = true;
  return result_fingerprint(engine.run(test_hidden(job.tokens, hidden, job.seed), job.tokens, o));
}

void expect_threads_match_serial(const std::shared_ptr<const Model>& model, const std::string& what) {
  std::vector<std::vector<std::vector<uint32_t>>> serial(kThreads);
  for (int t = 0; t < kThreads; ++t)
    for (const Job& job : jobs_for(t)) serial[t].push_back(run_job(model, job));

  std::vector<std::vector<std::vector<uint32_t>>> parallel(kThreads);
  std::vector<std::string> errors(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();  // start together: maximum overlap
      try {
        for (const Job& job : jobs_for(t)) parallel[t].push_back(run_job(model, job));
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], "") << what << " thread " << t;
    ASSERT_EQ(parallel[t].size(), serial[t].size()) << what << " thread " << t;
    for (size_t j = 0; j < serial[t].size(); ++j)
      EXPECT_EQ(parallel[t][j], serial[t][j]) << what << " thread " << t << " job " << j;
  }
}

TEST(Concurrency, OneModelSharedByThreadsEachWithItsOwnEngine) {
  auto model = Model::open(data_path("tail-q5k-v4096-h256.gguf"));
  expect_threads_match_serial(model, "golden q5_K head");
}

TEST(Concurrency, EveryHeadTypeSharedByThreads) {
  TempDir dir;
  for (const char* type : {"q8_0", "q4_K", "q6_K", "f16", "bf16", "f32"}) {
    auto model = Model::open(make_checkpoint(dir, type, 200, 256));
    expect_threads_match_serial(model, type);
  }
}

// One Engine called from several threads at once (a server's request threads sharing one engine):
// the engine runs one call at a time, and its thread pool hands each call's results over only
// when every worker has finished (the pending count, released by each worker and acquired by the
// caller: docs/cuda.md, "Completion"). Every call gives the bytes of the same call made alone; the
// sharded engine adds its shard threads to the same question.
TEST(Concurrency, OneEngineCalledFromManyThreads) {
  auto model = Model::open(data_path("tail-q5k-v4099-h512.gguf"));
  const int64_t hidden = model->config().hidden;
  for (int shards : {1, 3}) {
    Engine engine(model, {.backend = BackendKind::cpu, .threads = 2, .shards = shards});
    RunOptions o;
    o.top_k = 4;
    o.logprobs = true;
    o.want_logits = true;
    std::vector<std::vector<float>> inputs;
    std::vector<std::vector<uint32_t>> alone;
    for (int tokens : {1, 3, 5}) {
      inputs.push_back(test_hidden(tokens, hidden, uint64_t(40 + tokens)));
      alone.push_back(result_fingerprint(engine.run(inputs.back(), tokens, o)));
    }
    std::atomic<int> mismatches{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < 6; ++i) {
          const size_t k = size_t(t + i) % inputs.size();
          const int tokens = int(inputs[k].size() / size_t(hidden));
          if (result_fingerprint(engine.run(inputs[k], tokens, o)) != alone[k]) mismatches.fetch_add(1);
        }
      });
    for (std::thread& th : threads) th.join();
    EXPECT_EQ(mismatches.load(), 0) << engine.backend_name();
  }
}

// Opening the same checkpoint from several threads at once, and reading the shared config and
// token table while other threads run engines on it.
TEST(Concurrency, ConcurrentOpensAndReadsOfOneFile) {
  const std::string path = data_path("tail-q5k-v4099-h512.gguf");
  auto reference = Model::open(path);
  const HeadConfig& want = reference->config();
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      try {
        auto mine = Model::open(path);
        if (mine->config().vocab != want.vocab || mine->config().head_bytes != want.head_bytes ||
            mine->config().logit_scale != want.logit_scale)
          errors[t] = "config differs";
        for (int64_t id = t; id < want.vocab; id += 97)
          if (reference->token_text(id) != mine->token_text(id)) errors[t] = "token " + std::to_string(id) + " differs";
        Engine engine(t % 2 ? mine : reference, {.backend = BackendKind::cpu, .threads = 2});
        engine.run(test_hidden(2, want.hidden, uint64_t(t)), 2);
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
}

}  // namespace
