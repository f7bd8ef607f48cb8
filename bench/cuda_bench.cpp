// The CUDA backend at the Muse shape (Q5_K head 202,048 x 6,656, 924,571,648 B), synthesized in
// memory with random valid blocks: tuning sweep, per-T figures against a read ceiling measured in
// the same run, the other head types at T = 1, and a table last. Built by bench/gpu.sh.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/sharding.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/multi_gpu.hpp"
#include "quant/blocks.hpp"
#include "synth/splitmix64.hpp"

using namespace lmhead;

namespace {

constexpr int64_t kVocab = 202048, kHidden = 6656;

struct Head {
  std::vector<uint8_t> weights;
  std::vector<float> gamma;
  HeadView view;
};

// The blocks are random bytes with finite scales d = d_scale * (0.001 .. 0.021) (dmin half of it).
// At d_scale = 1 the raw logits reach hundreds, so the capped logits saturate at +-cap and ids tie
// at the maximum (the finalize's tie scan then costs up to ~25 us per token, measured apart); the
// default scale keeps the capped logits inside the cap, like a trained head's.
constexpr float kUnsaturatedScale = 1.0f / 32;

Head make_head(TensorType type, uint64_t seed, float d_scale = kUnsaturatedScale) {
  const TensorTypeInfo* info = tensor_type_info(type);
  const uint64_t row_bytes = uint64_t(kHidden / info->block_elems * info->block_bytes);
  Head h;
  h.weights.resize(size_t(kVocab) * row_bytes);
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      synth::SplitMix64 rng{seed * 1000003 + w};
      for (int64_t r = w; r < kVocab; r += threads) {
        uint8_t* row = h.weights.data() + size_t(r) * row_bytes;
        rng.fill_bytes(row, row_bytes / 8 * 8);
        // A tail of fewer than eight bytes takes one draw per byte here (Q6_K rows end 4 bytes past a word).
        for (uint64_t i = row_bytes / 8 * 8; i < row_bytes; ++i) row[i] = uint8_t(rng.next());
        const int64_t nb = kHidden / info->block_elems;
        for (int64_t b = 0; b < nb; ++b) {
          uint8_t* blk = row + size_t(b) * info->block_bytes;
          const float u = rng.unit24();
          const uint16_t d = quant::f32_to_f16(d_scale * (0.001f + 0.02f * u));
          const uint16_t dmin = quant::f32_to_f16(d_scale * (0.0005f + 0.01f * u));
          switch (type) {
            case TensorType::Q4_K:
            case TensorType::Q5_K: std::memcpy(blk, &d, 2); std::memcpy(blk + 2, &dmin, 2); break;
            case TensorType::Q6_K: std::memcpy(blk + 208, &d, 2); break;
            case TensorType::Q8_0: std::memcpy(blk, &d, 2); break;
            default: break;
          }
        }
      }
    });
  for (auto& t : pool) t.join();
  h.gamma.resize(kHidden);
  synth::SplitMix64 gamma_rng{seed};
  for (auto& g : h.gamma) g = 0.5f + gamma_rng.unit24();
  h.view.type = type;
  h.view.weights = h.weights.data();
  h.view.vocab = kVocab;
  h.view.hidden = kHidden;
  h.view.row_bytes = row_bytes;
  h.view.gamma = h.gamma.data();
  h.view.eps = 1e-5f;
  h.view.logit_scale = 0.196116f;
  h.view.softcap = 20.0f;
  return h;
}

std::vector<float> make_hidden(int T, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(size_t(T) * kHidden);
  for (auto& v : x) v = n(rng);
  return x;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Timing {
  double wall_ms = 0;   // median of forward() wall time (what a caller sees)
  double gpu_ms = 0;    // median of the graph's event time (first to last event)
  double head_ms = 0;   // median of the head stage (when stage events are on)
  std::vector<StageTime> stages;
};

// Wall time: the calls a caller makes (no stage times asked for: an argmax-only call then waits on
// the head kernel's done flag). GPU and head time: as many calls again with stage times asked for
// (event nodes between the stages when the tuning's stage_events is on).
Timing time_forward(Backend& b, int T, int runs, const ForwardRequest& request) {
  const std::vector<float> hidden = make_hidden(T, 77 + T);
  ForwardOutput out;
  ForwardRequest timed = request;
  timed.want_stage_times = true;
  for (int i = 0; i < 5; ++i) {
    b.forward(hidden.data(), T, request, out);
    b.forward(hidden.data(), T, timed, out);
  }
  std::vector<double> wall, gpu, head;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    b.forward(hidden.data(), T, request, out);
    const auto t1 = std::chrono::steady_clock::now();
    wall.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  for (int i = 0; i < runs; ++i) {
    b.forward(hidden.data(), T, timed, out);
    double g = 0, h = -1;
    for (const StageTime& s : out.times) {
      g += s.ms;
      if (s.label.rfind("head", 0) == 0) h = s.ms;
    }
    gpu.push_back(g);
    head.push_back(h);
  }
  Timing t;
  t.wall_ms = median(wall);
  t.gpu_ms = median(gpu);
  t.head_ms = median(head);
  t.stages = out.times;
  return t;
}

}  // namespace

