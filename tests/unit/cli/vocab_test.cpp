// The CLI's shared vocabulary: units on durations and sizes, refused old spellings, `--json -`.
#include "vocab.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace megascale::cli::vocab {
namespace {

// Parses argv (without the program name) into `app`; returns the parse error's text, "" on success.
std::string parse(CLI::App& app, std::vector<std::string> args) {
  std::reverse(args.begin(), args.end());  // CLI11 takes the vector back to front
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(Vocab, DurationTakesUnits) {
  for (const auto& [text, seconds] : std::vector<std::pair<std::string, double>>{
           {"2", 2.0}, {"2s", 2.0}, {"500ms", 0.5}, {"250us", 250e-6}, {"10ns", 10e-9}, {"1min", 60.0}}) {
    CLI::App app;
    double s = -1;
    duration(&app, kDurationFlag, s, "");
    EXPECT_EQ(parse(app, {"--duration", text}), "") << text;
    EXPECT_DOUBLE_EQ(s, seconds) << text;
  }
}

TEST(Vocab, DurationRefusesBadValuesNamingThem) {
  for (const std::string text : {"abc", "5parsecs", "-1", "0"}) {
    CLI::App app;
    double s = -1;
    duration(&app, kDurationFlag, s, "");
    const std::string error = parse(app, {"-D", text});
    EXPECT_NE(error.find(text), std::string::npos) << error;
  }
}

TEST(Vocab, TimeoutAllowsZero) {
  CLI::App app;
  double s = -1;
  timeout(&app, s, "");
  EXPECT_EQ(parse(app, {"--timeout", "0"}), "");
  EXPECT_EQ(s, 0.0);
}

TEST(Vocab, SizeTakesBinaryUnits) {
  for (const auto& [text, bytes] : std::vector<std::pair<std::string, std::uint64_t>>{
           {"65536", 65536}, {"64K", 65536}, {"64KiB", 65536}, {"1M", 1 << 20}, {"2G", 2ull << 30}}) {
    CLI::App app;
    std::uint64_t b = 0;
    size(&app, kSizeFlag, b, "");
    EXPECT_EQ(parse(app, {"-s", text}), "") << text;
    EXPECT_EQ(b, bytes) << text;
  }
  CLI::App app;
  std::uint64_t b = 0;
  size(&app, kSizeFlag, b, "");
  EXPECT_NE(parse(app, {"-s", "12XB"}).find("unknown size unit 'XB'"), std::string::npos);
}

TEST(Vocab, RenamedFlagIsRefusedNamingTheNewOne) {
  CLI::App app;
  double s = 0;
  timeout(&app, s, "");
  renamed(&app, "--timeout-s", "--timeout");
  const std::string with_value = parse(app, {"--timeout-s", "5"});
  EXPECT_NE(with_value.find("--timeout-s was renamed: use --timeout"), std::string::npos) << with_value;
  CLI::App flag_app;
  renamed(&flag_app, "--controller", "--cc");
  const std::string bare = parse(flag_app, {"--controller"});
  EXPECT_NE(bare.find("--controller was renamed: use --cc"), std::string::npos) << bare;
  // Hidden from --help.
  EXPECT_EQ(app.help().find("--timeout-s"), std::string::npos);
}

TEST(Vocab, WriteJsonToAFileAndRefusesAnUnwritablePath) {
  const std::string path = ::testing::TempDir() + "/vocab_test.json";
  auto doc = json_document("perf");
  doc["bandwidth_gbps"] = 1.5;
  ASSERT_TRUE(write_json(path, doc));
  std::ifstream in(path);
  const auto back = nlohmann::json::parse(in);
  EXPECT_EQ(back["command"], "perf");
  EXPECT_EQ(back["schema_version"], 1);
  EXPECT_EQ(back["bandwidth_gbps"], 1.5);
  const auto bad = write_json("/nonexistent-dir/x.json", doc);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("/nonexistent-dir/x.json"), std::string::npos);
}

TEST(Vocab, DashMeansStandardOutput) {
  EXPECT_EQ(human_stream("-"), stderr);
  EXPECT_EQ(human_stream("out.json"), stdout);
  ::testing::internal::CaptureStdout();
  ASSERT_TRUE(write_json("-", json_document("ceiling")));
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(nlohmann::json::parse(out)["command"], "ceiling");
}

}  // namespace
}  // namespace megascale::cli::vocab
