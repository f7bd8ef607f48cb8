// Hostile inputs end to end (issue 4): every broken .npy, GGUF and hidden state must end in a clear
// error and exit status 1 from the CLI, never in a signal, a sanitizer report or a hang; outputs are
// never half written when `lmhead make` is interrupted; a head that cannot fit in memory is refused
// up front with the numbers. The FuzzRegression tests each pin a bug the fuzzers found.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.hpp"
#include "gguf/hidden_states.hpp"
#include "gguf_test_builder.hpp"
#include "hardening_util.hpp"
#include "io/hidden_input.hpp"
#include "io/npy.hpp"
#include "lmhead/lmhead.hpp"
#include "model/resources.hpp"
#include "quant/activation.hpp"
#include "quant/blocks.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

const std::string kModel256 = data_path("tail-q5k-v4096-h256.gguf");
const std::string kVectors256 = data_path("tail-q5k-v4096-h256.vectors.gguf");

// A .npy file built from its parts, so each part can lie independently of the others.
std::vector<uint8_t> npy_bytes(const std::string& dict, const std::vector<float>& data, int version = 1,
                               int64_t declared_length = -1) {
  std::string header = dict;
  const size_t preamble = version == 1 ? 10 : 12;
  header.append((64 - (preamble + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  const uint64_t length = declared_length >= 0 ? uint64_t(declared_length) : header.size();
  std::vector<uint8_t> out = {0x93, 'N', 'U', 'M', 'P', 'Y', uint8_t(version), 0};
  for (size_t i = 0; i < (version == 1 ? 2u : 4u); ++i) out.push_back(uint8_t(length >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  const auto* raw = reinterpret_cast<const uint8_t*>(data.data());
  out.insert(out.end(), raw, raw + data.size() * 4);
  return out;
}

std::string f4_dict(const std::string& shape, const std::string& descr = "<f4", const char* fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

// What a refused input must look like from the outside: status 1, one "lmhead: error:" line that
// contains `expected`, and no trace of a crash.
void expect_clean_refusal(const CommandResult& r, const std::string& expected, const std::string& what) {
  EXPECT_EQ(r.status, 1) << what << "\n" << r.output;
  EXPECT_NE(r.output.find("lmhead: error: "), std::string::npos) << what << "\n" << r.output;
  EXPECT_NE(r.output.find(expected), std::string::npos) << what << ": expected '" << expected << "' in\n" << r.output;
  for (const char* crash : {"Sanitizer", "runtime error", "terminate called", "Segmentation", "Aborted", "std::bad_alloc"})
    EXPECT_EQ(r.output.find(crash), std::string::npos) << what << "\n" << r.output;
}

CommandResult run_cli(const std::string& args) { return run_command(shell_quote(cli()) + " " + args); }

// ---- hostile .npy hidden states ---------------------------------------------------------------

TEST(HostileNpy, CliRefusesEachWithAClearErrorAndStatus1) {
  TempDir dir;
  const std::vector<float> row(256, 0.5f), two_rows(512, 0.5f);
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"float64.npy", npy_bytes(f4_dict("(1, 256)", "<f8"), two_rows), "dtype '<f8' (float64)"},
      {"int32.npy", npy_bytes(f4_dict("(1, 256)", "<i4"), row), "dtype '<i4'"},
      {"big-endian.npy", npy_bytes(f4_dict("(1, 256)", ">f4"), row), "big-endian"},
      {"float16.npy", npy_bytes(f4_dict("(2, 256)", "<f2"), row), "float16"},
      {"fortran.npy", npy_bytes(f4_dict("(2, 256)", "<f4", "True"), two_rows), "fortran_order is True"},
      {"rank3.npy", npy_bytes(f4_dict("(1, 2, 256)"), two_rows), "has rank 3"},
      {"wrong-hidden.npy", npy_bytes(f4_dict("(2, 128)"), row), "hidden"},
      {"truncated.npy", npy_bytes(f4_dict("(2, 256)"), std::vector<float>(300, 1.0f)), "truncated"},
      {"shape-lies-huge.npy", npy_bytes(f4_dict("(1099511627776, 256)"), row), "truncated: shape"},
      {"shape-overflows.npy", npy_bytes(f4_dict("(8589934592, 4294967296)"), row), "64 bits"},
      {"header-length-lies.npy", npy_bytes(f4_dict("(1, 256)"), row, 1, 65535), "runs past the end of the file"},
      {"header-length-lies-v2.npy", npy_bytes(f4_dict("(1, 256)"), row, 2, 0x7fffffff), "runs past the end of the file"},
      {"extra-data.npy", npy_bytes(f4_dict("(1, 256)"), std::vector<float>(257, 1.0f)), "data size mismatch"},
      {"not-npy.npy", std::vector<uint8_t>(64, 'x'), "not a .npy file"},
      {"magic-only.npy", {0x93, 'N', 'U', 'M', 'P', 'Y'}, "truncated"},
      {"empty.npy", {}, "empty"},
  };
  for (const Case& c : cases) {
    const std::string path = dir.file(c.name);
    write_bytes(path, c.bytes);
    expect_clean_refusal(run_cli("run " + shell_quote(kModel256) + " --hidden " + shell_quote(path)), c.expected, c.name);
  }
}

// ---- NaN and infinity in hidden states ----------------------------------------------------------

TEST(NonFiniteHidden, EngineNamesTokenAndIndexOnEveryBackend) {
  auto model = Model::open(kModel256);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  for (BackendKind backend : {BackendKind::scalar, BackendKind::cpu}) {
    Engine engine(model, {.backend = backend, .threads = 2});
    for (float bad : specials) {
      std::vector<float> hidden = test_hidden(3, 256, 1);
      hidden[2 * 256 + 17] = bad;
      try {
        engine.run(hidden, 3);
        ADD_FAILURE() << to_string(backend) << ": a hidden state holding " << bad << " was accepted";
      } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("token 2"), std::string::npos) << m;
        EXPECT_NE(m.find("index 17"), std::string::npos) << m;
      }
    }
  }
}

// The check scans blocks of 64 values before it looks for the exact index: every position, inside a
// block, on its edges and in the tail, names the first bad value even when a later one follows.
TEST(NonFiniteHidden, EngineNamesTheFirstBadValueAtEveryPosition) {
  auto model = Model::open(kModel256);
  Engine engine(model, {.backend = BackendKind::scalar});
  const int n = 3 * 256;
  for (int pos = 0; pos < n; ++pos) {
    std::vector<float> hidden = test_hidden(3, 256, 1);
    hidden[size_t(pos)] = pos % 2 ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
    if (pos + 70 < n) hidden[size_t(pos) + 70] = std::numeric_limits<float>::infinity();
    try {
      engine.run(hidden, 3);
      ADD_FAILURE() << "a bad value at " << pos << " was accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      const std::string want = "token " + std::to_string(pos / 256) + " has a non-finite value";
      EXPECT_NE(m.find(want), std::string::npos) << pos << ": " << m;
      EXPECT_TRUE(m.ends_with("at index " + std::to_string(pos % 256))) << pos << ": " << m;
    }
  }
}

TEST(NonFiniteHidden, CliRefusesNpyAndGgufInputs) {
  TempDir dir;
  std::vector<float> values = test_hidden(2, 256, 2);
  values[256 + 5] = std::numeric_limits<float>::quiet_NaN();
  write_bytes(dir.file("nan.npy"), npy_bytes(f4_dict("(2, 256)"), values));
  expect_clean_refusal(run_cli("run " + shell_quote(kModel256) + " --hidden " + shell_quote(dir.file("nan.npy"))),
                       "token 1, index 5 is NaN", "NaN in a .npy");

  gguf::Writer w;
  std::vector<float> one = test_hidden(1, 256, 3);
  one[200] = -std::numeric_limits<float>::infinity();
  std::vector<uint8_t> bytes(one.size() * 4);
  std::memcpy(bytes.data(), one.data(), bytes.size());
  w.add_tensor("hidden", TensorType::F32, {256}, bytes);
  w.write(dir.file("inf.gguf"));
  expect_clean_refusal(run_cli("run " + shell_quote(kModel256) + " --hidden " + shell_quote(dir.file("inf.gguf") + ":hidden")),
                       "token 0, index 200 is -inf", "-inf in a GGUF tensor");
}

// Finite but extreme inputs are valid: they must run (no error, no undefined behaviour under UBSan)
// and give finite logits. FLT_MAX squares to infinity inside the RMSNorm, subnormals to zero.
TEST(NonFiniteHidden, ExtremeFiniteValuesRunToFiniteLogits) {
  auto model = Model::open(kModel256);
  const float extremes[] = {FLT_MAX, -FLT_MAX, FLT_TRUE_MIN, -FLT_TRUE_MIN, 0.0f, FLT_MIN};
  std::vector<float> hidden;
  for (float v : extremes) hidden.insert(hidden.end(), 256, v);
  std::vector<float> mixed = test_hidden(1, 256, 4);
  mixed[0] = FLT_MAX;
  hidden.insert(hidden.end(), mixed.begin(), mixed.end());
  const int tokens = int(hidden.size() / 256);
  for (BackendKind backend : {BackendKind::scalar, BackendKind::cpu})
    for (ActivationRoute route : {ActivationRoute::q8, ActivationRoute::f32}) {
      Engine engine(model, {.backend = backend, .threads = 2});
      RunOptions o;
      o.activations = route;
      o.want_logits = true;
      o.logprobs = true;
      o.top_k = 3;
      const RunResult r = engine.run(hidden, tokens, o);
      for (size_t i = 0; i < r.logits.size(); ++i)
        ASSERT_TRUE(std::isfinite(r.logits[i])) << to_string(backend) << "/" << to_string(route) << " logit " << i;
      for (const TokenChoice& c : r.choices) EXPECT_TRUE(std::isfinite(c.logprob));
    }
}

// ---- hostile GGUF checkpoints through the CLI --------------------------------------------------

std::vector<std::pair<std::string, std::string>> seed_expectations(const std::string& tsv) {
  std::vector<std::pair<std::string, std::string>> out;
  std::ifstream in(tsv);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t tab = line.find('\t');
    if (tab != std::string::npos) out.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return out;
}

// Each hostile case of spec/gguf.md (the hand-made seeds of fuzz/seeds) given to `lmhead info` and
// `lmhead run` as a file on disk: the path through mmap, the model layer and the CLI's error exit.
TEST(HostileGguf, CliRefusesEverySpecCaseAsAModelAndAsAnInput) {
  const std::string dir = repo_path("fuzz/seeds");
  const auto expectations = seed_expectations(dir + "/gguf.expected.tsv");
  ASSERT_GE(expectations.size(), 40u);
  size_t hostile = 0;
  for (const auto& [name, expected] : expectations) {
    if (expected == "accept") continue;
    ++hostile;
    const std::string path = dir + "/gguf/" + name;
    // An empty file is refused before parsing, by the mapping, with its own message.
    const std::string want = std::filesystem::file_size(path) == 0 ? "empty file" : expected;
    expect_clean_refusal(run_cli("info " + shell_quote(path)), want, name + " as a model");
    expect_clean_refusal(run_cli("run " + shell_quote(kModel256) + " --hidden " + shell_quote(path + ":hidden")), want,
                         name + " as a hidden-state input");
  }
  EXPECT_GE(hostile, 35u);
}

// A checkpoint whose GGUF is well formed but whose head metadata is not (spec/gguf.md: wrong value
// types for known keys), each written by hand and refused by name.
TEST(HostileGguf, CliRefusesBrokenHeadMetadata) {
  TempDir dir;
  auto model = [&](const std::string& name, auto&& add_metadata, float gamma0 = 1.0f, int32_t head_type = kQ8_0,
                   const char* head_name = "output.weight") {
    GgufBytes g;
    GgufBytes kvs;
    const int kv_count = add_metadata(kvs);
    g.header(2, kv_count);
    g.bytes.insert(g.bytes.end(), kvs.bytes.begin(), kvs.bytes.end());
    const int64_t hidden = 32, vocab = 4;
    const uint64_t head_bytes = head_type == kQ8_0 ? vocab * 34 : vocab * hidden * 4;
    g.tensor("output_norm.weight", {hidden}, kF32, 0).tensor(head_name, {hidden, vocab}, head_type, 128).pad_to(32);
    g.f32(gamma0);
    for (int i = 1; i < hidden; ++i) g.f32(1.0f);
    g.zeros(head_bytes).pad_to(32);
    write_bytes(dir.file(name), g.bytes);
    return dir.file(name);
  };
  struct Case {
    std::string path;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {model("scale-string.gguf", [](GgufBytes& k) { k.kv_str("general.architecture", "muse-glimmer").kv_str("muse-glimmer.logit_scale", "0.2"); return 2; }),
       "'muse-glimmer.logit_scale' has type string"},
      {model("scale-nan.gguf", [](GgufBytes& k) { k.kv_str("general.architecture", "muse-glimmer").kv_f32("muse-glimmer.logit_scale", NAN); return 2; }),
       "'muse-glimmer.logit_scale' is not a finite number"},
      {model("cap-negative.gguf", [](GgufBytes& k) { k.kv_str("general.architecture", "gemma2").kv_f32("gemma2.final_logit_softcapping", -1); return 2; }),
       "'gemma2.final_logit_softcapping' is negative"},
      {model("arch-u32.gguf", [](GgufBytes& k) { k.kv_u32("general.architecture", 7); return 1; }), "'general.architecture' has type u32"},
      {model("no-arch.gguf", [](GgufBytes& k) { k.kv_u32("general.alignment", 32); return 1; }), "'general.architecture' is missing"},
      {model("vocab-lies.gguf", [](GgufBytes& k) { k.kv_str("general.architecture", "llama").kv_u32("llama.vocab_size", 5); return 2; }),
       "'llama.vocab_size' says 5"},
      {model("hidden-negative.gguf", [](GgufBytes& k) { k.kv_str("general.architecture", "llama").kv_i32("llama.embedding_length", -32); return 2; }),
       "'llama.embedding_length' is negative"},
      {model("no-head.gguf", [](GgufBytes& k) { k.kv_str("general.architecture", "llama"); return 1; }, 1.0f, kQ8_0, "blk.0.weight"),
       "no head tensor"},
      {model("head-q4_0.gguf", [](GgufBytes& k) { k.kv_str("general.architecture", "llama"); return 1; }, 1.0f, 2), "q4_0, which lmhead cannot run"},
      {model("tokens-u32.gguf", [](GgufBytes& k) { k.kv_str("general.architecture", "llama").kv_u32_array("tokenizer.ggml.tokens", {1, 2, 3, 4}); return 2; }),
       "'tokenizer.ggml.tokens' must be an array of strings"},
  };
  for (const Case& c : cases) {
    expect_clean_refusal(run_cli("info " + shell_quote(c.path)), c.expected, c.path);
    expect_clean_refusal(run_cli("run " + shell_quote(c.path) + " --hidden " + shell_quote(kVectors256 + ":hidden")),
                         c.expected, c.path);
  }
}

// ---- the fuzz corpora as regression inputs ------------------------------------------------------

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file()) paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  return paths;
}

