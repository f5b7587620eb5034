// Conformance cases: identity and properties, setup on one thread, NCCL's transfer patterns.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <set>

#include "cases.h"

namespace megascale::nccl::conformance {
namespace {

// Redirects fd 1 to a temporary file while alive; bytes() says what was written there.
class StdoutCapture {
 public:
  StdoutCapture() {
    std::fflush(stdout);
    file_ = std::tmpfile();
    saved_ = dup(1);
    if (file_ != nullptr && saved_ >= 0) dup2(fileno(file_), 1);
  }
  ~StdoutCapture() { restore(); }
  long bytes() {
    restore();
    if (file_ == nullptr) return 0;
    struct stat st {};
    return fstat(fileno(file_), &st) == 0 ? static_cast<long>(st.st_size) : 0;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stdout);
    dup2(saved_, 1);
    close(saved_);
    saved_ = -1;
  }
  std::FILE* file_ = nullptr;
  int saved_ = -1;
};

Status check_properties(Net& net, int dev, std::set<std::string>& names) {
  DeviceProps p;
  MS_CALL(net.properties(dev, &p));
  const std::string who = "device " + std::to_string(dev) + " (" + p.name + ")";
  MS_REQUIRE(!p.name.empty(), "device " + std::to_string(dev) + " has no name");
  MS_REQUIRE(names.insert(p.name).second, who + ": the name is not unique (NCCL's topology is keyed by it)");
  MS_REQUIRE(p.ptr_support & abi::kPtrHost, who + ": ptrSupport lacks NCCL_PTR_HOST");
  MS_REQUIRE(p.speed_mbps > 0, who + ": speed must be > 0 Mbps");
  MS_REQUIRE(p.max_comms > 0, who + ": maxComms must be > 0");
  MS_REQUIRE(p.max_recvs >= 1, who + ": maxRecvs must be >= 1");
  MS_REQUIRE(p.pci_path_null || access(p.pci_path.c_str(), F_OK) == 0,
             who + ": pciPath " + p.pci_path + " does not exist (use NULL when there is none)");
  if (p.device_type == abi::kNetDeviceHost) {
    MS_REQUIRE(p.device_version == abi::kNetDeviceInvalidVersion,
               who + ": a HOST device must report version 0");
  }
  if (p.has_v9_fields) {
    MS_REQUIRE(p.vdev_count == 1 && p.vdev0 == dev, who + ": vProps of a physical device must be {1, {dev}}");
    MS_REQUIRE(p.max_p2p_bytes > 0 && p.max_p2p_bytes <= abi::kMaxNetSizeBytes,
               who + ": maxP2pBytes must be in (0, 1 TiB] (NCCL fails proxy setup otherwise)");
    MS_REQUIRE(p.max_coll_bytes > 0 && p.max_coll_bytes <= abi::kMaxNetSizeBytes,
               who + ": maxCollBytes must be in (0, 1 TiB]");
  }
  if (p.has_v12_fields) {
    // NCCL_NET_ID_UNDEF (-1) or a real index; NCCL's rail-merge policy compares railIds for equality.
    MS_REQUIRE(p.rail_id >= abi::kNetIdUndef,
               who + ": railId " + std::to_string(p.rail_id) + " must be -1 (unknown) or a rail index >= 0");
    MS_REQUIRE(p.plane_id >= abi::kNetIdUndef, who + ": planeId " + std::to_string(p.plane_id) +
                                                   " must be -1 (unknown) or a plane index >= 0");
  }
  return {};
}

}  // namespace

