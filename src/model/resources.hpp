#pragma once
// Up-front resource checks: a checkpoint whose head cannot fit in this machine's memory is refused
// with the numbers (needed vs available) before anything is allocated or streamed, instead of
// ending in an out-of-memory kill or a machine that pages the head from disk for every token.
#include <cstdint>
#include <string>
#include <string_view>

namespace lmhead {

struct HeadConfig;

// How much memory a CPU run may count on, and where the figure came from (for the message).
struct MemoryLimit {
  uint64_t bytes = 0;  // 0: unknown, nothing is refused
  std::string source;  // "MemTotal in /proc/meminfo", "cgroup memory.max", ...
};

// MemTotal of a /proc/meminfo text in bytes; 0 when the line is missing or malformed.
uint64_t parse_meminfo_total(std::string_view meminfo_text);
// A cgroup v2 memory.max text ("max\n" or a byte count) in bytes; 0 for "max" or malformed text.
uint64_t parse_cgroup_memory_max(std::string_view text);

// Physical memory (MemTotal) or, when lower, this process's cgroup v2 memory limit.
MemoryLimit cpu_memory_limit();

// Bytes a CPU engine allocates beside the mapped head for one pass of up to 16 tokens: the
// activations, every logit stage the scalar reference keeps and the per-token summaries.
uint64_t cpu_working_bytes(const HeadConfig& config);

// Throws Error "<what>: needs N bytes (head H + working W), but only A bytes are available
// (<source>)" when head_bytes + working_bytes exceed the limit. The head is memory-mapped, so it
// need not be resident all at once, but a head larger than physical memory is re-read from disk on
// every token: that is refused too. A limit of 0 bytes (unknown) refuses nothing.
void check_head_fits(uint64_t head_bytes, uint64_t working_bytes, std::string_view what, const MemoryLimit& limit);
// The same against cpu_memory_limit().
void check_head_fits(uint64_t head_bytes, uint64_t working_bytes, std::string_view what);

}  // namespace lmhead
