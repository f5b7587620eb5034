// The data path (NCCL's progress thread): memory registration, isend, grouped irecv, test, iflush,
// irecvConsumed. Buffers go straight to the engine: a send is read in place by the wire (zero copy), a
// receive is written in place as segments arrive (the UDP datapath's one copy). GPU buffers
// (MEGASCALE_GDR_COPY) go through their host shadows: a send's parts are copied there first (each waits
// in the comm's `staged` queue for its copy), a receive's are copied to the GPU as each part lands.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "log.h"
#include "net_result.h"
#include "plugin.h"
#include "registry.h"

namespace megascale::nccl::core {
namespace {

CommBase* as_comm(void* p, uint32_t magic) {
  auto* c = static_cast<CommBase*>(p);
  return (c != nullptr && c->magic == magic) ? c : nullptr;
}

bool connection_usable(DeviceWire& w, engine::ConnId conn) {
  const engine::ConnectionState st = w.udp().state(conn);
  return st == engine::ConnectionState::kConnecting || st == engine::ConnectionState::kEstablished;
}

// Adds a request that ended well to its comm's phase histograms (CommBase::phases) and to the request
// timeline (MEGASCALE_TRACE_FILE: stripe 0's part of each buffer only, `traced`); `seen_ns` is when
// test() found it done. With stripes, each part adds its own phases.
void record_phases(CommBase& comm, const Request& r, int sub, bool traced, const engine::Completion& c,
                   TimeNs seen_ns) {
  const TimeNs posted_ns = r.posted_ns;
  // Clamped at 0: the wire's thread reads its clock at the start of a round, which may be a little
  // before a post that the same round took in.
  comm.update([&](CommBase::Counters& counters) {
    const auto add = [&](CommBase::Phase p, TimeNs from, TimeNs to) {
      counters.phases[p].add(std::max<TimeNs>(0, to - from));
    };
    add(CommBase::kWait, posted_ns, c.first_ns);
    add(CommBase::kTransfer, c.first_ns, c.last_ns);
    if (c.send) add(CommBase::kAck, c.last_ns, c.done_ns);
    add(CommBase::kReport, c.done_ns, seen_ns);
  });
  if (traced && comm.trace_id != 0)
    Registry::get().trace().record(comm, r.trace_lane[sub], posted_ns, c, seen_ns);
}

// Looks at the tickets of the parts of `r` not yet done. Returns false (and fails the comm) when one
// failed. `seen_ns` (0: not test()'s look, or NCCL needs no completion) records the phases of those that
// ended.
bool poll_request(Request& r, NetResult* code, TimeNs seen_ns = 0) {
  CommBase* comm = r.comm;
  const uint32_t k = comm->stripe_count();
  for (uint32_t t = 0; t < r.parts; ++t) {
    if (r.done_mask & (uint64_t{1} << t)) continue;
    if (!r.tickets[t].done()) continue;
    const engine::Completion& c = r.tickets[t].completion();
    if (!c.ok) {
      const Stripe& s = comm->stripes[t % k];
      if (connection_usable(*s.wire, s.conn)) {
        // The connection is fine: this request alone failed (a receive smaller than the message).
        *code = fail_comm(comm, to_net_result(c.code), c.error);
      } else {
        const Error failure = classify_failure(*s.wire, s.conn);
        *code = fail_comm(comm, to_net_result(failure.code), c.error.empty() ? failure.message : c.error);
      }
      return false;
    }
    r.bytes[t / k] += c.bytes;
    if (seen_ns > 0) record_phases(*comm, r, static_cast<int>(t / k), t % k == 0, c, seen_ns);
    r.done_mask |= uint64_t{1} << t;
  }
  return true;
}

// MEGASCALE_TEST_PROGRESS_US: while a part of `r` is still out, NCCL's polling thread runs a round of
// its wire when the wire's own thread has not finished one for that long (UdpWire::help: otherwise a
// load and a compare, or a try-lock that fails while the wire's thread holds it).
void help_wires(const Request& r, TimeNs now) {
  const CommBase& comm = *r.comm;
  const uint32_t k = comm.stripe_count();
  DeviceWire* helped = nullptr;
  for (uint32_t t = 0; t < r.parts; ++t) {
    if ((r.done_mask & (uint64_t{1} << t)) != 0 || r.tickets[t].done()) continue;
    DeviceWire* w = comm.stripes[t % k].wire;
    if (w == helped) continue;
    w->udp().help(now);
    helped = w;
  }
}

bool all_done(const Request& r) {
  return r.done_mask == (r.parts >= 64 ? ~uint64_t{0} : (uint64_t{1} << r.parts) - 1);
}

// Whether NCCL may be told the request is done: every part that carries bytes is. A send knows its
// empty parts (needed_mask); a receive learns them as its parts arrive: after a part short of
// stripe_bytes the buffer's later parts are empty. Empty parts still travel (the receiver posted them),
// but nothing waits for them: their tickets finish later with the request deferred (reap_deferred).
bool complete(const Request& r) {
  const CommBase& comm = *r.comm;
  if (comm.role == Role::kSend) return (r.done_mask & r.needed_mask) == r.needed_mask;
  const uint32_t k = comm.stripe_count();
  for (uint32_t j = 0; j < r.n; ++j) {
    for (uint32_t i = 0; i < k; ++i) {
      const uint32_t t = j * k + i;
      if ((r.done_mask & (uint64_t{1} << t)) == 0) return false;
      if (r.tickets[t].completion().bytes < comm.stripe_bytes) break;
    }
  }
  return true;
}

// Adds the time from its construction to its destruction to `total` (the comm's time inside a call).
class CallTimer {
 public:
  CallTimer(std::atomic<uint64_t>& total, TimeNs start) : total_(total), start_(start) {}
  ~CallTimer() {
    add_owned(total_, static_cast<uint64_t>(std::max<TimeNs>(0, wire::UdpWire::now() - start_)));
  }
  CallTimer(const CallTimer&) = delete;
  CallTimer& operator=(const CallTimer&) = delete;