bool starts_with(const std::string& path, const char* prefix) {
  return std::filesystem::path(path).filename().string().rfind(prefix, 0) == 0;
}

// Every seed of every fuzz target goes through the API its harness calls, in the ordinary test
// binary, so the ASan/UBSan job replays the corpora on every submission even where libFuzzer is
// not built. Only lmhead::Error may come out; the valid seeds must be accepted.
TEST(FuzzCorpus, EverySeedIsHandledAndTheValidOnesAccepted) {
  size_t files = 0, accepted = 0;
  for (const std::string& dir : {repo_path("fuzz/corpus/gguf_fuzz"), repo_path("fuzz/corpus/hidden_input_fuzz"),
                                 repo_path("fuzz/corpus/model_fuzz"), repo_path("fuzz/seeds/gguf")})
    for (const std::string& path : files_in(dir)) {
      ++files;
      const std::vector<uint8_t> bytes = read_bytes(path);
      const bool valid = starts_with(path, "make-") || starts_with(path, "tiny-") || starts_with(path, "valid-") ||
                         starts_with(path, "every-") || starts_with(path, "golden-vectors-h256") || starts_with(path, "hidden-");
      try {
        auto file = gguf::File::from_bytes(bytes, path);
        ++accepted;
        if (const gguf::TensorInfo* hidden = file->find_tensor("hidden"); hidden && hidden->type == TensorType::F32)
          try { gguf::hidden_from_gguf(*file, "hidden"); } catch (const Error&) {}
      } catch (const Error& e) {
        EXPECT_FALSE(valid) << path << ": " << e.what();
      }
    }
  for (const std::string& path : files_in(repo_path("fuzz/corpus/model_fuzz"))) {
    const bool valid = starts_with(path, "make-") || starts_with(path, "tiny-");
    try {
      auto model = Model::open(path);
      Engine engine(model, {.backend = BackendKind::scalar});
      RunOptions o;
      o.top_k = int(std::min<int64_t>(3, model->config().vocab));
      o.logprobs = true;
      engine.run(test_hidden(2, model->config().hidden, 9), 2, o);
    } catch (const Error& e) {
      EXPECT_FALSE(valid) << path << ": " << e.what();
    }
  }
  for (const std::string& dir : {repo_path("fuzz/corpus/npy_fuzz"), repo_path("fuzz/seeds/npy")})
    for (const std::string& path : files_in(dir)) {
      ++files;
      try {
        io::HiddenStates s = io::parse_npy_f32(read_bytes(path), path);
        io::check_finite(s, path);
        ++accepted;
      } catch (const Error&) {
      }
    }
  EXPECT_GE(files, 100u);
  EXPECT_GE(accepted, 30u);
}

