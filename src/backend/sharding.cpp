#include "backend/sharding.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <thread>

namespace lmhead {

std::vector<int64_t> plan_shards(int64_t vocab, int shards, int64_t align) {
  if (shards < 1) throw Error("a head needs at least one shard, got " + std::to_string(shards));
  if (align < 1) throw Error("shard alignment must be positive");
  const int64_t units = (vocab + align - 1) / align;  // whole alignment units, the last may be partial
  if (units < shards)
    throw Error("a vocabulary of " + std::to_string(vocab) + " rows cannot be split into " + std::to_string(shards) +
                " shards of whole " + std::to_string(align) + "-row chunks");
  std::vector<int64_t> bounds(shards + 1);
  for (int s = 0; s <= shards; ++s) bounds[s] = std::min(vocab, (units * s / shards) * align);
  bounds[shards] = vocab;
  return bounds;
}

HeadView shard_view(const HeadView& head, int64_t first, int64_t last) {
  HeadView v = head;
  v.weights = head.weights + uint64_t(first) * head.row_bytes;
  v.vocab = last - first;
  return v;
}

namespace {

// Places a shard's [T, rows] block at columns [first, first + rows) of a [T, V] array.
void place(std::vector<float>& all, const std::vector<float>& part, int tokens, int64_t V, int64_t first, int64_t rows) {
  if (part.empty()) return;
  if (all.empty()) all.resize(size_t(tokens) * V);
  for (int t = 0; t < tokens; ++t)
    std::copy(part.begin() + t * rows, part.begin() + (t + 1) * rows, all.begin() + t * V + first);
}

void shift_ids(select::TokenSummary& s, int32_t by) {
  if (s.argmax >= 0) s.argmax += by;
  for (int32_t& id : s.tied_ids) id += by;
  for (Candidate& c : s.top) c.id += by;
}

class ShardedBackend final : public Backend {
 public:
  ShardedBackend(const HeadView& head, int shards, const ShardFactory& factory, int64_t align)
      : head_(head), bounds_(plan_shards(head.vocab, shards, align)) {
    for (int s = 0; s < shards; ++s) parts_.push_back(factory(shard_view(head, bounds_[s], bounds_[s + 1]), s));
  }

  std::string name() const override {
    return "sharded " + std::to_string(parts_.size()) + " x " + (parts_.empty() ? "" : parts_[0]->name());
  }

  void forward(const float* hidden, int tokens, const ForwardRequest& req, ForwardOutput& out) override {
    const int n = int(parts_.size());
    const int64_t V = head_.vocab;
    // logprobs need every logit relative to the merged maximum: shards hand back their logits for
    // that (the summaries alone carry argmax, ties and top-k).
    ForwardRequest shard_req = req;
    shard_req.logprobs = false;
    shard_req.want_logits = req.want_logits || req.logprobs;
    std::vector<ForwardOutput> outs(n);
    std::vector<std::exception_ptr> errors(n);
    {
      std::vector<std::thread> workers;
      for (int s = 0; s < n; ++s)
        workers.emplace_back([&, s] {
          try {
            parts_[s]->forward(hidden, tokens, shard_req, outs[s]);
          } catch (...) {
            errors[s] = std::current_exception();
          }
        });
      for (std::thread& w : workers) w.join();
    }
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
    const auto t1 = std::chrono::steady_clock::now();

    out.summaries.assign(tokens, {});
    for (int s = 0; s < n; ++s)
      for (int t = 0; t < tokens; ++t) {
        select::TokenSummary part = outs[s].summaries.at(t);
        shift_ids(part, int32_t(bounds_[s]));
        select::merge(out.summaries[t], part, req.top_k);
      }
    std::vector<float> logits;
    for (int s = 0; s < n; ++s) {
      const int64_t rows = bounds_[s + 1] - bounds_[s];
      place(logits, outs[s].logits, tokens, V, bounds_[s], rows);
      if (req.want_stages) {
        place(out.stages.raw, outs[s].stages.raw, tokens, V, bounds_[s], rows);
        place(out.stages.scaled, outs[s].stages.scaled, tokens, V, bounds_[s], rows);
        place(out.stages.div, outs[s].stages.div, tokens, V, bounds_[s], rows);
        place(out.stages.tanh, outs[s].stages.tanh, tokens, V, bounds_[s], rows);
        place(out.stages.capped, outs[s].stages.capped, tokens, V, bounds_[s], rows);
      }
    }
    if (req.want_stages) out.stages.normed = outs[0].stages.normed;  // every shard normalizes the same input
    out.sum_exp.assign(req.logprobs ? tokens : 0, 0.0);
    for (int t = 0; t < int(out.sum_exp.size()); ++t)
      out.sum_exp[t] = select::sum_exp(logits.data() + size_t(t) * V, V, out.summaries[t].max);
    if (req.want_logits || req.want_stages) out.logits = std::move(logits);
    const auto t2 = std::chrono::steady_clock::now();

    // Shards run concurrently: each stage is booked at the slowest shard's time.
    out.times.clear();
    for (const ForwardOutput& o : outs)
      for (const StageTime& st : o.times) {
        auto it = std::find_if(out.times.begin(), out.times.end(), [&](const StageTime& x) { return x.label == st.label; });
        if (it == out.times.end()) out.times.push_back(st);
        else it->ms = std::max(it->ms, st.ms);
      }
    out.times.push_back({"exchange and merge", std::chrono::duration<double, std::milli>(t2 - t1).count()});
  }

 private:
  HeadView head_;
  std::vector<int64_t> bounds_;
  std::vector<std::unique_ptr<Backend>> parts_;
};

}  // namespace

std::unique_ptr<Backend> make_sharded_backend(const HeadView& head, int shards, ShardFactory factory, int64_t align) {
  return std::make_unique<ShardedBackend>(head, shards, factory, align);
}

}  // namespace lmhead
