// The lmhead tool as a user meets it: help for every command, clear errors with non-zero exits,
// JSON that scripts can read, and stage labels that book the head's time to the head.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "io/npy.hpp"
#include "lmhead/lmhead.hpp"
#include "test_util.hpp"

namespace {

using namespace lmhead;
using namespace lmhead::testing;

const std::string kModel = data_path("tail-q5k-v4099-h512.gguf");
const std::string kVectors = data_path("tail-q5k-v4099-h512.vectors.gguf");

TEST(Cli, EveryCommandHasHelp) {
  for (const char* cmd : {"", "demo", "info", "run", "make", "bench"}) {
    const CommandResult r = run_command(cli() + " " + cmd + " --help");
    EXPECT_EQ(r.status, 0) << cmd << ": " << r.output;
    EXPECT_NE(r.output.find("Usage"), std::string::npos) << cmd;
  }
}

TEST(Cli, InfoShowsShapesDefaultsAndTheByteBill) {
  const CommandResult r = run_command(cli() + " info " + kModel);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("muse-glimmer"), std::string::npos);
  EXPECT_NE(r.output.find("4,099"), std::string::npos);
  EXPECT_NE(r.output.find("byte bill"), std::string::npos);
  const CommandResult j = run_command(cli() + " info " + kModel + " --json", false);
  ASSERT_EQ(j.status, 0);
  const auto info = nlohmann::json::parse(j.output);
  EXPECT_EQ(info["vocab"], 4099);
  EXPECT_EQ(info["hidden"], 512);
  EXPECT_EQ(info["head_type"], "q5_K");
  EXPECT_EQ(info["eps"]["default"], false);
  EXPECT_EQ(info["byte_bill"]["weights"], info["head_bytes"]);
}

TEST(Cli, RunJsonReportsTokensTopKAndTies) {
  const CommandResult r =
      run_command(cli() + " run " + kModel + " --hidden " + kVectors + ":hidden --top-k 4 --logprobs --json", false);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["tokens"].size(), 3u);
  const auto& t0 = j["tokens"][0];
  EXPECT_EQ(t0["argmax"], 0);
  EXPECT_EQ(t0["ties"]["count"], 3);
  EXPECT_EQ(t0["ties"]["ids"], nlohmann::json({0, 7, 14}));
  ASSERT_EQ(t0["top_k"].size(), 4u);
  EXPECT_LE(t0["top_k"][0]["logprob"].get<double>(), 0.0);
  EXPECT_TRUE(t0["top_k"][0].contains("text"));
}

TEST(Cli, ConsoleShowsTheDecidingTie) {
  const CommandResult r = run_command(cli() + " run " + kModel + " --hidden " + kVectors + ":hidden");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("tie decided the token: 3 ids"), std::string::npos) << r.output;
}

TEST(Cli, ErrorsAreClearAndNonZero) {
  TempDir dir;
  struct Case { std::string args, must_mention; };
  // A hidden state with a NaN at token 1, index 5.
  std::vector<float> h(2 * 512, 0.5f);
  h[512 + 5] = NAN;
  io::write_npy_f32(dir.file("nan.npy"), {2, 512}, h.data());
  std::vector<float> wrong(100, 1.0f);
  io::write_npy_f32(dir.file("wrong.npy"), {100}, wrong.data());
  const Case cases[] = {
      {"run " + dir.file("absent.gguf") + " --hidden x.npy", "absent.gguf"},
      {"run " + kModel + " --hidden " + dir.file("absent.npy"), "absent.npy"},
      {"run " + kModel + " --hidden " + dir.file("nan.npy"), "token 1"},
      {"run " + kModel + " --hidden " + dir.file("wrong.npy"), "512"},
      {"run " + kModel + " --hidden " + kVectors + ":nope", "nope"},
      {"info " + kVectors, "architecture 'tail-vectors' has no rule"},  // a vectors file, not a checkpoint
      {"run " + kModel + " --hidden " + kVectors + ":hidden --activations int4", "int4"},
      {"bench " + kModel + " --tokens 1,x", "--tokens"},
      {"make " + dir.file("bad.gguf") + " --hidden 100", "hidden"},
  };
  for (const Case& c : cases) {
    const CommandResult r = run_command(cli() + " " + c.args);
    EXPECT_NE(r.status, 0) << c.args;
    EXPECT_LT(r.status, 128) << "crashed: " << c.args;
    EXPECT_NE(r.output.find(c.must_mention), std::string::npos) << c.args << " -> " << r.output;
  }
  EXPECT_NE(run_command(cli() + " run " + kModel + " --hidden " + dir.file("nan.npy")).output.find("index 5"),
            std::string::npos);
}

