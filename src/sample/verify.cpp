#include "sample/verify.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "sample/philox.hpp"
#include "sample/sampler.hpp"

namespace lmhead::sample {

void validate_draft(int64_t V, std::span<const int32_t> draft, std::span<const float> q) {
  const int n = int(draft.size());
  for (int j = 0; j < n; ++j)
    if (draft[j] < 0 || draft[j] >= V)
      throw Error("draft token " + std::to_string(j) + " is id " + std::to_string(draft[j]) +
                  ", outside the vocabulary [0, " + std::to_string(V) + ")");
  if (!q.empty()) {
    if (int64_t(q.size()) != int64_t(n) * V)
      throw Error("draft probabilities hold " + std::to_string(q.size()) + " values, expected " + std::to_string(n) +
                  " drafts x " + std::to_string(V) + " ids");
    for (size_t i = 0; i < q.size(); ++i)
      if (!std::isfinite(q[i]) || q[i] < 0)
        throw Error("draft probability of draft " + std::to_string(i / size_t(V)) + ", id " +
                    std::to_string(i % size_t(V)) + " is " + std::to_string(q[i]) + " (must be finite and >= 0)");
  }
}

Verdict verify(const float* logits, int64_t V, std::span<const int32_t> draft, const SamplingOptions& o,
               std::span<const float> q, std::span<const int32_t> drawn) {
  const int n = int(draft.size());
  if (drawn.size() != size_t(n) + 1) throw Error("verification needs the target's draw at every row");
  validate_draft(V, draft, q);
  Verdict v;
  for (int j = 0; j < n; ++j) {
    const int64_t position = o.position + j;
    const uint32_t* mask = mask_row(o, V, j);
    const int32_t d = draft[j];
    if (q.empty()) {
      // Without the draft's probabilities the draft is a point mass: the rejection rule then
      // accepts exactly when the target's own draw at this position is the draft token, and on a
      // rejection that draw is already distributed as p without d, renormalized.
      const int32_t tok = drawn[size_t(j)];
      v.target.push_back(tok);
      if (tok != d) { v.next = tok; return v; }
      ++v.accepted;
      continue;
    }
    // p_i = W_i / S' with the sampler's integer weights: the same distribution run() draws from.
    const Weights w = kept_weights(logits + size_t(j) * size_t(V), V, o, mask);
    const float* qj = q.data() + size_t(j) * size_t(V);
    const double p_d = w.weight[size_t(d)] / w.total;
    const double q_d = double(qj[d]);
    const double u = uniform(o.seed, position, Stream::accept);
    // Accept with probability min(1, p/q): u * q < p avoids the division (and q = 0 accepts).
    if (p_d > 0 && u * q_d < p_d) {
      v.target.push_back(d);
      ++v.accepted;
      continue;
    }
    std::vector<double> residual(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) residual[size_t(i)] = std::max(0.0, w.weight[size_t(i)] / w.total - double(qj[i]));
    // max(0, p - q) is not an integer weight (q is the caller's floats), so the residual draw
    // stays a double inverse CDF in id order (chunked sums, sampler.hpp): it runs once per
    // rejection on the host, where no split has to reproduce it.
    const double ur = uniform(o.seed, position, Stream::residual);
    int32_t tok = inverse_cdf(residual.data(), V, ur);
    // p <= q everywhere (so p = q where it matters) makes a rejection impossible in exact
    // arithmetic; if rounding produced one, p itself is the right distribution.
    if (tok < 0) tok = inverse_cdf(w.weight.data(), V, ur);
    v.target.push_back(tok);
    v.next = tok;
    return v;
  }
  v.target.push_back(drawn[size_t(n)]);
  v.next = drawn[size_t(n)];
  return v;
}

Verdict verify(const float* logits, int64_t V, std::span<const int32_t> draft, const SamplingOptions& o,
               std::span<const float> q) {
  std::vector<int32_t> drawn;
  for (size_t j = 0; j <= draft.size(); ++j)
    drawn.push_back(sample_token(logits + j * size_t(V), V, o, mask_row(o, V, int(j)), o.position + int64_t(j)));
  return verify(logits, V, draft, o, q, drawn);
}

}  // namespace lmhead::sample
