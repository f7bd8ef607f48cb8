#pragma once
// Helpers shared by the test suites: golden tensors, byte comparison with a useful report, temp dirs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/kernels.hpp"
#include "gguf/gguf.hpp"

namespace lmhead::testing {

// Both paths are compiled in; the environment may point elsewhere (a build carried to a GPU
// machine runs from another checkout).
inline std::string data_dir() {
  const char* env = std::getenv("LMHEAD_TEST_DATA_DIR");
  return env != nullptr ? env : LMHEAD_TEST_DATA;
}
inline std::string data_path(const std::string& name) { return data_dir() + "/" + name; }

// An F32 tensor of a golden file, as a flat vector in ggml order ([elements, tokens] -> token-major).
inline std::vector<float> golden_f32(const gguf::File& f, const std::string& name) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) throw std::runtime_error("golden tensor missing: " + name);
  if (t->type != TensorType::F32) throw std::runtime_error("golden tensor not f32: " + name);
  std::vector<float> v(t->elements());
  std::memcpy(v.data(), t->data, v.size() * sizeof(float));
  return v;
}

// Calls f(backend, label) with the CPU backend limited to each instruction set this CPU runs
// (scalar, avx2, avx512) and each of `thread_counts`; label names both (also a SCOPED_TRACE).
template <class F>
void for_each_cpu_isa(const HeadView& view, std::initializer_list<int> thread_counts, F&& f) {
  for (cpu::Isa isa : {cpu::Isa::scalar, cpu::Isa::avx2, cpu::Isa::avx512}) {
    if (!cpu::cpu_supports(isa)) continue;
    for (int threads : thread_counts) {
      const std::string label = std::string(cpu::isa_name(isa)) + ", " + std::to_string(threads) + " threads";
      SCOPED_TRACE(label);
      f(*cpu::make_cpu_backend_limited(view, threads, isa), label);
    }
  }
}

// Hidden states of tokens with different magnitudes (token t scaled by 1 + t % magnitudes), from a
// xorshift stream; `salt` keeps two suites' states apart for the same seed.
inline std::vector<float> varied_hidden_states(int tokens, int64_t H, uint64_t seed, uint64_t salt, int magnitudes) {
  std::vector<float> h(size_t(tokens) * H);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + salt;
  for (size_t i = 0; i < h.size(); ++i) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    const float u = float(int64_t(x % 2000001) - 1000000) / 1e6f;
    h[i] = u * (1.0f + float(i / size_t(H) % size_t(magnitudes)));
  }
  return h;
}

inline uint32_t bits_of(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// Distance in units in the last place between two finite floats of any sign.
inline int64_t ulp_distance(float a, float b) {
  auto ordered = [](float f) { const int32_t i = int32_t(bits_of(f)); return i < 0 ? int64_t(INT32_MIN) - i : int64_t(i); };
  return std::llabs(ordered(a) - ordered(b));
}

// Byte equality of two float arrays; on failure names the count, the first index and both values.
inline ::testing::AssertionResult same_bytes(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  size_t differ = 0, first = 0;
  int64_t max_ulp = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (bits_of(got[i]) != bits_of(want[i])) {
      if (differ++ == 0) first = i;
      max_ulp = std::max(max_ulp, ulp_distance(got[i], want[i]));
    }
  }
  if (differ == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << differ << " of " << got.size() << " differ (max " << max_ulp
                                       << " ulp); first at " << first << ": got " << got[first] << " want "
                                       << want[first];
}

// The one place a test writes files: a fresh directory under the system temp dir (TMPDIR), removed
// with its contents at scope exit. ctest -j runs tests side by side, so any fixed name, even under
// a temp dir, is a file two tests may write at once. The current test's name is part of the
// directory's name only so that a leftover (a test killed before cleanup) says where it came from.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / ("lmhead-" + current_test_name() + "-XXXXXX")).string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl + ": " + std::strerror(errno));
    path_ = tmpl;
  }
  ~TempDir() { std::error_code ec; std::filesystem::remove_all(path_, ec); }
  // A copy would remove the directory twice, the first time while the other still uses it.
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }
  // Names of the directory's entries (not recursive) that start with `prefix`.
  std::vector<std::string> entries(const std::string& prefix = "") const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) == 0) names.push_back(std::move(name));
    }
    return names;
  }

 private:
  static std::string current_test_name() {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = test ? std::string(test->test_suite_name()) + "." + test->name() : "no-test";
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_') c = '_';
    return name;
  }
  std::string path_;
};

// Runs a shell command, returns its exit status and captures stdout (+ stderr when asked).
struct CommandResult {
  int status = -1;
  std::string output;
};
inline CommandResult run_command(const std::string& cmd, bool with_stderr = true) {
  CommandResult r;
  FILE* p = popen((cmd + (with_stderr ? " 2>&1" : "")).c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return r;
}

inline std::string cli() {
  const char* env = std::getenv("LMHEAD_CLI");
  return env != nullptr ? env : LMHEAD_CLI;
}

}  // namespace lmhead::testing