// --profile MODE: six calls of one configuration, for ncu (mma1, mma8, mma16 = the default kernel at
// T = 1, 8, 16; lanes1 = the lanes kernel at T=1; gen1 = the generic kernel; q4kN = a Q4_K head at T=N).
int profile(const std::string& mode) {
  if (mode.rfind("q4k", 0) == 0) {
    Head q4 = make_head(TensorType::Q4_K, 2);
    auto gpu = make_cuda_backend(q4.view, 1);
    const int T = std::stoi(mode.substr(3));
    const std::vector<float> hidden = make_hidden(T, 3);
    ForwardOutput out;
    for (int i = 0; i < 6; ++i) gpu->forward(hidden.data(), T, ForwardRequest{}, out);
    std::printf("profile %s: argmax %d max %g ties %lld\n", mode.c_str(), out.summaries[0].argmax, out.summaries[0].max,
                (long long)out.summaries[0].tie_count);
    return 0;
  }
  Head q5 = make_head(TensorType::Q5_K, 1);
  auto gpu = make_cuda_backend(q5.view, 1);
  if (mode == "gen1") cuda::set_tuning(*gpu, cuda::force_kernel(cuda::HeadKernel::generic));
  if (mode == "lanes1") cuda::set_tuning(*gpu, cuda::force_kernel(cuda::HeadKernel::q5k_lanes));
  const int T = mode == "mma16" ? 16 : mode == "mma8" ? 8 : 1;
  const std::vector<float> hidden = make_hidden(T, 3);
  ForwardRequest req;
  ForwardOutput out;
  for (int i = 0; i < 6; ++i) gpu->forward(hidden.data(), T, req, out);
  std::printf("profile %s: argmax %d\n", mode.c_str(), out.summaries[0].argmax);
  return 0;
}

