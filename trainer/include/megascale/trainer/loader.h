// The data loader: B x T training windows over a sorted list of llm.c shards (shard.h), with a
// background thread that reads the next batches while the GPU works on this one, and a Position that
// checkpoints save so that a resumed run sees exactly the batches it would have seen.
//
//   LoaderOptions options{.batch_size = 16, .seq_len = 256, .vocab_size = 257};
//   Result<std::unique_ptr<DataLoader>> loader = DataLoader::open("data/synth/*_train_*.bin", options);
//   if (!loader) return loader.error();
//   Batch batch;
//   if (Status s = (*loader)->next(batch); !s) return s.error();   // batch.inputs, batch.targets: B*T
//   LoaderPosition saved = (*loader)->position();                  // into the checkpoint
//   ...
//   (*loader)->set_position(saved);                                // after a restart: same next batch
//
// Windows (as llm.c's loader, llmc/dataloader.h): a step reads, from one shard, the span of
// num_processes * B * T + 1 tokens starting at the position; process r takes the B*T + 1 tokens at
// r * B * T inside it; inputs are its first B*T, targets the same shifted by one token (row b of the
// batch is tokens [b*T, b*T + T) of that span, targets [b*T + 1, b*T + T + 1)). The position then
// advances by num_processes * B * T. When the next span would run past the shard's end, the loader moves
// to the start of the next shard (the shard's tail is skipped), and after the last shard it wraps to the
// first one (a new epoch). Order is the files' sorted order; no shuffling, so batches are a pure function
// of (files, options, position).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/trainer/shard.h"

namespace megascale::trainer {

// Where the next step's span starts: shard index in the sorted list, token offset inside it.
struct LoaderPosition {
  int64_t shard = 0;
  int64_t offset_tokens = 0;
  bool operator==(const LoaderPosition&) const = default;
};

struct LoaderOptions {
  int batch_size = 0;  // B
  int seq_len = 0;     // T
  int process_rank = 0;
  int num_processes = 1;
  int vocab_size = 0;      // > 0: every token must be < vocab_size, or next() fails naming shard and offset
  bool prefetch = true;    // read ahead on a background thread (false: read inside next())
  int prefetch_depth = 2;  // batches read ahead
};

struct Batch {
  std::vector<int32_t> inputs;   // B*T token ids, row-major [B, T]
  std::vector<int32_t> targets;  // B*T: inputs shifted by one
  LoaderPosition position;       // where this batch's step span started
  int64_t epoch = 0;             // wraps past the last shard since open() or set_position()
};

class DataLoader {
 public:
  // The shards matching `glob_pattern` (POSIX glob), sorted by path. Errors: no match, a shard whose
  // header is bad (shard.h), a shard too short for one step span, options out of range.
  static Result<std::unique_ptr<DataLoader>> open(std::string_view glob_pattern,
                                                  const LoaderOptions& options);

  // The given shard files, in the given order.
  static Result<std::unique_ptr<DataLoader>> open_files(std::vector<std::string> paths,
                                                        const LoaderOptions& options);

  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next batch into `out` (its vectors are reused). An I/O error or an out-of-vocabulary token is
  // returned here; the loader then stays at that batch.
  Status next(Batch& out);

  // Where the next batch returned by next() starts (what a checkpoint saves).
  LoaderPosition position() const;

  // Continue from `position` (as returned by position(), possibly by another loader over the same files
  // and options). Errors: shard index out of range, offset not on a step boundary's span inside the
  // shard. Batches read ahead are discarded.
  Status set_position(LoaderPosition position);

  // Back to the first batch of the first shard (epoch 0).
  void reset();

  const std::vector<ShardInfo>& shards() const;
  const LoaderOptions& options() const;

  // Steps in one pass over every shard (sum over shards of the spans that fit).
  int64_t steps_per_epoch() const;

 private:
  struct Impl;
  explicit DataLoader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace megascale::trainer
