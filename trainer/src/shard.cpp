// llm.c token shards (shard.h). Little-endian hosts only (x86-64, aarch64), like llm.c itself.
#include "megascale/trainer/shard.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>

#include "file_io.h"

namespace megascale::trainer {
namespace {

static_assert(std::endian::native == std::endian::little, "shards are little-endian; so is this reader");

// Other magics of llm.c files, so that a wrong file is named rather than only refused.
constexpr int32_t kLlama3ShardMagic = 20240801;  // uint32 tokens (llm.c dev/data, Llama-3 tokenizer)
constexpr int32_t kEvalMagic = 20240522;         // HellaSwag/MMLU eval files
constexpr int32_t kModelMagic = 20240326;        // llm.c model checkpoints

// A read-only file descriptor closed on scope exit.
class ReadFile {
 public:
  explicit ReadFile(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~ReadFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  ReadFile(const ReadFile&) = delete;
  ReadFile& operator=(const ReadFile&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_;
};

// Reads exactly `bytes` at `offset`; false with errno (0 on end of file) when it cannot.
bool pread_all(int fd, void* out, size_t bytes, int64_t offset) {
  auto* p = static_cast<char*>(out);
  while (bytes > 0) {
    ssize_t n = ::pread(fd, p, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = 0;
      return false;
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += n;
  }
  return true;
}

std::string magic_hint(int32_t magic) {
  switch (magic) {
    case kLlama3ShardMagic:
      return " (that is llm.c's Llama-3 shard magic, uint32 tokens: not supported)";
    case kEvalMagic:
      return " (that is llm.c's eval-file magic)";
    case kModelMagic:
      return " (that is llm.c's model-checkpoint magic)";
    default:
      return "";
  }
}

}  // namespace

Result<ShardInfo> read_shard_header(const std::string& path) {
  ReadFile file(path);
  if (file.fd() < 0)
    return make_error(fmt::format("{}: cannot open shard: {}", path, detail::errno_text(errno)));
  struct stat st {};
  if (::fstat(file.fd(), &st) != 0)
    return make_error(fmt::format("{}: cannot stat: {}", path, detail::errno_text(errno)));
  const int64_t size = st.st_size;
  if (size < kShardHeaderBytes) {
    return make_error(fmt::format("{}: not a token shard: {} bytes, shorter than the {}-byte header", path,
                                  size, kShardHeaderBytes));
  }
  std::array<int32_t, kShardHeaderInts> header{};
  if (!pread_all(file.fd(), header.data(), sizeof(header), 0)) {
    return make_error(fmt::format("{}: cannot read the header: {}", path, detail::errno_text(errno)));
  }
  if (header[0] != kShardMagic) {
    return make_error(fmt::format("{}: wrong magic {} in the shard header, expected {}{}", path, header[0],
                                  kShardMagic, magic_hint(header[0])));
  }
  if (header[1] != kShardVersion) {
    return make_error(
        fmt::format("{}: unsupported shard version {}, expected {}", path, header[1], kShardVersion));
  }
  const int64_t count = header[2];
  if (count < 0) return make_error(fmt::format("{}: negative token count {} in the header", path, count));
  const int64_t expected = kShardHeaderBytes + 2 * count;
  if (size != expected) {
    return make_error(fmt::format(
        "{}: file is {} bytes but the header says {} tokens, which need {} bytes ({})", path, size, count,
        expected, size < expected ? "truncated" : "trailing bytes after the tokens"));
  }
  return ShardInfo{path, count};
}

Status read_shard_range(const std::string& path, int64_t first_token, int64_t count, uint16_t* out) {
  if (first_token < 0 || count < 0) {
    return make_error(fmt::format("{}: bad token range [{}, +{})", path, first_token, count));
  }
  ReadFile file(path);
  if (file.fd() < 0)
    return make_error(fmt::format("{}: cannot open shard: {}", path, detail::errno_text(errno)));
  if (!pread_all(file.fd(), out, static_cast<size_t>(count) * 2, kShardHeaderBytes + 2 * first_token)) {
    int e = errno;
    return make_error(fmt::format("{}: cannot read tokens [{}, {}): {}", path, first_token,
                                  first_token + count,
                                  e == 0 ? "past the end of the file" : detail::errno_text(e)));
  }
  return {};
}

Result<std::vector<uint16_t>> read_shard_tokens(const std::string& path) {
  Result<ShardInfo> info = read_shard_header(path);
  if (!info) return info.error();
  std::vector<uint16_t> tokens(static_cast<size_t>(info->num_tokens));
  if (Status s = read_shard_range(path, 0, info->num_tokens, tokens.data()); !s) return s.error();
  return tokens;
}

Status write_shard(const std::string& path, std::span<const uint16_t> tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return make_error(fmt::format("{}: {} tokens do not fit the header's int32 count", path, tokens.size()));
  }
  std::array<int32_t, kShardHeaderInts> header{};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  detail::AtomicFileWriter out;
  if (Status s = out.open(path); !s) return s;
  if (Status s = out.write(header.data(), sizeof(header)); !s) return s;
  if (Status s = out.write(tokens.data(), tokens.size_bytes()); !s) return s;
  return out.commit();
}

}  // namespace megascale::trainer