Status case_load(Env& env) {
  MS_REQUIRE(!env.net.name().empty(), "the plugin's name field is empty (NCCL_NET matches on it)");
  StdoutCapture out;
  {
    Context ctx(env.net);
    MS_TRY(ctx.init());
    int n = 0;
    MS_CALL(env.net.devices(&n));
    MS_REQUIRE(n >= 1, "devices() reported " + std::to_string(n) + " devices (NCCL treats <= 0 as failure)");
    std::set<std::string> names;
    for (int d = 0; d < n; ++d) MS_TRY(check_properties(env.net, d, names));
    // NCCL hands a device GPU buffers only where its ptrSupport says it takes them.
    MS_REQUIRE(env.options.mem_type != abi::kPtrCuda || (env.props.ptr_support & abi::kPtrCuda) != 0,
               "device " + std::to_string(env.dev) + " (" + env.props.name +
                   "): buffers registered as NCCL_PTR_CUDA (--mem cuda), but its ptrSupport " +
                   std::to_string(env.props.ptr_support) + " lacks NCCL_PTR_CUDA");
    // One small transfer too: the data path must not print either.
    Pair pair(env.net, ctx.get(), env.dev, env.options.mem_type);
    MS_TRY(pair.connect(Deadline(15)));
    MS_TRY(pair.register_buffers(8 * 4096));
    MS_TRY(stream(env.net, pair, 4096, 8, 16, 1, Deadline(15), 11));
    MS_TRY(pair.close());
    MS_TRY(ctx.finalize());
    env.detail = env.net.name() + " (ncclNetPlugin_v" + std::to_string(env.net.version()) + "), " +
                 std::to_string(n) + " device(s)";
    measure(env, "device_count", n);
  }
  const long printed = out.bytes();
  MS_REQUIRE(printed == 0, "the plugin wrote " + std::to_string(printed) +
                               " bytes to stdout (NCCL plugins must log through NCCL's logger only)");
  return {};
}

Status case_connect_accept_one_thread(Env& env) {
  Context ctx(env.net);
  MS_TRY(ctx.init());
  // Several connections in turn, each progressed only by this thread (NCCL's service thread, and its
  // loopback GDR probe, do exactly this).
  for (int i = 0; i < 4; ++i) {
    Pair pair(env.net, ctx.get(), env.dev, env.options.mem_type);
    const auto t0 = Clock::now();
    MS_TRY(pair.connect(Deadline(15)));
    if (i == 0) {
      env.detail = "first connection in " + std::to_string(seconds_since(t0) * 1e3) + " ms";
      measure(env, "first_connect_ms", seconds_since(t0) * 1e3);
    }
    MS_TRY(pair.close());
  }
  return ctx.finalize();
}

Status case_steps_in_flight(Env& env) {
  constexpr size_t kStep = 512 << 10;
  return with_pair(env, abi::kNcclSteps * kStep, [&](Pair& pair) -> Status {
    MS_TRY(stream(env.net, pair, kStep, abi::kNcclSteps, 64, 3, Deadline(60), 100));
    MS_TRY(stream(env.net, pair, 1024, abi::kNcclSteps, 256, 3, Deadline(30), 200));
    return {};
  });
}

Status case_message_sizes(Env& env) {
  const size_t sizes[] = {1, 7, 4095, 4096, 4097, 8191, 65537, (1 << 20) + 3, (8 << 20) + 1};
  return with_pair(env, 2 * ((8 << 20) + 8), [&](Pair& pair) -> Status {
    uint64_t seed = 300;
    for (size_t s : sizes) MS_TRY(stream(env.net, pair, s, 2, 4, 5, Deadline(60), seed += 10));
    return {};
  });
}

Status case_receive_larger_than_send(Env& env) {
  return with_pair(env, 8 * ((1 << 20) + 4096), [&](Pair& pair) -> Status {
    // The receive reports the size actually sent, not its capacity.
    MS_TRY(stream(env.net, pair, 1000, 8, 32, 2, Deadline(30), 400, 1 << 20));
    MS_TRY(stream(env.net, pair, 4096, 8, 32, 2, Deadline(30), 500, 1));
    return {};
  });
}

Status case_zero_byte(Env& env) {
  return with_pair(env, 8 * 4096, [&](Pair& pair) -> Status {
    MS_TRY(stream(env.net, pair, 0, 8, 32, 4, Deadline(30), 600));        // zero-byte into zero-byte
    MS_TRY(stream(env.net, pair, 0, 8, 32, 4, Deadline(30), 700, 4096));  // zero-byte into 4 KiB
    MS_TRY(stream(env.net, pair, 100, 8, 8, 4, Deadline(30), 800));       // and data after them
    return {};
  });
}

