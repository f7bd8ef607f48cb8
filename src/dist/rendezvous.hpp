#pragma once
// How the ranks of a one-process-per-GPU head meet: rank 0 publishes NCCL's unique id (opaque
// bytes) to a file that appears atomically (written aside, then renamed), the other ranks wait for
// it with a timeout. Any shared file system, or one machine's /tmp, serves a multi-node launch.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lmhead::dist {

// Rank 0. Refuses a path that already exists: a file left from an earlier launch would hand the
// other ranks a stale id, and they would wait for a rank 0 that never comes.
void publish_id(const std::string& path, const void* bytes, size_t n);

// Ranks > 0: waits until `path` holds exactly n bytes and returns them; throws Error naming the
// file, the rank and the time waited when it does not appear within timeout_s.
std::vector<uint8_t> wait_for_id(const std::string& path, size_t n, double timeout_s, int rank);

// LMHEAD_NCCL_TIMEOUT_S when set (seconds), else 120.
double rendezvous_timeout_s();

}  // namespace lmhead::dist
