// Vocabulary-parallel CUDA head in one process: one CudaBackend per shard, shards spread
// round-robin over the GPUs, one persistent host thread per shard (the caller runs shard 0), and
// an exchange of per-token summaries instead of a gather of logits:
//   argmax / ties  one TokenSummary per shard and token (value, lowest id, tie count, tied ids),
//   top-k          k candidates per shard and token,
//   logprobs       two phases: the merged maximum goes back to every shard, which sums
//                  exp(x - max) over its own 512-id chunks on its GPU; the chunk sums are added
//                  in id order on the host, exactly as the one-GPU backend adds its own.
//   sampling       numerics.md §9's rounds (temperature, top-p, min-p; with a bias or a mask each
//                  shard first sends its largest z): the merged maximum goes to every shard,
//                  which sends its integer weight sums per 512-id chunk (and per
//                  rank bucket); with top-p the boundary bucket goes back and each shard sends
//                  that bucket's ids; the host selects the boundary, finds the chunk holding the
//                  draw and fetches that one chunk's 512 logits to walk it.
// Logits travel only when asked for. Every byte equals the one-GPU result for any shard count.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "backend/backend.hpp"
#include "backend/input_check.hpp"
#include "backend/sharding.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/kernels.hpp"
#include "cuda/multi_gpu.hpp"
#include "cuda/spin.hpp"
#include "sample/philox.hpp"
#include "sample/row.hpp"
#include "sample/sampler.hpp"
#include "sample/weight_math.hpp"