 private:
  std::atomic<uint64_t>& total_;
  TimeNs start_;
};

int clamp_int(uint64_t v) {
  return v > INT_MAX ? INT_MAX : static_cast<int>(v);
}

// A registered GPU buffer's shadow: where the wire reads or writes [data, data + size) of it. Null when
// `mhandle` is host memory; an error when the range is not inside the registration.
Result<char*> shadow_of(void* mhandle, const void* data, uint64_t size) {
  const auto* h = static_cast<const MemHandle*>(mhandle);
  if (h == nullptr || h->magic != kMrMagic || h->shadow == nullptr) return static_cast<char*>(nullptr);
  const auto* base = static_cast<const char*>(h->data);
  const auto* p = static_cast<const char*>(data);
  if (p < base || size > h->size || static_cast<size_t>(p - base) > h->size - size) {
    return make_error("GPU buffer " + std::to_string(reinterpret_cast<uintptr_t>(data)) + " (+" +
                      std::to_string(size) + " bytes) is outside its registration of " +
                      std::to_string(h->size) + " bytes");
  }
  return h->shadow + (p - base);
}

NetResult copy_failed(CommBase* comm, const Error& e) {
  return fail_comm(comm, to_net_result(e.code), "GPU buffer copy: " + e.message);
}

void submit_send(CommBase& comm, Request& r) {
  for (uint32_t i = 0; i < r.parts; ++i) comm.stripes[i].wire->udp().submit(r.tickets[i]);
}

// Whether the comm's copier has `need` free marks, after taking back every mark whose copies are done:
// a look at all of them, so that marks held by requests NCCL is not testing come back too (a receive's
// marks are otherwise looked at only when NCCL tests it).
Result<bool> have_marks(CommBase* comm, size_t need) {
  if (comm->copier->free_marks() >= need) return true;
  auto looked = comm->copier->passed(std::numeric_limits<uint64_t>::max());
  if (!looked) return looked.error();
  return comm->copier->free_marks() >= need;
}

// Hands the comm's staged sends to the wire, in post order and part order, each part once its copy has
// passed.
NetResult pump_staged(CommBase* comm) {
  while (!comm->staged.empty()) {
    Request& r = comm->requests[comm->staged.front()];
    while (r.submitted < r.parts) {
      const uint32_t i = r.submitted;
      if (r.part_mark[i] != 0) {
        auto passed = comm->copier->passed(r.part_mark[i]);
        if (!passed) return copy_failed(comm, passed.error());
        if (!*passed) return abi::kNetSuccess;  // later parts' copies come after it
      }
      comm->stripes[i].wire->udp().submit(r.tickets[i]);
      ++r.submitted;
    }
    r.stage = Request::kNoStage;
    comm->staged.pop_front();
  }
  return abi::kNetSuccess;
}

// A receive into shadows: queues the copy to the GPU of each part that has arrived since the last look
// (at its offset in its buffer: stripe i's part lands at i x stripe_bytes), with one mark after them.
// Without a free mark it waits for the next look.
Status queue_arrived_copies(CommBase* comm, Request& r) {
  const uint64_t fresh = r.done_mask & ~r.copy_queued;
  if (fresh == 0) return {};
  auto room = have_marks(comm, 1);
  if (!room) return room.error();
  if (!*room) return {};
  const uint32_t k = comm->stripe_count();
  bool queued = false;
  for (uint32_t t = 0; t < r.parts; ++t) {
    if ((fresh & (uint64_t{1} << t)) == 0) continue;
    const uint32_t j = t / k;
    const uint64_t got = r.tickets[t].completion().bytes;
    if (r.gpu[j] == nullptr || got == 0) continue;
    const uint64_t off = (t % k) * comm->stripe_bytes;
    if (Status s = comm->copier->to_device(static_cast<char*>(r.gpu[j]) + off, r.shadow[j] + off, got); !s)
      return s;
    queued = true;
  }
  r.copy_queued |= fresh;
  if (queued) {
    auto mark = comm->copier->mark();
    if (!mark) return mark.error();
    r.copy_mark = *mark;
  }
  return {};
}

// A failed comm's queued copies, finished before NCCL hears of the failure: NCCL may free its buffers
// once a request failed, and no copy may land in them afterwards (the copy engine cannot take one back).
// Once: test() is called again and again on a failed comm's requests, and a copier that gave up on a copy
// says so at every call.
NetResult failed_after_copies(CommBase* comm, NetResult code) {
  if (comm->copier && !comm->copies_settled) {
    comm->copies_settled = true;
    if (Status s = comm->copier->drain();
        !s && comm->failed_error.find(s.error().message) == std::string::npos)
      MS_WARN("GPU buffer copy: %s", s.error().message.c_str());
  }
  return code;
}

// Whether a receive into shadows has every arrived part's bytes on the GPU.
Result<bool> copied_to_gpu(CommBase* comm, Request& r) {
  if ((r.done_mask & ~r.copy_queued) != 0) return false;  // a part still waits for a free mark
  if (r.copy_mark == 0) return true;
  return comm->copier->passed(r.copy_mark);
}

}  // namespace
}  // namespace megascale::nccl::core

