// The reader on well-formed input: a hand-built file, and the golden files ggml itself wrote
// (expected values below come from tests/data's README and llama.cpp's gguf-py reading the files,
// not from this reader).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "gguf/gguf.hpp"
#include "gguf_test_builder.hpp"

namespace lmhead::gguf {
namespace {

using lmhead::testing::GgufBytes;
using lmhead::testing::kF32;

const std::string kData = LMHEAD_TEST_DATA;

TEST(GgufReader, ReadsHandBuiltFile) {
  GgufBytes g = lmhead::testing::valid_gguf();
  auto file = File::from_bytes(g.span(), "hand.gguf");
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), 32u);
  ASSERT_EQ(file->metadata().size(), 3u);
  // Insertion order is kept.
  EXPECT_EQ(file->metadata()[0].key, "general.architecture");
  EXPECT_EQ(file->metadata()[2].key, "tokenizer.ggml.tokens");
  EXPECT_EQ(file->find("general.architecture")->as_string("general.architecture"), "test-arch");
  EXPECT_EQ(file->find("test.scale")->as_number("test.scale"), 0.5);
  const Value* tokens = file->find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->type, ValueType::array);
  EXPECT_EQ(tokens->array_type, ValueType::string);
  ASSERT_EQ(tokens->strings.size(), 3u);
  EXPECT_EQ(tokens->strings[2], "\xC3\xA9t\xC3\xA9");
  EXPECT_EQ(file->find("missing"), nullptr);

  ASSERT_EQ(file->tensors().size(), 2u);
  const TensorInfo* a = file->find_tensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->n_dims, 2u);
  EXPECT_EQ(a->dims[0], 8);
  EXPECT_EQ(a->dims[1], 2);
  EXPECT_EQ(a->dims[2], 1);
  EXPECT_EQ(a->nbytes, 64u);
  EXPECT_EQ(a->row_bytes, 32u);
  float first, last;
  std::memcpy(&first, a->data, 4);
  std::memcpy(&last, a->data + 60, 4);
  EXPECT_EQ(first, 1.0f);
  EXPECT_EQ(last, 16.0f);
  const TensorInfo* b = file->find_tensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->n_dims, 1u);
  EXPECT_EQ(b->dims[1], 1);  // missing trailing dims read as 1
  EXPECT_EQ(b->elements(), 4);
  std::memcpy(&first, b->data, 4);
  EXPECT_EQ(first, 100.0f);
  // The data section starts at the first multiple of 32 after the tensor infos.
  EXPECT_EQ(file->data_offset() % 32, 0u);
  EXPECT_EQ(a->data, file->bytes().data() + file->data_offset());
  EXPECT_EQ(file->find_tensor("c"), nullptr);
}

TEST(GgufReader, DataSectionStartsAtFirstAlignedOffsetAfterInfos) {
  // Header 24 + kv (8+17+4+4 = 33) + tensor info (8+1+4+8+4+8 = 33) = 90 bytes: with alignment 64
  // the data section starts at 128, not at 90 and not at 96.
  GgufBytes g;
  g.header(1, 1).kv_u32("general.alignment", 64).tensor("t", {2}, kF32, 0);
  ASSERT_EQ(g.size(), 90u);
  g.pad_to(64).f32(7.0f).f32(8.0f).pad_to(64);
  auto file = File::from_bytes(g.span());
  EXPECT_EQ(file->alignment(), 64u);
  EXPECT_EQ(file->data_offset(), 128u);
  float v;
  std::memcpy(&v, file->find_tensor("t")->data, 4);
  EXPECT_EQ(v, 7.0f);
}

TEST(GgufReader, AlignmentOneAndMetadataOnlyFilesAreValid) {
  GgufBytes g;
  g.header(1, 1).kv_u32("general.alignment", 1).tensor("t", {1}, kF32, 0).f32(3.0f);
  auto file = File::from_bytes(g.span());
  EXPECT_EQ(file->alignment(), 1u);
  EXPECT_EQ(file->find_tensor("t")->nbytes, 4u);

  GgufBytes meta;  // no tensors: the file may end right after the key-values
  meta.header(0, 1).kv_str("general.name", "x");
  auto m = File::from_bytes(meta.span());
  EXPECT_TRUE(m->tensors().empty());
}

