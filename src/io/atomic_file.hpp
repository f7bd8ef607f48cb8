#pragma once
// Outputs that are either complete or absent: bytes go to PATH.tmp-<pid>-<random> in the same
// directory (so the final rename(2) never crosses a file system and is atomic), and only commit()
// renames the temporary onto PATH. Destroying an uncommitted AtomicFile (an error, an exception)
// removes the temporary, so a failed `lmhead make` or `--out` never leaves a half-written file under
// the name the user asked for.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "lmhead/files.hpp"

namespace lmhead::io {

class AtomicFile {
 public:
  // Creates the temporary (exclusively: an existing file of that name is never reused).
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // removes the temporary unless commit() succeeded
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t nbytes);
  void write(std::span<const uint8_t> bytes) { write(bytes.data(), bytes.size()); }
  void write_zeros(size_t nbytes);
  uint64_t bytes_written() const { return written_; }

  // Flushes, fsyncs (so a crash after the rename cannot expose a file whose data never reached the
  // disk), closes and renames onto the final path. After a failure the temporary is removed.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  void flush_buffer();
  void discard() noexcept;
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  int slot_ = -1;  // entry in the signal-cleanup registry, -1 when none
  bool committed_ = false;
  uint64_t written_ = 0;
  std::vector<uint8_t> buffer_;  // writes are gathered into large chunks before write(2)
  size_t buffered_ = 0;
};

// Writes a whole file through an AtomicFile: `produce` writes the bytes; commit happens when it
// returns normally, and an exception from it leaves no file under `path` and no temporary.
void write_file_atomically(const std::string& path, const std::function<void(AtomicFile&)>& produce);

// lmhead/files.hpp's: the handlers unlink every temporary an AtomicFile currently holds open.
using lmhead::remove_temporaries_on_signals;

}  // namespace lmhead::io
