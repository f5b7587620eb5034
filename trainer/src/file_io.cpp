// AtomicFileWriter (file_io.h).
#include "file_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace megascale::trainer::detail {

std::string errno_text(int error_number) {
  return std::strerror(error_number);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
}

Status AtomicFileWriter::open(const std::string& path) {
  path_ = path;
  // Same directory as the target, so rename() stays within one filesystem and is atomic.
  temp_path_ = fmt::format("{}.tmp.{}", path, ::getpid());
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return make_error(fmt::format("{}: cannot create: {}", temp_path_, errno_text(errno)));
  bytes_written_ = 0;
  return {};
}

Status AtomicFileWriter::write(const void* data, size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error(fmt::format("{}: write failed: {}", temp_path_, errno_text(errno)));
    p += n;
    bytes -= static_cast<size_t>(n);
    bytes_written_ += static_cast<uint64_t>(n);
  }
  return {};
}

Status AtomicFileWriter::commit() {
  if (::fsync(fd_) != 0)
    return make_error(fmt::format("{}: fsync failed: {}", temp_path_, errno_text(errno)));
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(temp_path_.c_str());
    return make_error(fmt::format("{}: close failed: {}", temp_path_, errno_text(errno)));
  }
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    int e = errno;
    ::unlink(temp_path_.c_str());
    return make_error(fmt::format("{}: cannot rename {} over it: {}", path_, temp_path_, errno_text(e)));
  }
  return {};
}

}  // namespace megascale::trainer::detail
