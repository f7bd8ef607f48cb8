// INPUT for `lmhead run --hidden`: a .npy or FILE.gguf:TENSOR, with errors that name the file, the
// tensor and the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "gguf/gguf.hpp"
#include "gguf/hidden_states.hpp"
#include "io/hidden_input.hpp"
#include "lmhead/error.hpp"
#include "lmhead/files.hpp"
#include "test_util.hpp"

namespace lmhead::io {
namespace {

using lmhead::testing::TempDir;

const std::string kData = LMHEAD_TEST_DATA;

std::string error_of(const std::string& spec, int64_t expected_hidden = 0) {
  try {
    load_hidden_states(spec, expected_hidden);
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

#define EXPECT_INPUT_REJECTED(spec, expected_hidden, needle)                          \
  do {                                                                                \
    const std::string message_ = error_of(spec, expected_hidden);                     \
    EXPECT_NE(message_.find(needle), std::string::npos) << "message: " << message_;   \
  } while (0)

TEST(HiddenInputSpec, SplitsOnTheLastColonAfterDotGguf) {
  auto check = [](std::string_view spec, const std::string& path, const std::string& tensor) {
    HiddenInputSpec s = parse_hidden_input_spec(spec);
    EXPECT_EQ(s.path, path) << spec;
    EXPECT_EQ(s.tensor, tensor) << spec;
  };
  check("hidden.npy", "hidden.npy", "");
  check("c:/data/hidden.npy", "c:/data/hidden.npy", "");      // a ':' not after .gguf is part of the path
  check("vectors.gguf:hidden", "vectors.gguf", "hidden");
  check("dir:with:colons/v.gguf:hidden", "dir:with:colons/v.gguf", "hidden");
  check("v.gguf:name:with:colons", "v.gguf", "name:with:colons");
  check("a.gguf:b.gguf:t", "a.gguf:b.gguf", "t");               // the last qualifying ':' wins
  check("V.GGUF:hidden", "V.GGUF", "hidden");
  check("x.gguf.npy", "x.gguf.npy", "");
}

TEST(HiddenInputSpec, RefusesGgufWithoutTensor) {
  EXPECT_THROW(parse_hidden_input_spec(""), Error);
  try {
    parse_hidden_input_spec("vectors.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("names no tensor: use FILE.gguf:TENSOR"), std::string::npos) << e.what();
  }
  try {
    parse_hidden_input_spec("vectors.gguf:");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("empty tensor name"), std::string::npos) << e.what();
  }
}

TEST(HiddenInput, GoldenVectorsThreeTokens) {
  const std::string file = kData + "/tail-q5k-v4099-h512.vectors.gguf";
  HiddenStates h = load_hidden_states(file + ":hidden", 512);
  EXPECT_EQ(h.tokens, 3);
  EXPECT_EQ(h.hidden, 512);
  ASSERT_EQ(h.values.size(), 3u * 512);
  auto g = gguf::File::open(file);
  EXPECT_EQ(std::memcmp(h.values.data(), g->find_tensor("hidden")->data, 3 * 512 * 4), 0);
  // Other stages of the vectors file read the same way (logits are [V, T]).
  HiddenStates logits = load_hidden_states(file + ":logits_capped");
  EXPECT_EQ(logits.tokens, 3);
  EXPECT_EQ(logits.hidden, 4099);
}

TEST(HiddenInput, GoldenVectorsOneTokenStoredWithOneDim) {
  HiddenStates h = load_hidden_states(kData + "/tail-q5k-v4096-h256.vectors.gguf:hidden", 256);
  EXPECT_EQ(h.tokens, 1);
  EXPECT_EQ(h.hidden, 256);
  EXPECT_EQ(h.values.size(), 256u);
}

TEST(HiddenInput, MissingTensorListsWhatIsThere) {
  const std::string spec = kData + "/tail-q5k-v4096-h256.vectors.gguf:hiden";
  EXPECT_INPUT_REJECTED(spec, 0, "no tensor named 'hiden'");
  EXPECT_INPUT_REJECTED(spec, 0, "(it has: hidden, rms_norm, normed");
  EXPECT_INPUT_REJECTED(spec, 0, "tail-q5k-v4096-h256.vectors.gguf");
}

TEST(HiddenInput, TensorNotF32) {
  EXPECT_INPUT_REJECTED(kData + "/tail-q5k-v4096-h256.vectors.gguf:normed_vec_dot", 0,
                        "normed_vec_dot: tensor is q8_K, a hidden state must be F32");
  EXPECT_INPUT_REJECTED(kData + "/tail-q5k-v4096-h256.gguf:output.weight", 0, "tensor is q5_K");
}

TEST(HiddenInput, WrongHiddenSize) {
  EXPECT_INPUT_REJECTED(kData + "/tail-q5k-v4096-h256.vectors.gguf:hidden", 512,
                        "tail-q5k-v4096-h256.vectors.gguf:hidden: hidden size (dim 0) is 256, the model's is 512");
}

TEST(HiddenInput, MissingOrBrokenFile) {
  EXPECT_INPUT_REJECTED(kData + "/no-such.gguf:hidden", 0, "no-such.gguf");
  EXPECT_INPUT_REJECTED(kData + "/no-such.npy", 0, "no-such.npy");
  EXPECT_INPUT_REJECTED(kData + "/tail-q5k-v4096-h256.gguf", 0, "names no tensor");
  // A GGUF given as if it were a .npy.
  EXPECT_INPUT_REJECTED(kData + "/tail-q5k-v4096-h256.vectors.gguf.npy", 0, "cannot open");
}

TEST(HiddenInput, ThreeDimensionalTensorRefused) {
  gguf::Writer w;
  std::vector<uint8_t> bytes(2 * 3 * 4 * 4);
  w.add_tensor("cube", TensorType::F32, {4, 3, 2}, bytes);
  TempDir dir;
  const std::string path = dir.file("cube.gguf");
  w.write(path);
  EXPECT_INPUT_REJECTED(path + ":cube", 0, "tensor has 3 dims [4, 3, 2, 1], expected ggml dims [H, T]");
}

TEST(HiddenInput, NonFiniteValuesNameTokenAndIndex) {
  std::vector<float> values(3 * 8, 0.5f);
  values[1 * 8 + 5] = std::numeric_limits<float>::quiet_NaN();
  TempDir dir;
  const std::string npy = dir.file("nan.npy");
  write_npy_f32(npy, {3, 8}, values.data());
  EXPECT_INPUT_REJECTED(npy, 0, "nan.npy: hidden state of token 1, index 5 is NaN");

  values[1 * 8 + 5] = 0.0f;
  values[2 * 8 + 7] = -std::numeric_limits<float>::infinity();
  gguf::Writer w;
  std::vector<uint8_t> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  w.add_tensor("hidden", TensorType::F32, {8, 3}, bytes);
  const std::string gguf_path = dir.file("inf.gguf");
  w.write(gguf_path);
  EXPECT_INPUT_REJECTED(gguf_path + ":hidden", 0, "inf.gguf:hidden: hidden state of token 2, index 7 is -inf");
}

TEST(HiddenInput, NpyPathAndHiddenSizeCheck) {
  std::vector<float> values(2 * 16);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  TempDir dir;
  const std::string path = dir.file("ok.npy");
  write_npy_f32(path, {2, 16}, values.data());
  HiddenStates h = load_hidden_states(path, 16);
  EXPECT_EQ(h.tokens, 2);
  EXPECT_EQ(h.hidden, 16);
  EXPECT_EQ(h.values[31], 31.0f);
  EXPECT_INPUT_REJECTED(path, 512, "ok.npy: hidden size (last dim) is 16, the model's is 512");
}

TEST(HiddenInput, FromBytesForFuzzing) {
  // The fuzz target parses a GGUF from memory and asks for a tensor, without touching the disk.
  std::vector<uint8_t> file;
  auto put = [&](const void* p, size_t n) { file.insert(file.end(), (const uint8_t*)p, (const uint8_t*)p + n); };
  uint32_t version = 3, n_dims = 1;
  int64_t tensors = 1, kvs = 0, dim = 4;
  uint64_t name_len = 1, offset = 0;
  int32_t type = 0;
  put("GGUF", 4); put(&version, 4); put(&tensors, 8); put(&kvs, 8);
  put(&name_len, 8); put("h", 1); put(&n_dims, 4); put(&dim, 8); put(&type, 4); put(&offset, 8);
  file.resize(64, 0);
  float v[4] = {1, 2, 3, 4};
  put(v, 16);
  auto g = gguf::File::from_bytes(file, "mem.gguf");
  HiddenStates h = gguf::hidden_from_gguf(*g, "h");
  EXPECT_EQ(h.tokens, 1);
  EXPECT_EQ(h.hidden, 4);
  EXPECT_EQ(h.values[3], 4.0f);
}

}  // namespace
}  // namespace lmhead::io
