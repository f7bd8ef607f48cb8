// The writer: exact bytes against a hand-built file, round trips through the reader, a byte-for-byte
// rewrite of files ggml wrote, chunked fills with progress, and no file left behind on failure.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "gguf/gguf.hpp"
#include "gguf_test_builder.hpp"
#include "test_util.hpp"

namespace lmhead::gguf {
namespace {

using lmhead::testing::GgufBytes;
using lmhead::testing::TempDir;
using lmhead::testing::kF32;

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool exists(const std::string& path) { return std::ifstream(path).good(); }

std::vector<uint8_t> float_bytes(std::initializer_list<float> values) {
  std::vector<uint8_t> out(values.size() * 4);
  if (!out.empty()) std::memcpy(out.data(), values.begin(), out.size());
  return out;
}

TEST(GgufWriter, BytesMatchTheSpecLayoutBuiltByHand) {
  Writer w;
  w.add_string("general.architecture", "test-arch");
  w.add_f32("test.scale", 0.5f);
  w.add_string_array("tokenizer.ggml.tokens", {"a", "b", "\xC3\xA9t\xC3\xA9"});
  std::vector<uint8_t> a(64), b(16);
  for (int i = 0; i < 16; ++i) { float v = 1.0f + i; std::memcpy(a.data() + 4 * i, &v, 4); }
  for (int i = 0; i < 4; ++i) { float v = 100.0f + i; std::memcpy(b.data() + 4 * i, &v, 4); }
  w.add_tensor("a", TensorType::F32, {8, 2}, a);
  w.add_tensor("b", TensorType::F32, {4, 1, 1}, b);  // trailing 1s dropped: stored as n_dims 1
  TempDir dir;
  const std::string path = dir.file("layout.gguf");
  w.write(path);
  EXPECT_EQ(read_all(path), lmhead::testing::valid_gguf().bytes);
}

TEST(GgufWriter, RoundTripsEveryValueAndTensorType) {
  Writer w;
  w.add_u32("k.u32", 4000000000u);
  w.add_i32("k.i32", -7);
  w.add_u64("k.u64", 1ull << 40);
  w.add_f32("k.f32", 0.196116f);
  w.add_bool("k.bool", true);
  w.add_string("k.string", "\xE6\x97\xA5\xE6\x9C\xAC\n\"");
  w.add_string_array("k.strings", {"", "x", "\xF0\x9F\x99\x82"});
  w.add_f32_array("k.floats", {1.5f, -2.0f});
  struct Spec { const char* name; TensorType type; std::vector<int64_t> dims; uint64_t nbytes; uint32_t n_dims; };
  const std::vector<Spec> specs = {
      {"f32", TensorType::F32, {3}, 12, 1},
      {"f16", TensorType::F16, {16, 1}, 32, 1},
      {"bf16", TensorType::BF16, {8, 2, 3}, 96, 3},
      {"q8_0", TensorType::Q8_0, {64, 3}, 3 * 2 * 34, 2},
      {"q5_K", TensorType::Q5_K, {512, 2, 1, 1}, 2 * 2 * 176, 2},
      {"q4_K", TensorType::Q4_K, {256, 1, 1, 2}, 2 * 144, 4},
      {"q6_K", TensorType::Q6_K, {256}, 210, 1},
  };
  for (size_t k = 0; k < specs.size(); ++k) {
    std::vector<uint8_t> bytes(specs[k].nbytes);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 31 + k);
    w.add_tensor(specs[k].name, specs[k].type, specs[k].dims, bytes);
  }
  TempDir dir;
  const std::string path = dir.file("roundtrip.gguf");
  w.write(path);
  auto file = File::open(path);
  ASSERT_EQ(file->metadata().size(), 8u);
  const char* order[] = {"k.u32", "k.i32", "k.u64", "k.f32", "k.bool", "k.string", "k.strings", "k.floats"};
  for (size_t k = 0; k < 8; ++k) EXPECT_EQ(file->metadata()[k].key, order[k]);
  EXPECT_EQ(file->find("k.u32")->type, ValueType::u32);
  EXPECT_EQ(file->find("k.u32")->u, 4000000000u);
  EXPECT_EQ(file->find("k.i32")->i, -7);
  EXPECT_EQ(file->find("k.u64")->u, 1ull << 40);
  EXPECT_EQ(static_cast<float>(file->find("k.f32")->f), 0.196116f);
  EXPECT_EQ(file->find("k.bool")->u, 1u);
  EXPECT_EQ(file->find("k.string")->s, "\xE6\x97\xA5\xE6\x9C\xAC\n\"");
  ASSERT_EQ(file->find("k.strings")->strings.size(), 3u);
  EXPECT_EQ(file->find("k.strings")->strings[0], "");
  EXPECT_EQ(file->find("k.strings")->strings[2], "\xF0\x9F\x99\x82");
  const Value* floats = file->find("k.floats");
  ASSERT_EQ(floats->array_count, 2u);
  float second;
  std::memcpy(&second, floats->array_data + 4, 4);
  EXPECT_EQ(second, -2.0f);

