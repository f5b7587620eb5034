// The prefetching B x T data loader (loader.h).
//
// The worker thread runs ahead of the consumer by at most prefetch_depth batches, from its own cursor;
// every batch carries the position it was read at, so the consumer's position is exact whatever the worker
// has read. set_position and errors bump a generation counter: batches of an older generation are dropped.
#include "megascale/trainer/loader.h"

#include <fmt/format.h>
#include <glob.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

namespace megascale::trainer {

struct DataLoader::Impl {
  struct Item {
    Batch batch;
    Status status;
    uint64_t generation = 0;
  };

  std::vector<ShardInfo> shards;
  LoaderOptions options;
  int64_t rank_tokens = 0;  // B*T
  int64_t stride = 0;       // num_processes * B*T: how far a step advances

  // Consumer side.
  LoaderPosition position;
  int64_t epoch = 0;

  // Worker side, under `mutex`.
  std::thread worker;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Item> queue;
  LoaderPosition produce_at;
  int64_t produce_epoch = 0;
  uint64_t generation = 0;
  bool stopping = false;

  // Does the span of a step starting at `offset` fit shard `shard`? (+1: the last target.)
  bool fits(int64_t shard, int64_t offset) const {
    return offset + stride + 1 <= shards[static_cast<size_t>(shard)].num_tokens;
  }

  // The position after a step at `p`; wraps to the next shard, and past the last one to the first.
  void advance(LoaderPosition& p, int64_t& ep) const {
    p.offset_tokens += stride;
    if (!fits(p.shard, p.offset_tokens)) {
      p.offset_tokens = 0;
      if (++p.shard == static_cast<int64_t>(shards.size())) {
        p.shard = 0;
        ++ep;
      }
    }
  }

  Status read(const LoaderPosition& p, int64_t ep, Batch& out) const {
    const ShardInfo& shard = shards[static_cast<size_t>(p.shard)];
    const int64_t first = p.offset_tokens + options.process_rank * rank_tokens;
    std::vector<uint16_t> tokens(static_cast<size_t>(rank_tokens + 1));
    if (Status s = read_shard_range(shard.path, first, rank_tokens + 1, tokens.data()); !s) return s;
    if (options.vocab_size > 0) {
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (tokens[i] >= options.vocab_size) {
          return make_error(fmt::format("{}: token {} at offset {} is outside the vocabulary (vocab_size {})",
                                        shard.path, tokens[i], first + static_cast<int64_t>(i),
                                        options.vocab_size));
        }
      }
    }
    out.inputs.assign(tokens.begin(), tokens.end() - 1);
    out.targets.assign(tokens.begin() + 1, tokens.end());
    out.position = p;
    out.epoch = ep;
    return {};
  }

  void work() {
    std::unique_lock lock(mutex);
    while (true) {
      changed.wait(lock, [&] { return stopping || static_cast<int>(queue.size()) < options.prefetch_depth; });
      if (stopping) return;
      const LoaderPosition at = produce_at;
      const int64_t ep = produce_epoch;
      const uint64_t gen = generation;
      lock.unlock();
      Item item;
      item.status = read(at, ep, item.batch);
      item.generation = gen;
      lock.lock();
      if (gen != generation) continue;  // set_position ran meanwhile: this batch is stale
      const bool failed = !item.status;
      queue.push_back(std::move(item));
      if (failed) {
        // Stop producing until the consumer has seen the error and repositioned (next() does).
        changed.notify_all();
        changed.wait(lock, [&] { return stopping || gen != generation; });
        if (stopping) return;
        continue;
      }
      advance(produce_at, produce_epoch);
      changed.notify_all();
    }
  }

  // Points the worker at the consumer's position, dropping what it read ahead. Caller holds no lock.
  void restart_worker_at_consumer() {
    std::lock_guard lock(mutex);
    ++generation;
    queue.clear();
    produce_at = position;
    produce_epoch = epoch;
    changed.notify_all();
  }

  void stop() {
    if (!worker.joinable()) return;
    {
      std::lock_guard lock(mutex);
      stopping = true;
    }
    changed.notify_all();
    worker.join();
  }
};

DataLoader::DataLoader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DataLoader::~DataLoader() {
  impl_->stop();
}

