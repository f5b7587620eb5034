// llm.c token shards: round trip, header layout byte for byte, and every bad-header error.
#include "megascale/trainer/shard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <numeric>
#include <vector>

#include "../../support/temp_dir.h"

namespace megascale::trainer {
namespace {

using test::TempDir;

// Writes a shard by hand (not through write_shard), so the reader is checked against the format itself.
void write_raw(const std::string& path, std::vector<int32_t> header, const std::vector<uint16_t>& tokens,
               size_t extra_bytes = 0) {
  header.resize(256, 0);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  for (size_t i = 0; i < extra_bytes; ++i) out.put('x');
}

TEST(Shard, RoundTripAndExactLayout) {
  TempDir dir;
  std::vector<uint16_t> tokens(1000);
  std::iota(tokens.begin(), tokens.end(), uint16_t{65000 - 999});  // values near the uint16 top
  const std::string path = dir.file("a_train_000001.bin");
  ASSERT_TRUE(write_shard(path, tokens));

  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(bytes.size(), 1024u + 2000u);
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 1000);
  EXPECT_TRUE(std::all_of(bytes.begin() + 12, bytes.begin() + 1024, [](char c) { return c == 0; }));
  uint16_t first;
  std::memcpy(&first, bytes.data() + 1024, 2);
  EXPECT_EQ(first, tokens[0]);

  Result<ShardInfo> info = read_shard_header(path);
  ASSERT_TRUE(info) << info.error().message;
  EXPECT_EQ(info->num_tokens, 1000);
  Result<std::vector<uint16_t>> back = read_shard_tokens(path);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, tokens);

  std::vector<uint16_t> range(10);
  ASSERT_TRUE(read_shard_range(path, 990, 10, range.data()));
  EXPECT_EQ(range, std::vector<uint16_t>(tokens.begin() + 990, tokens.end()));
  Status past = read_shard_range(path, 995, 10, range.data());
  ASSERT_FALSE(past);
  EXPECT_NE(past.error().message.find("past the end"), std::string::npos) << past.error().message;
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(::getpid())));  // temp file renamed
}

TEST(Shard, ReadsAHandWrittenShard) {
  TempDir dir;
  write_raw(dir.file("x.bin"), {20240520, 1, 3}, {7, 8, 9});
  Result<std::vector<uint16_t>> t = read_shard_tokens(dir.file("x.bin"));
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(*t, (std::vector<uint16_t>{7, 8, 9}));
}

TEST(Shard, EmptyShardIsValid) {
  TempDir dir;
  ASSERT_TRUE(write_shard(dir.file("e.bin"), {}));
  Result<ShardInfo> info = read_shard_header(dir.file("e.bin"));
  ASSERT_TRUE(info) << info.error().message;
  EXPECT_EQ(info->num_tokens, 0);
}

std::string error_of(const std::string& path) {
  Result<ShardInfo> info = read_shard_header(path);
  EXPECT_FALSE(info);
  return info ? std::string() : info.error().message;
}

TEST(Shard, WrongMagicIsNamedWithAHint) {
  TempDir dir;
  write_raw(dir.file("m.bin"), {12345, 1, 3}, {1, 2, 3});
  EXPECT_EQ(error_of(dir.file("m.bin")),
            dir.file("m.bin") + ": wrong magic 12345 in the shard header, expected 20240520");
  write_raw(dir.file("l.bin"), {20240801, 7, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_NE(error_of(dir.file("l.bin")).find("Llama-3"), std::string::npos);
}

TEST(Shard, WrongVersion) {
  TempDir dir;
  write_raw(dir.file("v.bin"), {20240520, 2, 3}, {1, 2, 3});
  EXPECT_EQ(error_of(dir.file("v.bin")), dir.file("v.bin") + ": unsupported shard version 2, expected 1");
}

TEST(Shard, SizeMismatchSaysTruncatedOrTrailing) {
  TempDir dir;
  write_raw(dir.file("t.bin"), {20240520, 1, 5}, {1, 2, 3});
  EXPECT_EQ(error_of(dir.file("t.bin")),
            dir.file("t.bin") +
                ": file is 1030 bytes but the header says 5 tokens, which need 1034 bytes (truncated)");
  write_raw(dir.file("x.bin"), {20240520, 1, 3}, {1, 2, 3}, 1);
  EXPECT_NE(error_of(dir.file("x.bin")).find("(trailing bytes after the tokens)"), std::string::npos);
  write_raw(dir.file("n.bin"), {20240520, 1, -4}, {});
  EXPECT_NE(error_of(dir.file("n.bin")).find("negative token count -4"), std::string::npos);
}

TEST(Shard, ShorterThanAHeaderOrMissing) {
  TempDir dir;
  {
    std::ofstream out(dir.file("s.bin"), std::ios::binary);
    out << "tiny";
  }
  EXPECT_EQ(error_of(dir.file("s.bin")),
            dir.file("s.bin") + ": not a token shard: 4 bytes, shorter than the 1024-byte header");
  EXPECT_NE(error_of(dir.file("missing.bin")).find("cannot open shard: No such file or directory"),
            std::string::npos);
}

TEST(Shard, WriteIntoAMissingDirectoryFails) {
  TempDir dir;
  Status s = write_shard(dir.file("no/such/dir/x.bin"), std::vector<uint16_t>{1});
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("cannot create"), std::string::npos) << s.error().message;
}

}  // namespace
}  // namespace megascale::trainer