namespace megascale::nccl {

NetResult reap_deferred(CommBase* comm) {
  if (comm->deferred.empty()) return abi::kNetSuccess;
  using core::all_done;
  using core::poll_request;
  for (size_t k = 0; k < comm->deferred.size();) {
    Request& r = comm->requests[comm->deferred[k]];
    NetResult code = abi::kNetSuccess;
    if (!poll_request(r, &code)) return code;
    if (all_done(r)) {
      comm->free_request(&r);
      comm->deferred[k] = comm->deferred.back();
      comm->deferred.pop_back();
    } else {
      ++k;
    }
  }
  return abi::kNetSuccess;
}

}  // namespace megascale::nccl

namespace megascale::nccl::core {

NetResult reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if ((as_comm(comm, kSendMagic) == nullptr && as_comm(comm, kRecvMagic) == nullptr) || mhandle == nullptr) {
    MS_WARN("regMr: %p is not a send or recv comm", comm);
    return abi::kNetInvalidArgument;
  }
  *mhandle = nullptr;
  const GdrCopyMode mode = Registry::get().config().gdr_copy;
  const bool gpu = type == abi::kPtrCuda && mode != GdrCopyMode::kOff;
  if (type != abi::kPtrHost && !gpu) {
    MS_WARN(
        "regMr: only host memory (NCCL_PTR_HOST) is supported without MEGASCALE_GDR_COPY=1, got type %d "
        "for %p (%zu bytes)",
        type, data, size);
    return abi::kNetInternalError;
  }
  auto h = std::make_unique<MemHandle>();
  h->comm = comm;
  h->data = data;
  h->size = size;
  h->type = type;
  if (gpu) {
    auto* c = static_cast<CommBase*>(comm);
    if (!c->copier) {
      // A mark for each part of each request the comm can have out (gpu_copy.h).
      auto copier =
          make_copier(mode, c->requests.size() * c->stripe_count(), Registry::get().config().gdr_copy_limits);
      if (!copier) {
        MS_WARN("regMr: MEGASCALE_GDR_COPY: %s", copier.error().message.c_str());
        return to_net_result(copier.error().code);
      }
      c->copier = std::move(*copier);
    }
    auto shadow = c->copier->alloc_shadow(size);
    if (!shadow) {
      MS_WARN("regMr: the host shadow of GPU buffer %p: %s", data, shadow.error().message.c_str());
      return to_net_result(shadow.error().code);
    }
    h->shadow = static_cast<char*>(*shadow);
  }
  *mhandle = h.release();
  return abi::kNetSuccess;
}

