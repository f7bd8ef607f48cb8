#include "sample/sampler.hpp"

#include <algorithm>
#include <barrier>
#include <bit>
#include <exception>
#include <mutex>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "sample/boundary.hpp"
#include "sample/exp.hpp"
#include "sample/row.hpp"
#include "sample/philox.hpp"
#include "sample/weight_math.hpp"

namespace lmhead::sample {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Cand {
  double z;  // the id's logit after bias and temperature
  int32_t id;
};

// Rank order of numerics.md §9: z descending, then id ascending (the argmax's tie rule).
bool ranks_before(const Cand& a, const Cand& b) {
  if (a.z != b.z) return a.z > b.z;
  return a.id < b.id;
}

using Bias = std::vector<std::pair<int32_t, float>>;

Bias sorted_bias(const SamplingOptions& o) {
  Bias b = o.logit_bias;
  std::sort(b.begin(), b.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  return b;
}

bool masked_out(const uint32_t* mask, int64_t i) { return mask != nullptr && ((mask[i >> 5] >> (i & 31)) & 1u) == 0; }

// Each id's z, W and rank bucket for one call, reused by the next call on the same thread: the
// vocabulary's arrays (3.6 MB at 202,048 ids) are not allocated and faulted in for every token.
struct Scratch {
  std::vector<double> z;       // NaN where the id's mask bit is 0
  std::vector<uint64_t> w;     // the integer weight; 0 outside the kept (later the final) set
  std::vector<uint16_t> rank;  // top-p: rank_bucket(max - z) where w != 0
};
Scratch& scratch(int64_t V) {
  thread_local Scratch s;
  if (int64_t(s.z.size()) < V) {
    s.z.resize(size_t(V));
    s.w.resize(size_t(V));
    s.rank.resize(size_t(V));
  }
  return s;
}

void push_top(std::vector<Cand>& top, int k, const Cand& c) {
  if (static_cast<int>(top.size()) == k && !ranks_before(c, top.back())) return;
  top.insert(std::upper_bound(top.begin(), top.end(), c, ranks_before), c);
  if (static_cast<int>(top.size()) > k) top.pop_back();
}

bool included(double z) { return std::isfinite(z); }

// Round 1 of a range: its maximum z and its k best candidates (exact to merge: max, and "k best
// in a total order"). Leaves each id's z in the scratch for round 2.
struct Round1 {
  double max = kNegInf;
  std::vector<Cand> top;
};

// `x` is the range's own logits: id i's at x[i - begin].
Round1 round1(const float* x, const SamplingOptions& o, const Bias& bias, const uint32_t* mask, int64_t begin,
              int64_t end, double* z) {
  const double t = double(o.temperature);
  Round1 r;
  r.max = scaled_logits(x, end - begin, t, z + begin);
  auto it = std::lower_bound(bias.begin(), bias.end(), std::pair<int32_t, float>(int32_t(begin), -INFINITY));
  const bool biased = it != bias.end() && it->first < end;
  for (; it != bias.end() && it->first < end; ++it) z[it->first] = scaled_logit(x[it->first - begin], it->second, t);
  if (mask != nullptr)
    for (int64_t i = begin; i < end; ++i)
      if (masked_out(mask, i)) z[i] = std::numeric_limits<double>::quiet_NaN();
  if (biased || mask != nullptr) r.max = max_finite(z + begin, end - begin);
  if (o.top_k > 0) {
    // Most ids fail the first comparison against the current k-th once the list is full.
    double kth = kNegInf;
    for (int64_t i = begin; i < end; ++i) {
      if (!(z[i] >= kth) || !included(z[i])) continue;
      push_top(r.top, o.top_k, Cand{z[i], int32_t(i)});
      if (static_cast<int>(r.top.size()) == o.top_k) kth = r.top.back().z;
    }
  }
  return r;
}

// Round 1 without bias, mask or top-k (`direct`): z is the scaled logit itself, so nothing is
// stored; each chunk's z pass through a buffer that stays in L1 (the maximum only).
Round1 round1_direct(const float* x, double t, int64_t begin, int64_t end) {
  double z[kChunk];
  Round1 r;
  for (int64_t b = begin; b < end;) {
    const int64_t e = std::min(end, (b / kChunk + 1) * kChunk);
    r.max = std::max(r.max, scaled_logits(x + (b - begin), e - b, t, z));
    b = e;
  }
  return r;
}

// What every range needs after round 1: the global maximum and the top-k list (when k ids or
// more are included, only they can be kept). In the direct mode (no bias, mask or top-k) z is not
// kept in the scratch but recomputed from the logits where needed: the same double either way.
struct Cut {
  double max = kNegInf;
  bool has_k = false;
  std::vector<Cand> top;
  double min_p = 0;
  bool direct = false;
  bool keep_weights = true;  // every kept id's W stays in the scratch (top-p, kept_weights)
  double t = 1;
};

// The z of ids [b, b + n) of the range whose logits x start at id `begin`: the scratch's, or in the
// direct mode formed again into `buffer` (the same doubles round 1 formed).
const double* chunk_z(const Cut& cut, const float* x, int64_t begin, int64_t b, int64_t n, const Scratch& s,
                      double* buffer) {
  if (!cut.direct) return s.z.data() + b;
  scaled_logits(x + (b - begin), n, cut.t, buffer);
  return buffer;
}

// Round 2 of a range: the integer weight of each kept id (left in the scratch), their sums per
// 512-id chunk (a chunk cut by a range bound gets a partial sum from each side) and, for top-p,
// per rank bucket.
struct Round2 {
  int64_t first_chunk = 0;
  std::vector<uint64_t> chunk_sums;
  std::vector<uint64_t> bucket_mass;  // top-p: kRankBuckets sums
};

uint64_t weight_of(double w, double min_p) { return passes_min_p(w, min_p) ? integer_weight(w) : 0; }

Round2 round2(const Cut& cut, const float* x, int64_t begin, int64_t end, Scratch& s, bool top_p) {
  Round2 r;
  r.first_chunk = begin / kChunk;
  r.chunk_sums.assign(size_t((end - 1) / kChunk - r.first_chunk + 1), 0);
  if (top_p) r.bucket_mass.assign(size_t(kRankBuckets), 0);
  uint64_t* w = s.w.data();
  uint16_t* rank = s.rank.data();
  if (cut.has_k) {
    // Only the k ids of the list can be kept: no pass over the range's weights.
    std::fill(w + begin, w + end, uint64_t(0));
    for (const Cand& c : cut.top) {
      if (c.id < begin || c.id >= end) continue;
      const uint64_t W = weight_of(sample::exp(c.z - cut.max), cut.min_p);
      w[c.id] = W;
      rank[c.id] = uint16_t(rank_bucket(cut.max - c.z));
      r.chunk_sums[size_t(c.id / kChunk - r.first_chunk)] += W;
      if (top_p) r.bucket_mass[rank[c.id]] += W;
    }
    return r;
  }
  double z_chunk[kChunk];
  uint64_t w_chunk[kChunk];
  for (int64_t b = begin; b < end;) {
    const int64_t e = std::min(end, (b / kChunk + 1) * kChunk);
    const double* z = chunk_z(cut, x, begin, b, e - b, s, z_chunk);
    // Without top-p or kept_weights the weights are not read again: the draw recomputes its chunk.
    uint64_t* wb = cut.keep_weights ? w + b : w_chunk;
    r.chunk_sums[size_t(b / kChunk - r.first_chunk)] +=
        row_weights(z, e - b, cut.max, cut.min_p, wb, top_p ? rank + b : nullptr);
    if (top_p)  // while the chunk is in cache; w = 0 adds nothing
      for (int64_t i = b; i < e; ++i) r.bucket_mass[rank[i]] += w[i];
    b = e;
  }
  return r;
}

// Round 3 of a range, top-p only: its kept ids of the boundary bucket (they travel), and, in the
// same pass, the local half of round 4: ids of later buckets leave the set (weight 0) and so do
// the boundary bucket's until the boundary is known, the chunk sums becoming those of the ids
// that certainly stay.
void round3(const Cut& cut, const float* x, int bucket, int64_t begin, int64_t end, Scratch& s, Round2& r,
            std::vector<Boundary>& out) {
  for (int64_t b = begin; b < end;) {
    const int64_t e = std::min(end, (b / kChunk + 1) * kChunk);
    int32_t found[kChunk];
    uint64_t found_w[kChunk];
    int n = 0;
    const uint64_t sum = split_at_bucket(s.w.data() + b, s.rank.data() + b, e - b, bucket, found, found_w, &n);
    for (int j = 0; j < n; ++j) {
      const int64_t id = b + found[j];
      const double z = cut.direct ? scaled_logit(x[id - begin], 0.0f, cut.t) : s.z[size_t(id)];
      out.push_back(Boundary{descending_key(z), int32_t(id), found_w[j]});
    }
    r.chunk_sums[size_t(b / kChunk - r.first_chunk)] = sum;
    b = e;
  }
}

// Round 4 of a range, top-p only: the boundary bucket's ids up to the boundary (`in`) return.
void round4(std::span<const Boundary> in, int64_t begin, int64_t end, Scratch& s, Round2& r) {
  for (const Boundary& c : in)
    if (c.id >= begin && c.id < end) {
      s.w[size_t(c.id)] = c.w;
      r.chunk_sums[size_t(c.id / kChunk - r.first_chunk)] += c.w;
    }
}

// The plan of one token at temperature > 0: every range's rounds, leaving the final set's integer
// weights in the scratch and their chunk sums, plus the total S'.
struct Plan {
  std::vector<Round2> parts;
  uint64_t total = 0;
  Cut cut;
};

// Runs the rounds of `n` ranges: round(k, r) for every range r, then merge(k) once, for k = 0,
// 1, ... until a merge returns false. On workers, the whole plan is one wake-up of the pool: the
// workers meet at a barrier after each round and its completion runs the merge (a wake-up per
// round cost about a fifth of a token's sampling on the 2-core VM). Ranges write disjoint ids of
// the one scratch and their own summaries; merges read the summaries in range order.
void run_rounds(size_t n, const Workers* workers, const std::function<void(int, size_t)>& round,
                const std::function<bool(int)>& merge) {
  if (workers == nullptr || workers->count <= 1 || n <= 1) {
    for (int k = 0;; ++k) {
      for (size_t r = 0; r < n; ++r) round(k, r);
      if (!merge(k)) return;
    }
  }
  const size_t count = size_t(workers->count);
  int k = 0;
  bool more = true;
  std::exception_ptr error;
  std::mutex error_mutex;
  // The completion must not throw: an error stops every worker at the barrier and is rethrown here.
  auto completion = [&]() noexcept {
    if (!error) {
      try {
        more = merge(k);
      } catch (...) {
        error = std::current_exception();
      }
    }
    more = more && !error;
    ++k;
  };
  std::barrier sync(std::ptrdiff_t(count), completion);
  workers->run([&](int w) {
    for (;;) {
      try {
        for (size_t r = size_t(w); r < n; r += count) round(k, r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
      sync.arrive_and_wait();  // every worker arrives, or the others would wait forever
      if (!more) return;
    }
  });
  if (error) std::rethrow_exception(error);
}

// Range r covers ids [bounds[r], bounds[r + 1]) and reads its logits from starts[r] (id i's at
// starts[r][i - bounds[r]]): one array or a buffer per shard alike.
Plan plan(std::span<const float* const> starts, const SamplingOptions& o, const Bias& bias, const uint32_t* mask,
          std::span<const int64_t> bounds, Scratch& s, const Workers* workers, bool keep_weights) {
  const size_t n = bounds.size() - 1;
  const bool top_p = o.top_p < 1;
  Plan p;
  Cut& cut = p.cut;
  cut.min_p = double(o.min_p);
  cut.t = double(o.temperature);
  cut.direct = bias.empty() && mask == nullptr && o.top_k == 0;
  cut.keep_weights = keep_weights || top_p || !cut.direct;
  std::vector<Round1> first(n);
  p.parts.resize(n);
  int bucket = 0;
  uint64_t before = 0, target = 0;
  std::vector<std::vector<Boundary>> sent(n);
  std::vector<Boundary> cands;
  size_t last = 0;
  auto round = [&](int k, size_t r) {
    if (k == 0)
      first[r] = cut.direct ? round1_direct(starts[r], cut.t, bounds[r], bounds[r + 1])
                            : round1(starts[r], o, bias, mask, bounds[r], bounds[r + 1], s.z.data());
    if (k == 1) p.parts[r] = round2(cut, starts[r], bounds[r], bounds[r + 1], s, top_p);
    // What travels in round 3: each range's candidates of the one boundary bucket.
    if (k == 2) round3(cut, starts[r], bucket, bounds[r], bounds[r + 1], s, p.parts[r], sent[r]);
  };
  auto merge = [&](int k) {
    if (k == 0) {
      for (const Round1& part : first) {
        cut.max = std::max(cut.max, part.max);
        for (const Cand& c : part.top) push_top(cut.top, o.top_k, c);
      }
      if (cut.max == kNegInf)
        throw Error("no token can be sampled: the allowed-token mask (or non-finite logits) excludes every id");
      cut.has_k = o.top_k > 0 && static_cast<int>(cut.top.size()) == o.top_k;
      return true;
    }
    if (k == 1) {
      uint64_t total = 0;
      for (const Round2& part : p.parts)
        for (uint64_t c : part.chunk_sums) total += c;
      p.total = total;
      if (!top_p) return false;
      // The bucket where the mass in rank order reaches P: lower buckets are in, higher ones out.
      std::vector<uint64_t> mass(size_t(kRankBuckets), 0);
      for (const Round2& part : p.parts)
        for (size_t b = 0; b < mass.size(); ++b) mass[b] += part.bucket_mass[b];
      target = top_p_target(total, double(o.top_p));
      while (before + mass[size_t(bucket)] < target) before += mass[size_t(bucket++)];
      return true;
    }
    for (const auto& part : sent) cands.insert(cands.end(), part.begin(), part.end());
    last = select_boundary(cands, before, target, p.total);
    return false;
  };
  run_rounds(n, workers, round, merge);
  if (top_p) {
    // Round 4 here, not on the workers: it visits only the boundary bucket's ids up to the
    // boundary (a few thousand), less than a wake-up costs.
    const std::span<const Boundary> in(cands.data(), last + 1);
    for (size_t r = 0; r < n; ++r) round4(in, bounds[r], bounds[r + 1], s, p.parts[r]);
  }
  return p;
}

// The draw: the chunk holding the target is found from the chunk sums; only its ids are walked.
// Where the weights were not kept (the direct mode at temperature alone), that chunk's are
// recomputed from the logits of the ranges it overlaps: the same integers round 2 summed.
int32_t draw(const Plan& p, std::span<const float* const> starts, std::span<const int64_t> bounds, const Scratch& s,
             int64_t V, uint64_t target) {
  std::vector<uint64_t> chunks(size_t((V + kChunk - 1) / kChunk), 0);
  for (const Round2& part : p.parts)
    for (size_t c = 0; c < part.chunk_sums.size(); ++c) chunks[size_t(part.first_chunk) + c] += part.chunk_sums[c];
  uint64_t before = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (before + chunks[c] > target) {
      const int64_t first = int64_t(c) * kChunk, last = std::min(V, first + kChunk);
      const uint64_t* w = s.w.data() + first;
      uint64_t w_chunk[kChunk];
      if (!p.cut.keep_weights) {
        double z[kChunk];
        for (size_t r = 0; r + 1 < bounds.size(); ++r) {
          const int64_t b = std::max(first, bounds[r]), e = std::min(last, bounds[r + 1]);
          if (b >= e) continue;
          row_weights(chunk_z(p.cut, starts[r], bounds[r], b, e - b, s, z), e - b, p.cut.max, p.cut.min_p,
                      w_chunk + (b - first), nullptr);
        }
        w = w_chunk;
      }
      for (int64_t i = first; i < last; ++i) {
        before += w[i - first];
        if (before > target) return int32_t(i);
      }
      break;
    }
    before += chunks[c];
  }
  throw Error("internal: the draw's target " + std::to_string(target) + " is not below the total weight");
}

void check_bounds(std::span<const int64_t> bounds, int64_t V) {
  if (bounds.size() < 2 || bounds.front() != 0 || bounds.back() != V)
    throw Error("sampling ranges must run from id 0 to the vocabulary size");
  for (size_t i = 1; i < bounds.size(); ++i)
    if (bounds[i] <= bounds[i - 1]) throw Error("sampling ranges must be ascending and non-empty");
}

int32_t greedy(std::span<const float* const> starts, const Bias& bias, const uint32_t* mask,
               std::span<const int64_t> bounds) {
  double best = kNegInf;
  int32_t best_id = -1;
  for (size_t r = 0; r + 1 < bounds.size(); ++r) {
    auto it = std::lower_bound(bias.begin(), bias.end(), std::pair<int32_t, float>(int32_t(bounds[r]), -INFINITY));
    for (int64_t i = bounds[r]; i < bounds[r + 1]; ++i) {
      double v = double(starts[r][i - bounds[r]]);
      if (it != bias.end() && it->first == i) v += double((it++)->second);
      if (masked_out(mask, i) || std::isnan(v)) continue;
      if (best_id < 0 || v > best) { best = v; best_id = int32_t(i); }
    }
  }
  if (best_id < 0) throw Error("no token can be chosen: the allowed-token mask (or NaN logits) excludes every id");
  return best_id;
}

// One range per worker, on chunk bounds (a chunk's sum then comes from one range), fewer when the
// vocabulary has fewer chunks than workers.
std::vector<int64_t> worker_bounds(int64_t V, int workers) {
  const int64_t chunks = (V + kChunk - 1) / kChunk;
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(workers, chunks));
  std::vector<int64_t> b;
  for (int64_t i = 0; i < parts; ++i) b.push_back(chunks * i / parts * kChunk);
  b.push_back(V);
  return b;
}

}  // namespace

// A quickselect weighted by W: each step keeps the side of a pivot that holds the crossing, so the
// work is linear in the number of candidates (expected) where a sort is n log n. Median-of-3
// pivots make the sorted and reversed orders the ranges send cheap; against orders that defeat
// them anyway, the part left after 2 log2(n) rounds is sorted, which bounds the worst case at
// n log n (introselect). Both find the same candidate: the first in the total order whose running
// mass reaches the target.
size_t select_boundary(std::vector<Boundary>& c, uint64_t before, uint64_t target, uint64_t& reached) {
  size_t lo = 0, hi = c.size();
  int rounds_left = 2 * int(std::bit_width(c.size()));
  for (;;) {
    if (hi - lo <= 16 || rounds_left-- == 0) {
      std::sort(c.begin() + std::ptrdiff_t(lo), c.begin() + std::ptrdiff_t(hi), boundary_before);
      for (size_t j = lo; j < hi; ++j)
        if ((before += c[j].w) >= target) { reached = before; return j; }
      throw Error("internal: the top-p boundary bucket's candidates do not reach the target mass " +
                  std::to_string(target));
    }
    const size_t mid = lo + (hi - lo) / 2;
    // Order c[lo], c[mid], c[hi - 1]; the median goes last, as the pivot.
    if (boundary_before(c[mid], c[lo])) std::swap(c[mid], c[lo]);
    if (boundary_before(c[hi - 1], c[lo])) std::swap(c[hi - 1], c[lo]);
    if (boundary_before(c[mid], c[hi - 1])) std::swap(c[mid], c[hi - 1]);
    const Boundary pivot = c[hi - 1];
    const auto split = std::partition(c.begin() + std::ptrdiff_t(lo), c.begin() + std::ptrdiff_t(hi - 1),
                                      [&](const Boundary& x) { return boundary_before(x, pivot); });
    const size_t m = size_t(split - c.begin());
    std::swap(c[m], c[hi - 1]);
    uint64_t less = 0;
    for (size_t j = lo; j < m; ++j) less += c[j].w;
    if (before + less >= target) { hi = m; continue; }  // the crossing is before the pivot
    if (before + less + c[m].w >= target) { reached = before + less + c[m].w; return m; }
    before += less + c[m].w;
    lo = m + 1;
  }
}

void validate(const SamplingOptions& o, int64_t vocab, int tokens) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    throw Error("temperature must be a finite number >= 0 (0: greedy), got " + std::to_string(o.temperature));
  if (!(o.top_p > 0 && o.top_p <= 1)) throw Error("top-p must be in (0, 1], got " + std::to_string(o.top_p));
  if (!(o.min_p >= 0 && o.min_p <= 1)) throw Error("min-p must be in [0, 1], got " + std::to_string(o.min_p));
  if (o.top_k < 0) throw Error("sample top-k must be >= 0 (0: off), got " + std::to_string(o.top_k));
  if (o.temperature > 0 && vocab > kMaxSampledVocab)
    throw Error("sampling supports vocabularies of at most " + std::to_string(kMaxSampledVocab) + " ids (2^23: the " +
                "sum of the integer weights must stay below 2^64), this one has " + std::to_string(vocab) +
                "; use temperature 0 (greedy)");
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

namespace {

// Both entry points after their ranges are known: starts[r] holds ids [bounds[r], bounds[r + 1]).
int32_t sample_ranges(std::span<const float* const> starts, std::span<const int64_t> bounds, int64_t V,
                      const SamplingOptions& o, const uint32_t* mask, int64_t position, const Workers* workers) {
  check_bounds(bounds, V);
  const Bias bias = sorted_bias(o);
  if (o.temperature == 0) return greedy(starts, bias, mask, bounds);
  // The calling thread's scratch, shared by the workers: each writes only its ranges' ids.
  Scratch& s = scratch(V);
  const Plan p = plan(starts, o, bias, mask, bounds, s, workers, false);
  return draw(p, starts, bounds, s, V, draw_target(random128(o.seed, position, Stream::draw), p.total));
}

}  // namespace

int32_t sample_token(const float* logits, int64_t V, const SamplingOptions& o, const uint32_t* mask, int64_t position,
                     std::span<const int64_t> bounds, const Workers* workers) {
  const int64_t whole[2] = {0, V};
  std::vector<int64_t> spread;
  if (bounds.empty() && workers != nullptr && workers->count > 1) {
    spread = worker_bounds(V, workers->count);
    bounds = spread;
  }
  if (bounds.empty()) bounds = whole;
  std::vector<const float*> starts;
  for (size_t r = 0; r + 1 < bounds.size(); ++r) starts.push_back(logits + bounds[size_t(r)]);
  return sample_ranges(starts, bounds, V, o, mask, position, workers);
}

int32_t sample_token_in_ranges(std::span<const RangeLogits> ranges, int64_t V, const SamplingOptions& o,
                               const uint32_t* mask, int64_t position, const Workers* workers) {
  if (ranges.empty()) throw Error("sampling needs at least one range of logits");
  std::vector<int64_t> bounds;
  std::vector<const float*> starts;
  for (const RangeLogits& r : ranges) {
    if (!bounds.empty() && r.begin != bounds.back())
      throw Error("sampling ranges must follow each other without gaps: one ends at " + std::to_string(bounds.back()) +
                  ", the next begins at " + std::to_string(r.begin));
    if (bounds.empty()) bounds.push_back(r.begin);
    bounds.push_back(r.end);
    starts.push_back(r.logits);
  }
  return sample_ranges(starts, bounds, V, o, mask, position, workers);
}

void sample_tokens(const float* logits, int64_t V, int n, const SamplingOptions& o, int first, int32_t* out,
                   const Workers* workers) {
  auto one = [&](int t, const Workers* w) {
    const int global = first + t;
    out[t] = sample_token(logits + size_t(t) * size_t(V), V, o, mask_row(o, V, global), o.position + global, {}, w);
  };
  const int count = workers != nullptr ? std::max(1, workers->count) : 1;
  // Whole tokens need no merges nor wake-ups between rounds; each runs on its worker's scratch.
  const int whole = count > 1 ? n / count * count : 0;
  if (whole > 0)
    workers->run([&](int w) {
      for (int t = w; t < whole; t += count) one(t, nullptr);
    });
  for (int t = whole; t < n; ++t) one(t, workers);
}

Weights kept_weights(const float* logits, int64_t V, const SamplingOptions& o, const uint32_t* mask) {
  const int64_t whole[2] = {0, V};
  const Bias bias = sorted_bias(o);
  Weights out;
  out.weight.assign(size_t(V), 0.0);
  const float* const start[1] = {logits};
  if (o.temperature == 0) {  // greedy: all mass on the one token
    out.weight[size_t(greedy(start, bias, mask, whole))] = 1.0;
    out.total = 1.0;
    return out;
  }
  Scratch& s = scratch(V);
  const Plan p = plan(start, o, bias, mask, whole, s, nullptr, true);
  for (int64_t i = 0; i < V; ++i) out.weight[size_t(i)] = double(s.w[size_t(i)]);
  out.total = double(p.total);
  return out;
}

}  // namespace lmhead::sample
