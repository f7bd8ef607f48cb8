// The fast CPU backend: one pass over the head's weights for up to 16 tokens, split over a
// persistent thread pool in contiguous row ranges, with the scale, the soft cap and the token
// summaries computed per tile while the logits are still in cache. Every byte it produces equals
// the scalar backend's: the kernels reproduce the reference dots exactly, the epilogue calls the
// same per-logit functions, and summaries merge exactly whatever the split.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "backend/backend.hpp"
#include "backend/final_norm.hpp"
#include "backend/head_math.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/epilogue.hpp"
#include "cpu/kernels.hpp"
#include "cpu/read_stream.hpp"
#include "cpu/thread_pool.hpp"
#include "lmhead/error.hpp"
#include "quant/activation.hpp"

namespace lmhead {
namespace cpu {
namespace {

// Rows per tile: the kernel writes a tile's raw logits for all tokens (16 x 64 floats = 4 KB at
// most), the epilogue consumes them from L1 right away.
constexpr int64_t kTileRows = 64;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<uint8_t[], FreeDeleter>;

AlignedBytes aligned_bytes(size_t n, size_t alignment = 64) {
  const size_t rounded = (n + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded ? rounded : alignment);
  if (p == nullptr) throw Error("cpu backend: out of memory allocating " + std::to_string(n) + " B");
  return AlignedBytes(static_cast<uint8_t*>(p));
}

class StageClock {
 public:
  explicit StageClock(std::vector<StageTime>& times) : times_(times) {}
  void lap(const char* label) {
    const auto now = std::chrono::steady_clock::now();
    times_.push_back({label, std::chrono::duration<double, std::milli>(now - last_).count()});
    last_ = now;
  }
 private:
  std::vector<StageTime>& times_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// What each worker keeps between calls: the kernel's scratch, the raw tile, and one summary per
// token for its own row range.
struct Worker {
  AlignedBytes kernel_scratch;
  AlignedBytes raw_tile;     // [tokens][kTileRows] f32
  AlignedBytes capped_tile;  // [kTileRows] f32, when the logits are not kept
  std::vector<select::TokenSummary> summaries;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(const HeadView& head, int threads, Isa isa)
      : head_(head), pool_(threads), isa_(isa), kernels_(kernels_for(head.type, isa)),
        epilogue_isa_(isa == Isa::scalar || !cpu_supports(Isa::avx2) ? Isa::scalar : Isa::avx2) {
    if (kernels_.q8 == nullptr || kernels_.f32 == nullptr)
      throw Error("cpu backend: head type " + std::string(tensor_type_name(head.type)) + " has no kernel");
    workers_.resize(pool_.size());
    for (Worker& w : workers_) {
      w.kernel_scratch = aligned_bytes(kernel_scratch_bytes(head.hidden));
      w.raw_tile = aligned_bytes(size_t(tile_tokens_) * kTileRows * sizeof(float));
      w.capped_tile = aligned_bytes(kTileRows * sizeof(float));
    }
  }

  std::string name() const override {
    return std::string("cpu-") + isa_name(kernels_.q8_isa) + " (" + std::to_string(pool_.size()) + " threads)";
  }

  void forward(const float* hidden, int tokens, const ForwardRequest& req, ForwardOutput& out) override;
  bool takes_normed_input() const override { return true; }
  bool takes_llamacpp_route() const override { return true; }

 private:
  void run_rows(int worker, const TokenActs& acts, const TileKernel kernel, const ForwardRequest& req,
                ForwardOutput& out, float* kept_logits);