// ---- bugs the fuzzers found ---------------------------------------------------------------------

// model_fuzz: an output_norm.weight holding NaN was accepted; every normed value it touched became
// NaN, the Q8_0 activation quantizer converted NaN to int8 (undefined behaviour) and the run
// printed a plausible token. The checkpoint must be refused, naming the tensor and the element.
TEST(FuzzRegression, NonFiniteNormWeightIsRefusedByName) {
  TempDir dir;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    GgufBytes g;
    g.header(2, 1).kv_str("general.architecture", "llama");
    g.tensor("output_norm.weight", {32}, kF32, 0).tensor("output.weight", {32, 4}, kQ8_0, 128).pad_to(32);
    for (int i = 0; i < 32; ++i) g.f32(i == 29 ? bad : 1.0f);
    for (int r = 0; r < 4; ++r) g.u8(0).u8(0x3c).zeros(32);  // Q8_0 rows with scale 1.0
    write_bytes(dir.file("gamma.gguf"), g.bytes);
    try {
      auto model = Model::open(dir.file("gamma.gguf"));
      Engine engine(model, {.backend = BackendKind::scalar});
      engine.run(test_hidden(1, 32, 5), 1);
      ADD_FAILURE() << "a checkpoint whose output_norm.weight holds " << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("output_norm.weight"), std::string::npos) << e.what();
    }
  }
}

