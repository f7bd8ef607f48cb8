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

using ShardFactory = std::function<std::unique_ptr<Backend>(const HeadView& shard, int index)>;

// Runs every shard (concurrently, one host thread each) and merges: argmax / ties / top-k through
// select::merge (exact, order-independent), logits and stages placed at their global ids, and the
// logprobs' sum of exponentials taken relative to the merged maximum in select::sum_exp's chunk
// order. The result is byte-identical for any number of shards.
std::unique_ptr<Backend> make_sharded_backend(const HeadView& head, int shards, ShardFactory factory,
                                              int64_t align = select::kSumExpChunk);

}  // namespace lmhead
