// Concurrency is a correctness property: many CUDA backends (every head kernel, one GPU and several
// shards on it) in one process, driven from many threads at once, and several such processes at
// once, must give on every call the bytes each gives alone. Every call is compared with the scalar
// backend (summaries, top-k, logits, every stage) and, for the sums of exponentials (CUDA's exp),
// with the same head's CUDA answer computed before the stress began.
//
// The race this guards against (docs/cuda.md, "Completion"): a buffer filled on the legacy default
// stream while the kernels run on a non-blocking stream lands whenever the GPU gets to it, so
// under load it erased a kernel's output (the `normed` stage came back as zeros, top-k lists
// changed). Alone, the same calls always passed.
//
// LMHEAD_STRESS_CALLS (default 3000), LMHEAD_STRESS_THREADS (default 8) and LMHEAD_STRESS_TOKENS
// size the run, so compute-sanitizer can take a short one; the test prints calls and mismatches.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/cuda_backend.hpp"
#include "lmhead/lmhead.hpp"
#include "random_head.hpp"
#include "test_util.hpp"

namespace lmhead {
namespace {

using namespace lmhead::testing;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}

// LMHEAD_STRESS_TOKENS (e.g. "1,9"): the token counts of the cases; fewer make a sanitizer run short.
std::vector<int> token_counts() {
  std::vector<int> ts;
  if (const char* env = std::getenv("LMHEAD_STRESS_TOKENS"))
    for (const char* p = env; *p != 0;) {
      char* end = nullptr;
      const long t = std::strtol(p, &end, 10);
      if (end == p) break;
      if (t >= 1 && t <= 16) ts.push_back(int(t));
      p = *end == ',' ? end + 1 : end;
    }
  if (ts.empty()) ts = {1, 2, 3, 4, 7, 8, 9, 16};
  return ts;
}

// What one call asks for: each kind takes another completion path through the backend.
enum class Ask { argmax_polled, top5, top3_logprobs, logits, stages_top2, argmax_timed, kCount };

ForwardRequest request_for(Ask ask) {
  ForwardRequest r;
  switch (ask) {
    case Ask::argmax_polled: break;                            // waits on the done flag
    case Ask::top5: r.top_k = 5; break;                        // top-k lists downloaded
    case Ask::top3_logprobs: r.top_k = 3; r.logprobs = true; break;  // chunk sums too (two phases on shards)
    case Ask::logits: r.want_logits = true; break;             // the logits downloaded
    case Ask::stages_top2: r.want_stages = true; r.top_k = 2; break;  // every stage
    case Ask::argmax_timed: r.want_stage_times = true; break;  // event nodes in the graph
    case Ask::kCount: break;
  }
  return r;
}

struct Case {
  std::vector<float> hidden;
  int T = 0;
  ForwardOutput scalar;             // top-5, every stage
  std::vector<double> cuda_sum_exp; // the default CUDA backend alone
};

struct Head {
  std::string name;
  RandomHead random;
  std::vector<Case> cases;
};

struct Unit {
  std::string name;
  Head* head = nullptr;
  std::unique_ptr<Backend> backend;
  std::mutex busy;  // a backend runs one call at a time; any thread may make it
};

uint32_t fbits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
uint64_t dbits(double d) { uint64_t u; std::memcpy(&u, &d, 8); return u; }

// "" when `got` is what the call should give; otherwise the first difference.
std::string difference(const Case& c, const ForwardRequest& req, const ForwardOutput& got) {
  const ForwardOutput& want = c.scalar;
  if (got.summaries.size() != size_t(c.T)) return "token count";
  for (int t = 0; t < c.T; ++t) {
    const auto& a = want.summaries[size_t(t)];
    const auto& b = got.summaries[size_t(t)];
    const std::string at = " (token " + std::to_string(t) + ")";
    if (fbits(a.max) != fbits(b.max) || a.argmax != b.argmax) return "argmax or max" + at;
    if (a.tie_count != b.tie_count || a.tied_ids != b.tied_ids) return "ties" + at;
    if (b.top.size() != size_t(req.top_k)) return "top-k size" + at;
    for (size_t i = 0; i < b.top.size(); ++i)
      if (a.top[i].id != b.top[i].id || fbits(a.top[i].logit) != fbits(b.top[i].logit))
        return "top-k rank " + std::to_string(i) + at;
  }
  if (req.logprobs) {
    if (got.sum_exp.size() != size_t(c.T)) return "sum_exp count";
    for (int t = 0; t < c.T; ++t)
      if (dbits(got.sum_exp[size_t(t)]) != dbits(c.cuda_sum_exp[size_t(t)])) return "sum_exp";
  }
  auto same = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * 4) == 0;
  };
  if ((req.want_logits || req.want_stages) && !same(want.logits, got.logits)) return "logits";
  if (req.want_stages) {
    if (!same(want.stages.normed, got.stages.normed)) return "normed";
    if (!same(want.stages.raw, got.stages.raw)) return "raw";
    if (!same(want.stages.scaled, got.stages.scaled)) return "scaled";
    if (!same(want.stages.div, got.stages.div)) return "div";
    if (!same(want.stages.tanh, got.stages.tanh)) return "tanh";
    if (!same(want.stages.capped, got.stages.capped)) return "capped";
  }
  return "";
}