  ASSERT_EQ(file->tensors().size(), specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    const TensorInfo& t = file->tensors()[k];
    EXPECT_EQ(t.name, specs[k].name);
    EXPECT_EQ(t.type, specs[k].type);
    EXPECT_EQ(t.n_dims, specs[k].n_dims) << t.name;
    for (size_t d = 0; d < 4; ++d) EXPECT_EQ(t.dims[d], d < specs[k].dims.size() ? specs[k].dims[d] : 1) << t.name;
    EXPECT_EQ(t.nbytes, specs[k].nbytes) << t.name;
    EXPECT_EQ(t.offset % 32, 0u);
    for (size_t i = 0; i < t.nbytes; ++i) ASSERT_EQ(t.data[i], static_cast<uint8_t>(i * 31 + k)) << t.name << " byte " << i;
  }
}

// Copies every key-value and tensor of a file ggml wrote through the Writer: the bytes must come out
// identical, which pins key order, string encoding, tensor info layout, padding between tensors and
// at the end of the file to what ggml does.
void expect_identical_rewrite(const std::string& golden) {
  auto in = File::open(golden);
  Writer w;
  for (const KeyValue& kv : in->metadata()) {
    std::string key(kv.key);
    const Value& v = kv.value;
    switch (v.type) {
      case ValueType::u32: w.add_u32(key, static_cast<uint32_t>(v.u)); break;
      case ValueType::f32: w.add_f32(key, static_cast<float>(v.f)); break;
      case ValueType::string: w.add_string(key, std::string(v.s)); break;
      case ValueType::array:
        ASSERT_EQ(v.array_type, ValueType::string) << key;
        w.add_string_array(key, std::vector<std::string>(v.strings.begin(), v.strings.end()));
        break;
      default: FAIL() << "golden key " << key << " has a type this test does not copy";
    }
  }
  for (const TensorInfo& t : in->tensors()) {
    std::vector<int64_t> dims(t.dims, t.dims + 4);
    const uint8_t* src = t.data;
    w.add_tensor(std::string(t.name), t.type, dims, [src](uint8_t* dst, uint64_t offset, uint64_t nbytes) {
      std::memcpy(dst, src + offset, nbytes);
    });
  }
  TempDir dir;
  const std::string path = dir.file("rewrite.gguf");
  w.write(path);
  std::vector<uint8_t> ours = read_all(path);
  std::vector<uint8_t> theirs(in->bytes().begin(), in->bytes().end());
  ASSERT_EQ(ours.size(), theirs.size()) << golden;
  size_t first_difference = 0;
  while (first_difference < ours.size() && ours[first_difference] == theirs[first_difference]) ++first_difference;
  EXPECT_EQ(first_difference, ours.size()) << golden << ": first differing byte";
}

TEST(GgufWriter, RewritesGoldenCheckpointByteForByte) {
  expect_identical_rewrite(std::string(LMHEAD_TEST_DATA) + "/tail-q5k-v4099-h512.gguf");
}

TEST(GgufWriter, RewritesGoldenVectorsByteForByte) {
  expect_identical_rewrite(std::string(LMHEAD_TEST_DATA) + "/tail-q5k-v4099-h512.vectors.gguf");
  expect_identical_rewrite(std::string(LMHEAD_TEST_DATA) + "/tail-q5k-v4096-h256.vectors.gguf");
}

TEST(GgufWriter, FillsWholeRowsInOrderAndReportsProgress) {
  // 3000 rows of 1024 f32 = 12,288,000 bytes: several chunks of a few MiB each.
  const int64_t cols = 1024, rows = 3000;
  const uint64_t row_bytes = cols * 4, total = row_bytes * rows;
  Writer w;
  w.add_string("general.architecture", "chunks");
  std::vector<uint8_t> small = float_bytes({1, 2, 3, 4, 5, 6, 7, 8});
  w.add_tensor("small", TensorType::F32, {8}, small);
  uint64_t expected_offset = 0;
  int calls = 0;
  w.add_tensor("big", TensorType::F32, {cols, rows}, [&](uint8_t* dst, uint64_t offset, uint64_t nbytes) {
    EXPECT_EQ(offset, expected_offset);
    EXPECT_EQ(offset % row_bytes, 0u);
    EXPECT_EQ(nbytes % row_bytes, 0u);
    EXPECT_LE(nbytes, uint64_t(8) << 20);
    for (uint64_t i = 0; i < nbytes / 4; ++i) {
      float v = static_cast<float>((offset / 4 + i) % 1000003);
      std::memcpy(dst + 4 * i, &v, 4);
    }
    expected_offset += nbytes;
    ++calls;
  });
  std::vector<std::pair<uint64_t, uint64_t>> progress;
  TempDir dir;
  const std::string path = dir.file("chunks.gguf");
  w.write(path, [&](uint64_t done, uint64_t all) { progress.emplace_back(done, all); });
  EXPECT_EQ(expected_offset, total);
  EXPECT_GE(calls, 3);
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.front().first, 0u);
  EXPECT_EQ(progress.back().first, total + 32);
  for (size_t k = 0; k < progress.size(); ++k) {
    EXPECT_EQ(progress[k].second, total + 32);
    if (k > 0) {
      EXPECT_GE(progress[k].first, progress[k - 1].first);
    }
  }
  auto file = File::open(path);
  const TensorInfo* big = file->find_tensor("big");
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->nbytes, total);
  EXPECT_EQ(big->offset, 32u);  // "small" holds 32 bytes at 0
  for (uint64_t i = 0; i < total / 4; i += 4099) {
    float v;
    std::memcpy(&v, big->data + 4 * i, 4);
    ASSERT_EQ(v, static_cast<float>(i % 1000003)) << i;
  }
}

