// libFuzzer target: a whole checkpoint, end to end. The bytes become a file (an in-memory memfd,
// so Model::open maps it exactly as it maps a checkpoint on disk); Model::open reads the head's
// configuration from metadata, the memory check sizes it, and when the head is small a scalar
// engine runs one token through RMSNorm, the head, scale, soft cap and token choice.
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include "fuzz_common.hpp"
#include "lmhead/error.hpp"
#include "lmhead/lmhead.hpp"
#include "model/resources.hpp"

using namespace lmhead;

namespace {

// A file descriptor for the fuzz input that lives as long as the process, rewritten per input.
int input_fd() {
  static const int fd = memfd_create("model_fuzz.gguf", MFD_CLOEXEC);
  if (fd < 0) __builtin_trap();
  return fd;
}

bool write_input(const uint8_t* data, size_t size) {
  const int fd = input_fd();
  if (ftruncate(fd, 0) != 0) return false;
  size_t done = 0;
  while (done < size) {
    ssize_t n = pwrite(fd, data + done, size - done, off_t(done));
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!write_input(data, size)) return 0;
  const std::string path = "/proc/self/fd/" + std::to_string(input_fd());
  try {
    std::shared_ptr<const Model> model = Model::open(path);
    const HeadConfig& c = model->config();
    if (c.hidden <= 0 || c.vocab <= 0 || c.head_bytes == 0 || c.head_bytes > size) __builtin_trap();
    if (c.row_bytes == 0 || c.row_bytes * uint64_t(c.vocab) != c.head_bytes) __builtin_trap();
    check_head_fits(c.head_bytes, cpu_working_bytes(c), path, MemoryLimit{uint64_t(1) << 40, "fuzz"});
    for (int64_t id = 0; id < std::min<int64_t>(c.vocab, 4); ++id) fuzzing::consume(model->token_text(id).size());
    // The work per input stays small: the head's bytes come from the input, and one token is run.
    std::vector<float> hidden(size_t(c.hidden));
    for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = float(int(i % 7) - 3) * 0.25f;
    Engine engine(model, {.backend = BackendKind::scalar, .threads = 1});
    RunOptions options;
    options.top_k = int(std::min<int64_t>(c.vocab, 3));
    options.logprobs = true;
    options.activations = (size & 1) ? ActivationRoute::f32 : ActivationRoute::q8;
    RunResult result = engine.run(hidden, 1, options);
    if (result.choices.size() != 1) __builtin_trap();
    const TokenChoice& choice = result.choices[0];
    if (choice.argmax < 0 || choice.argmax >= c.vocab) __builtin_trap();
    fuzzing::consume(uint64_t(choice.argmax) + choice.top.size());
  } catch (const Error&) {
  }
  return 0;
}