// model_fuzz: a block of activations whose largest magnitude is subnormal makes 127 / amax
// overflow to infinity, and x * inf (or 0 * inf = NaN) was converted to int8: undefined
// behaviour. llama.cpp's AVX2 quantize_row_q8_0, whose bytes this route reproduces, converts with
// _mm256_cvtps_epi32 (NaN and out-of-range give INT32_MIN) and packs with signed saturation, so
// such a block becomes 32 x -128 with d = 0 (and contributes 0 to every dot product).
TEST(FuzzRegression, Q8_0ActivationsOfASubnormalBlockFollowLlamaCppAvx2) {
  std::vector<float> x(64, 0.0f);
  x[3] = 1e-40f;  // subnormal: 127 / 1e-40 overflows
  x[40] = -3e-39f;
  for (int j = 32; j < 64; ++j) if (j != 40) x[j] = 1e-41f;
  std::vector<quant::block_q8_0> blocks(2);
  quant::quantize_q8_0_activations(x.data(), 64, blocks.data());
  for (const quant::block_q8_0& b : blocks) {
    EXPECT_EQ(b.d, 0) << "f16 of a subnormal / 127 is +0";
    for (int j = 0; j < 32; ++j) EXPECT_EQ(b.qs[j], -128) << "element " << j;
  }
}

