#include "sample/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "sample/exp.hpp"
#include "sample/philox.hpp"

namespace lmhead::sample {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Cand {
  double z;  // the id's logit after bias and temperature
  int32_t id;
  double w;  // exp(z - max), once the maximum is known
};

// Rank order of numerics.md §9: z descending, then id ascending (the argmax's tie rule).
bool ranks_before(const Cand& a, const Cand& b) {
  if (a.z != b.z) return a.z > b.z;
  return a.id < b.id;
}

// The per-id transform (bias and mask, temperature) over one range of ids. The bias list is
// sorted by id and walked with a cursor, so a bias costs nothing for the ids it does not name.
class Walker {
 public:
  Walker(const float* logits, const SamplingOptions& o, const std::vector<std::pair<int32_t, float>>& bias,
         const uint32_t* mask)
      : logits_(logits), o_(o), bias_(bias), mask_(mask) {}

  // Calls f(id, v) for every allowed id in [begin, end) with v = logit + bias (double, exact sum
  // of two floats' values rounded once); masked ids and NaN logits are skipped.
  template <class F>
  void each(int64_t begin, int64_t end, F&& f) const {
    auto it = std::lower_bound(bias_.begin(), bias_.end(), std::pair<int32_t, float>(int32_t(begin), -INFINITY));
    for (int64_t i = begin; i < end; ++i) {
      double v = double(logits_[i]);
      if (it != bias_.end() && it->first == i) v += double((it++)->second);
      if (mask_ != nullptr && ((mask_[i >> 5] >> (i & 31)) & 1u) == 0) continue;
      if (std::isnan(v)) continue;
      f(int32_t(i), v);
    }
  }
  double z(double v) const { return v / double(o_.temperature); }