class CudaStress : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_available(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  }
};

TEST_F(CudaStress, ManyBackendsManyThreadsGiveTheScalarBytes) {
  const uint64_t seed = std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  struct Spec { TensorType type; int64_t V, H; bool every_kernel; int shards_a, shards_b; };
  const std::vector<Spec> specs = {
      {TensorType::Q5_K, 6007, 512, true, 2, 3},
      {TensorType::Q6_K, 4101, 768, true, 2, 0},
      {TensorType::Q4_K, 4099, 512, true, 3, 0},
      {TensorType::Q8_0, 3001, 512, true, 2, 0},
      {TensorType::F16, 2003, 256, false, 3, 0},
  };
  std::vector<std::unique_ptr<Head>> heads;
  std::vector<std::unique_ptr<Unit>> units;
  for (const Spec& s : specs) {
    auto head = std::make_unique<Head>();
    head->name = tensor_type_name(s.type);
    head->random = random_head(s.type, s.V, s.H, rng);
    const HeadView& h = head->random.view;
    auto scalar = make_scalar_backend(h);
    auto alone = make_cuda_backend(h, 1);
    for (int T : token_counts()) {
      Case c;
      c.T = T;
      c.hidden = random_hidden(T, s.H, rng);
      ForwardRequest all;
      all.top_k = 5;
      all.want_stages = true;
      scalar->forward(c.hidden.data(), T, all, c.scalar);
      ForwardRequest sums;
      sums.logprobs = true;
      ForwardOutput o;
      alone->forward(c.hidden.data(), T, sums, o);
      c.cuda_sum_exp = o.sum_exp;
      head->cases.push_back(std::move(c));
    }
    // The default plan, then each kernel that reads this head type forced (the plan's kernel where
    // the forced one cannot run a call).
    std::vector<std::optional<cuda::HeadKernel>> kernels = {std::nullopt};
    for (cuda::HeadKernel k : cuda::kHeadKernels)
      if (s.every_kernel && cuda::kernel_reads_type(k, s.type)) kernels.push_back(k);
    for (const std::optional<cuda::HeadKernel>& k : kernels) {
      auto u = std::make_unique<Unit>();
      u->name = head->name + " " + (k ? cuda::kernel_name(*k) : "default");
      u->head = head.get();
      u->backend = make_cuda_backend(h, 1);
      if (k) cuda::set_tuning(*u->backend, cuda::force_kernel(*k));
      units.push_back(std::move(u));
    }
    for (int shards : {s.shards_a, s.shards_b}) {
      if (shards == 0) continue;
      auto u = std::make_unique<Unit>();
      u->name = head->name + " " + std::to_string(shards) + " shards on one GPU";
      u->head = head.get();
      u->backend = make_multi_gpu_backend(h, shards, 1);
      units.push_back(std::move(u));
    }
    heads.push_back(std::move(head));
  }

  const int calls = env_int("LMHEAD_STRESS_CALLS", 3000);
  const int threads = env_int("LMHEAD_STRESS_THREADS", 8);
  std::atomic<int> next{0}, mismatches{0}, errors{0};
  std::mutex report_mutex;
  std::vector<std::string> reports;
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      std::mt19937_64 r(seed + uint64_t(w) * 0x9E3779B97F4A7C15ull);
      while (next.fetch_add(1) < calls) {
        Unit& u = *units[r() % units.size()];
        const Case& c = u.head->cases[r() % u.head->cases.size()];
        const Ask ask = Ask(r() % int(Ask::kCount));
        const ForwardRequest req = request_for(ask);
        std::string what;
        try {
          ForwardOutput out;
          std::lock_guard<std::mutex> lock(u.busy);
          u.backend->forward(c.hidden.data(), c.T, req, out);
          what = difference(c, req, out);
          if (!what.empty()) mismatches.fetch_add(1);
        } catch (const std::exception& e) {
          what = std::string("threw: ") + e.what();
          errors.fetch_add(1);
        }
        if (!what.empty()) {
          std::lock_guard<std::mutex> lock(report_mutex);
          if (reports.size() < 10)
            reports.push_back(u.name + ", T=" + std::to_string(c.T) + ", ask " + std::to_string(int(ask)) + ": " + what);
        }
      }
    });
  for (std::thread& t : pool) t.join();
  std::printf("[ stress ] %d calls on %zu backends from %d threads: %d mismatches, %d errors\n", calls, units.size(),
              threads, mismatches.load(), errors.load());
  for (const std::string& s : reports) ADD_FAILURE() << s;
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(errors.load(), 0);
}

