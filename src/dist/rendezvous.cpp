#include "dist/rendezvous.hpp"

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "io/atomic_file.hpp"
#include "lmhead/error.hpp"

namespace lmhead::dist {

void publish_id(const std::string& path, const void* bytes, size_t n) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0)
    throw Error("the NCCL id file '" + path + "' already exists (left by an earlier launch?): rank 0 writes a fresh "
                "one; remove it or pass another --nccl-id");
  io::AtomicFile file(path);
  file.write(bytes, n);
  file.commit();
}

std::vector<uint8_t> wait_for_id(const std::string& path, size_t n, double timeout_s, int rank) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0) {
      // The file appears by rename, so whatever is visible is complete.
      if (uint64_t(st.st_size) != n)
        throw Error("the NCCL id file '" + path + "' holds " + std::to_string(st.st_size) + " bytes, an id has " +
                    std::to_string(n));
      std::ifstream in(path, std::ios::binary);
      std::vector<uint8_t> bytes(n);
      if (!in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(n)))
        throw Error("cannot read the NCCL id file '" + path + "'");
      return bytes;
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited >= timeout_s) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f", waited);
      throw Error("rank " + std::to_string(rank) + " waited " + buf + " s for the NCCL id file '" + path +
                  "', which rank 0 writes: is rank 0 running, with the same --nccl-id and --nccl-ranks? "
                  "(LMHEAD_NCCL_TIMEOUT_S sets the wait)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

double rendezvous_timeout_s() {
  if (const char* env = std::getenv("LMHEAD_NCCL_TIMEOUT_S")) {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (end == env || *end != '\0' || !(v >= 0))
      throw Error(std::string("LMHEAD_NCCL_TIMEOUT_S must be a number of seconds, got '") + env + "'");
    return v;
  }
  return 120.0;
}

}  // namespace lmhead::dist