namespace lmhead {
namespace cuda {

int64_t sum_exp_chunks(int64_t rows) { return (rows + select::kSumExpChunk - 1) / select::kSumExpChunk; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

namespace {

// One persistent thread per shard beyond the first. Starting threads per call costs tens of
// microseconds, a fifth of a one-GPU T=1 call; a worker spins briefly after each job (a decode
// loop calls again within microseconds) and then sleeps on a condition variable.
class ShardPool {
 public:
  explicit ShardPool(int shards) : shards_(shards), errors_(size_t(shards)) {
    for (int s = 1; s < shards; ++s) threads_.emplace_back([this, s] { loop(s); });
  }
  ~ShardPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  // Runs job(s) for every shard s concurrently; rethrows the lowest shard's error.
  void run(const std::function<void(int)>& job) {
    job_ = &job;
    for (std::exception_ptr& e : errors_) e = nullptr;
    pending_.store(shards_ - 1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    call(0);
    while (pending_.load(std::memory_order_acquire) != 0) cpu_relax();
    for (const std::exception_ptr& e : errors_)
      if (e) std::rethrow_exception(e);
  }

 private:
  static constexpr int kSpins = 1 << 16;  // about a millisecond of pause instructions

  void call(int s) {
    try {
      (*job_)(s);
    } catch (...) {
      errors_[size_t(s)] = std::current_exception();
    }
  }

  void loop(int s) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g = generation_.load(std::memory_order_acquire);
      for (int i = 0; i < kSpins && g == seen; ++i) {
        cpu_relax();
        g = generation_.load(std::memory_order_acquire);
      }
      if (g == seen) {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
        g = generation_.load(std::memory_order_acquire);
      }
      seen = g;
      if (stop_) return;
      call(s);
      pending_.fetch_sub(1, std::memory_order_release);
    }
  }

  const int shards_;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
};

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

class MultiGpuBackend final : public Backend {
 public:
  MultiGpuBackend(const HeadView& head, int shards, int gpus)
      : head_(head), gpus_(gpus), bounds_(plan_shards(head.vocab, shards)), pool_(shards) {
    if (gpus < 1) throw Error("the multi-GPU head needs at least one GPU, got " + std::to_string(gpus));
    for (int s = 0; s < shards; ++s)
      parts_.push_back(make_cuda_backend_on_device(shard_view(head, bounds_[s], bounds_[s + 1]), s % gpus));
    outs_.resize(size_t(shards));
    sums_.resize(size_t(shards));
    shared_input_.reset(size_t(kMaxTokens) * size_t(head.hidden), MappedHostArray<float>::Mapping::portable);
    set_shared_input(true);
  }

  // Shared: every shard reads the hidden states from one portable mapped buffer, into which each
  // shard's thread copies its share of the values before any shard launches (at T = 16 the
  // 426 KB copy takes ~16 us on one core). Otherwise each shard copies all of them into its own.
  void set_shared_input(bool shared) {
    for (const auto& part : parts_) use_input_buffer(*part, shared ? shared_input_.host() : nullptr);
    shared_ = shared;
  }

  const std::vector<std::unique_ptr<Backend>>& parts() const { return parts_; }
  bool checks_finite_input() const override { return shared_; }
  bool takes_normed_input() const override {  // each shard's prep kernel skips the norm itself
    for (const auto& part : parts_)
      if (!part->takes_normed_input()) return false;
    return true;
  }
  bool takes_llamacpp_route() const override {  // the engine chose the path from the whole head
    for (const auto& part : parts_)
      if (!part->takes_llamacpp_route()) return false;
    return true;
  }
  uint64_t device_bytes() const override {
    uint64_t n = 0;
    for (const auto& part : parts_) n += part->device_bytes();
    return n;
  }

  std::string name() const override {
    return "cuda x" + std::to_string(gpus_) + " GPU(s), " + std::to_string(parts_.size()) + " shard(s)";
  }

  // The options whose rounds run on the shards' GPUs (sample_on_shards), as the one-GPU backend
  // takes them: top-k, and greedy with a bias or a mask, leave sampling to the engine, which then
  // gathers the logits.
  bool samples(const SamplingOptions& o) const override {
    return o.temperature > 0 && o.top_k == 0 && head_.vocab <= sample::kMaxSampledVocab;
  }

  void forward(const float* hidden, int tokens, const ForwardRequest& req, ForwardOutput& out) override {
    // Checked here too: the shared input holds kMaxTokens tokens and is filled before any shard runs.
    if (tokens < 1 || tokens > kMaxTokens)
      throw Error("the multi-GPU cuda head runs 1 to " + std::to_string(kMaxTokens) + " tokens per pass, got " +
                  std::to_string(tokens));
    const int n = int(parts_.size());
    const int64_t V = head_.vocab;
    ForwardRequest shard_req = req;
    shard_req.logprobs = false;  // phase two below, against the merged maximum
    shard_req.sampling = nullptr;  // the rounds below, over every shard
    shard_req.sample_mask = nullptr;
    if (req.sampling != nullptr && !samples(*req.sampling))
      throw Error("the multi-GPU cuda head was asked to sample options it does not sample on its shards");
    if (shared_) {
      const size_t values = size_t(tokens) * size_t(head_.hidden);
      std::atomic<int> copied{0};
      std::atomic<size_t> first_bad{values};
      pool_.run([&](int s) {
        const size_t lo = values * size_t(s) / size_t(n), hi = values * size_t(s + 1) / size_t(n);
        const size_t bad = lo + copy_checking_finite(shared_input_.host() + lo, hidden + lo, hi - lo);
        if (bad < hi) {
          size_t seen = first_bad.load(std::memory_order_relaxed);
          while (bad < seen && !first_bad.compare_exchange_weak(seen, bad, std::memory_order_acq_rel)) {}
        }
        // No shard may launch before every share is in place and checked. Copying cannot throw
        // and every shard runs on its own thread, so all of them arrive.
        copied.fetch_add(1, std::memory_order_acq_rel);
        while (copied.load(std::memory_order_acquire) < n) cpu_relax();
        const size_t first = first_bad.load(std::memory_order_acquire);
        if (first < values) {  // nobody launches; the shard holding the first bad value says so
          if (first >= lo && first < hi) throw non_finite_hidden_error(hidden, first, head_.hidden);
          return;
        }
        parts_[size_t(s)]->forward(shared_input_.host(), tokens, shard_req, outs_[size_t(s)]);
      });
    } else {
      pool_.run([&](int s) { parts_[size_t(s)]->forward(hidden, tokens, shard_req, outs_[size_t(s)]); });
    }
    const auto t1 = std::chrono::steady_clock::now();

    out.summaries.assign(size_t(tokens), {});
    for (int s = 0; s < n; ++s)
      merge_shard_summaries(out.summaries, outs_[size_t(s)].summaries, bounds_[size_t(s)], req.top_k);
    const auto t2 = std::chrono::steady_clock::now();

    out.sum_exp.assign(req.logprobs ? size_t(tokens) : 0, 0.0);
    auto t3 = t2;
    if (req.logprobs) {
      std::vector<float> global_max(static_cast<size_t>(tokens));
      for (int t = 0; t < tokens; ++t) global_max[size_t(t)] = out.summaries[size_t(t)].max;
      pool_.run([&](int s) {
        const int64_t chunks = sum_exp_chunks(bounds_[size_t(s) + 1] - bounds_[size_t(s)]);
        sums_[size_t(s)].resize(size_t(tokens) * size_t(chunks));
        chunk_sums_against(*parts_[size_t(s)], global_max.data(), tokens, sums_[size_t(s)].data());
      });
      for (int t = 0; t < tokens; ++t) {
        double total = 0.0;  // chunk order = id order: shards are contiguous and chunk-aligned
        for (int s = 0; s < n; ++s) {
          const size_t chunks = size_t(sum_exp_chunks(bounds_[size_t(s) + 1] - bounds_[size_t(s)]));
          for (size_t c = 0; c < chunks; ++c) total += sums_[size_t(s)][size_t(t) * chunks + c];
        }
        out.sum_exp[size_t(t)] = total;
      }
      t3 = std::chrono::steady_clock::now();
    }

    out.sampled.clear();
    std::vector<StageTime> sampling_times;
    if (req.sampling != nullptr)
      out.sampled = sample_on_shards(*req.sampling, req.sample_position, req.sample_mask, req.sample_mask_stride,
                                     out.summaries, sampling_times);
    const auto t_sampled = std::chrono::steady_clock::now();

    out.logits.clear();
    out.stages = {};
    if (req.want_logits || req.want_stages)
      for (int s = 0; s < n; ++s)
        place_shard_outputs(out, outs_[size_t(s)], req, tokens, V, bounds_[size_t(s)],
                            bounds_[size_t(s) + 1] - bounds_[size_t(s)]);
    const auto t4 = std::chrono::steady_clock::now();

    book_slowest_shard_times(out.times, outs_);
    out.times.push_back({"exchange: merge of per-shard summaries", ms_between(t1, t2)});
    if (req.logprobs) out.times.push_back({"exchange: logprob chunk sums against the global max", ms_between(t2, t3)});
    if (req.sampling != nullptr) {
      out.times.push_back({"exchange: sampling rounds over the shards", ms_between(t3, t_sampled)});
      out.times.insert(out.times.end(), sampling_times.begin(), sampling_times.end());
    }
    if (req.want_logits || req.want_stages) out.times.push_back({"gather of logits (asked for)", ms_between(t_sampled, t4)});
  }

 private:
  // The shard owning id `id`.
  size_t shard_of(int64_t id) const {
    return size_t(std::upper_bound(bounds_.begin(), bounds_.end(), id) - bounds_.begin() - 1);
  }

  // numerics.md §9's rounds with each shard's half on its GPU (see the top of this file). Every
  // sum is of integer weights computed by the functions the host sampler uses, and shards begin
  // on 512-id chunk bounds, so the chunk masses, the total, the bucket masses and the boundary
  // are the host sampler's on the whole row, and so is the token. A token whose maximum is not
  // finite, or whose boundary bucket holds more ids than a shard keeps, is drawn from its logits
  // (fetched from every shard) by the host sampler itself.
  std::vector<int32_t> sample_on_shards(const SamplingOptions& o, int64_t position, const uint32_t* mask,
                                        size_t mask_stride, const std::vector<select::TokenSummary>& summaries,
                                        std::vector<StageTime>& times) {
    auto lap = [&, last = std::chrono::steady_clock::now()](const char* label) mutable {
      const auto now = std::chrono::steady_clock::now();
      times.push_back({label, ms_between(last, now)});
      last = now;
    };
    const int n = int(parts_.size()), tokens = int(summaries.size());
    const int64_t V = head_.vocab, chunks = (V + sample::kChunk - 1) / sample::kChunk;
    const bool top_p = o.top_p < 1;
    const double temperature = double(o.temperature);
    // Round 1: the largest z. Without a bias or a mask it is the merged argmax summary's maximum
    // scaled (z is monotone in the logit); with them every shard's max kernel runs on its own ids.
    const bool max_round = !o.logit_bias.empty() || mask != nullptr;
    std::vector<float> max_logit(size_t(tokens), 0.0f);
    std::vector<uint64_t> max_key(size_t(tokens), 0);  // round 1's ordered keys (0: no id takes part)
    std::vector<double> max_z(size_t(tokens), 0.0);
    std::vector<uint8_t> on_host(size_t(tokens), 0);
    if (!max_round) {
      for (int t = 0; t < tokens; ++t) {
        if (std::isfinite(summaries[size_t(t)].max)) max_logit[size_t(t)] = summaries[size_t(t)].max;
        else on_host[size_t(t)] = 1;
        max_z[size_t(t)] = sample::scaled_logit(max_logit[size_t(t)], 0.0f, temperature);
      }
    } else {
      std::vector<ShardSampleInputs> in(static_cast<size_t>(n));
      std::vector<std::vector<uint64_t>> keys(static_cast<size_t>(n), std::vector<uint64_t>(size_t(tokens), 0));
      for (int s = 0; s < n; ++s) {
        const int64_t begin = bounds_[size_t(s)], end = bounds_[size_t(s) + 1];
        for (const auto& [id, value] : o.logit_bias)
          if (id >= begin && id < end) in[size_t(s)].bias.push_back({int32_t(id - begin), value});
        // Shards begin on 512-id bounds: their mask words start at begin / 32.
        in[size_t(s)].mask = mask == nullptr ? nullptr : mask + begin / 32;
        in[size_t(s)].mask_stride = mask_stride;
      }
      pool_.run([&](int s) { sample_round_max(*parts_[size_t(s)], o, in[size_t(s)], tokens, keys[size_t(s)].data()); });
      for (int t = 0; t < tokens; ++t) {
        for (const auto& k : keys) max_key[size_t(t)] = std::max(max_key[size_t(t)], k[size_t(t)]);
        if (max_key[size_t(t)] == 0) on_host[size_t(t)] = 1;  // nothing allowed: the host sampler says so
        max_z[size_t(t)] = sample::z_of_descending_key(~max_key[size_t(t)]);  // the kernels' key is ~descending_key
      }
      lap("sampling: max round on the shards (bias or mask)");
    }
    std::vector<ShardWeights> weights(static_cast<size_t>(n));
    pool_.run([&](int s) {
      sample_round_weights(*parts_[size_t(s)], o, max_logit.data(), max_round ? max_key.data() : nullptr, tokens,
                           weights[size_t(s)]);
    });
    lap("sampling: weights round on the shards");

    // Per token: the chunk masses in global chunk order (a shard's chunk c is chunk bounds[s] / 512 + c).
    std::vector<std::vector<uint64_t>> mass(size_t(tokens), std::vector<uint64_t>(size_t(chunks), 0));
    auto place = [&](int t, auto chunk_masses_of) {
      for (int s = 0; s < n; ++s) {
        const int64_t first = bounds_[size_t(s)] / sample::kChunk, count = weights[size_t(s)].chunks;
        const uint64_t* from = chunk_masses_of(s) + size_t(t) * size_t(count);
        std::copy(from, from + count, mass[size_t(t)].begin() + first);
      }
    };
    std::vector<uint64_t> total(size_t(tokens), 0);
    for (int t = 0; t < tokens; ++t) {
      for (const ShardWeights& w : weights) total[size_t(t)] += w.total[size_t(t)];
      if (total[size_t(t)] == 0) on_host[size_t(t)] = 1;
      if (!top_p) place(t, [&](int s) { return weights[size_t(s)].chunk_mass.data(); });
    }
    std::vector<int32_t> bucket(size_t(tokens), 0);
    std::vector<sample::Boundary> threshold(static_cast<size_t>(tokens));
    if (top_p) {
      // The bucket where the mass in rank order reaches P, as the host sampler's merge finds it.
      std::vector<uint64_t> before(size_t(tokens), 0), target(size_t(tokens), 0);
      for (int t = 0; t < tokens; ++t) {
        if (on_host[size_t(t)]) continue;
        std::vector<uint64_t> hist(size_t(sample::kRankBuckets), 0);
        for (const ShardWeights& w : weights)
          for (size_t b = 0; b < hist.size(); ++b) hist[b] += w.bucket_mass[size_t(t) * hist.size() + b];
        target[size_t(t)] = sample::top_p_target(total[size_t(t)], double(o.top_p));
        int b = 0;
        while (before[size_t(t)] + hist[size_t(b)] < target[size_t(t)]) before[size_t(t)] += hist[size_t(b++)];
        bucket[size_t(t)] = b;
      }
      std::vector<ShardBoundary> edge(static_cast<size_t>(n));
      lap("sampling: merge of the weights");
      pool_.run([&](int s) { sample_round_boundary(*parts_[size_t(s)], bucket.data(), tokens, edge[size_t(s)]); });
      lap("sampling: boundary round on the shards");
      for (int t = 0; t < tokens; ++t) {
        if (on_host[size_t(t)]) continue;
        for (int s = 0; s < n; ++s)
          if (edge[size_t(s)].overflow[size_t(t)]) on_host[size_t(t)] = 1;
        if (on_host[size_t(t)]) continue;
        place(t, [&](int s) { return edge[size_t(s)].chunk_mass.data(); });
        // Fine bins are monotone in max - z like the buckets, so the boundary lies in the first fine
        // bin where the mass reaches the target: ids of lower bins are in, of higher bins out, and
        // only that bin's ids are ordered (select_boundary on all of them finds the same id).
        std::vector<uint64_t> fine(size_t(kShardFineBins), 0);
        for (const ShardBoundary& e : edge)
          for (size_t f = 0; f < fine.size(); ++f) fine[f] += e.fine_mass[size_t(t) * fine.size() + f];
        uint64_t below = before[size_t(t)], reached = 0;  // the mass ranking before the crossing bin
        int crossing = 0;
        while (below + fine[size_t(crossing)] < target[size_t(t)]) below += fine[size_t(crossing++)];
        std::vector<sample::Boundary> few;
        for (int s = 0; s < n; ++s)
          for (const ShardCandidate& c : edge[size_t(s)].candidates[size_t(t)]) {
            const int64_t id = bounds_[size_t(s)] + c.id;
            if (c.fine < crossing) mass[size_t(t)][size_t(id / sample::kChunk)] += c.weight;
            else if (c.fine == crossing) few.push_back(sample::Boundary{c.key, int32_t(id), c.weight});
          }
        const size_t last = sample::select_boundary(few, below, target[size_t(t)], reached);
        for (size_t j = 0; j <= last; ++j) mass[size_t(t)][size_t(few[j].id / sample::kChunk)] += few[j].w;
        total[size_t(t)] = reached;
        threshold[size_t(t)] = few[last];
      }
    }

    // The draws: each token's target, the chunk holding it, that chunk's logits fetched from its
    // owner (one batch per shard), and its ids weighed as the host sampler weighs them, in id order.
    lap(top_p ? "sampling: the boundaries selected" : "sampling: merge of the weights");
    std::vector<int32_t> sampled(size_t(tokens), -1);
    std::vector<uint64_t> rest(size_t(tokens), 0);
    std::vector<int64_t> chunk(size_t(tokens), -1);
    std::vector<std::vector<LogitRun>> runs(static_cast<size_t>(n));
    std::vector<std::vector<int>> run_token(static_cast<size_t>(n));
    for (int t = 0; t < tokens; ++t) {
      if (on_host[size_t(t)]) continue;
      uint64_t r = sample::draw_target(sample::random128(o.seed, position + t, sample::Stream::draw), total[size_t(t)]);
      int64_t c = 0;
      while (c < chunks && r >= mass[size_t(t)][size_t(c)]) r -= mass[size_t(t)][size_t(c++)];
      if (c == chunks) throw Error("internal: the draw's target is not below the shards' total weight");
      rest[size_t(t)] = r;
      chunk[size_t(t)] = c;
      const int64_t first = c * sample::kChunk;
      const size_t s = shard_of(first);
      runs[s].push_back(LogitRun{t, first - bounds_[s], std::min(V, first + sample::kChunk) - first});
      run_token[s].push_back(t);
    }
    std::vector<std::vector<float>> fetched(static_cast<size_t>(n));
    pool_.run([&](int s) {
      fetched[size_t(s)].resize(runs[size_t(s)].size() * size_t(sample::kChunk));
      if (!runs[size_t(s)].empty()) fetch_logit_runs(*parts_[size_t(s)], runs[size_t(s)], fetched[size_t(s)].data());
    });
    lap("sampling: the draws' chunks fetched");
    for (int s = 0; s < n; ++s) {
      const float* x = fetched[size_t(s)].data();
      for (size_t j = 0; j < runs[size_t(s)].size(); x += runs[size_t(s)][j].count, ++j) {
        const int t = run_token[size_t(s)][j];
        const int64_t first = chunk[size_t(t)] * sample::kChunk, count = runs[size_t(s)][j].count;
        double z[sample::kChunk];
        uint64_t w[sample::kChunk];
        uint16_t rank[sample::kChunk];
        sample::scaled_logits(x, count, temperature, z);
        for (const auto& [id, value] : o.logit_bias)  // as the host sampler's round 1: bias, then mask
          if (id >= first && id < first + count) z[id - first] = sample::scaled_logit(x[id - first], value, temperature);
        if (mask != nullptr) {
          const uint32_t* row = mask + size_t(t) * mask_stride;
          for (int64_t i = 0; i < count; ++i)
            if (((row[(first + i) >> 5] >> ((first + i) & 31)) & 1u) == 0) z[i] = std::numeric_limits<double>::quiet_NaN();
        }
        sample::row_weights(z, count, max_z[size_t(t)], double(o.min_p), w, top_p ? rank : nullptr);
        uint64_t r = rest[size_t(t)];
        for (int64_t i = 0; i < count && sampled[size_t(t)] < 0; ++i) {
          const sample::Boundary me{sample::descending_key(z[i]), int32_t(first + i), 0};
          const bool member = !top_p || rank[i] < bucket[size_t(t)] ||
                              (rank[i] == bucket[size_t(t)] && !sample::boundary_before(threshold[size_t(t)], me));
          const uint64_t wi = member ? w[i] : 0;
          if (r < wi) sampled[size_t(t)] = int32_t(first + i);
          else r -= wi;
        }
        if (sampled[size_t(t)] < 0) throw Error("internal: the draw's chunk does not hold its target");
      }
    }
    for (int t = 0; t < tokens; ++t)
      if (on_host[size_t(t)])
        sampled[size_t(t)] =
            sample_from_fetched_logits(o, position + t, mask == nullptr ? nullptr : mask + size_t(t) * mask_stride, t);
    lap("sampling: the draws");
    return sampled;
  }

  // The host sampler over every shard's logits of token t, fetched (the rare tokens above).
  int32_t sample_from_fetched_logits(const SamplingOptions& o, int64_t position, const uint32_t* mask, int t) {
    const int n = int(parts_.size());
    std::vector<std::vector<float>> rows(static_cast<size_t>(n));
    std::vector<sample::RangeLogits> ranges(static_cast<size_t>(n));
    for (int s = 0; s < n; ++s) {
      const int64_t begin = bounds_[size_t(s)], end = bounds_[size_t(s) + 1];
      rows[size_t(s)].resize(size_t(end - begin));
      const LogitRun all{t, 0, end - begin};
      fetch_logit_runs(*parts_[size_t(s)], std::span<const LogitRun>(&all, 1), rows[size_t(s)].data());
      ranges[size_t(s)] = {rows[size_t(s)].data(), begin, end};
    }
    return sample::sample_token_in_ranges(ranges, head_.vocab, o, mask, position);
  }

  HeadView head_;
  int gpus_;
  std::vector<int64_t> bounds_;
  MappedHostArray<float> shared_input_;  // before parts_: they read it until they go
  std::vector<std::unique_ptr<Backend>> parts_;
  std::vector<ForwardOutput> outs_;
  std::vector<std::vector<double>> sums_;
  bool shared_ = false;
  ShardPool pool_;  // last: its threads stop before the parts they call go away
};

MultiGpuBackend& as_multi(Backend& backend) {
  auto* multi = dynamic_cast<MultiGpuBackend*>(&backend);
  if (multi == nullptr) throw Error("not the multi-GPU backend: " + backend.name());
  return *multi;
}

}  // namespace

void set_tuning_of_shards(Backend& backend, const Tuning& tuning) {
  for (const auto& part : as_multi(backend).parts()) set_tuning(*part, tuning);
}

std::vector<CallInfo> last_calls_of_shards(Backend& backend) {
  std::vector<CallInfo> calls;
  for (const auto& part : as_multi(backend).parts()) calls.push_back(last_call(*part));
  return calls;
}

void set_shared_input(Backend& backend, bool shared) { as_multi(backend).set_shared_input(shared); }

}  // namespace cuda

std::unique_ptr<Backend> make_multi_gpu_backend(const HeadView& head, int shards, int gpus) {
  return std::make_unique<cuda::MultiGpuBackend>(head, shards, gpus);
}

}  // namespace lmhead