TEST(Cli, MakeWritesACheckpointThatRuns) {
  TempDir dir;
  const std::string m = dir.file("m.gguf");
  const CommandResult mk = run_command(cli() + " make " + m + " --vocab 1001 --hidden 512 --type q6_K --seed 5 --quiet");
  ASSERT_EQ(mk.status, 0) << mk.output;
  const auto info = nlohmann::json::parse(run_command(cli() + " info " + m + " --json", false).output);
  EXPECT_EQ(info["vocab"], 1001);
  EXPECT_EQ(info["head_type"], "q6_K");
  EXPECT_EQ(info["logit_scale"]["value"].get<double>(), double(0.196116f));
  std::vector<float> h(512);
  for (int i = 0; i < 512; ++i) h[i] = float(i % 9) - 4;
  io::write_npy_f32(dir.file("h.npy"), {512}, h.data());
  const CommandResult r = run_command(cli() + " run " + m + " --hidden " + dir.file("h.npy") + " --out " + dir.file("o.npy"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(io::read_npy_f32(dir.file("o.npy")).hidden, 1001);
  // Same seed, same bytes; another seed, other bytes.
  ASSERT_EQ(run_command(cli() + " make " + dir.file("m2.gguf") + " --vocab 1001 --hidden 512 --type q6_K --seed 5 --quiet").status, 0);
  ASSERT_EQ(run_command(cli() + " make " + dir.file("m3.gguf") + " --vocab 1001 --hidden 512 --type q6_K --seed 6 --quiet").status, 0);
  EXPECT_EQ(run_command("cmp -s " + m + " " + dir.file("m2.gguf")).status, 0);
  EXPECT_NE(run_command("cmp -s " + m + " " + dir.file("m3.gguf")).status, 0);
}

TEST(Cli, BenchJsonHasTheDocumentedFields) {
  const CommandResult r = run_command(cli() + " bench " + kModel + " --tokens 1,3 --repeat 3 --threads 1 --json", false);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  ASSERT_EQ(j["results"].size(), 2u);
  for (const auto& row : j["results"])
    for (const char* k : {"tokens", "threads", "median_ms", "min_ms", "max_ms", "gbps", "ceiling_gbps", "ratio"})
      EXPECT_TRUE(row.contains(k)) << k;
  EXPECT_EQ(j["results"][1]["tokens"], 3);
}

// The head's time is booked under "head", never under the soft cap: with a head whose dot products
// are 4096 multiply-adds per logit against a few dozen operations of capping, the label that
// carries the work must be "head".
TEST(Cli, HeadTimeIsBookedToTheHead) {
  TempDir dir;
  const std::string m = dir.file("wide.gguf");
  ASSERT_EQ(run_command(cli() + " make " + m + " --vocab 2000 --hidden 4096 --quiet").status, 0);
  auto model = Model::open(m);
  Engine e(model, {.backend = BackendKind::scalar});
  std::vector<float> h(4096, 0.25f);
  const RunResult r = e.run(h, 1);
  double head = -1, cap = -1;
  for (const StageTime& s : r.times) {
    if (s.label == "head") head = s.ms;
    if (s.label == "softcap") cap = s.ms;
  }
  ASSERT_GE(head, 0) << "no 'head' stage";
  ASSERT_GE(cap, 0) << "no 'softcap' stage";
  EXPECT_GT(head, cap);
}

}  // namespace
