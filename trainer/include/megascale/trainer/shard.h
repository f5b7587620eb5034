// llm.c token shards: the on-disk format of training data (llm.c dev/data/data_common.py, read by
// llmc/dataloader.h). A shard is a 1024-byte header of 256 little-endian int32 (magic 20240520, version
// 1, token count, the rest 0) followed by that many uint16 tokens; the file size must be exactly
// 1024 + 2 * count. The same files llm.c's GPT-2 tokenizers write load here unchanged.
//
//   if (Status s = write_shard("data/x_train_000001.bin", tokens); !s) return s.error();
//   Result<ShardInfo> info = read_shard_header("data/x_train_000001.bin");   // checks magic, version, size
//   Result<std::vector<uint16_t>> all = read_shard_tokens("data/x_train_000001.bin");
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "megascale/common/result.h"

namespace megascale::trainer {

inline constexpr int32_t kShardMagic = 20240520;  // GPT-2-token shards (uint16)
inline constexpr int32_t kShardVersion = 1;
inline constexpr int kShardHeaderInts = 256;
inline constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;

struct ShardInfo {
  std::string path;
  int64_t num_tokens = 0;
};

// Reads and checks the header: the error names the path and the problem (file missing or shorter than a
// header, wrong magic (with a hint when it is llm.c's Llama-3 or model-checkpoint magic), unsupported
// version, negative count, file size that does not match the count (truncated or trailing bytes)).
Result<ShardInfo> read_shard_header(const std::string& path);

// Reads `count` tokens starting at token `first_token` into `out` (header checked by the caller, through
// read_shard_header); an error when the range is outside the file or the read comes up short.
Status read_shard_range(const std::string& path, int64_t first_token, int64_t count, uint16_t* out);

// The whole shard, header checked.
Result<std::vector<uint16_t>> read_shard_tokens(const std::string& path);

// Writes a shard (header + tokens). The file appears whole or not at all (temp file + rename).
Status write_shard(const std::string& path, std::span<const uint16_t> tokens);

}  // namespace megascale::trainer
