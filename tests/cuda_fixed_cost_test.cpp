// Where the per-call fixed part of the CUDA head goes: the Muse-width Q5_K head (6,656 columns) timed
// at V, V/2 and V/4 rows on one GPU, with the stages split by event nodes. t(V) = a + b V separates
// the part that does not shrink with the rows (prep, launch, prologue, tail, merge) from the stream.
// Runs only with LMHEAD_CUDA_PERF=1 (a ~1 GB head, several seconds); bench/gpu.sh-style device runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.hpp"
#include "cuda/cuda_backend.hpp"
#include "quant/blocks.hpp"

namespace lmhead {
namespace {

constexpr int64_t kFullVocab = 202048, kWidth = 6656, kRowBytes = kWidth / 256 * 176;

std::vector<uint8_t> random_q5k_rows(int64_t rows) {
  std::vector<uint8_t> w(size_t(rows) * kRowBytes);
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned k = 0; k < threads; ++k)
    pool.emplace_back([&, k] {
      std::mt19937_64 rng(1234 + k);
      for (int64_t r = k; r < rows; r += threads) {
        uint8_t* row = w.data() + size_t(r) * kRowBytes;
        for (int64_t i = 0; i + 8 <= kRowBytes; i += 8) {
          const uint64_t v = rng();
          std::memcpy(row + i, &v, 8);
        }
        for (int64_t b = 0; b < kWidth / 256; ++b) {
          const float u = float(rng() >> 40) / float(1 << 24);
          const uint16_t d = quant::f32_to_f16(0.001f + 0.02f * u), dmin = quant::f32_to_f16(0.0005f + 0.01f * u);
          std::memcpy(row + 176 * b, &d, 2);
          std::memcpy(row + 176 * b + 2, &dmin, 2);
        }
      }
    });
  for (auto& t : pool) t.join();
  return w;
}

struct Split {
  double wall = 0, prep = 0, head = 0;
  std::vector<select::TokenSummary> summaries;
};

Split time_calls(Backend& b, const std::vector<float>& hidden, int T, bool events, int runs) {
  cuda::Tuning t;
  t.hooks.stage_events = events;
  cuda::set_tuning(b, t);
  ForwardRequest req;
  req.want_stage_times = true;
  ForwardOutput out;
  for (int i = 0; i < 5; ++i) b.forward(hidden.data(), T, req, out);
  std::vector<double> wall, prep, head;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    b.forward(hidden.data(), T, req, out);
    wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    for (const StageTime& s : out.times) {
      if (s.label.rfind("head", 0) == 0) head.push_back(s.ms);
      if (s.label.rfind("norm", 0) == 0) prep.push_back(s.ms);
    }
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  return Split{median(wall), median(prep), median(head), out.summaries};
}

TEST(CudaFixedCost, HeadTimeAgainstRows) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  if (!std::getenv("LMHEAD_CUDA_PERF")) GTEST_SKIP() << "set LMHEAD_CUDA_PERF=1 to time the fixed part";
  const std::vector<uint8_t> weights = random_q5k_rows(kFullVocab);
  std::vector<float> gamma(kWidth);
  std::mt19937_64 rng(99);
  for (auto& g : gamma) g = 0.5f + float(rng() >> 40) / float(1 << 24);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const int kTokens[] = {1, 2, 8, 16};
  std::vector<float> hidden(size_t(16) * kWidth);
  for (auto& v : hidden) v = n(rng);

  const int64_t kRows[] = {kFullVocab, kFullVocab / 2, kFullVocab / 4};
  double wall[4][3] = {}, head[4][3] = {}, prep[4][3] = {};
  for (int vi = 0; vi < 3; ++vi) {
    HeadView view;
    view.type = TensorType::Q5_K;
    view.weights = weights.data();
    view.vocab = kRows[vi];
    view.hidden = kWidth;
    view.row_bytes = kRowBytes;
    view.gamma = gamma.data();
    view.eps = 1e-5f;
    view.logit_scale = 0.196116f;
    view.softcap = 20.0f;
    auto gpu = make_cuda_backend(view, 1);
    for (int ti = 0; ti < 4; ++ti) {
      const int T = kTokens[ti];
      const Split with_events = time_calls(*gpu, hidden, T, true, 60);
      const Split plain = time_calls(*gpu, hidden, T, false, 60);
      // The same call with and without event nodes gives the same answers.
      ASSERT_EQ(with_events.summaries.size(), size_t(T));
      for (int t = 0; t < T; ++t) {
        EXPECT_EQ(with_events.summaries[t].argmax, plain.summaries[t].argmax) << "T=" << T << " t=" << t;
        EXPECT_EQ(std::memcmp(&with_events.summaries[t].max, &plain.summaries[t].max, 4), 0);
        EXPECT_GE(with_events.summaries[t].argmax, 0);
        EXPECT_LT(with_events.summaries[t].argmax, kRows[vi]);
      }
      EXPECT_GT(plain.wall, 0.0);
      EXPECT_GT(with_events.head, 0.0);
      wall[ti][vi] = plain.wall;
      head[ti][vi] = with_events.head;
      prep[ti][vi] = with_events.prep;
      std::printf("[ fixed ] V=%lld T=%d wall %.4f ms | events: prep %.4f head %.4f wall %.4f\n",
                  static_cast<long long>(kRows[vi]), T, plain.wall, with_events.prep, with_events.head,
                  with_events.wall);
    }
  }
  // Least-squares t = a + b * (V / V_full) over the three sizes.
  auto fit = [&](const double (&y)[3], double& a, double& b) {
    const double x[3] = {1.0, 0.5, 0.25};
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < 3; ++i) { sx += x[i]; sy += y[i]; sxx += x[i] * x[i]; sxy += x[i] * y[i]; }
    b = (3 * sxy - sx * sy) / (3 * sxx - sx * sx);
    a = (sy - b * sx) / 3;
  };
  for (int ti = 0; ti < 4; ++ti) {
    double aw, bw, ah, bh;
    fit(wall[ti], aw, bw);
    fit(head[ti], ah, bh);
    std::printf("[ fixed ] T=%d: wall = %.4f + %.4f * V/Vfull ms; head kernel = %.4f + %.4f * V/Vfull ms; prep %.4f ms\n",
                kTokens[ti], aw, bw, ah, bh, prep[ti][0]);
  }
}

}  // namespace
}  // namespace lmhead