// The same, end to end: a Q8_0 head whose gamma is subnormal runs on both backends and routes
// without undefined behaviour (checked under UBSan) and gives finite logits.
TEST(FuzzRegression, SubnormalNormWeightRunsToFiniteLogits) {
  TempDir dir;
  GgufBytes g;
  g.header(2, 1).kv_str("general.architecture", "llama");
  g.tensor("output_norm.weight", {64}, kF32, 0).tensor("output.weight", {64, 4}, kQ8_0, 256).pad_to(32);
  for (int i = 0; i < 64; ++i) g.f32(1e-40f);
  for (int r = 0; r < 8; ++r) {
    g.u8(0).u8(0x3c);  // scale 1.0
    for (int j = 0; j < 32; ++j) g.u8(uint8_t(j * 7 + r));
  }
  write_bytes(dir.file("tiny.gguf"), g.pad_to(32).bytes);
  auto model = Model::open(dir.file("tiny.gguf"));
  for (BackendKind backend : {BackendKind::scalar, BackendKind::cpu})
    for (ActivationRoute route : {ActivationRoute::q8, ActivationRoute::f32}) {
      Engine engine(model, {.backend = backend, .threads = 1});
      RunOptions o;
      o.activations = route;
      o.want_logits = true;
      o.top_k = 4;
      const RunResult r = engine.run(test_hidden(2, 64, 6), 2, o);
      for (float v : r.logits) EXPECT_TRUE(std::isfinite(v)) << to_string(backend) << "/" << to_string(route);
    }
}