Result<std::unique_ptr<DataLoader>> DataLoader::open(std::string_view glob_pattern,
                                                     const LoaderOptions& options) {
  const std::string pattern(glob_pattern);
  glob_t matches{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<std::string> paths;
  if (rc == 0) {
    for (size_t i = 0; i < matches.gl_pathc; ++i) paths.emplace_back(matches.gl_pathv[i]);
  }
  ::globfree(&matches);
  if (rc == GLOB_NOMATCH || (rc == 0 && paths.empty())) {
    return make_error(fmt::format("{}: no shard files match", pattern));
  }
  if (rc != 0) return make_error(fmt::format("{}: glob failed (code {})", pattern, rc));
  std::sort(paths.begin(), paths.end());
  return open_files(std::move(paths), options);
}

Result<std::unique_ptr<DataLoader>> DataLoader::open_files(std::vector<std::string> paths,
                                                           const LoaderOptions& options) {
  if (options.batch_size < 1 || options.seq_len < 1) {
    return make_error(fmt::format("data loader: batch_size ({}) and seq_len ({}) must be >= 1",
                                  options.batch_size, options.seq_len));
  }
  if (options.num_processes < 1 || options.process_rank < 0 ||
      options.process_rank >= options.num_processes) {
    return make_error(fmt::format("data loader: process_rank {} is not in [0, num_processes = {})",
                                  options.process_rank, options.num_processes));
  }
  if (options.prefetch && options.prefetch_depth < 1) {
    return make_error(
        fmt::format("data loader: prefetch_depth must be >= 1, got {}", options.prefetch_depth));
  }
  if (paths.empty()) return make_error("data loader: no shard files given");

  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->rank_tokens = int64_t{options.batch_size} * options.seq_len;
  impl->stride = impl->rank_tokens * options.num_processes;
  for (const std::string& path : paths) {
    Result<ShardInfo> info = read_shard_header(path);
    if (!info) return info.error();
    if (info->num_tokens < impl->stride + 1) {
      return make_error(fmt::format(
          "{}: {} tokens, fewer than one step needs ({} processes x batch {} x seq_len {} + 1 = {})", path,
          info->num_tokens, options.num_processes, options.batch_size, options.seq_len, impl->stride + 1));
    }
    impl->shards.push_back(*info);
  }
  Impl* raw = impl.get();
  std::unique_ptr<DataLoader> loader(new DataLoader(std::move(impl)));
  if (options.prefetch) raw->worker = std::thread([raw] { raw->work(); });
  return loader;
}

Status DataLoader::next(Batch& out) {
  Impl& d = *impl_;
  if (!d.options.prefetch) {
    if (Status s = d.read(d.position, d.epoch, out); !s) return s;
    d.advance(d.position, d.epoch);
    return {};
  }
  Impl::Item item;
  {
    std::unique_lock lock(d.mutex);
    d.changed.wait(lock, [&] { return !d.queue.empty() && d.queue.front().generation == d.generation; });
    item = std::move(d.queue.front());
    d.queue.pop_front();
    d.changed.notify_all();
  }
  if (!item.status) {
    d.restart_worker_at_consumer();  // stay at this batch: the next call reads it again
    return item.status;
  }
  out = std::move(item.batch);
  d.advance(d.position, d.epoch);
  return {};
}

LoaderPosition DataLoader::position() const {
  return impl_->position;
}

Status DataLoader::set_position(LoaderPosition position) {
  Impl& d = *impl_;
  if (position.shard < 0 || position.shard >= static_cast<int64_t>(d.shards.size())) {
    return make_error(fmt::format("data loader: position shard {} is not in [0, {}) ({} shards)",
                                  position.shard, d.shards.size(), d.shards.size()));
  }
  const ShardInfo& shard = d.shards[static_cast<size_t>(position.shard)];
  if (position.offset_tokens < 0 || position.offset_tokens % d.stride != 0 ||
      !d.fits(position.shard, position.offset_tokens)) {
    return make_error(fmt::format(
        "data loader: position offset {} in {} is not the start of a step (a multiple of {} with a whole "
        "step of {} tokens after it in the shard's {}); was it saved with other batch/sequence/process "
        "sizes?",
        position.offset_tokens, shard.path, d.stride, d.stride + 1, shard.num_tokens));
  }
  d.position = position;
  d.epoch = 0;
  if (d.options.prefetch) d.restart_worker_at_consumer();
  return {};
}

void DataLoader::reset() {
  Status s = set_position({0, 0});  // always valid: open() checked every shard holds one step
  (void)s;
}

const std::vector<ShardInfo>& DataLoader::shards() const {
  return impl_->shards;
}

const LoaderOptions& DataLoader::options() const {
  return impl_->options;
}

int64_t DataLoader::steps_per_epoch() const {
  int64_t steps = 0;
  for (const ShardInfo& s : impl_->shards) steps += (s.num_tokens - 1) / impl_->stride;
  return steps;
}

}  // namespace megascale::trainer