  HeadView head_;
  ThreadPool pool_;
  Isa isa_;
  KernelSet kernels_;
  Isa epilogue_isa_;
  std::vector<Worker> workers_;
  int tile_tokens_ = 16;  // tokens the raw tiles have room for
  int grouped_ = 0;       // this call's tokens that take grouped_kernel_
  TileKernel grouped_kernel_ = nullptr;
  AlignedBytes acts_;
  size_t acts_capacity_ = 0;
  std::vector<float> normed_;
  std::vector<float> logits_for_sums_;  // the capped logits when logprobs are asked without them
};

void CpuBackend::forward(const float* hidden, int tokens, const ForwardRequest& req, ForwardOutput& out) {
  if (tokens <= 0) throw Error("cpu backend: forward needs at least one token");
  const int64_t H = head_.hidden, V = head_.vocab;
  out.times.clear();
  StageClock clock(out.times);

  normed_.resize(size_t(tokens) * H);
  if (req.input_normed)
    std::copy(hidden, hidden + size_t(tokens) * H, normed_.begin());
  else
    for (int t = 0; t < tokens; ++t)
      final_norm(head_, hidden + size_t(t) * H, normed_.data() + size_t(t) * H);
  clock.lap("norm");

  TokenActs acts;
  acts.tokens = tokens;
  const bool q8 = req.activations == ActivationRoute::q8;
  const bool llamacpp = req.route == Route::llamacpp;
  using quant::LlamaCppPath;
  // llama.cpp's vec_dot-ordered paths run the default route's kernels; the others their own.
  const bool own_path = llamacpp && req.llamacpp_path != LlamaCppPath::vec_dot &&
                        req.llamacpp_path != LlamaCppPath::sgemm_q8_0;
  const TileKernel kernel = own_path ? llamacpp_kernel(req.llamacpp_path, head_.type, isa_) : q8 ? kernels_.q8 : kernels_.f32;
  grouped_ = 0;
  if (own_path && req.llamacpp_path == LlamaCppPath::repack_q4_K_8x8) {
    grouped_ = tokens - tokens % 4;
    grouped_kernel_ = llamacpp_grouped_kernel(req.llamacpp_path, head_.type, isa_);
  }
  if (kernel == nullptr)
    throw Error("cpu backend: no kernel for llama.cpp's " + std::string(quant::path_name(req.llamacpp_path)) +
                " path on " + std::string(tensor_type_name(head_.type)) + " heads");
  if (q8) {
    const auto fmt = llamacpp ? quant::llamacpp_activation_format(req.llamacpp_path, head_.type)
                              : quant::activation_format(head_.type, req.activations);
    acts.stride = quant::activation_bytes(fmt, H);
    if (acts.stride * tokens > acts_capacity_) {
      acts_capacity_ = acts.stride * tokens;
      acts_ = aligned_bytes(acts_capacity_);
    }
    // A pass holds whole groups of 4 of the call's tokens (passes are 16 tokens but the last), so the
    // repacked path's per-group quantization is decided by the pass's own count.
    for (int t = 0; t < tokens; ++t) {
      if (llamacpp)
        quant::quantize_llamacpp_activations(req.llamacpp_path, head_.type, normed_.data() + size_t(t) * H, H, t,
                                             tokens, acts_.get() + t * acts.stride);
      else
        quant::quantize_activations(fmt, normed_.data() + size_t(t) * H, H, acts_.get() + t * acts.stride);
    }
    acts.data = acts_.get();
  } else {
    acts.stride = size_t(H) * sizeof(float);
    acts.data = reinterpret_cast<const uint8_t*>(normed_.data());
  }
  clock.lap("quantize");

  const bool has_cap = head_.softcap != 0.0f;
  const size_t tv = size_t(tokens) * V;
  const bool keep_logits = req.want_logits || req.want_stages;
  float* kept = nullptr;
  out.logits.clear();
  if (keep_logits) {
    out.logits.resize(tv);
    kept = out.logits.data();
  } else if (req.logprobs) {
    logits_for_sums_.resize(tv);
    kept = logits_for_sums_.data();
  }
  out.stages = Stages{};
  if (req.want_stages) {
    out.stages.raw.resize(tv);
    if (has_cap) {
      out.stages.scaled.resize(tv);
      out.stages.div.resize(tv);
      out.stages.tanh.resize(tv);
    }
  }
  if (tokens > tile_tokens_) {
    tile_tokens_ = tokens;
    for (Worker& w : workers_) w.raw_tile = aligned_bytes(size_t(tokens) * kTileRows * sizeof(float));
  }
  for (Worker& w : workers_) w.summaries.assign(tokens, {});

  pool_.run([&](int worker) { run_rows(worker, acts, kernel, req, out, kept); });
  clock.lap("head (fused: scale, soft cap, select)");

  out.summaries = std::move(workers_[0].summaries);
  for (size_t w = 1; w < workers_.size(); ++w)
    for (int t = 0; t < tokens; ++t) select::merge(out.summaries[t], workers_[w].summaries[t], req.top_k);

  out.sum_exp.assign(req.logprobs ? tokens : 0, 0.0);
  if (req.logprobs) {
    // Chunk sums in parallel, added in id order: the same double as select::sum_exp.
    const int64_t chunks = (V + select::kSumExpChunk - 1) / select::kSumExpChunk;
    std::vector<double> partial(size_t(tokens) * chunks);
    pool_.run([&](int worker) {
      const Range r = split_range(chunks * tokens, pool_.size(), worker);
      for (int64_t c = r.begin; c < r.end; ++c) {
        const int64_t t = c / chunks, begin = (c % chunks) * select::kSumExpChunk;
        partial[c] = select::sum_exp_chunk(kept + t * V, begin, std::min(V, begin + select::kSumExpChunk),
                                           out.summaries[t].max);
      }
    });
    for (int t = 0; t < tokens; ++t) {
      double total = 0.0;
      for (int64_t c = 0; c < chunks; ++c) total += partial[size_t(t) * chunks + c];
      out.sum_exp[t] = total;
    }
  }
  clock.lap("select");

  if (req.want_stages) {
    out.stages.normed = normed_;
    if (!has_cap) out.stages.scaled = out.logits;
    out.stages.capped = out.logits;
  }
  if (!req.want_logits && !req.want_stages) out.logits.clear();
}

void CpuBackend::run_rows(int worker, const TokenActs& acts, const TileKernel kernel, const ForwardRequest& req,
                          ForwardOutput& out, float* kept) {
  Worker& w = workers_[worker];
  const int64_t V = head_.vocab;
  const Range rows = split_range(V, pool_.size(), worker);
  const CapParams cap = cap_params(head_, req.softcap);
  float* raw = reinterpret_cast<float*>(w.raw_tile.get());
  float* capped_tile = reinterpret_cast<float*>(w.capped_tile.get());
  Stages& st = out.stages;

  // With one kernel call per tile (one slice of tokens), each call after the worker's first sees
  // the scratch its predecessor left for the same activations.
  const bool one_slice = grouped_ == 0 && acts.tokens <= kMaxKernelTokens;
  bool prepared = false;
  for (int64_t first = rows.begin; first < rows.end; first += kTileRows) {
    const int64_t n = std::min(kTileRows, rows.end - first);
    HeadTile tile{head_.weights + first * head_.row_bytes, head_.row_bytes, n, head_.hidden};
    // Tokens [0, grouped_) take grouped_kernel_ (the repacked Q4_K path's gemm), the rest `kernel`.
    for (int t0 = 0; t0 < acts.tokens;) {
      const bool grouped = t0 < grouped_;
      TokenActs slice = acts;
      slice.data = acts.data + size_t(t0) * acts.stride;
      slice.tokens = std::min(kMaxKernelTokens, (grouped ? grouped_ : acts.tokens) - t0);
      slice.scratch_prepared = prepared;
      (grouped ? grouped_kernel_ : kernel)(tile, slice, RawOut{raw + size_t(t0) * kTileRows, size_t(kTileRows)},
                                           w.kernel_scratch.get());
      prepared = one_slice;
      t0 += slice.tokens;
    }

    // llama.cpp's bias node follows the matmul: one f32 add per logit, before scale and cap.
    if (head_.head_bias)
      for (int t = 0; t < acts.tokens; ++t)
        for (int64_t i = 0; i < n; ++i) raw[size_t(t) * kTileRows + i] += head_.head_bias[first + i];

    for (int t = 0; t < acts.tokens; ++t) {
      const float* tile_raw = raw + size_t(t) * kTileRows;
      const size_t at = size_t(t) * V + first;
      float* capped = kept ? kept + at : capped_tile;
      if (!st.raw.empty()) {
        std::memcpy(st.raw.data() + at, tile_raw, n * sizeof(float));
        if (!st.div.empty())
          write_stages(tile_raw, n, cap, st.scaled.data() + at, st.div.data() + at, st.tanh.data() + at);
      }
      cap_tile(tile_raw, n, cap, capped, epilogue_isa_);
      fold_tile(capped, first, n, req.top_k, w.summaries[t]);
    }
  }
}

}  // namespace
}  // namespace cpu

std::unique_ptr<Backend> make_cpu_backend(const HeadView& head, int threads) {
  return std::make_unique<cpu::CpuBackend>(head, threads, cpu::detect_isa());
}

std::unique_ptr<Backend> cpu::make_cpu_backend_limited(const HeadView& head, int threads, Isa limit) {
  return std::make_unique<CpuBackend>(head, threads, limit);
}

double measure_cpu_read_ceiling_gbps(uint64_t bytes, int threads) {
  using namespace cpu;
  // In huge pages where the kernel gives them (transparent huge pages in "madvise" mode): a mapped
  // head file's page cache comes in large folios, and a stream over 4 KiB pages is measurably
  // slower (docs/performance.md, "The machine"), which would make the ceiling no ceiling.
  constexpr uint64_t kHugePage = uint64_t(2) << 20;
  bytes = (std::max<uint64_t>(bytes, 1 << 20) + kHugePage - 1) / kHugePage * kHugePage;
  ThreadPool pool(threads);
  AlignedBytes buffer = aligned_bytes(bytes, kHugePage);
  ::madvise(buffer.get(), bytes, MADV_HUGEPAGE);  // advice only: without it the stream runs as before
  const int parts = pool.size();
  // Each thread first touches the part it later reads, so its pages are local to it.
  pool.run([&](int w) {
    const Range r = split_range(int64_t(bytes), parts, w, 4096);
    std::memset(buffer.get() + r.begin, 1, size_t(r.end - r.begin));
  });
  const bool simd = cpu_supports(Isa::avx2);
  std::vector<uint64_t> sums(parts);
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    pool.run([&](int w) {
      const Range r = split_range(int64_t(bytes), parts, w, 4096);
      const uint8_t* p = buffer.get() + r.begin;
      sums[w] = simd ? avx2::read_stream(p, uint64_t(r.end - r.begin)) : read_stream_scalar(p, uint64_t(r.end - r.begin));
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Every 8-byte word holds 0x0101010101010101: the sum proves every word was read.
    uint64_t total = 0;
    for (uint64_t v : sums) total += v;
    if (total != (bytes / 8) * 0x0101010101010101ull)
      throw Error("read ceiling: the stream's sum is wrong, the measurement is void");
    best = std::max(best, double(bytes) / s / 1e9);
  }
  return best;
}

namespace cpu {
uint64_t read_stream_scalar(const uint8_t* data, uint64_t bytes) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i + 8 <= bytes; i += 8) {
    uint64_t word;
    std::memcpy(&word, data + i, 8);
    sum += word;
  }
  return sum;
}
}  // namespace cpu

}  // namespace lmhead
