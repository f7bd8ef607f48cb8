#include "cuda/call_results.hpp"

#include <algorithm>
#include <cstring>

#include "select/token_summary.hpp"

namespace lmhead::cuda {

// The device's copies of the selection constants (kernels.hpp cannot include select/ headers into
// device code) must be the host's.
static_assert(kMaxTied == select::kMaxTiedIds);
static_assert(kSumExpChunk == select::kSumExpChunk);

void read_results(const HostResults& h, int tokens, int64_t vocab, int64_t hidden, int top_k, bool logprobs,
                  bool logits, bool stages, bool capped, ForwardOutput& out) {
  out.summaries.assign(size_t(tokens), {});
  for (int t = 0; t < tokens; ++t) {
    const TokenResult& r = h.results[t];
    select::TokenSummary& s = out.summaries[size_t(t)];
    s.max = r.max;
    s.argmax = r.argmax;
    s.tie_count = r.tie_count;
    s.tied_ids.assign(r.tied, r.tied + std::min(r.n_tied, kMaxTied));
  }
  if (top_k > 0) {
    const int chunks = int((vocab + kTopKChunk - 1) / kTopKChunk);
    const int kc = std::min(top_k, kTopKChunk);
    for (int t = 0; t < tokens; ++t) {
      select::TokenSummary& s = out.summaries[size_t(t)];
      for (int c = 0; c < chunks; ++c) {
        select::TokenSummary part;
        const int2* list = h.candidates + (size_t(t) * chunks + c) * kc;
        for (int i = 0; i < kc && list[i].x >= 0; ++i) {
          float v;
          std::memcpy(&v, &list[i].y, 4);
          part.top.push_back(Candidate{list[i].x, v, 0.0f});
        }
        select::merge(s, part, top_k);
      }
    }
  }
  out.sum_exp.assign(logprobs ? size_t(tokens) : 0, 0.0);
  if (logprobs) {
    const int chunks = int((vocab + kSumExpChunk - 1) / kSumExpChunk);
    for (int t = 0; t < tokens; ++t) {
      double total = 0.0;
      for (int c = 0; c < chunks; ++c) total += h.chunk_sums[size_t(t) * chunks + c];
      out.sum_exp[size_t(t)] = total;
    }
  }
  const size_t TV = size_t(tokens) * size_t(vocab), TH = size_t(tokens) * size_t(hidden);
  if (logits || stages) out.logits.assign(h.logits, h.logits + TV);
  if (stages) {
    out.stages.normed.assign(h.normed, h.normed + TH);
    out.stages.raw.assign(h.raw, h.raw + TV);
    if (capped) {
      out.stages.scaled.assign(h.scaled, h.scaled + TV);
      out.stages.div.assign(h.div, h.div + TV);
      out.stages.tanh.assign(h.tanh, h.tanh + TV);
    } else {
      out.stages.scaled = out.logits;
    }
    out.stages.capped = out.logits;
  }
}

}  // namespace lmhead::cuda
