#include "model/resources.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

#include "lmhead/bench.hpp"  // with_commas, for messages and the tool
#include "lmhead/error.hpp"
#include "lmhead/lmhead.hpp"

namespace lmhead {

std::string with_commas(uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

namespace {

constexpr int64_t kTokensPerPass = 16;  // the engine's pass size (engine.cpp)

std::string read_small_file(const char* path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Digits at the start of `s` (after blanks) as an unsigned value; false on no digits or overflow.
bool leading_number(std::string_view s, uint64_t& value, size_t& end) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  const size_t first = i;
  value = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
    const uint64_t digit = uint64_t(s[i] - '0');
    if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) return false;
    value = value * 10 + digit;
  }
  end = i;
  return i > first;
}

std::string gib(uint64_t bytes) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(1);
  s << double(bytes) / double(uint64_t(1) << 30) << " GiB";
  return s.str();
}

}  // namespace

uint64_t parse_meminfo_total(std::string_view text) {
  constexpr std::string_view key = "MemTotal:";
  for (size_t line = 0; line < text.size();) {
    size_t next = text.find('\n', line);
    if (next == std::string_view::npos) next = text.size();
    std::string_view row = text.substr(line, next - line);
    if (row.substr(0, key.size()) == key) {
      uint64_t kib = 0;
      size_t end = 0;
      std::string_view rest = row.substr(key.size());
      if (!leading_number(rest, kib, end)) return 0;
      std::string_view unit = rest.substr(end);
      while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
      // The kernel has always written "kB" (meaning KiB); any other unit is not a meminfo we know.
      if (unit.substr(0, 2) != "kB") return 0;
      if (kib > std::numeric_limits<uint64_t>::max() / 1024) return 0;
      return kib * 1024;
    }
    line = next + 1;
  }
  return 0;
}

uint64_t parse_cgroup_memory_max(std::string_view text) {
  uint64_t bytes = 0;
  size_t end = 0;
  if (!leading_number(text, bytes, end)) return 0;  // "max": no limit
  return bytes;
}

MemoryLimit cpu_memory_limit() {
  MemoryLimit limit;
  if (uint64_t total = parse_meminfo_total(read_small_file("/proc/meminfo"))) {
    limit.bytes = total;
    limit.source = "physical memory, MemTotal in /proc/meminfo";
  }
  // A container's cgroup limit is what the OOM killer enforces; it counts when it is the lower one.
  if (uint64_t cgroup = parse_cgroup_memory_max(read_small_file("/sys/fs/cgroup/memory.max"));
      cgroup != 0 && (limit.bytes == 0 || cgroup < limit.bytes)) {
    limit.bytes = cgroup;
    limit.source = "this container's limit, /sys/fs/cgroup/memory.max";
  }
  return limit;
}

uint64_t cpu_working_bytes(const HeadConfig& c) {
  const uint64_t vocab = uint64_t(std::max<int64_t>(c.vocab, 0));
  const uint64_t hidden = uint64_t(std::max<int64_t>(c.hidden, 0));
  // Per token: six [V] f32 stages (raw, scaled, div, tanh, capped and the returned logits), the
  // normed row, and its activation blocks (at most one f32 per element).
  const uint64_t per_token = vocab * 4 * 6 + hidden * 4 * 2;
  return uint64_t(kTokensPerPass) * per_token + hidden * 4;  // + the gamma copy
}

void check_head_fits(uint64_t head_bytes, uint64_t working_bytes, std::string_view what, const MemoryLimit& limit) {
  if (limit.bytes == 0) return;
  uint64_t needed = 0;
  const bool wraps = __builtin_add_overflow(head_bytes, working_bytes, &needed);
  if (!wraps && needed <= limit.bytes) return;
  throw Error(std::string(what) + ": the head does not fit in memory: it needs " +
              (wraps ? std::string("more than 2^64") : with_commas(needed) + " bytes (" + gib(needed) + ")") +
              " (head weights " + with_commas(head_bytes) + " B + working buffers " + with_commas(working_bytes) +
              " B), but only " + with_commas(limit.bytes) + " bytes (" + gib(limit.bytes) + ") are available (" +
              limit.source + ")");
}

void check_head_fits(uint64_t head_bytes, uint64_t working_bytes, std::string_view what) {
  check_head_fits(head_bytes, working_bytes, what, cpu_memory_limit());
}

}  // namespace lmhead