NetResult dereg_mr(void* comm, void* mhandle) {
  (void)comm;
  auto* h = static_cast<MemHandle*>(mhandle);
  if (h == nullptr) return abi::kNetSuccess;
  if (h->magic != kMrMagic) {
    MS_WARN("deregMr: %p is not a memory handle", mhandle);
    return abi::kNetInvalidArgument;
  }
  h->magic = 0;
  if (h->shadow != nullptr) {
    // With requests out the wire or a copy may still use the shadow: it goes with the comm.
    auto* c = static_cast<CommBase*>(h->comm);
    if (c->requests_in_use() > 0) {
      c->orphan_shadows.push_back(h->shadow);
    } else {
      if (Status s = c->copier->drain(); !s) MS_WARN("deregMr: %s", s.error().message.c_str());
      c->copier->free_shadow(h->shadow);
    }
  }
  delete h;
  return abi::kNetSuccess;
}

NetResult isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  CommBase* comm = as_comm(send_comm, kSendMagic);
  if (comm == nullptr || request == nullptr) {
    MS_WARN("isend: %p is not a send comm", send_comm);
    return abi::kNetInvalidArgument;
  }
  *request = nullptr;
  if (comm->failed != abi::kNetSuccess) return comm->failed;
  // Checked once, here: the wire and the engine take the checked request as it is.
  Result<engine::SendRequest> send = engine::SendRequest::make(data, size, tag);
  if (!send) {
    MS_WARN("isend: bad arguments (data %p, size %zu, tag %d)", data, size, tag);
    return abi::kNetInvalidArgument;
  }
  const TimeNs now = wire::UdpWire::now();
  const CallTimer timer(comm->post_call_ns, now);
  Registry::get().tick(now);
  auto shadow = shadow_of(mhandle, data, size);
  if (!shadow) {
    MS_WARN("isend: %s", shadow.error().message.c_str());
    return abi::kNetInvalidArgument;
  }
  if (NetResult code = reap_deferred(comm); code != abi::kNetSuccess) return code;
  if (NetResult code = pump_staged(comm); code != abi::kNetSuccess) return code;
  const uint32_t k = comm->stripe_count();
  const bool copy = *shadow != nullptr && size > 0;
  // A copy takes a mark per part: without them, as without a free request, NCCL tries again later
  // (gpu_copy.h: marks are not made in the data path).
  bool marks_free = true;
  if (copy) {
    auto room = have_marks(comm, k);
    if (!room) return copy_failed(comm, room.error());
    marks_free = *room;
  }
  Request* r = marks_free ? comm->alloc_request() : nullptr;
  if (r == nullptr) {
    comm->update([](CommBase::Counters& c) { ++c.retry_later; });
    return abi::kNetSuccess;
  }
  r->posted_ns = now;
  // A copied send is read from its shadow: the same bytes, once they are there.
  const engine::SendRequest message = copy ? send->read_from(*shadow) : *send;
  if (copy) {
    r->stage = Request::kToHost;  // each part's bytes go to the shadow first; the wire reads them there
  } else if (!comm->staged.empty()) {
    r->stage = Request::kQueued;  // behind a send still being copied
  }
  r->needed_mask = 1;
  r->parts = static_cast<uint8_t>(k);
  for (uint32_t i = 0; i < k; ++i) {
    const auto [off, len] = comm->part(i, size);
    if (len > 0) r->needed_mask |= uint64_t{1} << i;
    r->tickets[i].set_send(comm->stripes[i].conn, message.part(off, len));
    r->part_mark[i] = 0;
    if (copy && len > 0) {
      Status s = comm->copier->to_host(*shadow + off, static_cast<const char*>(data) + off, len);
      auto mark = s ? comm->copier->mark() : Result<uint64_t>(s.error());
      if (!mark) {
        comm->free_request(r);
        return copy_failed(comm, mark.error());
      }
      r->part_mark[i] = *mark;
    }
  }
  if (r->stage == Request::kNoStage) {
    submit_send(*comm, *r);
  } else {
    comm->staged.push_back(static_cast<uint32_t>(r - comm->requests.data()));
  }
  r->n = 1;
  r->bytes[0] = 0;
  if (comm->trace_id != 0) r->trace_lane[0] = comm->take_trace_lane();
  comm->update([](CommBase::Counters& c) {
    ++c.posted;
    ++c.posted_buffers;
  });
  *request = r;
  return abi::kNetSuccess;
}

