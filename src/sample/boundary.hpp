#pragma once
// The top-p boundary inside the one rank bucket where the kept mass reaches P (sampler.cpp's
// round 3), apart so that the tests can feed it orders a quickselect handles badly.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace lmhead::sample {

// A kept id of the boundary bucket: (rank key, id, W). Ranges send them in no particular order.
struct Boundary {
  uint64_t key;
  int32_t id;
  uint64_t w;
};
inline bool boundary_before(const Boundary& a, const Boundary& b) {
  return a.key != b.key ? a.key < b.key : a.id < b.id;
}

// The candidate in rank order at which the running mass, starting from `before` (the buckets
// ahead of this one), first reaches `target` (the candidates' mass must get there). Returns its
// index and leaves the mass at the boundary (inclusive) in `reached`; the candidates ranking
// before it end up in front of it. A pure function of the set: the input order changes neither
// the index's candidate nor the set in front of it.
size_t select_boundary(std::vector<Boundary>& c, uint64_t before, uint64_t target, uint64_t& reached);

}  // namespace lmhead::sample
