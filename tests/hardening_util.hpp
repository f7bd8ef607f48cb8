#pragma once
// Helpers of the hardening, determinism and concurrency suites: small checkpoints made by the CLI,
// files written byte for byte, and child processes that can be interrupted.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "lmhead/lmhead.hpp"
#include "test_util.hpp"

namespace lmhead::testing {

inline std::string repo_path(const std::string& relative) { return std::string(LMHEAD_TEST_DATA) + "/../../" + relative; }

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// `lmhead make` of a small head; `extra` is appended to the command line (--softcap 0, --seed 7, ...).
inline std::string make_checkpoint(const TempDir& dir, const std::string& type, int64_t vocab, int64_t hidden,
                                   const std::string& extra = "") {
  const std::string path = dir.file("head-" + type + "-v" + std::to_string(vocab) + "-h" + std::to_string(hidden) + ".gguf");
  const CommandResult r = run_command(shell_quote(cli()) + " make " + shell_quote(path) + " --quiet --vocab " +
                                      std::to_string(vocab) + " --hidden " + std::to_string(hidden) + " --type " + type +
                                      " " + extra);
  if (r.status != 0) throw std::runtime_error("lmhead make failed: " + r.output);
  return path;
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Deterministic hidden states: a different, well-spread row for every (seed, token).
inline std::vector<float> test_hidden(int64_t tokens, int64_t hidden, uint64_t seed) {
  std::vector<float> h(static_cast<size_t>(tokens * hidden));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& v : h) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    v = static_cast<float>(static_cast<int64_t>(s >> 40) - (int64_t(1) << 23)) / float(1 << 22);  // in [-2, 2)
  }
  return h;
}

// A child process running argv[0] with argv; stdout and stderr go to /dev/null.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv) {
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      const int null_fd = open("/dev/null", O_WRONLY);
      dup2(null_fd, STDOUT_FILENO);
      dup2(null_fd, STDERR_FILENO);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  void signal(int sig) const { ::kill(pid_, sig); }
  // Raw wait status (WIFSIGNALED / WTERMSIG / WEXITSTATUS apply).
  int wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return status;
  }
  bool running() const {
    int status = 0;
    return waitpid(pid_, &status, WNOHANG) == 0;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
};

// Every result field a caller can see, in one comparable form: logits and floats as raw bits.
inline std::vector<uint32_t> result_fingerprint(const RunResult& r) {
  std::vector<uint32_t> f;
  f.push_back(static_cast<uint32_t>(r.tokens));
  for (const TokenChoice& c : r.choices) {
    f.push_back(static_cast<uint32_t>(c.argmax));
    f.push_back(bits_of(c.value));
    f.push_back(bits_of(c.logprob));
    f.push_back(static_cast<uint32_t>(c.tie_count));
    for (int32_t id : c.tied_ids) f.push_back(static_cast<uint32_t>(id));
    for (const Candidate& k : c.top) {
      f.push_back(static_cast<uint32_t>(k.id));
      f.push_back(bits_of(k.logit));
      f.push_back(bits_of(k.logprob));
    }
  }
  for (float v : r.logits) f.push_back(bits_of(v));
  return f;
}

}  // namespace lmhead::testing