NetResult irecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags, void** mhandles,
                void** request) {
  CommBase* comm = as_comm(recv_comm, kRecvMagic);
  if (comm == nullptr || request == nullptr) {
    MS_WARN("irecv: %p is not a recv comm", recv_comm);
    return abi::kNetInvalidArgument;
  }
  // NCCL_NET_OPTIONAL_RECV_COMPLETION arrives as the input value of *request (LL/LL128, n == 1).
  const bool optional = reinterpret_cast<uintptr_t>(*request) == abi::kOptionalRecvCompletion && n == 1;
  *request = nullptr;
  if (comm->failed != abi::kNetSuccess) return comm->failed;
  if (n < 1 || n > kMaxRecvs || data == nullptr || sizes == nullptr || tags == nullptr) {
    MS_WARN("irecv: bad arguments (n %d, maxRecvs %d)", n, kMaxRecvs);
    return abi::kNetInvalidArgument;
  }
  for (int i = 0; i < n; ++i) {
    if (tags[i] < 0 || (data[i] == nullptr && sizes[i] > 0)) {
      MS_WARN("irecv: bad buffer %d (data %p, size %zu, tag %d)", i, data[i], sizes[i], tags[i]);
      return abi::kNetInvalidArgument;
    }
  }
  char* shadows[kMaxRecvs] = {};
  for (int j = 0; j < n; ++j) {
    auto shadow = shadow_of(mhandles != nullptr ? mhandles[j] : nullptr, data[j], sizes[j]);
    if (!shadow) {
      MS_WARN("irecv: buffer %d: %s", j, shadow.error().message.c_str());
      return abi::kNetInvalidArgument;
    }
    shadows[j] = *shadow;
  }
  const TimeNs now = wire::UdpWire::now();
  const CallTimer timer(comm->post_call_ns, now);
  Registry::get().tick(now);
  if (NetResult code = reap_deferred(comm); code != abi::kNetSuccess) return code;
  Request* r = comm->alloc_request();
  if (r == nullptr) {
    comm->update([](CommBase::Counters& c) { ++c.retry_later; });
    return abi::kNetSuccess;
  }
  r->posted_ns = now;
  const uint32_t k = comm->stripe_count();
  for (int j = 0; j < n; ++j) {
    // A GPU buffer's parts land in its shadow, and each goes to the GPU once it is in (test()).
    char* dst = static_cast<char*>(data[j]);
    if (shadows[j] != nullptr) {
      r->gpu[j] = data[j];
      r->shadow[j] = shadows[j];
      r->staged_recv = true;
      dst = shadows[j];
    }
    for (uint32_t i = 0; i < k; ++i) {
      const auto [off, len] = comm->part(i, sizes[j]);
      const Stripe& st = comm->stripes[i];
      wire::UdpWire::Ticket& t = r->tickets[static_cast<uint32_t>(j) * k + i];
      t.set_recv(st.conn, dst + off, len, tags[j]);
      st.wire->udp().submit(t);
    }
    r->bytes[j] = 0;
    if (comm->trace_id != 0) r->trace_lane[j] = comm->take_trace_lane();
  }
  r->n = static_cast<uint8_t>(n);
  r->parts = static_cast<uint8_t>(static_cast<uint32_t>(n) * k);
  // An optional completion lets NCCL read LL/LL128 flags in the buffer before test(): a GPU buffer gets
  // its bytes only from test(), so it is always completed.
  r->optional = optional && !r->staged_recv;
  comm->update([n](CommBase::Counters& c) {
    ++c.posted;
    c.posted_buffers += static_cast<uint64_t>(n);
  });
  *request = r;
  return abi::kNetSuccess;
}