// --multi: the two-GPU split taken apart (issue 6). Per T, medians of the same calls through
// (a) the whole head on GPU 0, (b) each shard alone on its own GPU, (c) both shards through the
// multi-GPU backend. (b) against (a) is how the shard's own call scales with its rows (kernel
// body against the per-call fixed part); (c) against the slower of (b) is what driving two GPUs at
// once adds. Every backend reports its host phases (copy, launch, wait), (c) per shard. Three
// ways of running: waiting on the stream, on the kernel's done flag, and the flag with the shards
// sharing one input buffer that each shard's thread fills in part (the default).
int multi(int runs) {
  if (cuda::device_count() < 2) {
    std::printf("--multi needs two GPUs, this machine has %d\n", cuda::device_count());
    return 1;
  }
  Head q5 = make_head(TensorType::Q5_K, 1);
  const double bytes = double(q5.view.vocab) * double(q5.view.row_bytes);
  const double ceiling = measure_cuda_read_ceiling_gbps(uint64_t(4) << 30);
  const std::vector<int64_t> b = plan_shards(q5.view.vocab, 2);
  std::printf("multi: Q5_K head %lld rows, %.0f B per pass, shards [0, %lld) and [%lld, %lld); ceiling (GPU 0) %.1f GB/s\n",
              (long long)q5.view.vocab, bytes, (long long)b[1], (long long)b[1], (long long)b[2], ceiling);
  auto one = make_cuda_backend_on_device(q5.view, 0);
  auto s0 = make_cuda_backend_on_device(shard_view(q5.view, b[0], b[1]), 0);
  auto s1 = make_cuda_backend_on_device(shard_view(q5.view, b[1], b[2]), 1);
  auto both = make_multi_gpu_backend(q5.view, 2, 2);
  struct Phases {
    double wall = 0, copy = 0, launch = 0, wait = 0, rest = 0;
    std::string str() const {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%.1f / %.1f / %.1f / %.1f", copy, launch, wait, rest);
      return buf;
    }
  };
  // Medians of the wall time and of each host phase of the calls' CallInfo (one per shard).
  auto time_calls = [&](Backend& be, int T, const std::function<std::vector<cuda::CallInfo>()>& info) {
    const std::vector<float> hidden = make_hidden(T, 77 + T);
    ForwardOutput out;
    ForwardRequest req;
    for (int i = 0; i < 5; ++i) be.forward(hidden.data(), T, req, out);
    std::vector<double> wall;
    std::vector<std::vector<double>> ph(8);
    for (int i = 0; i < runs; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      be.forward(hidden.data(), T, req, out);
      const auto t1 = std::chrono::steady_clock::now();
      wall.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      const std::vector<cuda::CallInfo> calls = info();
      for (size_t k = 0; k < calls.size() && k < 2; ++k) {
        const cuda::CallInfo& c = calls[k];
        ph[4 * k + 0].push_back(c.copy_us);
        ph[4 * k + 1].push_back(c.launch_us);
        ph[4 * k + 2].push_back(c.wait_us);
        ph[4 * k + 3].push_back(c.total_us - c.copy_us - c.launch_us - c.wait_us);
      }
    }
    std::vector<Phases> p(2);
    for (size_t k = 0; k < 2; ++k) {
      p[k].wall = median(wall);
      if (ph[4 * k].empty()) continue;
      p[k].copy = median(ph[4 * k]);
      p[k].launch = median(ph[4 * k + 1]);
      p[k].wait = median(ph[4 * k + 2]);
      p[k].rest = median(ph[4 * k + 3]);
    }
    return p;
  };
  auto single = [](Backend& be) { return [&be] { return std::vector<cuda::CallInfo>{cuda::last_call(be)}; }; };
  struct Mode { const char* what; bool poll, shared; };
  for (const Mode mode : {Mode{"waiting on the stream (cudaStreamSynchronize), each shard copies the whole input", false, false},
                          Mode{"waiting on the head kernel's done flag, each shard copies the whole input", true, false},
                          Mode{"done flag, shards share one input buffer, each copies a share (the defaults)", true, true}}) {
    cuda::Tuning tuning;
    tuning.hooks.poll_done = mode.poll;
    for (Backend* be : {one.get(), s0.get(), s1.get()}) cuda::set_tuning(*be, tuning);
    cuda::set_tuning_of_shards(*both, tuning);
    cuda::set_shared_input(*both, mode.shared);
    std::printf("\n%s\n", mode.what);
    std::printf("| T | ratio 1 GPU | ratio 2 GPUs | 1 GPU us | shard 0 alone us | shard 1 alone us | 2 GPUs us |"
                " 2 GPUs / 1 | slower shard / 1 | 2 GPUs - slower shard us | host phases copy / launch / wait / rest us:"
                " 1 GPU | shard 0 alone | 2 GPUs: shard 0 | 2 GPUs: shard 1 |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int T : {1, 2, 4, 8, 16}) {
      const Phases a = time_calls(*one, T, single(*one))[0];
      const Phases p0 = time_calls(*s0, T, single(*s0))[0];
      const Phases p1 = time_calls(*s1, T, single(*s1))[0];
      const std::vector<Phases> c = time_calls(*both, T, [&] { return cuda::last_calls_of_shards(*both); });
      const double slower = std::max(p0.wall, p1.wall);
      // ratio = head bytes / wall time / one GPU's read ceiling (2 GPUs can exceed 1).
      std::printf("| %d | %.3f | %.3f | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f | %.1f | %s | %s | %s | %s |\n", T,
                  bytes / (a.wall * 1e3) / ceiling, bytes / (c[0].wall * 1e3) / ceiling, a.wall, p0.wall, p1.wall,
                  c[0].wall, c[0].wall / a.wall, slower / a.wall, c[0].wall - slower, a.str().c_str(), p0.str().c_str(),
                  c[0].str().c_str(), c[1].str().c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const bool types_only = argc > 1 && std::string(argv[1]) == "--types";  // only the Q4_K / Q6_K / Q8_0 heads
  std::string why;
  if (!cuda_available(&why)) {
    std::printf("no usable GPU: %s\n", why.c_str());
    return 1;
  }
  if (argc > 2 && std::string(argv[1]) == "--profile") return profile(argv[2]);
  if (argc > 1 && std::string(argv[1]) == "--multi") return multi(argc > 2 ? std::stoi(argv[2]) : 200);
  try {
    const double ceiling = measure_cuda_read_ceiling_gbps(uint64_t(4) << 30);
    std::printf("ceiling: read-only stream of 4 GiB: %.1f GB/s\n", ceiling);
    std::printf("SM clock after the ceiling: %.0f MHz\n", cuda::measure_sm_clock_mhz());
    const int runs = quick ? 20 : 100;

    struct Row { int T; double wall, gpu, gbps, ratio; std::string kernel; };
    std::vector<Row> rows;
    ForwardRequest req;
    cuda::Tuning best;  // the sweep's best configuration (stage events off)
    best.hooks.stage_events = false;
    if (!types_only) {
      Head q5 = make_head(TensorType::Q5_K, 1);
      const double bytes = double(q5.view.vocab) * double(q5.view.row_bytes);
      auto gpu = make_cuda_backend(q5.view, 1);
      std::printf("Q5_K head: %.0f B in the file, %llu B held on the GPU\n", bytes,
                  (unsigned long long)cuda::head_device_bytes(*gpu));

      // Full-shape spot check: the tensor-core kernel and the generic kernel agree byte for byte.
      {
        ForwardRequest lr;
        lr.want_logits = true;
        for (int T : {1, 3, 4, 16}) {
          const std::vector<float> hidden = make_hidden(T, 5 + T);
          ForwardOutput a, b;
          cuda::Tuning t;
          cuda::set_tuning(*gpu, t);
          gpu->forward(hidden.data(), T, lr, a);
          const std::string fast_kernel = cuda::kernel_name(cuda::last_call(*gpu).kernel);
          cuda::set_tuning(*gpu, cuda::force_kernel(cuda::HeadKernel::generic));
          gpu->forward(hidden.data(), T, lr, b);
          size_t diff = 0;
          for (size_t i = 0; i < a.logits.size(); ++i) diff += std::memcmp(&a.logits[i], &b.logits[i], 4) != 0;
          std::printf("check T=%d: %s vs generic capped logits: %zu of %zu differ; argmax %d vs %d (max %g, %lld tied)\n",
                      T, fast_kernel.c_str(), diff, a.logits.size(), a.summaries[0].argmax, b.summaries[0].argmax,
                      a.summaries[0].max, (long long)a.summaries[0].tie_count);
        }
      }

      // Tuning sweep.
      struct Cfg { const char* name; cuda::Tuning t; };
      std::vector<Cfg> cfgs;
      using cuda::HeadKernel;
      // Each configuration: rows tried before the Q5_K table (plan.hpp), stage events on or off.
      auto add = [&](const char* name, bool events, std::vector<cuda::PlanRow> rows) {
        cuda::Tuning t;
        t.rows = std::move(rows);
        t.hooks.stage_events = events;
        cfgs.push_back({name, t});
      };
      // "nN": the tokens-in-N kernel (T > 2) with N warps; "regsWxD": the register stream kernel at
      // T <= 2 with W warps and D item buffers per warp (the plan's T=1 kernel: 16 x 2); "tma16x4":
      // the TMA kernel (16 warps x 4 stages) at T <= 2.
      add("plan events", true, {});
      add("plan pdl", false, {});
      add("staged", false, {{1, 2, HeadKernel::q5k_lanes}, {1, 16, HeadKernel::q5k_mma, 12}});
      add("n8", false, {{3, 16, HeadKernel::q5k_stream_n, 8}});
      add("n16", false, {{3, 16, HeadKernel::q5k_stream_n, 16}});
      // The tokens-in-N kernel in registers (the plan's row before the staged kernel) and staged
      // by bulk copies with 8 or 16 warps (the plan's: 12).
      add("regs n12", false, {{1, 16, HeadKernel::q5k_stream_n, 12}});
      add("tma n8", false, {{1, 16, HeadKernel::q5k_tma_n, 8}});
      add("tma n16", false, {{1, 16, HeadKernel::q5k_tma_n, 16}});
      // The plan of a backend holding both Q5_K stream layouts (EngineOptions::cuda_second_layout):
      // its gain over the default's one copy at T <= 2 (the lanes layout is uploaded by its first call).
      add("two layouts", false, {{1, 1, HeadKernel::q5k_stream, 16}, {2, 2, HeadKernel::q5k_tma, 16}});
      add("regs16x2", false, {{1, 2, HeadKernel::q5k_stream, 16}});
      add("regs12x3", false, {{1, 2, HeadKernel::q5k_stream, 12}});
      add("tma16x4", false, {{1, 2, HeadKernel::q5k_tma, 16}});
      int best_cfg = 0;
      double best_score = 1e30;
      std::printf("\n-- tuning sweep (Q5_K q8 route, nodes cap, argmax; medians of %d calls) --\n", runs);
      for (size_t i = 0; i < cfgs.size(); ++i) {
        try {
          cuda::set_tuning(*gpu, cfgs[i].t);
          double score = 0;
          for (int T : {1, 2, 3, 4, 8, 16}) {
            const Timing tm = time_forward(*gpu, T, runs, req);
            std::printf("%-20s T=%-2d wall %.4f ms  gpu %.4f ms  head %.4f ms  ratio(wall) %.3f\n", cfgs[i].name, T,
                        tm.wall_ms, tm.gpu_ms, tm.head_ms, bytes / (tm.wall_ms * 1e6) / ceiling);
            score += tm.wall_ms;
          }
          std::printf("%-20s SM clock right after: %.0f MHz\n", cfgs[i].name, cuda::measure_sm_clock_mhz());
          if (score < best_score) { best_score = score; best_cfg = int(i); }
        } catch (const std::exception& e) {
          std::printf("%-20s failed: %s\n", cfgs[i].name, e.what());
        }
      }
      {
        cuda::Tuning t = cuda::force_kernel(cuda::HeadKernel::generic);
        t.hooks.stage_events = false;
        cuda::set_tuning(*gpu, t);
        for (int T : {1, 2}) {
          const Timing tm = time_forward(*gpu, T, runs, req);
          std::printf("%-20s T=%-2d wall %.4f ms  gpu %.4f ms  head %.4f ms  ratio(wall) %.3f\n", "generic kernel", T,
                      tm.wall_ms, tm.gpu_ms, tm.head_ms, bytes / (tm.wall_ms * 1e6) / ceiling);
        }
      }
      std::printf("best configuration: %s\n", cfgs[size_t(best_cfg)].name);

      best = cfgs[size_t(best_cfg)].t;

      // Main figures with the best configuration, and its stage split with events on.
      std::printf("\n-- Q5_K head, whole tail with argmax, %s --\n", cfgs[size_t(best_cfg)].name);
      for (int T : {1, 2, 3, 4, 5, 8, 16}) {
        cuda::set_tuning(*gpu, cfgs[size_t(best_cfg)].t);
        const Timing tm = time_forward(*gpu, T, runs, req);
        const double gbps = bytes / (tm.wall_ms * 1e6);
        const std::string kernel = cuda::kernel_name(cuda::last_call(*gpu).kernel);
        rows.push_back({T, tm.wall_ms, tm.gpu_ms, gbps, gbps / ceiling, kernel});
        std::printf("ratio %.3f | T=%-2d | %.4f ms (gpu %.4f ms) | %.0f B | %.1f GB/s | ceiling %.1f GB/s | %s\n",
                    gbps / ceiling, T, tm.wall_ms, tm.gpu_ms, bytes, gbps, ceiling, kernel.c_str());
        cuda::Tuning ev = cfgs[size_t(best_cfg)].t;
        ev.hooks.stage_events = true;
        cuda::set_tuning(*gpu, ev);
        const Timing st = time_forward(*gpu, T, runs, req);
        std::printf("        stages (events on, wall %.4f ms):", st.wall_ms);
        for (const StageTime& s : st.stages) std::printf("  %s %.4f ms;", s.label.c_str(), s.ms);
        std::printf("\n");
      }
      {
        cuda::set_tuning(*gpu, cfgs[size_t(best_cfg)].t);
        ForwardRequest full;
        full.top_k = 40;
        full.logprobs = true;
        const Timing tm = time_forward(*gpu, 1, runs, full);
        std::printf("T=1 with top-40 and logprobs: %.4f ms (ratio %.3f)\n", tm.wall_ms, bytes / (tm.wall_ms * 1e6) / ceiling);
        ForwardRequest fused;
        fused.softcap = SoftcapRoute::fused;
        const Timing tf = time_forward(*gpu, 1, runs, fused);
        std::printf("T=1 fused cap: %.4f ms (ratio %.3f)\n", tf.wall_ms, bytes / (tf.wall_ms * 1e6) / ceiling);
        ForwardRequest f32;
        f32.activations = ActivationRoute::f32;
        for (int T : {1, 4}) {
          const Timing t32 = time_forward(*gpu, T, runs, f32);
          std::printf("T=%d f32 route: %.4f ms (ratio %.3f)\n", T, t32.wall_ms, bytes / (t32.wall_ms * 1e6) / ceiling);
        }
        cuda::set_tuning(*gpu, best);
      }
      // Route tiled (llama.cpp's tiled K-quant order at every T, numerics.md): the tensor-core kernel
      // checked against the generic kernel's tiled bytes, then timed with each warp configuration.
      {
        ForwardRequest tr = req;
        tr.route = Route::llamacpp;
        tr.llamacpp_path = quant::LlamaCppPath::tiled_kquant;
        for (cuda::HeadKernel k : {cuda::HeadKernel::q5k_stream_n_tiled, cuda::HeadKernel::q5k_stream_tiled,
                                   cuda::HeadKernel::q5k_tma_n_tiled, cuda::HeadKernel::q5k_tma_tiled})
          for (int T : {1, 16}) {
            ForwardRequest lr = tr;
            lr.want_logits = true;
            const std::vector<float> hidden = make_hidden(T, 9 + T);
            ForwardOutput a, b;
            cuda::set_tuning(*gpu, cuda::force_kernel(k, 16));  // the lanes layout: uploaded by its first call
            gpu->forward(hidden.data(), T, lr, a);
            const std::string fast_kernel = cuda::kernel_name(cuda::last_call(*gpu).kernel);
            cuda::set_tuning(*gpu, cuda::force_kernel(cuda::HeadKernel::llamacpp_tiled));
            gpu->forward(hidden.data(), T, lr, b);
            size_t diff = 0;
            for (size_t i = 0; i < a.logits.size(); ++i) diff += std::memcmp(&a.logits[i], &b.logits[i], 4) != 0;
            std::printf("check route tiled T=%d: %s vs %s capped logits: %zu of %zu differ\n", T, fast_kernel.c_str(),
                        cuda::kernel_name(cuda::last_call(*gpu).kernel), diff, a.logits.size());
          }
        // K = one sub-block on the lanes layout (both copies held) at 16 warps x 2 buffers, then the
        // sub-blocks layout's kernel at 16 warps; each also staged by bulk copies at 16 and 12 warps.
        const std::pair<cuda::HeadKernel, int> tiled_kernels[] = {
            {cuda::HeadKernel::q5k_stream_tiled, 16}, {cuda::HeadKernel::q5k_tma_tiled, 16},
            {cuda::HeadKernel::q5k_tma_tiled, 12},    {cuda::HeadKernel::q5k_stream_n_tiled, 16},
            {cuda::HeadKernel::q5k_tma_n_tiled, 16},  {cuda::HeadKernel::q5k_tma_n_tiled, 12}};
        for (const auto& [kernel, warps] : tiled_kernels) {
          cuda::Tuning w = cuda::force_kernel(kernel, warps);
          w.hooks = best.hooks;
          cuda::set_tuning(*gpu, w);
          for (int T : {1, 2, 3, 4, 5, 8, 16}) {
            const Timing tm = time_forward(*gpu, T, runs, tr);
            const double gbps = bytes / (tm.wall_ms * 1e6);
            std::printf("ratio %.3f | T=%-2d route tiled | %d warps | %.4f ms (gpu %.4f ms) | %.0f B | %.1f GB/s | ceiling "
                        "%.1f GB/s | %s\n",
                        gbps / ceiling, T, warps, tm.wall_ms, tm.gpu_ms, bytes, gbps, ceiling,
                        cuda::kernel_name(cuda::last_call(*gpu).kernel));
          }
        }
        cuda::set_tuning(*gpu, best);
      }
      // The same shape with cap-saturated logits (d_scale 1): many ids tie at the maximum.
      {
        Head sat = make_head(TensorType::Q5_K, 1, 1.0f);
        auto sgpu = make_cuda_backend(sat.view, 1);
        cuda::set_tuning(*sgpu, best);
        for (int T : {1, 2, 8, 16}) {
          const Timing ts = time_forward(*sgpu, T, runs, req);
          ForwardOutput so;
          const std::vector<float> hidden = make_hidden(T, 77 + T);
          sgpu->forward(hidden.data(), T, req, so);
          std::printf("ratio %.3f | T=%-2d cap-saturated head (token 0: max %g, %lld tied) | %.4f ms | %.0f B | %.1f GB/s "
                      "| ceiling %.1f GB/s | %s\n",
                      bytes / (ts.wall_ms * 1e6) / ceiling, T, so.summaries[0].max, (long long)so.summaries[0].tie_count,
                      ts.wall_ms, bytes, bytes / (ts.wall_ms * 1e6), ceiling, cuda::kernel_name(cuda::last_call(*sgpu).kernel));
        }
      }
    }

    // The other head types: their stream kernels (generic where a type has none), checked against
    // the generic kernel's capped-logit bytes at full shape, then timed without stage events.
    struct Other { TensorType type; int T; double wall, ratio, bytes; std::string kernel; };
    std::vector<Other> others;
    if (!quick || types_only) {
      for (TensorType type : {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0}) {
        Head h = make_head(type, 2);
        auto b = make_cuda_backend(h.view, 1);
        const std::string name(tensor_type_name(type));
        const double ob = double(h.view.vocab) * double(h.view.row_bytes);
        cuda::HeadKernel stream_kernel = cuda::HeadKernel::generic;
        std::printf("%s head: %.0f B in the file, %llu B held on the GPU\n", name.c_str(), ob,
                    (unsigned long long)cuda::head_device_bytes(*b));
        {
          ForwardRequest lr = req;
          lr.want_logits = true;
          const std::vector<float> hidden = make_hidden(1, 5);
          ForwardOutput fast, generic;
          b->forward(hidden.data(), 1, lr, fast);
          stream_kernel = cuda::last_call(*b).kernel;
          const std::string fast_kernel = cuda::kernel_name(stream_kernel);
          cuda::set_tuning(*b, cuda::force_kernel(cuda::HeadKernel::generic));
          b->forward(hidden.data(), 1, lr, generic);
          size_t diff = 0;
          for (size_t i = 0; i < fast.logits.size(); ++i) diff += std::memcmp(&fast.logits[i], &generic.logits[i], 4) != 0;
          std::printf("check %s T=1: %s vs %s capped logits: %zu of %zu differ (max %g, %lld tied)\n", name.c_str(),
                      fast_kernel.c_str(), cuda::kernel_name(cuda::last_call(*b).kernel), diff, fast.logits.size(),
                      fast.summaries[0].max, (long long)fast.summaries[0].tie_count);
        }
        // T=2 with each warp configuration (16 x 2, 12 x 3, 8 x 4 item buffers).
        for (int warps : {16, 12, 8}) {
          if (stream_kernel == cuda::HeadKernel::generic) break;  // no stream layout held: one configuration
          cuda::Tuning w = cuda::force_kernel(stream_kernel, warps);
          w.hooks = best.hooks;
          cuda::set_tuning(*b, w);
          const Timing tw = time_forward(*b, 2, runs, req);
          std::printf("ratio %.3f | %s T=2  | %d warps | %.4f ms | %.0f B | %.1f GB/s | ceiling %.1f GB/s\n",
                      ob / (tw.wall_ms * 1e6) / ceiling, name.c_str(), warps, tw.wall_ms, ob, ob / (tw.wall_ms * 1e6),
                      ceiling);
        }
        if (type == TensorType::Q4_K || type == TensorType::Q6_K) {
          // Route tiled's kernel on the type's layout, checked against the generic tiled kernel first.
          ForwardRequest tr = req;
          tr.route = Route::llamacpp;
          tr.llamacpp_path = quant::LlamaCppPath::tiled_kquant;
          for (int T : {1, 16}) {
            ForwardRequest lr = tr;
            lr.want_logits = true;
            const std::vector<float> hidden = make_hidden(T, 9 + T);
            ForwardOutput fast, generic;
            cuda::set_tuning(*b, best);
            b->forward(hidden.data(), T, lr, fast);
            const std::string fast_kernel = cuda::kernel_name(cuda::last_call(*b).kernel);
            cuda::set_tuning(*b, cuda::force_kernel(cuda::HeadKernel::llamacpp_tiled));
            b->forward(hidden.data(), T, lr, generic);
            size_t diff = 0;
            for (size_t i = 0; i < fast.logits.size(); ++i) diff += std::memcmp(&fast.logits[i], &generic.logits[i], 4) != 0;
            std::printf("check %s route tiled T=%d: %s vs %s capped logits: %zu of %zu differ\n", name.c_str(), T,
                        fast_kernel.c_str(),
                        cuda::kernel_name(cuda::last_call(*b).kernel), diff, fast.logits.size());
          }
          auto time_tiled = [&](std::initializer_list<int> token_counts) {
            for (int T : token_counts) {
              const Timing tm = time_forward(*b, T, runs, tr);
              const double gbps = ob / (tm.wall_ms * 1e6);
              std::printf("ratio %.3f | %s T=%-2d route tiled | %.4f ms | %.0f B | %.1f GB/s | ceiling %.1f GB/s | %s\n",
                          gbps / ceiling, name.c_str(), T, tm.wall_ms, ob, gbps, ceiling,
                          cuda::kernel_name(cuda::last_call(*b).kernel));
            }
          };
          if (type == TensorType::Q6_K) {  // the passes-of-4 kernel (the table's T = 1 row) beside tokens in N
            cuda::Tuning w = cuda::force_kernel(cuda::HeadKernel::q6k_stream_tiled, 16);
            w.hooks = best.hooks;
            cuda::set_tuning(*b, w);
            time_tiled({1, 2, 4});
          }
          // Tokens in N with the items in registers, and staged by bulk copies at 16 and 12 warps.
          const bool q4 = type == TensorType::Q4_K;
          const std::pair<cuda::HeadKernel, int> tokens_n_kernels[] = {
              {q4 ? cuda::HeadKernel::q4k_stream_tiled : cuda::HeadKernel::q6k_tiled_n, 16},
              {q4 ? cuda::HeadKernel::q4k_tma_tiled : cuda::HeadKernel::q6k_tma_tiled, 16},
              {q4 ? cuda::HeadKernel::q4k_tma_tiled : cuda::HeadKernel::q6k_tma_tiled, 12}};
          for (const auto& [kernel, warps] : tokens_n_kernels) {
            cuda::Tuning w = cuda::force_kernel(kernel, warps);
            w.hooks = best.hooks;
            cuda::set_tuning(*b, w);
            std::printf("%s route tiled, %s with %d warps:\n", name.c_str(), cuda::kernel_name(kernel), warps);
            time_tiled({1, 2, 4, 8, 16});
          }
          cuda::set_tuning(*b, best);
          time_tiled({1, 2, 4, 8, 16});
        }
        cuda::set_tuning(*b, best);
        for (int T : {1, 2, 4, 8, 16}) {
          const Timing tm = time_forward(*b, T, runs, req);
          const double gbps = ob / (tm.wall_ms * 1e6);
          others.push_back({type, T, tm.wall_ms, gbps / ceiling, ob, cuda::kernel_name(cuda::last_call(*b).kernel)});
          std::printf("ratio %.3f | %s T=%-2d | %.4f ms | %.0f B | %.1f GB/s | ceiling %.1f GB/s | %s\n", gbps / ceiling,
                      name.c_str(), T, tm.wall_ms, ob, gbps, ceiling, others.back().kernel.c_str());
        }
      }
    }
    const double ceiling_after = measure_cuda_read_ceiling_gbps(uint64_t(4) << 30);

    std::printf("\n| head | T | ratio | wall ms | GPU ms | GB/s | ceiling GB/s | kernel |\n|---|---|---|---|---|---|---|---|\n");
    for (const Row& r : rows)
      std::printf("| q5_K | %d | %.3f | %.4f | %.4f | %.1f | %.1f | %s |\n", r.T, r.ratio, r.wall, r.gpu, r.gbps, ceiling,
                  r.kernel.c_str());
    for (const Other& o : others)
      std::printf("| %s | %d | %.3f | %.4f | | %.1f | %.1f | %s |\n", std::string(tensor_type_name(o.type)).c_str(), o.T,
                  o.ratio, o.wall, o.bytes / (o.wall * 1e6), ceiling, o.kernel.c_str());
    std::printf("ceiling re-measured at the end: %.1f GB/s\n", ceiling_after);
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
  return 0;
}