TEST(GgufWriter, CustomAlignment) {
  Writer w;
  w.set_alignment(64);
  w.add_string("general.name", "x");
  w.add_tensor("a", TensorType::F32, {3}, float_bytes({1, 2, 3}));
  w.add_tensor("b", TensorType::F32, {5}, float_bytes({4, 5, 6, 7, 8}));
  TempDir dir;
  const std::string path = dir.file("align.gguf");
  w.write(path);
  auto file = File::open(path);
  EXPECT_EQ(file->alignment(), 64u);
  EXPECT_EQ(file->metadata()[0].key, "general.alignment");
  EXPECT_EQ(file->find("general.alignment")->type, ValueType::u32);
  EXPECT_EQ(file->data_offset() % 64, 0u);
  EXPECT_EQ(file->find_tensor("b")->offset, 64u);
  EXPECT_EQ(file->bytes().size() % 64, 0u);

  Writer bad;
  EXPECT_THROW(bad.set_alignment(0), Error);
  EXPECT_THROW(bad.set_alignment(48), Error);
  EXPECT_THROW(bad.set_alignment(1u << 21), Error);
  EXPECT_THROW(bad.add_u64("general.alignment", 32), Error);
  EXPECT_THROW(bad.add_string("general.alignment", "32"), Error);
  bad.add_u32("general.alignment", 16);  // the u32 key is the same as set_alignment
  EXPECT_THROW(bad.add_u32("general.alignment", 16), Error);
}