// One Engine called from many threads at once: calls are serialized inside the engine, and each
// gives the bytes of the same call made alone.
TEST_F(CudaStress, OneEngineFromManyThreads) {
  TempDir dir;
  const std::string path = dir.file("m.gguf");
  const CommandResult made = run_command(cli() + " make " + path + " --vocab 5003 --hidden 512 --quiet");
  ASSERT_EQ(made.status, 0) << made.output;
  auto model = Model::open(path);
  for (int shards : {1, 3}) {
    Engine engine(model, {.backend = BackendKind::cuda, .shards = shards});
    std::mt19937_64 rng(7);
    std::vector<std::vector<float>> hiddens;
    std::vector<RunResult> alone;
    const RunOptions opts{.top_k = 4, .logprobs = true, .want_logits = true};
    for (int T : {1, 5, 16}) {
      hiddens.push_back(random_hidden(T, 512, rng));
      alone.push_back(engine.run(hiddens.back(), T, opts));
    }
    std::atomic<int> mismatches{0};
    std::vector<std::thread> pool;
    for (int w = 0; w < 8; ++w)
      pool.emplace_back([&, w] {
        for (int i = 0; i < 60; ++i) {
          const size_t k = size_t(w + i) % hiddens.size();
          const RunResult r = engine.run(hiddens[k], alone[k].tokens, opts);
          bool same = r.logits == alone[k].logits && r.choices.size() == alone[k].choices.size();
          for (size_t t = 0; same && t < r.choices.size(); ++t) {
            const TokenChoice &a = r.choices[t], &b = alone[k].choices[t];
            same = a.argmax == b.argmax && fbits(a.logprob) == fbits(b.logprob) && a.top.size() == b.top.size();
            for (size_t j = 0; same && j < a.top.size(); ++j)
              same = a.top[j].id == b.top[j].id && fbits(a.top[j].logprob) == fbits(b.top[j].logprob);
          }
          if (!same) mismatches.fetch_add(1);
        }
      });
    for (std::thread& t : pool) t.join();
    EXPECT_EQ(mismatches.load(), 0) << engine.backend_name();
  }
}

// Several processes on one GPU at once, each running the stress above.
TEST_F(CudaStress, SeveralProcessesAtOnce) {
  if (std::getenv("LMHEAD_STRESS_CHILD") != nullptr) GTEST_SKIP() << "a child of this test";
  const int processes = 3;
  std::vector<CommandResult> results(processes);
  std::vector<std::thread> pool;
  const std::string cmd = "LMHEAD_STRESS_CHILD=1 LMHEAD_STRESS_CALLS=" +
                          std::to_string(env_int("LMHEAD_STRESS_CALLS", 3000) / 3) +
                          " /proc/" + std::to_string(getpid()) +
                          "/exe --gtest_filter=CudaStress.ManyBackendsManyThreadsGiveTheScalarBytes";
  for (int p = 0; p < processes; ++p) pool.emplace_back([&, p] { results[size_t(p)] = run_command(cmd); });
  for (std::thread& t : pool) t.join();
  for (int p = 0; p < processes; ++p) {
    EXPECT_EQ(results[size_t(p)].status, 0) << results[size_t(p)].output;
    const size_t at = results[size_t(p)].output.find("[ stress ]");
    ASSERT_NE(at, std::string::npos) << results[size_t(p)].output;
    std::printf("process %d: %s", p, results[size_t(p)].output.substr(at, results[size_t(p)].output.find('\n', at) - at + 1).c_str());
  }
}

}  // namespace
}  // namespace lmhead
