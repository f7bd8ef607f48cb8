#pragma once
// Vocabulary-parallel heads: the rows split into contiguous shards, each run by its own backend
// (a GPU each, or several shards on one device), merged by exchanging per-token summaries rather
// than gathering logits.
#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.hpp"

namespace lmhead {

// Boundaries of `shards` contiguous row ranges of nearly equal size (every row has the same bytes,
// so equal rows are equal bytes). Every boundary but the last is a multiple of `align`, so the
// chunked sum of exponentials (select::kSumExpChunk) never straddles two shards. Returns shards+1
// ascending boundaries from 0 to vocab; throws when a shard would be empty.
std::vector<int64_t> plan_shards(int64_t vocab, int shards, int64_t align = select::kSumExpChunk);

// The head view of rows [first, last) of `head`.
HeadView shard_view(const HeadView& head, int64_t first, int64_t last);

// Host-side steps shared by every sharded backend (CPU shards here, GPU shards in src/cuda).
// Folds a shard's per-token summaries (ids local to the shard, shifted here) into `into`.
void merge_shard_summaries(std::vector<select::TokenSummary>& into, std::vector<select::TokenSummary>& shard,
                           int64_t first_id, int k);
// Places a shard's logits and, when asked, its stages at columns [first, first + rows) of [T, V].
void place_shard_outputs(ForwardOutput& into, const ForwardOutput& shard, const ForwardRequest& req, int tokens,
                         int64_t V, int64_t first, int64_t rows);
// Shards run concurrently: each stage label is booked at the slowest shard's time.
void book_slowest_shard_times(std::vector<StageTime>& into, const std::vector<ForwardOutput>& shards);

using ShardFactory = std::function<std::unique_ptr<Backend>(const HeadView& shard, int index)>;

// Runs every shard (concurrently, one host thread each) and merges: argmax / ties / top-k through
// select::merge (exact, order-independent), logits and stages placed at their global ids, and the
// logprobs' sum of exponentials taken relative to the merged maximum in select::sum_exp's chunk
// order. Sampling runs the sampler's rounds over the shards' own logits (sample_token_in_ranges),
// placing none. The result is byte-identical for any number of shards.
std::unique_ptr<Backend> make_sharded_backend(const HeadView& head, int shards, ShardFactory factory,
                                              int64_t align = select::kSumExpChunk);

}  // namespace lmhead