NetResult iflush(void* recv_comm, int n, void** data, const int* sizes, void** mhandles, void** request) {
  (void)n;
  (void)data;
  (void)sizes;
  (void)mhandles;
  if (as_comm(recv_comm, kRecvMagic) == nullptr || request == nullptr) {
    MS_WARN("iflush: %p is not a recv comm", recv_comm);
    return abi::kNetInvalidArgument;
  }
  // Host memory written by the CPU is visible to the GPU without a flush, and a GPU buffer's copy was done
  // before test() said so: nothing to wait for.
  *request = nullptr;
  return abi::kNetSuccess;
}

NetResult test(void* request, int* done, int* sizes) {
  auto* r = static_cast<Request*>(request);
  if (r == nullptr || r->magic != kRequestMagic || !r->in_use || r->reported || done == nullptr) {
    MS_WARN("test: %p is not a live request", request);
    return abi::kNetInvalidArgument;
  }
  *done = 0;
  CommBase* comm = r->comm;
  if (comm->failed != abi::kNetSuccess) return failed_after_copies(comm, comm->failed);
  Registry& reg = Registry::get();
  const TimeNs now = wire::UdpWire::now();
  const CallTimer timer(comm->test_call_ns, now);
  add_owned(comm->test_calls, 1);
  reg.tick(now);
  if (!comm->staged.empty()) {
    if (NetResult code = pump_staged(comm); code != abi::kNetSuccess) return code;
    if (r->stage != Request::kNoStage) return abi::kNetSuccess;  // its copy to the shadow runs
  }
  // NCCL calls test() in a tight loop: a look is a load of each ticket's flag, without the wire's lock.
  help_wires(*r, now);
  NetResult code = abi::kNetSuccess;
  if (!poll_request(*r, &code, r->optional ? 0 : now)) return failed_after_copies(comm, code);
  if (r->staged_recv) {
    if (Status s = queue_arrived_copies(comm, *r); !s) return copy_failed(comm, s.error());
  }
  const bool finished = complete(*r);
  if (!finished && !r->optional) return abi::kNetSuccess;
  if (r->staged_recv) {
    auto copied = copied_to_gpu(comm, *r);
    if (!copied) return copy_failed(comm, copied.error());
    if (!*copied) return abi::kNetSuccess;
  }
  // Done (or optional: NCCL reads LL/LL128 data by its flags and need not wait for the completion).
  // Engine requests still pending (an optional receive's, empty parts') keep the request, which is
  // freed when they finish.
  *done = 1;
  comm->update([&](CommBase::Counters& c) {
    ++c.completed;
    c.request_latency.add(now - r->posted_ns);
    if (finished) {
      for (int i = 0; i < r->n; ++i) c.bytes_done += r->bytes[i];
    }
  });
  if (sizes != nullptr) {
    for (int i = 0; i < r->n; ++i) sizes[i] = finished ? clamp_int(r->bytes[i]) : 0;
  }
  if (all_done(*r)) {
    comm->free_request(r);
  } else {
    r->reported = true;
    comm->deferred.push_back(static_cast<uint32_t>(r - comm->requests.data()));
  }
  return abi::kNetSuccess;
}

NetResult irecv_consumed(void* recv_comm, int n, void* request) {
  (void)n;
  (void)request;  // may already be reused: NCCL passes requests it saw done; never dereferenced
  CommBase* comm = as_comm(recv_comm, kRecvMagic);
  if (comm == nullptr) {
    MS_WARN("irecvConsumed: %p is not a recv comm", recv_comm);
    return abi::kNetInvalidArgument;
  }
  if (comm->failed != abi::kNetSuccess) return comm->failed;
  return reap_deferred(comm);
}

}  // namespace megascale::nccl::core
