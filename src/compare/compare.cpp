// Bounded-logit comparison (numerics.md §11): distances, argmax and top-k agreement, KL, policies.
#include "lmhead/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace lmhead {
namespace {

// Floats mapped onto integers that are ordered like the floats, so the ulp distance is a
// difference (and +0 / -0 map to the same integer).
int64_t ordered(float f) {
  int32_t i;
  std::memcpy(&i, &f, 4);
  return i < 0 ? int64_t(INT32_MIN) - i : int64_t(i);
}

std::string describe_non_finite(double v) { return std::isnan(v) ? "NaN" : (v > 0 ? "+inf" : "-inf"); }

template <class A>
void check_finite(std::span<const A> v, const char* side, int64_t vocab) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(double(v[i])))
      throw Error(std::string("compare: ") + side + " token " + std::to_string(int64_t(i) / vocab) + ", index " +
                  std::to_string(int64_t(i) % vocab) + " is " + describe_non_finite(double(v[i])) +
                  " (only finite logits can be compared)");
}

template <class A>
int32_t argmax_of(const A* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;  // strict: the lowest index wins a tie
  return int32_t(best);
}

// Top-k ids by value descending, then id ascending (numerics.md §8).
template <class A>
std::vector<int32_t> topk_of(const A* v, int64_t n, int k) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  auto better = [&](int32_t x, int32_t y) { return v[x] > v[y] || (v[x] == v[y] && x < y); };
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), better);
  ids.resize(size_t(k));
  std::sort(ids.begin(), ids.end());
  return ids;
}

// log_softmax in double, max-subtracted: (x - max) - log(sum exp(x - max)).
template <class A>
void log_softmax(const A* v, int64_t n, std::vector<double>& out) {
  out.resize(size_t(n));
  double mx = double(v[0]);
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, double(v[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(double(v[i]) - mx);
  const double ls = std::log(s);
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = (double(v[i]) - mx) - ls;
}

template <class A, class B>
Comparison compare_impl(std::span<const A> a, std::span<const B> b, int64_t tokens, int64_t vocab,
                        const CompareOptions& options) {
  if (tokens <= 0 || vocab <= 0)
    throw Error("compare: shape [" + std::to_string(tokens) + ", " + std::to_string(vocab) + "] is empty");
  const uint64_t n = uint64_t(tokens) * uint64_t(vocab);
  if (a.size() != n || b.size() != n)
    throw Error("compare: A holds " + std::to_string(a.size()) + " values and B " + std::to_string(b.size()) +
                ", expected tokens x vocab = " + std::to_string(n));
  if (options.top_k < 1) throw Error("compare: top-k must be at least 1, not " + std::to_string(options.top_k));
  check_finite(a, "A", vocab);
  check_finite(b, "B", vocab);

  Comparison c;
  c.tokens = tokens;
  c.vocab = vocab;
  c.top_k = int(std::min<int64_t>(options.top_k, vocab));
  c.per_token.resize(size_t(tokens));
  double sum_abs = 0, sum_overlap = 0, sum_kl = 0;
  std::vector<double> la, lb;
  for (int64_t t = 0; t < tokens; ++t) {
    const A* ra = a.data() + t * vocab;
    const B* rb = b.data() + t * vocab;
    TokenComparison& tc = c.per_token[size_t(t)];
    double tok_sum = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      const double d = std::fabs(double(ra[i]) - double(rb[i]));
      tok_sum += d;
      tc.max_abs = std::max(tc.max_abs, d);
      const int64_t u = std::llabs(ordered(float(ra[i])) - ordered(float(rb[i])));
      tc.max_ulp = std::max(tc.max_ulp, u);
      tc.differing += u != 0;
    }
    tc.mean_abs = tok_sum / double(vocab);
    tc.argmax_a = argmax_of(ra, vocab);
    tc.argmax_b = argmax_of(rb, vocab);
    tc.argmax_agree = tc.argmax_a == tc.argmax_b;
    const std::vector<int32_t> ka = topk_of(ra, vocab, c.top_k), kb = topk_of(rb, vocab, c.top_k);
    std::vector<int32_t> common;
    std::set_intersection(ka.begin(), ka.end(), kb.begin(), kb.end(), std::back_inserter(common));
    tc.topk_overlap = double(common.size()) / double(c.top_k);
    log_softmax(ra, vocab, la);
    log_softmax(rb, vocab, lb);
    double kl = 0;
    for (int64_t i = 0; i < vocab; ++i) kl += std::exp(la[size_t(i)]) * (la[size_t(i)] - lb[size_t(i)]);
    tc.kl = kl;

    sum_abs += tok_sum;
    c.max_abs = std::max(c.max_abs, tc.max_abs);
    c.max_ulp = std::max(c.max_ulp, tc.max_ulp);
    c.differing += tc.differing;
    c.argmax_agree += tc.argmax_agree;
    sum_overlap += tc.topk_overlap;
    sum_kl += tc.kl;
    c.kl_max = t == 0 ? tc.kl : std::max(c.kl_max, tc.kl);
  }
  c.mean_abs = sum_abs / double(n);
  c.topk_overlap = sum_overlap / double(tokens);
  c.kl_mean = sum_kl / double(tokens);
  c.policy = evaluate(options.policy, c);
  c.policy_holds = std::all_of(c.policy.begin(), c.policy.end(), [](const ClauseResult& r) { return r.holds; });
  return c;
}

struct MetricName {
  std::string_view name;
  PolicyClause::Metric metric;
};
constexpr MetricName kMetrics[] = {
    {"max", PolicyClause::Metric::max_abs},     {"max|a-b|", PolicyClause::Metric::max_abs},
    {"mean", PolicyClause::Metric::mean_abs},   {"mean|a-b|", PolicyClause::Metric::mean_abs},
    {"kl", PolicyClause::Metric::kl},           {"klmax", PolicyClause::Metric::kl_max},
    {"argmax", PolicyClause::Metric::argmax},   {"topk", PolicyClause::Metric::topk},
    {"differing", PolicyClause::Metric::differing}, {"ulp", PolicyClause::Metric::ulp},
};
struct OpName {
  std::string_view name;
  PolicyClause::Op op;
};
constexpr OpName kOps[] = {{"<", PolicyClause::Op::lt},
                           {"<=", PolicyClause::Op::le},
                           {">", PolicyClause::Op::gt},
                           {">=", PolicyClause::Op::ge},
                           {"=", PolicyClause::Op::eq}};

}  // namespace