 private:
  const float* logits_;
  const SamplingOptions& o_;
  const std::vector<std::pair<int32_t, float>>& bias_;
  const uint32_t* mask_;
};

std::vector<std::pair<int32_t, float>> sorted_bias(const SamplingOptions& o) {
  std::vector<std::pair<int32_t, float>> b = o.logit_bias;
  std::sort(b.begin(), b.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  return b;
}

void push_top(std::vector<Cand>& top, int k, const Cand& c) {
  if (static_cast<int>(top.size()) == k && !ranks_before(c, top.back())) return;
  top.insert(std::upper_bound(top.begin(), top.end(), c, ranks_before), c);
  if (static_cast<int>(top.size()) > k) top.pop_back();
}

// Round 1 of a range: its maximum z and its k best candidates. Merged by max and by merging the
// candidate lists: both are exact and independent of how the ids were split.
struct Round1 {
  double max = kNegInf;
  std::vector<Cand> top;
};

// What every range needs after round 1: the global maximum and the top-k cut (the k-th candidate).
struct Cut {
  double max = kNegInf;
  bool has_k = false;
  Cand kth{};
  double min_p = 0;
  bool in(const Cand& c) const { return !has_k || !ranks_before(kth, c); }
};

// Round 2 of a range: the weights exp(z - max) of its kept ids summed per 512-id chunk, and for
// top-p a count of its kept ids per weight bucket and the weights themselves (kept for round 3).
constexpr int kBuckets = 64 * 32;  // 64 per octave of m - z from 2^-20 to 2^12; the ends clamp

// Bucket by the distance below the maximum, d = m - z >= 0: a larger d never gets a smaller bucket,
// so every id of a higher bucket ranks after every id of a lower one (no property of exp needed).
int bucket_of(double d) {
  uint64_t bits, base_bits;
  const double base = 0x1p-20;
  std::memcpy(&bits, &d, 8);
  std::memcpy(&base_bits, &base, 8);
  if (bits <= base_bits) return 0;
  const uint64_t b = (bits - base_bits) >> 46;
  return b >= uint64_t(kBuckets) ? kBuckets - 1 : int(b);
}

struct Round2 {
  std::vector<double> chunk_sums;  // chunks [first_chunk, first_chunk + size)
  int64_t first_chunk = 0;
  std::vector<int64_t> buckets;    // top-p: kept ids per bucket of m - z
  std::vector<double> lightest;    // top-p: the smallest weight in each bucket
  std::vector<double> w;           // top-p: each id's weight, -1 when not kept
  std::vector<Cand> cands;         // top-p, round 3: candidates that can be in the prefix, rank order
  size_t next = 0;

  const Cand* head() const { return next < cands.size() ? &cands[next] : nullptr; }
};

template <class F>
void each_kept(const Walker& walk, const Cut& cut, int64_t begin, int64_t end, F&& f) {
  walk.each(begin, end, [&](int32_t id, double v) {
    const Cand c{walk.z(v), id, 0.0};
    if (!cut.in(c)) return;
    const double w = sample::exp(c.z - cut.max);
    if (cut.min_p > 0 && !(w >= cut.min_p)) return;
    f(Cand{c.z, id, w});
  });
}

struct Plan {
  Cut cut;
  std::vector<Round2> parts;
  double total = 0;  // chunked sum of every kept weight
};

Plan plan(const float* logits, const SamplingOptions& o, const std::vector<std::pair<int32_t, float>>& bias,
          const uint32_t* mask, std::span<const int64_t> bounds, bool collect) {
  const Walker walk(logits, o, bias, mask);
  const size_t n = bounds.size() - 1;
  Round1 merged;
  for (size_t r = 0; r < n; ++r) {
    Round1 part;
    walk.each(bounds[r], bounds[r + 1], [&](int32_t id, double v) {
      const Cand c{walk.z(v), id, 0.0};
      part.max = std::max(part.max, c.z);
      if (o.top_k > 0) push_top(part.top, o.top_k, c);
    });
    // What travels: one double and at most k (z, id) pairs per range.
    merged.max = std::max(merged.max, part.max);
    for (const Cand& c : part.top) push_top(merged.top, o.top_k, c);
  }
  if (merged.max == kNegInf) throw Error("no token can be sampled: the allowed-token mask (or NaN logits) excludes every id");
  Plan p;
  p.cut.max = merged.max;
  p.cut.min_p = double(o.min_p);
  if (o.top_k > 0 && static_cast<int>(merged.top.size()) == o.top_k) {
    p.cut.has_k = true;
    p.cut.kth = merged.top.back();
  }
  p.parts.resize(n);
  for (size_t r = 0; r < n; ++r) {
    Round2& part = p.parts[r];
    part.first_chunk = bounds[r] / kChunk;
    part.chunk_sums.assign(size_t((bounds[r + 1] + kChunk - 1) / kChunk - part.first_chunk), 0.0);
    if (collect) {
      part.buckets.assign(kBuckets, 0);
      part.lightest.assign(kBuckets, std::numeric_limits<double>::infinity());
      part.w.assign(size_t(bounds[r + 1] - bounds[r]), -1.0);
    }
    each_kept(walk, p.cut, bounds[r], bounds[r + 1], [&](const Cand& c) {
      part.chunk_sums[size_t(c.id / kChunk - part.first_chunk)] += c.w;
      if (collect) {
        const size_t b = size_t(bucket_of(p.cut.max - c.z));
        ++part.buckets[b];
        part.lightest[b] = std::min(part.lightest[b], c.w);
        part.w[size_t(c.id - bounds[r])] = c.w;
      }
    });
  }
  // What travels: one double per 512-id chunk; added in id order.
  for (const Round2& part : p.parts)
    for (double s : part.chunk_sums) p.total += s;
  if (!collect) return p;
  // Top-p only needs the ids that can be in the prefix. The ids of buckets 0..b weigh at least
  // the sum over those buckets of count * lightest weight; once that reaches top_p * total (with
  // room for the rounding of the additions), every id of a later bucket ranks after all of them,
  // has that much mass before it, and is out. What
  // travels: a count and a minimum per bucket (exact to merge), so the bound is the same for
  // every split.
  std::vector<int64_t> counts(kBuckets, 0);
  std::vector<double> lightest(kBuckets, std::numeric_limits<double>::infinity());
  for (const Round2& part : p.parts)
    for (int b = 0; b < kBuckets; ++b) {
      counts[size_t(b)] += part.buckets[size_t(b)];
      lightest[size_t(b)] = std::min(lightest[size_t(b)], part.lightest[size_t(b)]);
    }
  const double target = double(o.top_p) * p.total;
  int last_bucket = kBuckets - 1;
  double at_least = 0;
  for (int b = 0; b < kBuckets; ++b) {
    if (counts[size_t(b)] == 0) continue;
    at_least += double(counts[size_t(b)]) * lightest[size_t(b)];
    if (at_least * (1.0 - 0x1p-20) >= target) { last_bucket = b; break; }
  }
  // Round 3: each range sends its candidates from buckets 0..last_bucket in rank order.
  for (size_t r = 0; r < n; ++r) {
    Round2& part = p.parts[r];
    walk.each(bounds[r], bounds[r + 1], [&](int32_t id, double v) {
      const double w = part.w[size_t(id - bounds[r])];
      if (w < 0) return;
      const double z = walk.z(v);
      if (bucket_of(p.cut.max - z) <= last_bucket) part.cands.push_back(Cand{z, id, w});
    });
    std::sort(part.cands.begin(), part.cands.end(), ranks_before);
    part.w.clear();
    part.w.shrink_to_fit();
  }
  return p;
}

// Top-p: candidates in rank order from every range, merged, until their running mass (added in
// rank order) reaches top_p * total. Only that prefix travels, and only as far as it is needed.
std::vector<Cand> top_p_prefix(Plan& p, double top_p, std::vector<double>& cumulative) {
  const double target = top_p * p.total;
  std::vector<Cand> prefix;
  double c = 0;
  for (;;) {
    Round2* best = nullptr;
    const Cand* best_head = nullptr;
    for (Round2& part : p.parts)
      if (const Cand* h = part.head(); h != nullptr && (best_head == nullptr || ranks_before(*h, *best_head))) {
        best = &part;
        best_head = h;
      }
    if (best == nullptr) break;
    c += best_head->w;
    prefix.push_back(*best_head);
    cumulative.push_back(c);
    ++best->next;
    if (c >= target) break;
  }
  return prefix;
}

int64_t check_bounds(std::span<const int64_t> bounds, int64_t V) {
  if (bounds.size() < 2 || bounds.front() != 0 || bounds.back() != V)
    throw Error("sampling ranges must run from id 0 to the vocabulary size");
  for (size_t i = 1; i < bounds.size(); ++i) {
    if (bounds[i] <= bounds[i - 1]) throw Error("sampling ranges must be ascending and non-empty");
    if (i + 1 < bounds.size() && bounds[i] % kChunk != 0) throw Error("inner sampling range bounds must be multiples of 512");
  }
  return int64_t(bounds.size() - 1);
}

int32_t greedy(const float* logits, const SamplingOptions& o, const std::vector<std::pair<int32_t, float>>& bias,
               const uint32_t* mask, std::span<const int64_t> bounds) {
  const Walker walk(logits, o, bias, mask);
  double best = kNegInf;
  int32_t best_id = -1;
  for (size_t r = 0; r + 1 < bounds.size(); ++r)
    walk.each(bounds[r], bounds[r + 1], [&](int32_t id, double v) {
      if (best_id < 0 || v > best) { best = v; best_id = id; }
    });
  if (best_id < 0) throw Error("no token can be chosen: the allowed-token mask (or NaN logits) excludes every id");
  return best_id;
}

}  // namespace

void validate(const SamplingOptions& o, int64_t vocab, int tokens) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw Error("temperature must be a finite number >= 0 (0: greedy), got " + std::to_string(o.temperature));
  if (!(o.top_p > 0 && o.top_p <= 1)) throw Error("top-p must be in (0, 1], got " + std::to_string(o.top_p));
  if (!(o.min_p >= 0 && o.min_p <= 1)) throw Error("min-p must be in [0, 1], got " + std::to_string(o.min_p));
  if (o.top_k < 0) throw Error("sample top-k must be >= 0 (0: off), got " + std::to_string(o.top_k));
  std::vector<int32_t> ids;
  for (const auto& [id, value] : o.logit_bias) {
    if (id < 0 || id >= vocab)
      throw Error("logit bias id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    if (!std::isfinite(value)) throw Error("logit bias for id " + std::to_string(id) + " is not finite");
    ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  if (auto it = std::adjacent_find(ids.begin(), ids.end()); it != ids.end())
    throw Error("logit bias id " + std::to_string(*it) + " is given twice");
  const int64_t words = (vocab + 31) / 32;
  if (!o.allowed.empty() && int64_t(o.allowed.size()) != words && int64_t(o.allowed.size()) != words * tokens)
    throw Error("allowed-token mask has " + std::to_string(o.allowed.size()) + " 32-bit words; a vocabulary of " +
                std::to_string(vocab) + " needs " + std::to_string(words) + " (one mask for every token) or " +
                std::to_string(words * tokens) + " (one per token for " + std::to_string(tokens) + " tokens)");
}

bool needs_logits(const SamplingOptions& o) {
  return o.temperature > 0 || !o.logit_bias.empty() || !o.allowed.empty();
}

const uint32_t* mask_row(const SamplingOptions& o, int64_t vocab, int t) {
  if (o.allowed.empty()) return nullptr;
  const int64_t words = (vocab + 31) / 32;
  if (int64_t(o.allowed.size()) == words) return o.allowed.data();
  return o.allowed.data() + size_t(t) * size_t(words);
}

double chunked_sum(const double* w, int64_t n) {
  double total = 0;
  for (int64_t b = 0; b < n; b += kChunk) {
    double s = 0;
    for (int64_t i = b; i < std::min(n, b + kChunk); ++i) s += w[i];
    total += s;
  }
  return total;
}

int32_t inverse_cdf(const double* w, int64_t n, double u) {
  const double t = u * chunked_sum(w, n);
  double before = 0;  // the chunk sums added so far, exactly as chunked_sum adds them
  int32_t last = -1;
  for (int64_t b = 0; b < n; b += kChunk) {
    const int64_t e = std::min(n, b + kChunk);
    double s = 0;
    for (int64_t i = b; i < e; ++i) {
      if (w[i] == 0) continue;
      s += w[i];
      last = int32_t(i);
      if (before + s > t) return int32_t(i);
    }
    before += s;
  }
  return last;  // u * total rounded up to total: the last id with weight
}

int32_t sample_token(const float* logits, int64_t V, const SamplingOptions& o, const uint32_t* mask, int64_t position,
                     std::span<const int64_t> bounds) {
  const int64_t whole[2] = {0, V};
  if (bounds.empty()) bounds = whole;
  check_bounds(bounds, V);
  const auto bias = sorted_bias(o);
  if (o.temperature == 0) return greedy(logits, o, bias, mask, bounds);
  const bool top_p = o.top_p < 1;
  Plan p = plan(logits, o, bias, mask, bounds, top_p);
  const double u = uniform(o.seed, position, Stream::draw);
  if (top_p) {
    std::vector<double> cumulative;
    const std::vector<Cand> prefix = top_p_prefix(p, double(o.top_p), cumulative);
    const double t = u * cumulative.back();
    for (size_t j = 0; j < prefix.size(); ++j)
      if (cumulative[j] > t) return prefix[j].id;
    return prefix.back().id;
  }
  // Inverse CDF in id order: the chunk is found from the chunk sums that travelled; only the range
  // owning it walks its ids again.
  const double t = u * p.total;
  const Walker walk(logits, o, bias, mask);
  double before = 0;
  int32_t last = -1;
  for (size_t r = 0; r < p.parts.size(); ++r) {
    const Round2& part = p.parts[r];
    for (size_t k = 0; k < part.chunk_sums.size(); ++k) {
      const double c = part.chunk_sums[k];
      if (before + c > t) {
        const int64_t b = (part.first_chunk + int64_t(k)) * kChunk;
        double s = 0;
        int32_t found = -1;
        each_kept(walk, p.cut, b, std::min(V, b + kChunk), [&](const Cand& x) {
          if (found >= 0) return;
          s += x.w;
          if (before + s > t) found = x.id;
        });
        if (found >= 0) return found;
      }
      if (c > 0) last = int32_t((part.first_chunk + int64_t(k)) * kChunk);
      before += c;
    }
  }
  // u * total rounded up to total: the last kept id of the last chunk with weight.
  int32_t found = -1;
  each_kept(walk, p.cut, last, std::min(V, int64_t(last) + kChunk), [&](const Cand& x) {
    if (x.w > 0) found = x.id;
  });
  return found;
}

Weights kept_weights(const float* logits, int64_t V, const SamplingOptions& o, const uint32_t* mask) {
  const int64_t whole[2] = {0, V};
  const auto bias = sorted_bias(o);
  Weights out;
  out.weight.assign(size_t(V), 0.0);
  if (o.temperature == 0) {  // greedy: all mass on the one token
    out.weight[size_t(greedy(logits, o, bias, mask, whole))] = 1.0;
    out.total = 1.0;
    return out;
  }
  const bool top_p = o.top_p < 1;
  Plan p = plan(logits, o, bias, mask, whole, top_p);
  if (top_p) {
    std::vector<double> cumulative;
    for (const Cand& c : top_p_prefix(p, double(o.top_p), cumulative)) out.weight[size_t(c.id)] = c.w;
    out.total = cumulative.back();
  } else {
    const Walker walk(logits, o, bias, mask);
    each_kept(walk, p.cut, 0, V, [&](const Cand& c) { out.weight[size_t(c.id)] = c.w; });
    out.total = p.total;
  }
  return out;
}

}  // namespace lmhead::sample
