#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "lmhead/error.hpp"

namespace lmhead::io {
namespace {

constexpr size_t kBufferBytes = size_t(1) << 20;

std::string errno_text(int err) { return std::strerror(err); }

// Temporaries a signal handler may unlink. A handler may only touch lock-free atomics and plain
// memory, so each slot is a fixed char array guarded by an atomic state: free -> claimed (being
// filled) -> live (handler may unlink) -> free.
struct TempSlot {
  std::atomic<int> state{0};  // 0 free, 1 claimed, 2 live
  char path[4096] = {};
};
constexpr int kFree = 0, kClaimed = 1, kLive = 2;
std::array<TempSlot, 32> g_temp_slots;

int register_temporary(const std::string& path) {
  if (path.size() >= sizeof(TempSlot::path)) return -1;
  for (size_t i = 0; i < g_temp_slots.size(); ++i) {
    int expected = kFree;
    if (g_temp_slots[i].state.compare_exchange_strong(expected, kClaimed)) {
      std::memcpy(g_temp_slots[i].path, path.c_str(), path.size() + 1);
      g_temp_slots[i].state.store(kLive);
      return static_cast<int>(i);
    }
  }
  return -1;  // more concurrent outputs than slots: that temporary is not cleaned on a signal
}

void unregister_temporary(int slot) {
  if (slot >= 0) g_temp_slots[slot].state.store(kFree);
}

extern "C" void unlink_temporaries_and_reraise(int sig) {
  for (TempSlot& slot : g_temp_slots)
    if (slot.state.load() == kLive) ::unlink(slot.path);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

std::string random_suffix() {
  static std::atomic<uint64_t> counter{0};
  std::random_device device;
  uint64_t bits = (uint64_t(device()) << 32) ^ device() ^ (counter.fetch_add(1) * 0x9E3779B97F4A7C15ull);
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(bits));
  return text;
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw Error("cannot write a file with an empty name");
  for (int attempt = 0; attempt < 16 && fd_ < 0; ++attempt) {
    temp_path_ = path_ + ".tmp-" + std::to_string(::getpid()) + "-" + random_suffix();
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST)
      throw Error("cannot create " + temp_path_ + " (temporary for " + path_ + "): " + errno_text(errno));
  }
  if (fd_ < 0) throw Error("cannot create a unique temporary next to " + path_);
  slot_ = register_temporary(temp_path_);
  buffer_.resize(kBufferBytes);
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() noexcept {
  unregister_temporary(slot_);
  slot_ = -1;
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
}

void AtomicFile::flush_buffer() {
  const uint8_t* p = buffer_.data();
  size_t left = buffered_;
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      buffered_ = 0;
      throw Error("writing " + temp_path_ + " (temporary for " + path_ + ") failed after " +
                  std::to_string(written_ - left) + " bytes: " + errno_text(err));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  buffered_ = 0;
}

void AtomicFile::write(const void* data, size_t nbytes) {
  if (fd_ < 0) throw Error("write to " + path_ + " after it was committed or discarded");
  const uint8_t* src = static_cast<const uint8_t*>(data);
  written_ += nbytes;
  while (nbytes > 0) {
    size_t take = std::min(nbytes, buffer_.size() - buffered_);
    std::memcpy(buffer_.data() + buffered_, src, take);
    buffered_ += take;
    src += take;
    nbytes -= take;
    if (buffered_ == buffer_.size()) flush_buffer();
  }
}

void AtomicFile::write_zeros(size_t nbytes) {
  static const uint8_t zeros[256] = {};
  while (nbytes > 0) {
    size_t take = std::min(nbytes, sizeof zeros);
    write(zeros, take);
    nbytes -= take;
  }
}

void AtomicFile::commit() {
  if (committed_) return;
  if (fd_ < 0) throw Error("commit of " + path_ + " after it was discarded");
  try {
    flush_buffer();
    if (::fsync(fd_) != 0) throw Error("fsync of " + temp_path_ + " failed: " + errno_text(errno));
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw Error("closing " + temp_path_ + " failed: " + errno_text(errno));
    unregister_temporary(slot_);
    slot_ = -1;
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0)
      throw Error("renaming " + temp_path_ + " to " + path_ + " failed: " + errno_text(errno));
  } catch (...) {
    discard();
    throw;
  }
  committed_ = true;
  // The rename itself becomes durable only when the directory entry is synced; failure here does
  // not make the file incomplete, so it is not an error.
  std::string dir = ".";
  if (size_t slash = path_.find_last_of('/'); slash != std::string::npos) dir = slash == 0 ? "/" : path_.substr(0, slash);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomically(const std::string& path, const std::function<void(AtomicFile&)>& produce) {
  AtomicFile file(path);
  produce(file);
  file.commit();
}

}  // namespace lmhead::io

namespace lmhead {

void write_file_atomically(const std::string& path, std::string_view bytes) {
  io::write_file_atomically(path, [&](io::AtomicFile& f) { f.write(bytes.data(), bytes.size()); });
}

void remove_temporaries_on_signals() {
  struct sigaction action = {};
  action.sa_handler = io::unlink_temporaries_and_reraise;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &action, nullptr);
}

}  // namespace lmhead
