#include "select/token_summary.hpp"

#include <algorithm>
#include <cmath>

namespace lmhead::select {
namespace {

// Candidate order of numerics.md §8: value descending, then id ascending.
bool ranks_before(const Candidate& a, const Candidate& b) {
  if (a.logit != b.logit) return a.logit > b.logit;
  return a.id < b.id;
}

void push_candidate(std::vector<Candidate>& top, int k, Candidate c) {
  if (k <= 0) return;
  if (static_cast<int>(top.size()) == k && !ranks_before(c, top.back())) return;
  auto it = std::upper_bound(top.begin(), top.end(), c, ranks_before);
  top.insert(it, c);
  if (static_cast<int>(top.size()) > k) top.pop_back();
}

void add_tie(TokenSummary& s, int32_t id) {
  ++s.tie_count;
  if (static_cast<int>(s.tied_ids.size()) < kMaxTiedIds) s.tied_ids.push_back(id);
}

}  // namespace

void summarize(const float* logits, int64_t begin, int64_t end, int k, TokenSummary& into) {
  summarize_span(logits + begin, begin, end - begin, k, into);
}

void summarize_span(const float* values, int64_t first_id, int64_t count, int k, TokenSummary& into) {
  for (int64_t j = 0; j < count; ++j) {
    const float v = values[j];
    const int32_t id = static_cast<int32_t>(first_id + j);
    // NaN ranks below every number: it becomes the token only when a range holds nothing else.
    const bool replaces = into.argmax < 0 || (!std::isnan(v) && (v > into.max || std::isnan(into.max)));
    if (replaces) {
      into.max = v;
      into.argmax = id;
      into.tie_count = 0;
      into.tied_ids.clear();
      add_tie(into, id);
    } else if (v == into.max) {
      add_tie(into, id);
    }
    if (k > 0 && !std::isnan(v)) push_candidate(into.top, k, {id, v, 0.0f});
  }
}

void merge(TokenSummary& a, const TokenSummary& b, int k) {
  if (b.argmax >= 0) {
    if (a.argmax < 0 || (!std::isnan(b.max) && (b.max > a.max || std::isnan(a.max)))) {
      a.max = b.max;
      a.argmax = b.argmax;
      a.tie_count = b.tie_count;
      a.tied_ids = b.tied_ids;
    } else if (b.max == a.max) {
      a.argmax = std::min(a.argmax, b.argmax);
      a.tie_count += b.tie_count;
      std::vector<int32_t> ids;
      std::merge(a.tied_ids.begin(), a.tied_ids.end(), b.tied_ids.begin(), b.tied_ids.end(),
                 std::back_inserter(ids));
      if (static_cast<int>(ids.size()) > kMaxTiedIds) ids.resize(kMaxTiedIds);
      a.tied_ids = std::move(ids);
    }
  }
  for (const Candidate& c : b.top) push_candidate(a.top, k, c);
}

double sum_exp_chunk(const float* logits, int64_t begin, int64_t end, float max) {
  double s = 0.0;
  for (int64_t i = begin; i < end; ++i) s += std::exp(static_cast<double>(logits[i]) - static_cast<double>(max));
  return s;
}

double sum_exp(const float* logits, int64_t n, float max) {
  double total = 0.0;
  for (int64_t begin = 0; begin < n; begin += kSumExpChunk)
    total += sum_exp_chunk(logits, begin, std::min(n, begin + kSumExpChunk), max);
  return total;
}

float logprob(float value, float max, double sum_exp) {
  return static_cast<float>((static_cast<double>(value) - static_cast<double>(max)) - std::log(sum_exp));
}

}  // namespace lmhead::select
