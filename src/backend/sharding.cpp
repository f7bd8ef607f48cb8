#include "backend/sharding.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <thread>

#include "sample/sampler.hpp"

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
  if (head.head_bias) v.head_bias = head.head_bias + first;
  return v;
}

namespace {

void place(std::vector<float>& all, const std::vector<float>& part, int tokens, int64_t V, int64_t first, int64_t rows) {
  if (part.empty()) return;
  if (all.empty()) all.resize(size_t(tokens) * size_t(V));
  for (int t = 0; t < tokens; ++t)
    std::copy(part.begin() + size_t(t) * size_t(rows), part.begin() + size_t(t + 1) * size_t(rows),
              all.begin() + size_t(t) * size_t(V) + size_t(first));
}

}  // namespace

void merge_shard_summaries(std::vector<select::TokenSummary>& into, std::vector<select::TokenSummary>& shard,
                           int64_t first_id, int k) {
  for (size_t t = 0; t < into.size(); ++t) {
    select::TokenSummary& s = shard.at(t);
    const int32_t by = int32_t(first_id);
    if (s.argmax >= 0) s.argmax += by;
    for (int32_t& id : s.tied_ids) id += by;
    for (Candidate& c : s.top) c.id += by;
    select::merge(into[t], s, k);
  }
}

void place_shard_outputs(ForwardOutput& into, const ForwardOutput& shard, const ForwardRequest& req, int tokens,
                         int64_t V, int64_t first, int64_t rows) {
  place(into.logits, shard.logits, tokens, V, first, rows);
  if (!req.want_stages) return;
  place(into.stages.raw, shard.stages.raw, tokens, V, first, rows);
  place(into.stages.scaled, shard.stages.scaled, tokens, V, first, rows);
  place(into.stages.div, shard.stages.div, tokens, V, first, rows);
  place(into.stages.tanh, shard.stages.tanh, tokens, V, first, rows);
  place(into.stages.capped, shard.stages.capped, tokens, V, first, rows);
  if (first == 0) into.stages.normed = shard.stages.normed;  // every shard normalizes the same input
}

void book_slowest_shard_times(std::vector<StageTime>& into, const std::vector<ForwardOutput>& shards) {
  into.clear();
  for (const ForwardOutput& o : shards)
    for (const StageTime& st : o.times) {
      auto it = std::find_if(into.begin(), into.end(), [&](const StageTime& x) { return x.label == st.label; });
      if (it == into.end()) into.push_back(st);
      else it->ms = std::max(it->ms, st.ms);
    }
}

namespace {

class ShardedBackend final : public Backend {
 public:
  ShardedBackend(const HeadView& head, int shards, const ShardFactory& factory, int64_t align)
      : head_(head), bounds_(plan_shards(head.vocab, shards, align)) {
    for (int s = 0; s < shards; ++s) parts_.push_back(factory(shard_view(head, bounds_[s], bounds_[s + 1]), s));
  }

  std::string name() const override {
    return "sharded " + std::to_string(parts_.size()) + " x " + (parts_.empty() ? "" : parts_[0]->name());
  }
  bool takes_normed_input() const override {
    for (const auto& p : parts_)
      if (!p->takes_normed_input()) return false;
    return !parts_.empty();
  }
  bool takes_llamacpp_route() const override {
    for (const auto& p : parts_)
      if (!p->takes_llamacpp_route()) return false;
    return !parts_.empty();
  }

  // Every option: the shards keep their logits and only the summaries of numerics.md §9's rounds
  // pass between them (sample::sample_token_in_ranges), so sampling gathers no [T, V] logits.
  bool samples(const SamplingOptions&) const override { return true; }

  void forward(const float* hidden, int tokens, const ForwardRequest& req, ForwardOutput& out) override {
    const int n = int(parts_.size());
    const int64_t V = head_.vocab;
    // logprobs need every logit relative to the merged maximum: shards hand back their logits for
    // that (the summaries alone carry argmax, ties and top-k). Sampling reads each shard's logits
    // where the shard left them; they are placed at their global ids only when asked for.
    ForwardRequest shard_req = req;
    shard_req.logprobs = false;
    shard_req.sampling = nullptr;
    const bool place_logits = req.want_logits || req.logprobs;
    shard_req.want_logits = place_logits || req.sampling != nullptr;
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
    out.logits.clear();
    out.stages = {};
    for (int s = 0; s < n; ++s) {
      merge_shard_summaries(out.summaries, outs[s].summaries, bounds_[s], req.top_k);
      if (place_logits || req.want_stages)
        place_shard_outputs(out, outs[s], req, tokens, V, bounds_[s], bounds_[s + 1] - bounds_[s]);
    }
    out.sum_exp.assign(req.logprobs ? tokens : 0, 0.0);
    for (int t = 0; t < int(out.sum_exp.size()); ++t)
      out.sum_exp[t] = select::sum_exp(out.logits.data() + size_t(t) * V, V, out.summaries[t].max);
    if (!req.want_logits && !req.want_stages) out.logits.clear();  // were only fetched for the logprobs
    const auto t2 = std::chrono::steady_clock::now();
    out.sampled.clear();
    if (req.sampling != nullptr) {
      std::vector<sample::RangeLogits> ranges(static_cast<size_t>(n));
      for (int t = 0; t < tokens; ++t) {
        for (int s = 0; s < n; ++s) {
          const int64_t rows = bounds_[s + 1] - bounds_[s];
          ranges[size_t(s)] = {outs[s].logits.data() + size_t(t) * size_t(rows), bounds_[s], bounds_[s + 1]};
        }
        const uint32_t* mask = req.sample_mask == nullptr ? nullptr : req.sample_mask + size_t(t) * req.sample_mask_stride;
        out.sampled.push_back(
            sample::sample_token_in_ranges(ranges, V, *req.sampling, mask, req.sample_position + t));
      }
    }
    book_slowest_shard_times(out.times, outs);
    out.times.push_back({"exchange and merge", std::chrono::duration<double, std::milli>(t2 - t1).count()});
    if (req.sampling != nullptr)
      out.times.push_back({"sampling over the shards' ranges",
                           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t2).count()});
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
