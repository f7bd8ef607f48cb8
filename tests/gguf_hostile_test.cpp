// One test per hostile case of spec/gguf.md: each file is built by hand, field by field, and must be
// refused with an Error whose message names the file and the problem. An allocation driven by an
// unchecked count would surface here as std::bad_alloc (not an Error) or as a hang; reads outside
// the buffer are caught when this suite runs under AddressSanitizer (the buffers are exact-size).
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <limits>

#include "gguf/gguf.hpp"
#include "gguf_test_builder.hpp"
#include "test_util.hpp"

namespace lmhead::gguf {
namespace {

using lmhead::testing::GgufBytes;
using lmhead::testing::kF32;
using lmhead::testing::kQ5_K;
using lmhead::testing::kQ8_0;
using lmhead::testing::TempDir;

constexpr int64_t kHuge = int64_t(1) << 62;

// The message of the Error parsing `bytes` throws, or "(accepted)". Any other exception type
// propagates and fails the test.
std::string error_of(std::span<const uint8_t> bytes) {
  // An exact-size heap copy, so AddressSanitizer sees any read past the end.
  std::vector<uint8_t> exact(bytes.begin(), bytes.end());
  try {
    File::from_bytes(exact, "hostile.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}
std::string error_of(const GgufBytes& g) { return error_of(g.span()); }

#define EXPECT_REJECTED(g, needle)                                                  \
  do {                                                                              \
    const std::string message_ = error_of(g);                                       \
    EXPECT_NE(message_.find(needle), std::string::npos) << "message: " << message_; \
    EXPECT_EQ(message_.rfind("hostile.gguf: ", 0), 0u) << "message: " << message_;  \
  } while (0)

// A file with one F32 tensor of `dims` at offset 0 and enough zero data for `data_bytes`.
GgufBytes one_tensor(const std::vector<int64_t>& dims, int32_t type, uint64_t offset = 0, size_t data_bytes = 64) {
  GgufBytes g;
  g.header(1, 0).tensor("t", dims, type, offset).pad_to(32).zeros(data_bytes);
  return g;
}

// ---- header -----------------------------------------------------------------------------------

TEST(GgufHostile, EmptyAndTinyFiles) {
  EXPECT_REJECTED(GgufBytes{}, "truncated: expected 4 bytes for the magic 'GGUF' at offset 0, file has 0");
  GgufBytes g;
  g.raw("GGU");
  EXPECT_REJECTED(g, "truncated: expected 4 bytes for the magic");
}

TEST(GgufHostile, BadMagic) {
  GgufBytes g;
  g.raw("GGML").u32(3).i64(0).i64(0);
  EXPECT_REJECTED(g, "not a GGUF file: starts with bytes 47 47 4d 4c");
}

TEST(GgufHostile, ObsoleteVersions) {
  for (uint32_t v : {1u, 2u}) {
    GgufBytes g;
    g.header(0, 0, v);
    EXPECT_REJECTED(g, "obsolete GGUF version " + std::to_string(v));
  }
}

TEST(GgufHostile, UnknownAndBigEndianVersions) {
  GgufBytes g;
  g.header(0, 0, 4);
  EXPECT_REJECTED(g, "unsupported GGUF version 4");
  GgufBytes big;
  big.header(0, 0, 0x03000000);
  EXPECT_REJECTED(big, "big-endian");
}

TEST(GgufHostile, NegativeCounts) {
  GgufBytes g;
  g.header(-1, 0);
  EXPECT_REJECTED(g, "negative tensor count -1");
  GgufBytes k;
  k.header(0, -5);
  EXPECT_REJECTED(k, "negative key-value count -5");
}

TEST(GgufHostile, HugeKeyValueCountFailsBeforeAllocating) {
  for (int64_t count : {kHuge, std::numeric_limits<int64_t>::max(), int64_t(1000)}) {
    GgufBytes g;
    g.header(0, count).kv_u32("a", 1);
    EXPECT_REJECTED(g, "key-value count " + std::to_string(count) + " cannot fit");
  }
}

TEST(GgufHostile, HugeTensorCountFailsBeforeAllocating) {
  for (int64_t count : {kHuge, std::numeric_limits<int64_t>::max()}) {
    GgufBytes g;
    g.header(count, 0).tensor("t", {8}, kF32, 0).pad_to(32).zeros(32);
    EXPECT_REJECTED(g, "tensor count " + std::to_string(count) + " cannot fit");
  }
  // Fits the header-level bound but not what is left after large key-values.
  GgufBytes g;
  g.header(3, 1).kv_str("pad", std::string(60, 'x')).tensor("t", {8}, kF32, 0);
  EXPECT_REJECTED(g, "tensor count 3 cannot fit");
}

// ---- key-values ---------------------------------------------------------------------------------

TEST(GgufHostile, HugeKeyLength) {
  GgufBytes g;
  g.header(0, 1).u64(uint64_t(1) << 63).raw("abc").i32(4).u32(0);
  EXPECT_REJECTED(g, "truncated: expected 9223372036854775808 bytes for the key of key-value #0 at offset 32");
}

TEST(GgufHostile, HugeStringValueLength) {
  GgufBytes g;
  g.header(0, 1).str("general.name").i32(8).u64(std::numeric_limits<uint64_t>::max()).raw("x");
  EXPECT_REJECTED(g, "bytes for the value of key 'general.name'");
  EXPECT_REJECTED(g, "truncated: expected 18446744073709551615 bytes");
}

TEST(GgufHostile, HugeNumericArrayLength) {
  GgufBytes g;
  g.header(0, 1).str("ids").i32(9).i32(4).u64(uint64_t(kHuge)).u32(1).u32(2);
  EXPECT_REJECTED(g, "truncated: array 'ids' of 4611686018427387904 u32");
  GgufBytes wrap;  // count * 8 wraps to 0 in 64 bits: must still be refused
  wrap.header(0, 1).str("ids").i32(9).i32(10).u64(uint64_t(1) << 61).u64(0);
  EXPECT_REJECTED(wrap, "needs more than 2^64 bytes");
}

TEST(GgufHostile, HugeStringArrayLength) {
  GgufBytes g;
  g.header(0, 1).str("tokenizer.ggml.tokens").i32(9).i32(8).u64(uint64_t(kHuge)).str("a");
  EXPECT_REJECTED(g, "array of 4611686018427387904 strings");
  EXPECT_REJECTED(g, "cannot fit");
}

TEST(GgufHostile, StringArrayElementTruncated) {
  GgufBytes g;
  g.header(0, 1).str("tokens").i32(9).i32(8).u64(2).str("a").u64(100).raw("short");
  EXPECT_REJECTED(g, "truncated: expected 100 bytes for element 1 of array 'tokens'");
}

TEST(GgufHostile, UnknownValueType) {
  for (int32_t type : {13, -1, 1000}) {
    GgufBytes g;
    g.header(0, 1).str("k").i32(type).u32(0);
    EXPECT_REJECTED(g, "key 'k': unknown value type " + std::to_string(type) + " at offset 33");
  }
}

TEST(GgufHostile, UnknownArrayElementType) {
  GgufBytes g;
  g.header(0, 1).str("k").i32(9).i32(99).u64(1).u32(0);
  EXPECT_REJECTED(g, "key 'k': unknown array element type 99");
}

TEST(GgufHostile, ArrayOfArraysRefused) {
  GgufBytes g;
  g.header(0, 1).str("nested").i32(9).i32(9).u64(1).i32(4).u64(1).u32(7);
  EXPECT_REJECTED(g, "key 'nested': arrays of arrays are not supported");
}

TEST(GgufHostile, BoolThatIsNeither0Nor1) {
  GgufBytes g;
  g.header(0, 1).kv_bool("flag", 2);
  EXPECT_REJECTED(g, "key 'flag': bool value 2");
  GgufBytes a;
  a.header(0, 1).str("flags").i32(9).i32(7).u64(3).u8(1).u8(0).u8(7);
  EXPECT_REJECTED(a, "key 'flags': bool element 2");
}

TEST(GgufHostile, DuplicateKeys) {
  GgufBytes g;
  g.header(0, 3).kv_u32("a", 1).kv_str("b", "x").kv_f32("a", 2.0f);
  EXPECT_REJECTED(g, "duplicate key 'a' (key-values #0 and #2)");
}

TEST(GgufHostile, InvalidUtf8InKey) {
  GgufBytes g;
  g.header(0, 1).kv_u32("bad\xC0\xAFkey", 1);
  EXPECT_REJECTED(g, "the key of key-value #0 at offset 24 is not valid UTF-8 (bad byte at offset 35)");
}

TEST(GgufHostile, InvalidUtf8InStringValue) {
  GgufBytes g;
  g.header(0, 1).kv_str("general.name", "ok\xED\xA0\x80");  // a UTF-16 surrogate
  EXPECT_REJECTED(g, "the value of key 'general.name'");
  EXPECT_REJECTED(g, "is not valid UTF-8");
}

TEST(GgufHostile, InvalidUtf8InStringArrayElement) {
  GgufBytes g;
  g.header(0, 1).kv_str_array("tokenizer.ggml.tokens", {"fine", "\xFF"});
  EXPECT_REJECTED(g, "element 1 of array 'tokenizer.ggml.tokens'");
  EXPECT_REJECTED(g, "is not valid UTF-8");
}

TEST(GgufHostile, ControlBytesInNamesAreEscapedInMessages) {
  GgufBytes g;
  g.header(0, 2).kv_u32("a\x1b[2Jb", 1).kv_u32("a\x1b[2Jb", 1);
  EXPECT_REJECTED(g, "duplicate key 'a\\x1b[2Jb'");
}

// ---- general.alignment ------------------------------------------------------------------------

TEST(GgufHostile, AlignmentZero) {
  GgufBytes g;
  g.header(0, 1).kv_u32("general.alignment", 0);
  EXPECT_REJECTED(g, "general.alignment is 0");
}

TEST(GgufHostile, AlignmentNotPowerOfTwo) {
  GgufBytes g;
  g.header(0, 1).kv_u32("general.alignment", 48);
  EXPECT_REJECTED(g, "general.alignment 48 is not a power of two");
}

TEST(GgufHostile, AlignmentAbsurdlyLarge) {
  for (uint32_t a : {1u << 21, 1u << 31}) {
    GgufBytes g;
    g.header(0, 1).kv_u32("general.alignment", a);
    EXPECT_REJECTED(g, "general.alignment " + std::to_string(a) + " is larger than lmhead's limit");
  }
}

TEST(GgufHostile, AlignmentOfTheWrongType) {
  GgufBytes s;
  s.header(0, 1).kv_str("general.alignment", "32");
  EXPECT_REJECTED(s, "general.alignment has type string, must be u32");
  GgufBytes u;
  u.header(0, 1).kv_u64("general.alignment", 32);
  EXPECT_REJECTED(u, "general.alignment has type u64, must be u32");
  GgufBytes f;
  f.header(0, 1).kv_f32("general.alignment", 32.0f);
  EXPECT_REJECTED(f, "general.alignment has type f32");
}

TEST(GgufHostile, WrongValueTypeForAKnownKeyIsNamedWhenRead) {
  // The reader accepts any type for keys it does not interpret; the checked accessor the model
  // layer uses names the key and the type it found.
  GgufBytes g;
  g.header(0, 1).kv_str("muse-glimmer.logit_scale", "0.196");
  auto file = File::from_bytes(g.span(), "model.gguf");
  try {
    file->find("muse-glimmer.logit_scale")->as_number("muse-glimmer.logit_scale");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'muse-glimmer.logit_scale' has type string, expected a number"), std::string::npos)
        << e.what();
  }
}

// ---- tensor infos -----------------------------------------------------------------------------

TEST(GgufHostile, TooManyDims) {
  GgufBytes g;
  g.header(1, 0).str("t").u32(5);
  for (int i = 0; i < 5; ++i) g.i64(1);
  g.i32(kF32).u64(0).pad_to(32).zeros(32);
  EXPECT_REJECTED(g, "tensor 't': n_dims 5 is more than 4");
  GgufBytes huge;
  huge.header(1, 0).str("t").u32(0xFFFFFFFF).i64(1).zeros(64);
  EXPECT_REJECTED(huge, "n_dims 4294967295");
}

TEST(GgufHostile, NegativeDim) {
  EXPECT_REJECTED(one_tensor({8, -2}, kF32), "tensor 't': dim 1 is negative (-2)");
  EXPECT_REJECTED(one_tensor({std::numeric_limits<int64_t>::min()}, kF32), "dim 0 is negative");
}

TEST(GgufHostile, ZeroDim) { EXPECT_REJECTED(one_tensor({8, 0}, kF32), "tensor 't': dim 1 is zero"); }

TEST(GgufHostile, DimProductOverflows) {
  EXPECT_REJECTED(one_tensor({int64_t(1) << 32, int64_t(1) << 32}, kF32), "tensor 't': the product of its dims overflows");
  EXPECT_REJECTED(one_tensor({int64_t(1) << 62, 2}, kF32), "the product of its dims overflows");
  EXPECT_REJECTED(one_tensor({2, 2, int64_t(1) << 31, int64_t(1) << 31}, kF32), "the product of its dims overflows");
}

TEST(GgufHostile, ByteSizeOverflows) {
  // 2^62 elements fit in int64, but 2^62 * 4 bytes do not fit in 64 bits.
  EXPECT_REJECTED(one_tensor({int64_t(1) << 61, 2}, kF32), "tensor 't': its size in bytes overflows 64 bits");
}

TEST(GgufHostile, UnsupportedTensorType) {
  EXPECT_REJECTED(one_tensor({256}, 31), "tensor 't': unsupported ggml type id 31 (q4_0_4_4, removed from ggml)");
  EXPECT_REJECTED(one_tensor({256}, 5), "tensor 't': unsupported ggml type id 5 (q4_3, removed from ggml)");
  EXPECT_REJECTED(one_tensor({256}, 42), "tensor 't': unsupported ggml type id 42 (unknown to ggml and lmhead)");
  EXPECT_REJECTED(one_tensor({256}, 4242), "tensor 't': unsupported ggml type id 4242 (unknown to ggml and lmhead)");
  EXPECT_REJECTED(one_tensor({256}, -1), "unsupported ggml type id -1");
}

TEST(GgufHostile, RowNotAWholeNumberOfBlocksOfTypesLmheadDoesNotCompute) {
  // Types lmhead never runs are still sized from ggml's table, so their rows are checked too.
  EXPECT_REJECTED(one_tensor({100}, 20), "tensor 't': dim 0 (100) is not a multiple of iq4_nl's block of 32 elements");
  EXPECT_REJECTED(one_tensor({128}, 16), "dim 0 (128) is not a multiple of iq2_xxs's block of 256 elements");
}

TEST(GgufHostile, RowNotAWholeNumberOfBlocks) {
  EXPECT_REJECTED(one_tensor({100, 2}, kQ5_K, 0, 1024), "tensor 't': dim 0 (100) is not a multiple of q5_K's block of 256 elements");
  EXPECT_REJECTED(one_tensor({33}, kQ8_0), "dim 0 (33) is not a multiple of q8_0's block of 32 elements");
}

TEST(GgufHostile, DuplicateTensorNames) {
  GgufBytes g;
  g.header(2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad_to(32).zeros(64);
  EXPECT_REJECTED(g, "duplicate tensor name 'w' (tensors #0 and #1)");
}

TEST(GgufHostile, InvalidUtf8InTensorName) {
  GgufBytes g;
  g.header(1, 0).tensor("w\x80", {8}, kF32, 0).pad_to(32).zeros(32);
  EXPECT_REJECTED(g, "the name of tensor #0 at offset 24 is not valid UTF-8");
}

TEST(GgufHostile, OffsetNotAligned) {
  EXPECT_REJECTED(one_tensor({8}, kF32, 4), "tensor 't': data offset 4 (at offset 49) is not a multiple of the alignment 32");
  GgufBytes g;  // aligned to the default 32, not to the file's 64
  g.header(1, 1).kv_u32("general.alignment", 64).tensor("t", {8}, kF32, 32).pad_to(64).zeros(128);
  EXPECT_REJECTED(g, "is not a multiple of the alignment 64");
}

TEST(GgufHostile, OffsetPastEndOfFile) {
  EXPECT_REJECTED(one_tensor({8}, kF32, uint64_t(1) << 40), "tensor 't': data offset 1099511627776 is past the end of the file");
  EXPECT_REJECTED(one_tensor({8}, kF32, std::numeric_limits<uint64_t>::max() - 31), "is past the end of the file");
}

TEST(GgufHostile, TensorDataPastEndOfFile) {
  // 1024 floats need 4096 bytes; the file holds 64 after the data section starts.
  EXPECT_REJECTED(one_tensor({1024}, kF32), "truncated: tensor 't' needs 4096 bytes at file offset 64");
  EXPECT_REJECTED(one_tensor({1024}, kF32), "file has 128");
  // Inside the file but ending past it.
  EXPECT_REJECTED(one_tensor({8}, kF32, 32, 48), "truncated: tensor 't' needs 32 bytes at file offset 96 (ending at 128), file has 112");
}

TEST(GgufHostile, DataSectionPastEndOfFile) {
  GgufBytes g;
  g.header(1, 0).tensor("t", {8}, kF32, 0);  // ends at 57; the data section would start at 64
  EXPECT_REJECTED(g, "truncated: expected the data section at offset 64");
}

TEST(GgufHostile, OverlappingTensors) {
  GgufBytes same;
  same.header(2, 0).tensor("a", {8}, kF32, 0).tensor("b", {8}, kF32, 0).pad_to(32).zeros(32);
  EXPECT_REJECTED(same, "overlap");
  GgufBytes partial;  // a covers [0, 64), b starts at 32; listed in reverse order
  partial.header(2, 0).tensor("b", {8}, kF32, 32).tensor("a", {16}, kF32, 0).pad_to(32).zeros(64);
  EXPECT_REJECTED(partial, "tensors 'a' (data offsets 0..64) and 'b' (32..64) overlap");
  GgufBytes touching;  // back to back is fine
  touching.header(2, 0).tensor("a", {8}, kF32, 0).tensor("b", {8}, kF32, 32).pad_to(32).zeros(64);
  EXPECT_EQ(error_of(touching), "(accepted)");
}

TEST(GgufHostile, TruncationAnywhereInAHandBuiltFile) {
  const GgufBytes full = lmhead::testing::valid_gguf();
  ASSERT_EQ(error_of(full), "(accepted)");
  // Tensor "b" ends 80 bytes into the data section; ggml pads the file's end, but a reader must not
  // need that padding, so cuts inside it are still complete files.
  const size_t complete = File::from_bytes(full.span())->data_offset() + 80;
  for (size_t cut = 0; cut < full.size(); ++cut) {
    const std::string message = error_of(std::span<const uint8_t>(full.bytes.data(), cut));
    if (cut < complete)
      EXPECT_NE(message.find("truncated"), std::string::npos) << "cut at " << cut << ": " << message;
    else
      EXPECT_EQ(message, "(accepted)") << "cut at " << cut;
  }
}

TEST(GgufHostile, TruncationAnywhereInAGoldenFile) {
  std::ifstream in(std::string(LMHEAD_TEST_DATA) + "/tail-q5k-v4099-h512.vectors.gguf", std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), 267008u);
  ASSERT_EQ(error_of(bytes), "(accepted)");
  // logits_capped, the last tensor, starts at file offset 217792 (as gguf-py reports it) and holds
  // 4099 x 3 floats; ggml pads the file's end past it to a multiple of 32.
  const size_t last_data_byte = 217792 + 49188;
  for (size_t cut = 0; cut < last_data_byte; cut += (cut < 1024 ? 1 : 509)) {
    const std::string message = error_of(std::span<const uint8_t>(bytes.data(), cut));
    EXPECT_NE(message.find("truncated"), std::string::npos) << "cut at " << cut << ": " << message;
  }
  EXPECT_EQ(error_of(std::span<const uint8_t>(bytes.data(), last_data_byte)), "(accepted)");
}

TEST(GgufHostile, ErrorsFromOpenNameThePath) {
  TempDir dir;
  const std::string path = dir.file("version.gguf");
  GgufBytes g;
  g.header(0, 0, 2);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(g.bytes.data()), static_cast<std::streamsize>(g.size()));
  }
  try {
    File::open(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": obsolete GGUF version 2", 0), 0u) << e.what();
  }
}

TEST(GgufHostile, ScalarTensorWithZeroDimsIsOneElement) {
  // n_dims 0 is within the limit of 4; every dim is then the implicit 1.
  GgufBytes g;
  g.header(1, 0).str("s").u32(0).i32(kF32).u64(0).pad_to(32).f32(5.0f);
  auto file = File::from_bytes(g.span());
  const TensorInfo* s = file->find_tensor("s");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->elements(), 1);
  EXPECT_EQ(s->nbytes, 4u);
}

}  // namespace
}  // namespace lmhead::gguf

// ---- the fuzzers' hand-made seed corpus (tools/make_hostile_seeds.py) -----------------------------

namespace lmhead::gguf {
namespace {

std::vector<std::pair<std::string, std::string>> read_expectations(const std::string& tsv) {
  std::ifstream in(tsv);
  std::vector<std::pair<std::string, std::string>> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    out.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return out;
}

TEST(GgufSeeds, EverySeedIsJudgedAsListed) {
  const std::string dir = std::string(LMHEAD_TEST_DATA) + "/../../fuzz/seeds";
  const auto expectations = read_expectations(dir + "/gguf.expected.tsv");
  ASSERT_GE(expectations.size(), 40u) << "run tools/make_hostile_seeds.py";
  for (const auto& [name, expected] : expectations) {
    std::ifstream in(dir + "/gguf/" + name, std::ios::binary);
    ASSERT_TRUE(in.good()) << name;
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string message = error_of(bytes);
    std::printf("  %-36s %s\n", name.c_str(), message.c_str());
    if (expected == "accept")
      EXPECT_EQ(message, "(accepted)") << name;
    else
      EXPECT_NE(message.find(expected), std::string::npos) << name << ": " << message;
  }
}

}  // namespace
}  // namespace lmhead::gguf