TEST(GgufWriter, RefusesWhatTheReaderWouldRefuse) {
  Writer w;
  w.add_u32("a", 1);
  EXPECT_THROW(w.add_string("a", "again"), Error);
  EXPECT_THROW(w.add_string("bad\xFF", "x"), Error);
  EXPECT_THROW(w.add_string("v", "bad\xC0\xAF"), Error);
  EXPECT_THROW(w.add_string_array("tokens", {"ok", "\xED\xA0\x80"}), Error);
  w.add_tensor("t", TensorType::F32, {2}, float_bytes({1, 2}));
  EXPECT_THROW(w.add_tensor("t", TensorType::F32, {2}, float_bytes({1, 2})), Error);
  EXPECT_THROW(w.add_tensor("w\x80", TensorType::F32, {2}, float_bytes({1, 2})), Error);
  EXPECT_THROW(w.add_tensor("rank5", TensorType::F32, {1, 1, 1, 1, 2}, float_bytes({1, 2})), Error);
  EXPECT_THROW(w.add_tensor("empty", TensorType::F32, {}, float_bytes({})), Error);
  EXPECT_THROW(w.add_tensor("zero", TensorType::F32, {0}, float_bytes({})), Error);
  EXPECT_THROW(w.add_tensor("negative", TensorType::F32, {-2}, float_bytes({})), Error);
  EXPECT_THROW(w.add_tensor("partial", TensorType::Q5_K, {100}, std::vector<uint8_t>(176)), Error);
  EXPECT_THROW(w.add_tensor("size", TensorType::F32, {3}, float_bytes({1, 2})), Error);
  EXPECT_THROW(w.add_tensor("overflow", TensorType::F32, {int64_t(1) << 61, 2}, Writer::Fill([](uint8_t*, uint64_t, uint64_t) {})), Error);
  EXPECT_THROW(w.add_tensor("unknown", static_cast<TensorType>(16), {256}, std::vector<uint8_t>(256)), Error);
  // None of the refused tensors was kept.
  TempDir dir;
  const std::string path = dir.file("refused.gguf");
  w.write(path);
  EXPECT_EQ(File::open(path)->tensors().size(), 1u);
}

TEST(GgufWriter, FailedFillLeavesNoFileAndKeepsTheOldOne) {
  TempDir dir;
  const std::string name = "failing.gguf";
  const std::string path = dir.file(name);
  {
    std::ofstream old(path);
    old << "previous contents";
  }
  Writer w;
  w.add_string("general.name", "x");
  w.add_tensor("t", TensorType::F32, {1024, 4096}, [](uint8_t* dst, uint64_t offset, uint64_t nbytes) {
    std::memset(dst, 0, nbytes);
    if (offset > 0) throw Error("generator failed half way");
  });
  EXPECT_THROW(w.write(path), Error);
  std::ifstream in(path);
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(contents, "previous contents");
  EXPECT_TRUE(dir.entries(name + ".tmp-").empty());

  const std::string fresh = dir.file("never-written.gguf");
  EXPECT_THROW(w.write(fresh), Error);
  EXPECT_FALSE(exists(fresh));
}

TEST(GgufWriter, UnwritableDirectoryIsAClearError) {
  TempDir dir;
  const std::string unwritable = dir.file("no-such-dir/out.gguf");
  Writer w;
  w.add_string("general.name", "x");
  try {
    w.write(unwritable);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(unwritable), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lmhead::gguf
