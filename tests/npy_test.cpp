// .npy: the layout NumPy documents (NEP 1), round trips, and one test per way a file can be wrong.
// Files are built here byte by byte, independently of src/io/npy.cpp's writer.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "io/npy.hpp"
#include "lmhead/error.hpp"
#include "test_util.hpp"

namespace lmhead::io {
namespace {

using lmhead::testing::TempDir;

// A .npy whose every part can lie: the dict text, the declared header length, the format version.
std::vector<uint8_t> npy_bytes(const std::string& dict, const std::vector<uint8_t>& data, int major = 1,
                               int64_t declared_length = -1) {
  std::string header = dict;
  const size_t preamble = major == 1 ? 10 : 12;
  header.append((64 - (preamble + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  const uint64_t length = declared_length >= 0 ? static_cast<uint64_t>(declared_length) : header.size();
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  for (size_t b = 0; b < (major == 1 ? 2u : 4u); ++b) out.push_back(static_cast<uint8_t>(length >> (8 * b)));
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<uint8_t> floats(size_t n, float start = 0.0f) {
  std::vector<uint8_t> out(n * 4);
  for (size_t i = 0; i < n; ++i) {
    float v = start + static_cast<float>(i) * 0.25f;
    std::memcpy(out.data() + 4 * i, &v, 4);
  }
  return out;
}

std::string dict(const std::string& descr, const std::string& order, const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': " + order + ", 'shape': " + shape + ", }";
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    parse_npy_f32(bytes, "input.npy");
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

#define EXPECT_NPY_REJECTED(bytes, needle)                                            \
  do {                                                                                \
    const std::string message_ = error_of(bytes);                                     \
    EXPECT_NE(message_.find(needle), std::string::npos) << "message: " << message_;   \
    EXPECT_EQ(message_.rfind("input.npy: ", 0), 0u) << "message: " << message_;       \
  } while (0)

TEST(Npy, ReadsTwoDimensional) {
  HiddenStates h = parse_npy_f32(npy_bytes(dict("<f4", "False", "(3, 4)"), floats(12)));
  EXPECT_EQ(h.tokens, 3);
  EXPECT_EQ(h.hidden, 4);
  ASSERT_EQ(h.values.size(), 12u);
  EXPECT_EQ(h.values[0], 0.0f);
  EXPECT_EQ(h.values[11], 2.75f);
}

TEST(Npy, ReadsOneDimensionalAsOneToken) {
  HiddenStates h = parse_npy_f32(npy_bytes(dict("<f4", "False", "(5,)"), floats(5, 1.0f)));
  EXPECT_EQ(h.tokens, 1);
  EXPECT_EQ(h.hidden, 5);
  EXPECT_EQ(h.values[4], 2.0f);
}

TEST(Npy, AcceptsWhatNumPyMayWrite) {
  // Key order, double quotes, no trailing comma, Python 2 long suffix, format 2.0 and 3.0.
  EXPECT_EQ(error_of(npy_bytes("{'shape': (3, 4), 'fortran_order': False, 'descr': '<f4'}", floats(12))), "(accepted)");
  EXPECT_EQ(error_of(npy_bytes("{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (3L, 4L)}", floats(12))), "(accepted)");
  EXPECT_EQ(error_of(npy_bytes(dict("<f4", "False", "(3, 4)"), floats(12), 2)), "(accepted)");
  EXPECT_EQ(error_of(npy_bytes(dict("<f4", "False", "(3, 4)"), floats(12), 3)), "(accepted)");
  // Fortran order of a single row is still refused: the rule is simple and the fix is one call.
}

TEST(Npy, WrongDtype) {
  EXPECT_NPY_REJECTED(npy_bytes(dict("<f8", "False", "(3, 4)"), floats(24)), "dtype '<f8' (float64), expected '<f4'");
  EXPECT_NPY_REJECTED(npy_bytes(dict(">f4", "False", "(3, 4)"), floats(12)), "dtype '>f4' (big-endian float32)");
  EXPECT_NPY_REJECTED(npy_bytes(dict("<f2", "False", "(3, 4)"), floats(6)), "(float16)");
  EXPECT_NPY_REJECTED(npy_bytes(dict("<i4", "False", "(3, 4)"), floats(12)), "dtype '<i4'");
  EXPECT_NPY_REJECTED(npy_bytes(dict("|O", "False", "(3, 4)"), floats(12)), "dtype '|O'");
}

TEST(Npy, FortranOrder) {
  EXPECT_NPY_REJECTED(npy_bytes(dict("<f4", "True", "(3, 4)"), floats(12)), "fortran_order is True");
}

TEST(Npy, WrongRank) {
  EXPECT_NPY_REJECTED(npy_bytes(dict("<f4", "False", "()"), floats(1)), "shape () has rank 0, expected [H] or [T, H]");
  EXPECT_NPY_REJECTED(npy_bytes(dict("<f4", "False", "(1, 3, 4)"), floats(12)), "shape (1, 3, 4) has rank 3");
}

TEST(Npy, EmptyShape) {
  EXPECT_NPY_REJECTED(npy_bytes(dict("<f4", "False", "(0, 4)"), {}), "shape (0, 4) is empty");
  EXPECT_NPY_REJECTED(npy_bytes(dict("<f4", "False", "(0,)"), {}), "is empty");
}

TEST(Npy, TruncatedData) {
  EXPECT_NPY_REJECTED(npy_bytes(dict("<f4", "False", "(3, 4)"), floats(11)),
                      "truncated: shape (3, 4) needs 48 bytes of data at offset 128, only 44 follow the header (file has 172)");
  std::vector<uint8_t> cut = npy_bytes(dict("<f4", "False", "(3, 4)"), floats(12));
  cut.pop_back();  // one byte short of the data
  EXPECT_NPY_REJECTED(cut, "truncated");
}

TEST(Npy, DataSizeMismatch) {
  EXPECT_NPY_REJECTED(npy_bytes(dict("<f4", "False", "(3, 4)"), floats(13)),
                      "data size mismatch: shape (3, 4) needs 48 bytes of data at offset 128, but 52 bytes follow the header");
}

TEST(Npy, HeaderLengthPastEndOfFile) {
  EXPECT_NPY_REJECTED(npy_bytes(dict("<f4", "False", "(3, 4)"), floats(12), 1, 65535),
                      "the header length 65535 at offset 8 runs past the end of the file (176 bytes)");
  EXPECT_NPY_REJECTED(npy_bytes(dict("<f4", "False", "(3, 4)"), floats(12), 2, 0xFFFFFFFF), "runs past the end");
}

TEST(Npy, ShapeProductOverflowsOrLies) {
  EXPECT_NPY_REJECTED(npy_bytes(dict("<f4", "False", "(4294967296, 4294967296)"), floats(12)),
                      "has more elements than fit in 64 bits");
  // A product that fits in 64 bits but not in the file: refused before any allocation.
  EXPECT_NPY_REJECTED(npy_bytes(dict("<f4", "False", "(9223372036854775807, 1)"), floats(12)),
                      "needs more than 2^64 bytes");
  EXPECT_NPY_REJECTED(npy_bytes(dict("<f4", "False", "(1000000000, 1000)"), floats(12)), "truncated: shape (1000000000, 1000)");
  EXPECT_NPY_REJECTED(npy_bytes(dict("<f4", "False", "(99999999999999999999, 1)"), floats(12)), "dim too large");
}

TEST(Npy, MalformedHeaders) {
  EXPECT_NPY_REJECTED(npy_bytes("{'descr': '<f4", floats(1)), "unterminated string");
  EXPECT_NPY_REJECTED(npy_bytes("['descr']", floats(1)), "expected '{'");
  EXPECT_NPY_REJECTED(npy_bytes("{'descr': '<f4', 'fortran_order': False}", floats(1)), "no 'shape'");
  EXPECT_NPY_REJECTED(npy_bytes("{'descr': '<f4', 'shape': (1,)}", floats(1)), "no 'fortran_order'");
  EXPECT_NPY_REJECTED(npy_bytes("{'fortran_order': False, 'shape': (1,)}", floats(1)), "no 'descr'");
  EXPECT_NPY_REJECTED(npy_bytes("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", floats(1)),
                      "'descr' appears twice");
  EXPECT_NPY_REJECTED(npy_bytes("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,)}", floats(1)), "expected True or False");
  EXPECT_NPY_REJECTED(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1, -2)}", floats(1)), "non-negative integer dim");
  EXPECT_NPY_REJECTED(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1}", floats(1)),
                      "unexpected key 'extra'");
  EXPECT_NPY_REJECTED(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} trailing", floats(1)),
                      "unexpected text after the dict");
  std::string deep = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < 40; ++i) deep += "1, ";
  EXPECT_NPY_REJECTED(npy_bytes(deep + ")}", floats(1)), "more than 32 dims");
}

TEST(Npy, NotNpyOrTooShort) {
  EXPECT_NPY_REJECTED(std::vector<uint8_t>{}, "truncated: expected 8 bytes");
  EXPECT_NPY_REJECTED((std::vector<uint8_t>{0x93, 'N', 'U'}), "truncated");
  EXPECT_NPY_REJECTED((std::vector<uint8_t>{'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0, 0, 0}), "not a .npy file");
  EXPECT_NPY_REJECTED((std::vector<uint8_t>{0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 10}), "truncated: expected 2 bytes for the header length");
  EXPECT_NPY_REJECTED(npy_bytes(dict("<f4", "False", "(1,)"), floats(1), 9), "unsupported .npy format version 9.0");
}

TEST(Npy, EveryPrefixOfAValidFileIsRefused) {
  const std::vector<uint8_t> full = npy_bytes(dict("<f4", "False", "(3, 4)"), floats(12));
  for (size_t cut = 0; cut < full.size(); ++cut) {
    std::vector<uint8_t> prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(cut));
    EXPECT_NE(error_of(prefix), "(accepted)") << "cut at " << cut;
  }
}

TEST(Npy, WriterLayoutFollowsNumPy) {
  const float data[6] = {1, 2, 3, 4, 5, 6};
  std::vector<uint8_t> bytes = encode_npy_f32({2, 3}, data);
  ASSERT_GE(bytes.size(), 64u + 24);
  EXPECT_EQ(std::memcmp(bytes.data(), "\x93NUMPY\x01\x00", 8), 0);
  const size_t header_length = bytes[8] | (bytes[9] << 8);
  EXPECT_EQ((10 + header_length) % 64, 0u);  // data aligned to 64 as NumPy writes it
  std::string header(bytes.begin() + 10, bytes.begin() + 10 + static_cast<std::ptrdiff_t>(header_length));
  EXPECT_EQ(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0), 0u) << header;
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(bytes.size(), 10 + header_length + 24);
  EXPECT_EQ(std::memcmp(bytes.data() + 10 + header_length, data, 24), 0);

  std::vector<uint8_t> one = encode_npy_f32({4}, data);
  std::string one_header(one.begin() + 10, one.begin() + 10 + (one[8] | (one[9] << 8)));
  EXPECT_NE(one_header.find("'shape': (4,), "), std::string::npos) << one_header;
  EXPECT_THROW(encode_npy_f32({}, data), Error);
  EXPECT_THROW(encode_npy_f32({1, 1, 1}, data), Error);
  EXPECT_THROW(encode_npy_f32({0, 3}, data), Error);
}

TEST(Npy, FileRoundTrip) {
  std::vector<float> values(3 * 4099);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * -0.5f + 1e-3f;
  TempDir dir;
  const std::string path = dir.file("roundtrip.npy");
  write_npy_f32(path, {3, 4099}, values.data());
  HiddenStates back = read_npy_f32(path);
  EXPECT_EQ(back.tokens, 3);
  EXPECT_EQ(back.hidden, 4099);
  EXPECT_EQ(std::memcmp(back.values.data(), values.data(), values.size() * 4), 0);
  write_npy_f32(path, {4099}, values.data());  // replaces the file
  back = read_npy_f32(path);
  EXPECT_EQ(back.tokens, 1);
  EXPECT_EQ(back.hidden, 4099);
}

TEST(Npy, FileErrorsNameThePath) {
  TempDir dir;
  const std::string path = dir.file("missing.npy");
  try {
    read_npy_f32(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  const std::string empty = dir.file("empty.npy");
  { std::ofstream out(empty); }
  EXPECT_THROW(read_npy_f32(empty), Error);
  const float v = 1;
  EXPECT_THROW(write_npy_f32(dir.file("no-such-dir/x.npy"), {1}, &v), Error);
}

TEST(NpySeeds, EverySeedIsJudgedAsListed) {
  const std::string dir = std::string(LMHEAD_TEST_DATA) + "/../../fuzz/seeds";
  std::ifstream list(dir + "/npy.expected.tsv");
  ASSERT_TRUE(list.good()) << "run tools/make_hostile_seeds.py";
  std::string line;
  int seeds = 0;
  while (std::getline(list, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.find('\t');
    const std::string name = line.substr(0, tab), expected = line.substr(tab + 1);
    std::ifstream in(dir + "/npy/" + name, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string message = error_of(bytes);
    if (expected == "accept")
      EXPECT_EQ(message, "(accepted)") << name;
    else
      EXPECT_NE(message.find(expected), std::string::npos) << name << ": " << message;
    ++seeds;
  }
  EXPECT_GE(seeds, 20);
}

}  // namespace
}  // namespace lmhead::io