TEST(GgufReader, EveryScalarValueType) {
  GgufBytes g;
  g.header(0, 11);
  g.str("u8").i32(0).u8(200);
  g.str("i8").i32(1).le<int8_t>(-5);
  g.str("u16").i32(2).le<uint16_t>(60000);
  g.str("i16").i32(3).le<int16_t>(-30000);
  g.str("u32").i32(4).u32(4000000000u);
  g.str("i32").i32(5).i32(-2000000000);
  g.str("f32").i32(6).f32(0.25f);
  g.str("bool").i32(7).u8(1);
  g.str("u64").i32(10).u64(1ull << 63);
  g.str("i64").i32(11).i64(-(1ll << 62));
  g.str("f64").i32(12).le<double>(1e300);
  auto file = File::from_bytes(g.span());
  EXPECT_EQ(file->find("u8")->as_u64("u8"), 200u);
  EXPECT_EQ(file->find("i8")->as_number("i8"), -5.0);
  EXPECT_EQ(file->find("u16")->as_u64("u16"), 60000u);
  EXPECT_EQ(file->find("i16")->i, -30000);
  EXPECT_EQ(file->find("u32")->as_u64("u32"), 4000000000u);
  EXPECT_EQ(file->find("i32")->i, -2000000000);
  EXPECT_EQ(file->find("f32")->as_number("f32"), 0.25);
  EXPECT_EQ(file->find("bool")->type, ValueType::boolean);
  EXPECT_EQ(file->find("bool")->u, 1u);
  EXPECT_EQ(file->find("u64")->as_u64("u64"), 1ull << 63);
  EXPECT_EQ(file->find("i64")->i, -(1ll << 62));
  EXPECT_EQ(file->find("f64")->as_number("f64"), 1e300);
  EXPECT_TRUE(file->find("u8")->is_integer());
  EXPECT_TRUE(file->find("f64")->is_float());
  EXPECT_FALSE(file->find("bool")->is_integer());
}

