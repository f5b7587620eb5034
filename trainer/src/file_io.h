// Private to the trainer core: whole-file writes that appear atomically (temp file + fsync + rename),
// used by shards and checkpoints so a crash mid-write never leaves a half file under the real name.
//
//   AtomicFileWriter out;
//   if (Status s = out.open(path); !s) return s;
//   if (Status s = out.write(data, bytes); !s) return s;
//   return out.commit();      // renames over `path`; destroying an uncommitted writer deletes the temp
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "megascale/common/result.h"

namespace megascale::trainer::detail {

class AtomicFileWriter {
 public:
  AtomicFileWriter() = default;
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  Status open(const std::string& path);
  Status write(const void* data, size_t bytes);
  Status commit();
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  uint64_t bytes_written_ = 0;
};

// "No such file or directory": errno as text.
std::string errno_text(int error_number);

}  // namespace megascale::trainer::detail