// ---- nothing half written -----------------------------------------------------------------------

// `lmhead make` of a 566 MB head takes seconds; it is interrupted once its temporary exists and
// 0.3 s more have passed, i.e. in the middle of writing.
void interrupt_make(int sig) {
  TempDir dir;
  const std::string out = dir.file("big.gguf");
  Child make({cli(), "make", out, "--vocab", "200000", "--hidden", "4096"});
  bool writing = false;
  for (int i = 0; i < 3000 && !writing; ++i) {
    writing = !dir.entries("big.gguf.tmp-").empty();
    if (!writing) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(writing) << "lmhead make never created its temporary";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(make.running()) << "lmhead make finished before it could be interrupted";
  ASSERT_GT(std::filesystem::file_size(dir.file(dir.entries().at(0))), 0u) << "nothing written yet";
  make.signal(sig);
  const int status = make.wait();
  ASSERT_TRUE(WIFSIGNALED(status)) << "lmhead make exited with status " << WEXITSTATUS(status) << " instead of dying by signal " << sig;
  EXPECT_EQ(WTERMSIG(status), sig);
  EXPECT_FALSE(std::filesystem::exists(out)) << "a partial file was left under the final name";
  const std::vector<std::string> left = dir.entries();
  if (sig == SIGKILL) {
    // SIGKILL cannot be caught: the temporary stays, under its own name only.
    for (const std::string& name : left) EXPECT_EQ(name.rfind("big.gguf.tmp-", 0), 0u) << name;
  } else {
    EXPECT_TRUE(left.empty()) << "the signal handler left " << left.size() << " file(s), first: " << left.at(0);
  }
}

TEST(InterruptedMake, SigkillLeavesNothingUnderTheFinalName) { interrupt_make(SIGKILL); }
TEST(InterruptedMake, SigintLeavesNoFileAndNoTemporary) { interrupt_make(SIGINT); }
TEST(InterruptedMake, SigtermLeavesNoFileAndNoTemporary) { interrupt_make(SIGTERM); }

// ---- resource limits ----------------------------------------------------------------------------

TEST(Resources, ParsesMeminfoAndCgroupLimits) {
  EXPECT_EQ(parse_meminfo_total("MemTotal:       24683652 kB\nMemFree:        22011296 kB\n"), 24683652ull * 1024);
  EXPECT_EQ(parse_meminfo_total("MemFree: 1 kB\nMemTotal: 2048 kB"), 2048ull * 1024);
  EXPECT_EQ(parse_meminfo_total("MemFree: 1 kB\n"), 0u);
  EXPECT_EQ(parse_meminfo_total("MemTotal: lots kB\n"), 0u);
  EXPECT_EQ(parse_meminfo_total("MemTotal: 5 MB\n"), 0u);
  EXPECT_EQ(parse_meminfo_total("MemTotal: 99999999999999999999 kB\n"), 0u);
  EXPECT_EQ(parse_meminfo_total(""), 0u);
  EXPECT_EQ(parse_cgroup_memory_max("max\n"), 0u);
  EXPECT_EQ(parse_cgroup_memory_max("1073741824\n"), 1073741824u);
  EXPECT_EQ(parse_cgroup_memory_max(""), 0u);
}

TEST(Resources, LimitIsThisMachinesMemoryOrLower) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  in >> key >> kib;
  ASSERT_EQ(key, "MemTotal:");
  const MemoryLimit limit = cpu_memory_limit();
  EXPECT_GT(limit.bytes, 0u);
  EXPECT_LE(limit.bytes, kib * 1024);
  EXPECT_FALSE(limit.source.empty());
}