Status case_grouped_receive(Env& env) {
  const int n = std::min(env.props.max_recvs, 8);
  if (n <= 1) return skip("maxRecvs is 1: the plugin does not do grouped receives");
  constexpr size_t kSlot = 64 << 10;
  return with_pair(env, static_cast<size_t>(n) * kSlot, [&](Pair& pair) -> Status {
    for (int round = 0; round < 8; ++round) {
      // One irecv of n buffers with distinct tags (the sending ranks) and sizes ...
      void* data[8];
      size_t sizes[8];
      int tags[8];
      void* mhs[8];
      for (int i = 0; i < n; ++i) {
        data[i] = pair.recv_buf.data() + kSlot * static_cast<size_t>(i);
        sizes[i] = kSlot;
        tags[i] = 10 + i;
        mhs[i] = pair.recv_mr;
      }
      void* rreq = nullptr;
      MS_CALL(env.net.irecv(pair.recv_comm, n, data, sizes, tags, mhs, &rreq));
      MS_REQUIRE(rreq != nullptr, "a grouped irecv with no other request outstanding returned NULL");
      // ... matched by sends posted in the reverse tag order, each a different size.
      void* sreq[8] = {};
      size_t sent[8];
      const Deadline deadline(30);
      for (int k = n - 1; k >= 0; --k) {
        sent[k] = 1000 * static_cast<size_t>(k + 1) + static_cast<size_t>(round);
        uint8_t* src = pair.send_buf.data() + kSlot * static_cast<size_t>(k);
        fill_pattern(src, sent[k], 1000 + static_cast<uint64_t>(round * 16 + k));
        MS_TRY(isend_retrying(env.net, pair, src, sent[k], 10 + k, deadline, &sreq[k]));
      }
      for (int k = 0; k < n; ++k) MS_TRY(wait_request(env.net, sreq[k], nullptr, deadline, "grouped send"));
      int got[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
      MS_TRY(wait_request(env.net, rreq, got, deadline, "grouped receive"));
      for (int i = 0; i < n; ++i) {
        MS_REQUIRE(got[i] == static_cast<int>(sent[i]),
                   "grouped receive: buffer " + std::to_string(i) + " (tag " + std::to_string(tags[i]) +
                       ") reported " + std::to_string(got[i]) + " bytes, its tag's send had " +
                       std::to_string(sent[i]));
        const int64_t bad = check_pattern(static_cast<uint8_t*>(data[i]), sent[i],
                                          1000 + static_cast<uint64_t>(round * 16 + i));
        MS_REQUIRE(bad < 0, "grouped receive: buffer " + std::to_string(i) + " holds the wrong data (byte " +
                                std::to_string(bad) + "): sends must land in the buffer of their tag");
      }
    }
    env.detail = std::to_string(n) + " buffers per irecv";
    measure(env, "buffers_per_irecv", n);
    return {};
  });
}

Status case_max_requests(Env& env) {
  const int n = std::min(env.props.max_recvs, 8);
  const int nreq = abi::kNetMaxRequests;
  const int nsend = nreq * n;
  constexpr size_t kMsg = 8192;
  return with_pair(env, static_cast<size_t>(nsend) * kMsg, [&](Pair& pair) -> Status {
    const Deadline deadline(60);
    // 32 receives (each of n buffers) outstanding on one recv comm ...
    std::vector<void*> rreq(static_cast<size_t>(nreq), nullptr);
    for (int r = 0; r < nreq; ++r) {
      void* data[8];
      size_t sizes[8];
      int tags[8];
      void* mhs[8];
      for (int i = 0; i < n; ++i) {
        data[i] = pair.recv_buf.data() + kMsg * static_cast<size_t>(r * n + i);
        sizes[i] = kMsg;
        tags[i] = i;
        mhs[i] = pair.recv_mr;
      }
      MS_CALL(env.net.irecv(pair.recv_comm, n, data, sizes, tags, mhs, &rreq[static_cast<size_t>(r)]));
      MS_REQUIRE(rreq[static_cast<size_t>(r)] != nullptr,
                 "irecv " + std::to_string(r) + " returned NULL with fewer than 32 requests outstanding");
    }
    // ... and 32 x maxRecvs sends outstanding on the send comm.
    std::vector<void*> sreq(static_cast<size_t>(nsend), nullptr);
    for (int s = 0; s < nsend; ++s) {
      uint8_t* src = pair.send_buf.data() + kMsg * static_cast<size_t>(s);
      fill_pattern(src, kMsg, 5000 + static_cast<uint64_t>(s));
      MS_CALL(env.net.isend(pair.send_comm, src, kMsg, s % n, pair.send_mr, &sreq[static_cast<size_t>(s)]));
      MS_REQUIRE(
          sreq[static_cast<size_t>(s)] != nullptr,
          "isend " + std::to_string(s) + " returned NULL with fewer than 32 x maxRecvs requests outstanding");
    }
    for (int s = 0; s < nsend; ++s)
      MS_TRY(wait_request(env.net, sreq[static_cast<size_t>(s)], nullptr, deadline, "send"));
    for (int r = 0; r < nreq; ++r) {
      int got[8];
      MS_TRY(wait_request(env.net, rreq[static_cast<size_t>(r)], got, deadline, "receive"));
      for (int i = 0; i < n; ++i) {
        const int s = r * n + i;  // sends of tag i match that tag's receives in order
        MS_REQUIRE(got[i] == static_cast<int>(kMsg),
                   "receive " + std::to_string(r) + " reported " + std::to_string(got[i]));
        MS_REQUIRE(check_pattern(pair.recv_buf.data() + kMsg * static_cast<size_t>(s), kMsg,
                                 5000 + static_cast<uint64_t>(s)) < 0,
                   "receive " + std::to_string(r) + " buffer " + std::to_string(i) +
                       ": wrong data (sends of one tag must "
                       "match that tag's receives in posting order)");
      }
    }
    env.detail = std::to_string(nreq) + " irecvs x " + std::to_string(n) + " buffers, " +
                 std::to_string(nsend) + " isends";
    measure(env, "irecvs", nreq);
    measure(env, "buffers_per_irecv", n);
    measure(env, "isends", nsend);
    return {};
  });
}

Status case_iflush(Env& env) {
  return with_pair(env, 8 * 4096, [&](Pair& pair) -> Status {
    MS_TRY(stream(env.net, pair, 4096, 1, 1, 0, Deadline(15), 900));
    void* data = pair.recv_buf.data();
    int size = 4096;
    void* mh = pair.recv_mr;
    void* req = reinterpret_cast<void*>(uintptr_t{0xdead});
    MS_CALL(env.net.iflush(pair.recv_comm, 1, &data, &size, &mh, &req));
    // NULL: nothing to flush (host memory); otherwise NCCL tests it with sizes = NULL.
    if (req != nullptr) MS_TRY(wait_request(env.net, req, nullptr, Deadline(15), "iflush"));
    env.detail = req == nullptr ? "nothing to flush (request NULL)" : "flush request completed";
    return {};
  });
}

Status case_optional_recv_completion(Env& env) {
  if (env.net.version() < 9) return skip("NCCL passes the optional-completion hint from v9 on");
  constexpr size_t kMsg = 64 << 10;
  return with_pair(env, 8 * kMsg, [&](Pair& pair) -> Status {
    const Deadline deadline(30);
    for (int step = 0; step < 16; ++step) {
      uint8_t* dst = pair.recv_buf.data() + kMsg * static_cast<size_t>(step % 8);
      std::memset(dst, 0, kMsg);
      void* data = dst;
      size_t size = kMsg;
      int tag = 6;
      void* mh = pair.recv_mr;
      void* rreq = reinterpret_cast<void*>(abi::kOptionalRecvCompletion);  // LL/LL128, n == 1
      MS_CALL(env.net.irecv(pair.recv_comm, 1, &data, &size, &tag, &mh, &rreq));
      MS_REQUIRE(rreq != reinterpret_cast<void*>(abi::kOptionalRecvCompletion),
                 "irecv left the optional-completion hint in *request (it must return a request or NULL)");
      MS_REQUIRE(rreq != nullptr, "irecv returned NULL with no request outstanding");
      uint8_t* src = pair.send_buf.data() + kMsg * static_cast<size_t>(step % 8);
      fill_pattern(src, kMsg, 7000 + static_cast<uint64_t>(step));
      void* sreq = nullptr;
      MS_TRY(isend_retrying(env.net, pair, src, kMsg, 6, deadline, &sreq));
      int got[8];
      // Meanwhile the send is tested, as NCCL's proxy keeps testing its other requests.
      bool sent = false;
      MS_TRY(wait_request(env.net, rreq, got, deadline, "optional-completion receive", sreq, &sent));
      // The data itself tells when it arrived (as LL flags do for NCCL's kernels).
      while (!sent || poll_pattern(dst, kMsg, 7000 + static_cast<uint64_t>(step)) >= 0) {
        MS_REQUIRE(!deadline.passed(), "the data of an optional-completion receive never arrived");
        if (!sent) {
          int done = 0;
          MS_CALL(env.net.test(sreq, &done, nullptr));
          sent = done != 0;
        }
      }
      MS_CALL(env.net.irecv_consumed(pair.recv_comm, 1, rreq));
    }
    // Ordinary traffic goes on afterwards.
    MS_TRY(stream(env.net, pair, 4096, 8, 32, 6, deadline, 7500));
    return {};
  });
}

}  // namespace megascale::nccl::conformance
