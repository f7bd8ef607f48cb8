#pragma once
// Comparing two engines' logits under a bounded-logit policy (numerics.md §11), and the f64 oracle
// every route is measured against.
//
//   lmhead::Policy p = lmhead::parse_policy("max<11,mean<1.25,argmax=all");
//   lmhead::Comparison c = lmhead::compare(a, b, T, V, {.top_k = 5, .policy = p});
//   if (!c.policy_holds) ...
//
// Every metric is computed in double. Inputs must be finite: a NaN or an infinity is an Error
// naming the side, token and index (a comparison involving them has no meaningful distance).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lmhead/lmhead.hpp"

namespace lmhead {

// One clause of a policy: METRIC OP BOUND, e.g. "max<11", "kl<=1e-3", "argmax=all".
struct PolicyClause {
  enum class Metric {
    max_abs,       // max |a - b| over every logit           (spelled max, max|a-b|)
    mean_abs,      // mean |a - b| over every logit          (mean, mean|a-b|)
    kl,            // mean over tokens of KL(softmax(A) || softmax(B))   (kl)
    kl_max,        // the largest per-token KL               (klmax)
    argmax,        // fraction of tokens whose argmax agrees (argmax; "argmax=all" means 1)
    topk,          // mean top-k overlap, |topk(A) n topk(B)| / k  (topk)
    differing,     // count of logits whose f32 bits differ  (differing)
    ulp,           // the largest ulp distance               (ulp)
  };
  enum class Op { lt, le, gt, ge, eq };
  Metric metric = Metric::max_abs;
  Op op = Op::lt;
  double bound = 0;
  std::string text;  // the clause as written, normalized (no spaces)
};

struct Policy {
  std::vector<PolicyClause> clauses;  // all must hold; empty: nothing to hold (always holds)
  std::string text;
};

// Comma-separated clauses, spaces ignored. Throws Error naming the clause and what is wrong (an
// unknown metric, a missing or unknown operator, a bound that is not a finite number, "all"
// anywhere but argmax=all).
Policy parse_policy(std::string_view text);
// The grammar as help text (the CLI prints it; docs/fidelity.md quotes it).
std::string_view policy_grammar();
// A clause's metric and operator as the grammar spells them ("max", "klmax", "<=", ...).
std::string_view to_string(PolicyClause::Metric metric);
std::string_view to_string(PolicyClause::Op op);

struct TokenComparison {
  double max_abs = 0, mean_abs = 0;
  int64_t differing = 0, max_ulp = 0;
  int32_t argmax_a = 0, argmax_b = 0;  // lowest index wins a tie (numerics.md §8)
  bool argmax_agree = true;
  double topk_overlap = 1;             // |topk(A) n topk(B)| / k
  double kl = 0;                       // KL(softmax(A) || softmax(B)), max-subtracted, in double
};

struct ClauseResult {
  PolicyClause clause;
  double measured = 0;
  bool holds = false;
};

struct CompareOptions {
  int top_k = 5;  // clamped to the vocabulary
  Policy policy{};
};

struct Comparison {
  int64_t tokens = 0, vocab = 0;
  int top_k = 0;
  double max_abs = 0, mean_abs = 0;
  int64_t differing = 0;   // f32 bit patterns differ (+0 and -0 count as equal)
  // Over f32 bit patterns ordered like the floats: two values of opposite sign are as many ulps
  // apart as there are floats between them, so near-zero logits of opposite sign give distances
  // near 2^31 while |a - b| stays tiny; read max_ulp beside max_abs.
  int64_t max_ulp = 0;
  int64_t argmax_agree = 0;  // tokens whose argmax is the same
  double topk_overlap = 1;   // mean over tokens
  double kl_mean = 0, kl_max = 0;
  std::vector<TokenComparison> per_token;
  std::vector<ClauseResult> policy;  // one per clause, in order
  bool policy_holds = true;
};

// a and b are [tokens, vocab] row-major. b in double (the oracle) is compared unrounded for the
// absolute differences and KL; ulps and `differing` use b rounded to f32. Throws Error for sizes
// that disagree with tokens x vocab or for a non-finite value.
Comparison compare(std::span<const float> a, std::span<const float> b, int64_t tokens, int64_t vocab,
                   const CompareOptions& options = {});
Comparison compare(std::span<const float> a, std::span<const double> b, int64_t tokens, int64_t vocab,
                   const CompareOptions& options = {});
// The same with b first in double: KL(softmax(oracle) || softmax(route)).
Comparison compare(std::span<const double> a, std::span<const float> b, int64_t tokens, int64_t vocab,
                   const CompareOptions& options = {});

Comparison compare(std::span<const double> a, std::span<const double> b, int64_t tokens, int64_t vocab,
                   const CompareOptions& options = {});

// Evaluates a policy on a finished comparison (compare() does this with options.policy).
std::vector<ClauseResult> evaluate(const Policy& policy, const Comparison& c);

// The picture of `lmhead compare --plot`: one self-contained SVG with the histogram of |a - b|, the
// histogram of the ulp distance, and |a - b| against B's value (B is the reference). a and b of
// equal length; the scatter is drawn as a density grid, so the file stays small at any vocabulary.
std::string comparison_svg(std::span<const double> a, std::span<const double> b, const std::string& title);

// Logits [tokens, vocab] as `lmhead compare` reads a side from a file: a .npy of f32 ([V] reads as
// one token, [T, V] as T tokens) or FILE.gguf:TENSOR, an F32 tensor of ggml dims [V] or [V, T] (a
// golden vectors file's logits_capped). Throws Error naming `spec` and the problem.
struct LogitsFile {
  int64_t tokens = 0, vocab = 0;
  std::vector<float> values;
};
LogitsFile read_logits(const std::string& spec);

// The f64 oracle of a checkpoint's head: RMSNorm (unless input is normed), the dequantized weights
// (exact per numerics.md §3) times the activations, logit scale and soft cap, all in double, no
// activation quantization. Returns [tokens, vocab] capped logits (or the stage asked for).
enum class OracleStage { raw, scaled, capped };
std::vector<double> oracle_logits(const Model& model, std::span<const float> hidden, int tokens,
                                  InputKind input = InputKind::hidden, OracleStage stage = OracleStage::capped,
                                  int threads = 0);

}  // namespace lmhead