TEST(GgufReader, NumericArraysAreRawViews) {
  GgufBytes g;
  g.header(0, 1).kv_u32_array("ids", {3, 1, 4, 1, 5});
  auto file = File::from_bytes(g.span());
  const Value* ids = file->find("ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->array_type, ValueType::u32);
  ASSERT_EQ(ids->array_count, 5u);
  uint32_t fifth;
  std::memcpy(&fifth, ids->array_data + 16, 4);
  EXPECT_EQ(fifth, 5u);
}

TEST(GgufReader, CheckedConversionsNameTheKey) {
  GgufBytes g;
  g.header(0, 3).kv_str("a.string", "x").kv_i32("a.negative", -3).kv_f32("a.float", 1.5f);
  auto file = File::from_bytes(g.span());
  try {
    file->find("a.string")->as_number("a.string");
    FAIL() << "a string was accepted as a number";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'a.string' has type string, expected a number"), std::string::npos) << e.what();
  }
  EXPECT_THROW(file->find("a.negative")->as_u64("a.negative"), Error);
  EXPECT_THROW(file->find("a.float")->as_u64("a.float"), Error);
  EXPECT_THROW(file->find("a.float")->as_string("a.float"), Error);
}

TEST(GgufReader, Utf8Validator) {
  EXPECT_EQ(invalid_utf8_at(""), std::string_view::npos);
  EXPECT_EQ(invalid_utf8_at("plain"), std::string_view::npos);
  EXPECT_EQ(invalid_utf8_at("\xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x99\x82"), std::string_view::npos);  // 日本 🙂
  EXPECT_EQ(invalid_utf8_at("ab\x80"), 2u);                   // stray continuation byte
  EXPECT_EQ(invalid_utf8_at("\xC0\xAF"), 0u);                 // overlong '/'
  EXPECT_EQ(invalid_utf8_at("\xE0\x80\xAF"), 0u);             // overlong, 3 bytes
  EXPECT_EQ(invalid_utf8_at("x\xED\xA0\x80"), 1u);            // UTF-16 surrogate D800
  EXPECT_EQ(invalid_utf8_at("\xF4\x90\x80\x80"), 0u);         // U+110000
  EXPECT_EQ(invalid_utf8_at("\xE6\x97"), 0u);                 // cut short
  EXPECT_EQ(invalid_utf8_at("\xFF"), 0u);
  EXPECT_EQ(invalid_utf8_at(std::string_view("a\0b", 3)), std::string_view::npos);  // NUL is valid UTF-8
}

// ---- golden files (written by ggml) --------------------------------------------------------------

void expect_tail_checkpoint(const std::string& path, int64_t hidden, int64_t vocab) {
  auto file = File::open(path);
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), 32u);
  EXPECT_EQ(file->name(), path);
  EXPECT_EQ(file->metadata().size(), 9u);
  EXPECT_EQ(file->find("general.architecture")->as_string("general.architecture"), "muse-glimmer");
  EXPECT_EQ(file->find("general.name")->as_string("general.name"), "tail golden (ggml reference)");
  const Value* scale = file->find("muse-glimmer.logit_scale");
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(scale->type, ValueType::f32);
  EXPECT_EQ(static_cast<float>(scale->f), 0.196116f);
  EXPECT_EQ(file->find("muse-glimmer.final_logit_softcapping")->as_number("cap"), 20.0);
  EXPECT_EQ(static_cast<float>(file->find("muse-glimmer.attention.layer_norm_rms_epsilon")->as_number("eps")), 1e-5f);
  EXPECT_EQ(file->find("muse-glimmer.embedding_length")->type, ValueType::u32);
  EXPECT_EQ(file->find("muse-glimmer.embedding_length")->as_u64("h"), static_cast<uint64_t>(hidden));
  EXPECT_EQ(file->find("muse-glimmer.vocab_size")->as_u64("v"), static_cast<uint64_t>(vocab));
  EXPECT_EQ(file->find("tokenizer.ggml.model")->as_string("m"), "llama");

  const Value* tokens = file->find("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->array_type, ValueType::string);
  ASSERT_EQ(tokens->strings.size(), static_cast<size_t>(vocab));
  EXPECT_EQ(tokens->array_count, static_cast<uint64_t>(vocab));
  EXPECT_EQ(tokens->strings[0], "<pad>");
  EXPECT_EQ(tokens->strings[1], "<bos>");
  EXPECT_EQ(tokens->strings[7], "\xC3\xA9t\xC3\xA9");                  // été
  EXPECT_EQ(tokens->strings[8], "\xE6\x97\xA5\xE6\x9C\xAC");           // 日本
  EXPECT_EQ(tokens->strings[9], "\xF0\x9F\x99\x82");                   // 🙂
  EXPECT_EQ(tokens->strings[10], "\n");
  EXPECT_EQ(tokens->strings[11], "\"quoted\"");
  EXPECT_EQ(tokens->strings[vocab - 1], "\xE2\x96\x81w" + std::to_string(vocab - 1));  // ▁wN

  ASSERT_EQ(file->tensors().size(), 2u);
  const TensorInfo* norm = file->find_tensor("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->type, TensorType::F32);
  EXPECT_EQ(norm->n_dims, 1u);
  EXPECT_EQ(norm->dims[0], hidden);
  EXPECT_EQ(norm->nbytes, static_cast<uint64_t>(hidden) * 4);
  const TensorInfo* head = file->find_tensor("output.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->type, TensorType::Q5_K);
  EXPECT_EQ(head->n_dims, 2u);
  EXPECT_EQ(head->dims[0], hidden);
  EXPECT_EQ(head->dims[1], vocab);
  EXPECT_EQ(head->row_bytes, static_cast<uint64_t>(hidden / 256 * 176));
  EXPECT_EQ(head->nbytes, static_cast<uint64_t>(vocab) * head->row_bytes);
  // ggml places tensors in order, each aligned: the head follows the norm.
  EXPECT_EQ(norm->offset, 0u);
  EXPECT_EQ(head->offset, (norm->nbytes + 31) / 32 * 32);
  EXPECT_EQ(head->data + head->nbytes, file->bytes().data() + file->bytes().size());
}

TEST(GgufReader, GoldenCheckpoint4099x512) {
  expect_tail_checkpoint(kData + "/tail-q5k-v4099-h512.gguf", 512, 4099);
  // gguf-py (llama.cpp's reader) places the data section here.
  EXPECT_EQ(File::open(kData + "/tail-q5k-v4099-h512.gguf")->data_offset(), 65056u);
}

TEST(GgufReader, GoldenCheckpoint4096x256) {
  expect_tail_checkpoint(kData + "/tail-q5k-v4096-h256.gguf", 256, 4096);
  EXPECT_EQ(File::open(kData + "/tail-q5k-v4096-h256.gguf")->data_offset(), 65024u);
}

void expect_vectors(const std::string& path, int64_t hidden, int64_t vocab, int64_t tokens) {
  auto file = File::open(path);
  EXPECT_EQ(file->find("general.architecture")->as_string("a"), "tail-vectors");
  EXPECT_EQ(file->find("tail.vec_dot_type")->as_string("t"), "q8_K");
  EXPECT_EQ(file->find("tail.tokens")->as_u64("n"), static_cast<uint64_t>(tokens));
  const char* names[] = {"hidden", "rms_norm", "normed", "normed_vec_dot", "logits_raw",
                         "logits_scaled", "logits_div", "logits_tanh", "logits_capped"};
  ASSERT_EQ(file->tensors().size(), 9u);
  for (size_t k = 0; k < 9; ++k) {
    const TensorInfo& t = file->tensors()[k];
    EXPECT_EQ(t.name, names[k]);
    bool is_logits = k >= 4;
    bool is_q8k = k == 3;
    EXPECT_EQ(t.type, is_q8k ? TensorType::Q8_K : TensorType::F32) << t.name;
    EXPECT_EQ(t.dims[0], is_logits ? vocab : hidden) << t.name;
    EXPECT_EQ(t.dims[1], tokens) << t.name;  // a 1-token file stores n_dims 1; the reader fills in 1
    EXPECT_EQ(t.n_dims, tokens == 1 ? 1u : 2u) << t.name;
    uint64_t row = is_q8k ? static_cast<uint64_t>(hidden / 256 * 292) : static_cast<uint64_t>(t.dims[0]) * 4;
    EXPECT_EQ(t.nbytes, row * tokens) << t.name;
    EXPECT_EQ(t.offset % 32, 0u);
  }
  // The hidden state is finite f32 data in the mapping.
  const TensorInfo* hidden_t = file->find_tensor("hidden");
  for (int64_t i = 0; i < hidden * tokens; ++i) {
    float v;
    std::memcpy(&v, hidden_t->data + 4 * i, 4);
    ASSERT_TRUE(std::isfinite(v)) << i;
  }
}

TEST(GgufReader, GoldenVectors3Tokens) {
  expect_vectors(kData + "/tail-q5k-v4099-h512.vectors.gguf", 512, 4099, 3);
}

TEST(GgufReader, GoldenVectors1TokenHasMissingTrailingDim) {
  expect_vectors(kData + "/tail-q5k-v4096-h256.vectors.gguf", 256, 4096, 1);
}

TEST(GgufReader, GoldenQuantizeVectors) {
  auto file = File::open(kData + "/quantize-r64-n512.gguf");
  EXPECT_EQ(file->find("general.architecture")->as_string("a"), "quantize-vectors");
  struct Expect { const char* name; TensorType type; uint64_t nbytes; };
  const Expect expected[] = {{"source", TensorType::F32, 131072}, {"q4_K", TensorType::Q4_K, 18432},
                             {"q5_K", TensorType::Q5_K, 22528},   {"q6_K", TensorType::Q6_K, 26880},
                             {"q8_0", TensorType::Q8_0, 34816}};
  ASSERT_EQ(file->tensors().size(), 5u);
  for (const Expect& e : expected) {
    const TensorInfo* t = file->find_tensor(e.name);
    ASSERT_NE(t, nullptr) << e.name;
    EXPECT_EQ(t->type, e.type);
    EXPECT_EQ(t->dims[0], 512);
    EXPECT_EQ(t->dims[1], 64);
    EXPECT_EQ(t->nbytes, e.nbytes) << e.name;  // sizes as gguf-py reports them
  }
  EXPECT_EQ(file->data_offset(), 416u);
}

TEST(GgufReader, OpenNamesMissingFile) {
  try {
    File::open(kData + "/no-such-file.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-file.gguf"), std::string::npos) << e.what();
  }
  EXPECT_THROW(File::open(kData), Error);  // a directory
}

}  // namespace
}  // namespace lmhead::gguf