std::string_view policy_grammar() {
  return "POLICY := CLAUSE[,CLAUSE...]; CLAUSE := METRIC OP BOUND (spaces ignored), all clauses must hold.\n"
         "  METRIC: max (max|a-b|), mean (mean|a-b|), kl (mean KL(softmax(A)||softmax(B)) over tokens),\n"
         "          klmax (largest per-token KL), argmax (fraction of tokens with the same argmax),\n"
         "          topk (mean top-k overlap, 0..1), differing (logits whose f32 bits differ), ulp (largest ulp distance)\n"
         "  OP: <  <=  >  >=  =\n"
         "  BOUND: a finite number; 'all' only in argmax=all (every token's argmax agrees)\n"
         "  e.g. max<11,mean<1.25   kl<1e-3,argmax=all   topk>=0.8";
}

// The first spelling of each metric in kMetrics is its name.
std::string_view to_string(PolicyClause::Metric metric) {
  for (const MetricName& m : kMetrics)
    if (m.metric == metric) return m.name;
  return "?";
}

std::string_view to_string(PolicyClause::Op op) {
  for (const OpName& o : kOps)
    if (o.op == op) return o.name;
  return "?";
}

Policy parse_policy(std::string_view text) {
  Policy p;
  std::string compact;
  for (char ch : text)
    if (ch != ' ' && ch != '\t') compact += ch;
  p.text = compact;
  if (compact.empty()) return p;
  size_t start = 0;
  while (start <= compact.size()) {
    const size_t comma = compact.find(',', start);
    const std::string clause = compact.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? compact.size() + 1 : comma + 1;
    if (clause.empty()) throw Error("policy '" + std::string(text) + "': an empty clause (two commas, or a comma at an end)");
    // The operator is the first of < > = (metric names never hold them; "max|a-b|" holds '|').
    const size_t at = clause.find_first_of("<>=");
    if (at == std::string::npos)
      throw Error("policy clause '" + clause + "': no operator (one of < <= > >= =)");
    const std::string name = clause.substr(0, at);
    std::string op_text(1, clause[at]);
    if (at + 1 < clause.size() && clause[at + 1] == '=' && clause[at] != '=') op_text += '=';
    const std::string bound = clause.substr(at + op_text.size());
    PolicyClause c;
    c.text = clause;
    bool known = false;
    for (const MetricName& m : kMetrics)
      if (m.name == name) { c.metric = m.metric; known = true; }
    if (!known)
      throw Error("policy clause '" + clause + "': unknown metric '" + name +
                  "' (max, mean, kl, klmax, argmax, topk, differing, ulp)");
    for (const OpName& o : kOps)
      if (o.name == op_text) c.op = o.op;
    if (bound.empty()) throw Error("policy clause '" + clause + "': no bound after '" + op_text + "'");
    if (bound.find_first_of("<>=") != std::string::npos)
      throw Error("policy clause '" + clause + "': more than one operator");
    if (bound == "all") {
      if (c.metric != PolicyClause::Metric::argmax || c.op != PolicyClause::Op::eq)
        throw Error("policy clause '" + clause + "': 'all' is only allowed as argmax=all");
      c.bound = 1.0;
    } else {
      size_t used = 0;
      double v = 0;
      try {
        v = std::stod(bound, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != bound.size() || !std::isfinite(v))
        throw Error("policy clause '" + clause + "': bound '" + bound + "' is not a finite number");
      c.bound = v;
    }
    p.clauses.push_back(c);
  }
  return p;
}

std::vector<ClauseResult> evaluate(const Policy& policy, const Comparison& c) {
  std::vector<ClauseResult> out;
  for (const PolicyClause& clause : policy.clauses) {
    ClauseResult r;
    r.clause = clause;
    switch (clause.metric) {
      case PolicyClause::Metric::max_abs: r.measured = c.max_abs; break;
      case PolicyClause::Metric::mean_abs: r.measured = c.mean_abs; break;
      case PolicyClause::Metric::kl: r.measured = c.kl_mean; break;
      case PolicyClause::Metric::kl_max: r.measured = c.kl_max; break;
      case PolicyClause::Metric::argmax: r.measured = c.tokens ? double(c.argmax_agree) / double(c.tokens) : 1.0; break;
      case PolicyClause::Metric::topk: r.measured = c.topk_overlap; break;
      case PolicyClause::Metric::differing: r.measured = double(c.differing); break;
      case PolicyClause::Metric::ulp: r.measured = double(c.max_ulp); break;
    }
    const double m = r.measured, b = clause.bound;
    switch (clause.op) {
      case PolicyClause::Op::lt: r.holds = m < b; break;
      case PolicyClause::Op::le: r.holds = m <= b; break;
      case PolicyClause::Op::gt: r.holds = m > b; break;
      case PolicyClause::Op::ge: r.holds = m >= b; break;
      case PolicyClause::Op::eq: r.holds = m == b; break;
    }
    out.push_back(r);
  }
  return out;
}

Comparison compare(std::span<const float> a, std::span<const float> b, int64_t tokens, int64_t vocab,
                   const CompareOptions& options) {
  return compare_impl(a, b, tokens, vocab, options);
}
Comparison compare(std::span<const float> a, std::span<const double> b, int64_t tokens, int64_t vocab,
                   const CompareOptions& options) {
  return compare_impl(a, b, tokens, vocab, options);
}
Comparison compare(std::span<const double> a, std::span<const float> b, int64_t tokens, int64_t vocab,
                   const CompareOptions& options) {
  return compare_impl(a, b, tokens, vocab, options);
}

Comparison compare(std::span<const double> a, std::span<const double> b, int64_t tokens, int64_t vocab,
                   const CompareOptions& options) {
  return compare_impl(a, b, tokens, vocab, options);
}

}  // namespace lmhead