TEST(Resources, RefusalStatesNeededAndAvailable) {
  const MemoryLimit limit{2'000'000'000, "test limit"};
  EXPECT_NO_THROW(check_head_fits(1'000'000'000, 1'000'000'000, "m.gguf", limit));
  try {
    check_head_fits(3'000'000'000, 1'000'000, "m.gguf", limit);
    ADD_FAILURE() << "a head above the limit was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    for (const char* part : {"m.gguf", "3,001,000,000 bytes", "3,000,000,000", "1,000,000", "2,000,000,000 bytes", "test limit"})
      EXPECT_NE(m.find(part), std::string::npos) << part << " missing from: " << m;
  }
  EXPECT_THROW(check_head_fits(UINT64_MAX, 10, "m.gguf", limit), Error);
  EXPECT_NO_THROW(check_head_fits(UINT64_MAX, 10, "m.gguf", MemoryLimit{}));  // unknown limit: nothing refused
}

// A 2 TiB head in a sparse file: opening it maps but never reads the head, so the refusal comes
// from the numbers alone, before any byte of it is touched.
std::string write_sparse_head(const TempDir& dir, uint64_t& head_bytes) {
  const int64_t hidden = 4096, vocab = int64_t(1) << 27;  // f32 rows of 16 KiB: 2 TiB
  head_bytes = uint64_t(hidden) * 4 * uint64_t(vocab);
  GgufBytes g;
  g.header(2, 1).kv_str("general.architecture", "llama");
  g.tensor("output_norm.weight", {hidden}, kF32, 0).tensor("output.weight", {hidden, vocab}, kF32, uint64_t(hidden) * 4).pad_to(32);
  for (int64_t i = 0; i < hidden; ++i) g.f32(1.0f);
  const std::string path = dir.file("huge.gguf");
  write_bytes(path, g.bytes);
  std::filesystem::resize_file(path, g.bytes.size() + head_bytes);
  return path;
}

TEST(Resources, SparseTwoTebibyteHeadIsRefusedUpFront) {
  TempDir dir;
  uint64_t head_bytes = 0;
  const std::string path = write_sparse_head(dir, head_bytes);
  const MemoryLimit limit = cpu_memory_limit();
  if (limit.bytes > head_bytes) GTEST_SKIP() << "this machine has more than 2 TiB of memory";
  auto model = Model::open(path);
  ASSERT_EQ(model->config().head_bytes, head_bytes);
  try {
    check_head_fits(model->config().head_bytes, cpu_working_bytes(model->config()), path);
    ADD_FAILURE() << "a 2 TiB head was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("2,199,023,255,552"), std::string::npos) << m;
    EXPECT_NE(m.find(limit.source), std::string::npos) << m;
  }
}

// Engine's constructor calls check_head_fits for the CPU backends: the refusal reaches API and CLI
// users before any weight is read.
TEST(Resources, EngineAndCliRefuseAHeadLargerThanMemory) {
  TempDir dir;
  uint64_t head_bytes = 0;
  const std::string path = write_sparse_head(dir, head_bytes);
  if (cpu_memory_limit().bytes > head_bytes) GTEST_SKIP() << "this machine has more than 2 TiB of memory";
  auto model = Model::open(path);
  for (BackendKind backend : {BackendKind::scalar, BackendKind::cpu}) {
    try {
      Engine engine(model, {.backend = backend});
      ADD_FAILURE() << to_string(backend) << ": an engine over a 2 TiB head was built";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("does not fit in memory"), std::string::npos) << e.what();
    }
  }
  write_bytes(dir.file("h.npy"), npy_bytes(f4_dict("(4096,)"), std::vector<float>(4096, 1.0f)));
  expect_clean_refusal(run_cli("run " + shell_quote(path) + " --hidden " + shell_quote(dir.file("h.npy"))),
                       "does not fit in memory", "2 TiB head");
}

}  // namespace
