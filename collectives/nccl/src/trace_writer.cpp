// The request timeline as Chrome trace JSON (see trace_writer.h).
#include "trace_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "config.h"
#include "log.h"
#include "megascale/engine/endpoint.h"
#include "transport.h"

namespace megascale::nccl {
namespace {

// A slice: microseconds with ns precision, as the format wants them. `bytes` < 0: no args.
void slice(std::FILE* f, bool& first, const char* name, const char* cat, long pid, uint64_t tid, TimeNs from,
           TimeNs to, int64_t bytes) {
  std::fprintf(f,
               "%s\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%ld,\"tid\":%" PRIu64
               ",\"ts\":%" PRId64 ".%03" PRId64 ",\"dur\":%" PRId64 ".%03" PRId64,
               first ? "" : ",", name, cat, pid, tid, from / 1000, from % 1000, (to - from) / 1000,
               (to - from) % 1000);
  if (bytes >= 0) std::fprintf(f, ",\"args\":{\"bytes\":%" PRId64 "}", bytes);
  std::fputs("}", f);
  first = false;
}

void metadata(std::FILE* f, bool& first, const char* what, long pid, const uint64_t* tid,
              const nlohmann::json& args) {
  std::fprintf(f, "%s\n{\"name\":\"%s\",\"ph\":\"M\",\"pid\":%ld", first ? "" : ",", what, pid);
  if (tid != nullptr) std::fprintf(f, ",\"tid\":%" PRIu64, *tid);
  std::fprintf(f, ",\"args\":%s}", args.dump().c_str());
  first = false;
}

}  // namespace

void TraceWriter::configure(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  path_ = path;
}

void TraceWriter::add(CommBase* comm) {
  if (!enabled()) return;
  // A comm opens once its connection is up (connect: the hello acknowledged; accept: it arrived), so the
  // peer's id for it is known. Read before this writer's lock: the wire's lock is not taken under it.
  uint64_t peer_conn = 0;
  comm->wire()->udp().with_endpoint([&](engine::Endpoint& ep) {
    if (const engine::Connection* c = ep.connection(comm->conn())) peer_conn = c->remote_id();
  });
  std::lock_guard<std::mutex> lock(mu_);
  // A send comm's peer text already names the interface ("addr:port (ifname)").
  const bool has_ifname = comm->peer.find(" (") != std::string::npos;
  comms_.push_back(Comm{std::string(comm->role == Role::kSend ? "send " : "recv ") + comm->peer +
                            (has_ifname ? "" : " (" + comm->ifname + ")"),
                        0, comm->conn(), peer_conn, comm->stripe_count()});
  comm->trace_id = static_cast<uint32_t>(comms_.size());  // 1-based: 0 is "no track"
}

void TraceWriter::record(const CommBase& comm, uint8_t lane, TimeNs posted_ns, const engine::Completion& c,
                         TimeNs seen_ns) {
  if (!enabled() || comm.trace_id == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (requests_.size() >= kMaxRequests) {
    ++dropped_;
    return;
  }
  Comm& track = comms_[comm.trace_id - 1];
  track.lanes = std::max<uint32_t>(track.lanes, lane + 1u);
  requests_.push_back(
      Request{comm.trace_id, lane, c.send, c.bytes, posted_ns, c.first_ns, c.last_ns, c.done_ns, seen_ns});
}

Status TraceWriter::write() {
  if (!enabled()) return {};
  std::lock_guard<std::mutex> lock(mu_);
  if (written_ == requests_.size() + dropped_) return {};
  const std::string tmp = path_ + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    return make_error("MEGASCALE_TRACE_FILE: cannot write " + tmp + ": " + std::strerror(errno));
  }
  const long pid = static_cast<long>(::getpid());
  const std::string host = host_name();
  std::fputs("{\"displayTimeUnit\":\"ns\",\"otherData\":", f);
  std::fputs(nlohmann::json{{"clock", "CLOCK_MONOTONIC"},
                            {"host", host},
                            {"requests", requests_.size()},
                            {"requests_not_kept", dropped_},
                            {"max_requests", kMaxRequests}}
                 .dump()
                 .c_str(),
             f);
  std::fputs(",\"traceEvents\":[", f);
  bool first = true;
  metadata(f, first, "process_name", pid, nullptr,
           {{"name", "MegaScale " + host + " pid " + std::to_string(pid)}});
  for (size_t i = 0; i < comms_.size(); ++i) {
    for (uint32_t lane = 0; lane < comms_[i].lanes; ++lane) {
      const uint64_t tid = (i + 1) * 100 + lane;
      nlohmann::json args = {{"name", comms_[i].name + (lane > 0 ? " +" + std::to_string(lane) : "")}};
      if (lane == 0) {
        args["conn"] = id_hex(comms_[i].conn);
        args["peer_conn"] = id_hex(comms_[i].peer_conn);
        args["stripes"] = comms_[i].stripes;
      }
      metadata(f, first, "thread_name", pid, &tid, args);
      metadata(f, first, "thread_sort_index", pid, &tid, {{"sort_index", tid}});
    }
  }
  for (const Request& r : requests_) {
    const uint64_t tid = uint64_t{r.comm} * 100 + r.lane;
    // Clamped like the phase histograms: the engine's round clock may read a little before the post.
    const TimeNs first_ns = std::max(r.first, r.posted);
    const TimeNs last_ns = std::max(r.last, first_ns);
    const TimeNs done_ns = r.send ? std::max(r.done, last_ns) : last_ns;
    const TimeNs seen_ns = std::max(r.seen, done_ns);
    slice(f, first, r.send ? "send" : "recv", "request", pid, tid, r.posted, seen_ns,
          static_cast<int64_t>(r.bytes));
    slice(f, first, "wait", "phase", pid, tid, r.posted, first_ns, -1);
    slice(f, first, "transfer", "phase", pid, tid, first_ns, last_ns, -1);
    if (r.send) slice(f, first, "ack", "phase", pid, tid, last_ns, done_ns, -1);
    slice(f, first, "report", "phase", pid, tid, done_ns, seen_ns, -1);
  }
  std::fputs("\n]}\n", f);
  const bool ok = std::ferror(f) == 0;
  if (std::fclose(f) != 0 || !ok) {
    std::remove(tmp.c_str());
    return make_error("MEGASCALE_TRACE_FILE: writing " + tmp + " failed");
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return make_error("MEGASCALE_TRACE_FILE: cannot rename " + tmp + " to " + path_ + ": " + why);
  }
  written_ = requests_.size() + dropped_;
  return {};
}

}  // namespace megascale::nccl
