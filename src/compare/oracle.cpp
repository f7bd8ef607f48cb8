// The f64 oracle: what the tail would give in exact-enough arithmetic, so every route (and every
// head type quantized from the same f32 weights) can be measured against one reference.
#include <algorithm>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>

#include "lmhead/compare.hpp"
#include "quant/dequantize.hpp"

namespace lmhead {

std::vector<double> oracle_logits(const Model& model, std::span<const float> hidden, int tokens, InputKind input,
                                  OracleStage stage, int threads) {
  const HeadConfig& c = model.config();
  const int64_t H = c.hidden, V = c.vocab;
  if (tokens <= 0) throw Error("oracle: tokens must be positive, not " + std::to_string(tokens));
  if (hidden.size() != uint64_t(tokens) * uint64_t(H))
    throw Error("oracle: " + std::to_string(hidden.size()) + " hidden values for " + std::to_string(tokens) +
                " tokens of hidden size " + std::to_string(H));
  for (size_t i = 0; i < hidden.size(); ++i)
    if (!std::isfinite(hidden[i]))
      throw Error("oracle: hidden token " + std::to_string(int64_t(i) / H) + ", index " + std::to_string(int64_t(i) % H) +
                  " is not finite");

  // The norm in double: no f32 rounding of the mean, the scale or the products.
  std::vector<double> act(hidden.size());
  const float* gamma = model.norm_weight();
  for (int t = 0; t < tokens; ++t) {
    const float* x = hidden.data() + size_t(t) * H;
    double* y = act.data() + size_t(t) * H;
    if (input == InputKind::normed) {
      for (int64_t i = 0; i < H; ++i) y[i] = x[i];
      continue;
    }
    double ss = 0;
    for (int64_t i = 0; i < H; ++i) ss += double(x[i]) * double(x[i]);
    const double inv = 1.0 / std::sqrt(ss / double(H) + double(c.eps));
    for (int64_t i = 0; i < H; ++i) y[i] = double(x[i]) * inv * double(gamma[i]);
  }

  std::vector<double> out(size_t(tokens) * V);
  const double scale = c.logit_scale, cap = c.softcap;
  auto rows = [&](int64_t begin, int64_t end) {
    std::vector<float> w(static_cast<size_t>(H));
    for (int64_t r = begin; r < end; ++r) {
      // Dequantization is exact (numerics.md §3): the f32 values are the weights the file stores.
      quant::dequantize_row(c.head_type, model.head_weights() + uint64_t(r) * c.row_bytes, w.data(), H);
      for (int t = 0; t < tokens; ++t) {
        const double* y = act.data() + size_t(t) * H;
        double s = 0;
        for (int64_t i = 0; i < H; ++i) s += double(w[size_t(i)]) * y[i];
        double v = s;
        if (stage != OracleStage::raw) {
          v = s * scale;
          if (stage == OracleStage::capped && cap > 0) v = cap * std::tanh(v / cap);
        }
        out[size_t(t) * V + size_t(r)] = v;
      }
    }
  };
  int n = threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
  n = int(std::min<int64_t>(n, V));
  std::vector<std::thread> pool;
  std::exception_ptr failure;
  std::mutex failure_mutex;
  for (int k = 0; k < n; ++k)
    pool.emplace_back([&, k] {
      try {
        rows(V * k / n, V * (k + 1) / n);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    });
  for (std::thread& th : pool) th.join();
  if (failure) std::rethrow_exception(failure);
  return out;
}

}  // namespace lmhead
