// Outputs appear complete under their name or not at all: on success, on an exception, and when the
// writing process is killed part way.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "io/atomic_file.hpp"
#include "lmhead/error.hpp"
#include "test_util.hpp"

namespace lmhead::io {
namespace {

using lmhead::testing::TempDir;

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

TEST(AtomicFile, CommitPublishesTheWholeFile) {
  TempDir dir;
  const std::string name = "ok.bin";
  const std::string path = dir.file(name);
  {
    AtomicFile f(path);
    // The temporary sits beside the target and is named PATH.tmp-<pid>-<random>.
    EXPECT_EQ(f.temp_path().rfind(path + ".tmp-" + std::to_string(getpid()) + "-", 0), 0u) << f.temp_path();
    EXPECT_TRUE(exists(f.temp_path()));
    EXPECT_FALSE(exists(path));
    std::string big(3 << 20, 'x');  // larger than the write buffer
    f.write(big.data(), big.size());
    f.write_zeros(5);
    f.write(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>("end"), 3));
    EXPECT_EQ(f.bytes_written(), big.size() + 8);
    EXPECT_FALSE(exists(path));  // nothing under the final name until commit
    f.commit();
  }
  std::string got = contents(path);
  ASSERT_EQ(got.size(), (3u << 20) + 8);
  EXPECT_EQ(got.substr(got.size() - 8), std::string(5, '\0') + "end");
  EXPECT_TRUE(dir.entries(name + ".tmp-").empty());
}

TEST(AtomicFile, UncommittedIsRemoved) {
  TempDir dir;
  const std::string name = "abandoned.bin";
  const std::string path = dir.file(name);
  {
    AtomicFile f(path);
    f.write("partial", 7);
  }
  EXPECT_FALSE(exists(path));
  EXPECT_TRUE(dir.entries(name + ".tmp-").empty());
}

TEST(AtomicFile, ExceptionKeepsThePreviousFile) {
  TempDir dir;
  const std::string name = "previous.bin";
  const std::string path = dir.file(name);
  write_file_atomically(path, [](AtomicFile& f) { f.write("version 1", 9); });
  EXPECT_EQ(contents(path), "version 1");
  EXPECT_THROW(write_file_atomically(path,
                                     [](AtomicFile& f) {
                                       f.write("version 2, half", 15);
                                       throw Error("producer failed");
                                     }),
               Error);
  EXPECT_EQ(contents(path), "version 1");
  EXPECT_TRUE(dir.entries(name + ".tmp-").empty());
  write_file_atomically(path, [](AtomicFile& f) { f.write("version 3", 9); });
  EXPECT_EQ(contents(path), "version 3");
}

TEST(AtomicFile, UnwritableLocationNamesThePath) {
  TempDir dir;
  const std::string unwritable = dir.file("no-such-dir/out.npy");
  try {
    AtomicFile f(unwritable);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(unwritable), std::string::npos) << e.what();
  }
  EXPECT_THROW(AtomicFile(""), Error);
}

// Forks a writer that reports when it is half way through, then kills it with `sig`.
void kill_writer_midway(const std::string& path, int sig, bool install_cleanup) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (install_cleanup) remove_temporaries_on_signals();
    AtomicFile f(path);
    std::string chunk(1 << 20, 'y');
    f.write(chunk.data(), chunk.size());
    f.write(chunk.data(), chunk.size());
    char one = 1;
    (void)!write(ready[1], &one, 1);
    pause();  // killed here, half written
    _exit(0);
  }
  close(ready[1]);
  char got = 0;
  ASSERT_EQ(read(ready[0], &got, 1), 1);
  close(ready[0]);
  kill(child, sig);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), sig);  // the handler re-raised: the exit status still says "killed"
}

TEST(AtomicFile, KilledWriterLeavesNothingUnderTheFinalName) {
  TempDir dir;
  const std::string name = "killed.bin";
  const std::string path = dir.file(name);

  kill_writer_midway(path, SIGTERM, true);
  EXPECT_FALSE(exists(path));
  EXPECT_TRUE(dir.entries(name + ".tmp-").empty()) << "SIGTERM with cleanup installed leaves no temporary";

  kill_writer_midway(path, SIGINT, true);
  EXPECT_FALSE(exists(path));
  EXPECT_TRUE(dir.entries(name + ".tmp-").empty());

  // SIGKILL cannot be caught: the temporary stays behind, but the final name is still absent.
  kill_writer_midway(path, SIGKILL, true);
  EXPECT_FALSE(exists(path));
}

}  // namespace
}  // namespace lmhead::io
