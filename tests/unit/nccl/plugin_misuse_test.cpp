// The MegaScale plugin under calls NCCL itself never makes wrongly, but a buggy caller (or a corrupted
// handle from the bootstrap) could: each is refused with the error code NCCL would act on and a WARN
// that names the problem, the comm, memory handle or request it was to return is NULL, and the comms
// involved keep working afterwards.
// Loaded with dlopen as NCCL loads it, through the v11 table, on loopback. Also here: the counters the
// plugin exports beside its tables (megascale/nccl/counters.h).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../../../collectives/nccl/src/handle.h"
#include "megascale/nccl/abi/net_v11.h"
#include "megascale/nccl/abi/net_v8.h"
#include "megascale/nccl/counters.h"
#include "warn_capture.h"

namespace {

using namespace megascale::nccl::abi;

using megascale::nccl::kMaxStripes;
using megascale::nccl::kMinStripeBytes;
using megascale::nccl::ListenHandle;
using megascale::nccl::test::take_warns;
using megascale::nccl::test::warn_logger;
using megascale::nccl::test::warned;

// Calls `step` (a connect and an accept, a test(), an isend) until `done` says so, a call fails its
// assertion, or 10 s pass. The wire's threads do the work the calls wait for, and on a loaded 2-core host
// they may not run for tens of milliseconds: a bound on the number of calls (200,000 connect calls take
// about 24 ms there) can run out before the connection comes up, so no loop here counts calls.
template <typename Step, typename Done>
void call_until(Step step, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done() && !::testing::Test::HasFatalFailure() && std::chrono::steady_clock::now() < deadline) {
    step();
  }
}

// Alternates `connect` and `accept`, each only while its comm (*s, *r) is still NULL, as NCCL's proxy does,
// until both are up (call_until's bounds).
template <typename Connect, typename Accept>
void connect_and_accept(Connect connect, Accept accept, void* const* s, void* const* r) {
  call_until(
      [&] {
        if (*s == nullptr) connect();
        if (*r == nullptr) accept();
      },
      [&] { return *s != nullptr && *r != nullptr; });
}

class PluginMisuse : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("MEGASCALE_IFNAME", "lo", /*overwrite=*/0);
    lib_ = dlopen(MEGASCALE_NCCL_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
    net_ = static_cast<NetV11*>(dlsym(lib_, "ncclNetPlugin_v11"));
    ASSERT_NE(net_, nullptr);
    ctx_ = init_ctx();
    ASSERT_NE(ctx_, nullptr);
    take_warns();
  }
  void TearDown() override {
    if (net_ != nullptr && ctx_ != nullptr) {
      EXPECT_EQ(net_->finalize(ctx_), kNetSuccess);
    }
    take_warns();
    // The library stays loaded: the plugin's wires and threads live for the process, as under NCCL.
  }

  void* init_ctx() {
    void* ctx = nullptr;
    NetCommConfig cfg{kTrafficClassUndef};
    EXPECT_EQ(net_->init(&ctx, 0x1234, &cfg, warn_logger, nullptr), kNetSuccess);
    return ctx;
  }

  // Listen, then connect and accept alternated on this thread (as NCCL's proxy does) until both are up.
  void connect_pair(void** send_comm, void** recv_comm) {
    char handle[kNetHandleMaxBytes] = {};
    void* listen_comm = nullptr;
    ASSERT_EQ(net_->listen(ctx_, 0, handle, &listen_comm), kNetSuccess);
    *send_comm = nullptr;
    *recv_comm = nullptr;
    connect_and_accept([&] { ASSERT_EQ(net_->connect(ctx_, 0, handle, send_comm, nullptr), kNetSuccess); },
                       [&] { ASSERT_EQ(net_->accept(listen_comm, recv_comm, nullptr), kNetSuccess); },
                       send_comm, recv_comm);
    ASSERT_NE(*send_comm, nullptr);
    ASSERT_NE(*recv_comm, nullptr);
    EXPECT_EQ(net_->closeListen(listen_comm), kNetSuccess);
  }

  // test() until done; the result of the last call.
  NetResult wait(void* request, int* size) {
    int done = 0;
    NetResult r = kNetSuccess;
    call_until([&] { r = net_->test(request, &done, size); }, [&] { return r != kNetSuccess || done != 0; });
    EXPECT_TRUE(r != kNetSuccess || done) << "a request never completed";
    return r;
  }

  // One message of `n` bytes through the pair, checked byte for byte.
  void round_trip(void* s, void* r, size_t n, uint8_t seed) {
    std::vector<uint8_t> out(n), in(n, 0);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(seed + i * 7);
    void *smr = nullptr, *rmr = nullptr;
    ASSERT_EQ(net_->regMr(s, out.data(), n, kPtrHost, &smr), kNetSuccess);
    ASSERT_EQ(net_->regMr(r, in.data(), n, kPtrHost, &rmr), kNetSuccess);
    void* data = in.data();
    size_t size = n;
    int tag = 5;
    void* rreq = nullptr;
    ASSERT_EQ(net_->irecv(r, 1, &data, &size, &tag, &rmr, nullptr, &rreq), kNetSuccess);
    ASSERT_NE(rreq, nullptr);
    void* sreq = nullptr;
    call_until([&] { ASSERT_EQ(net_->isend(s, out.data(), n, tag, smr, nullptr, &sreq), kNetSuccess); },
               [&] { return sreq != nullptr; });
    ASSERT_NE(sreq, nullptr);
    int sent = -1, got = -1;
    EXPECT_EQ(wait(sreq, &sent), kNetSuccess);
    EXPECT_EQ(wait(rreq, &got), kNetSuccess);
    EXPECT_EQ(got, static_cast<int>(n));
    EXPECT_EQ(in, out);
    // A request already reported done is not a request any more.
    int done = 0;
    EXPECT_EQ(net_->test(rreq, &done, nullptr), kNetInvalidArgument);
    EXPECT_TRUE(warned("is not a live request"));
    EXPECT_EQ(net_->deregMr(s, smr), kNetSuccess);
    EXPECT_EQ(net_->deregMr(r, rmr), kNetSuccess);
  }

  void* lib_ = nullptr;
  NetV11* net_ = nullptr;
  void* ctx_ = nullptr;
};

TEST_F(PluginMisuse, ConnectRefusesAHandleThatIsNotOne) {
  char handle[kNetHandleMaxBytes];
  std::memset(handle, 0xa5, sizeof handle);
  void* s = reinterpret_cast<void*>(uintptr_t{0xdead});
  EXPECT_EQ(net_->connect(ctx_, 0, handle, &s, nullptr), kNetInvalidArgument);
  EXPECT_EQ(s, nullptr) << "*sendComm must be cleared on failure";
  EXPECT_TRUE(warned("not a MegaScale listen handle"));
}

// A handle whose stripes the connecting side could not follow (a count out of range, or parts smaller
// than the plugin cuts) is refused before any connection opens.
TEST_F(PluginMisuse, ConnectRefusesStripesItCannotFollow) {
  char handle[kNetHandleMaxBytes] = {};
  void* listen_comm = nullptr;
  ASSERT_EQ(net_->listen(ctx_, 0, handle, &listen_comm), kNetSuccess);
  ListenHandle h;
  std::memcpy(&h, handle, sizeof h);
  EXPECT_GE(h.stripes, 1u);
  EXPECT_GE(h.stripe_bytes, kMinStripeBytes);
  for (const auto& [stripes, bytes] :
       {std::pair<uint8_t, uint32_t>{0, 65536}, {kMaxStripes + 1, 65536}, {2, 100}}) {
    ListenHandle bad = h;
    bad.stripes = stripes;
    bad.stripe_bytes = bytes;
    char copy[kNetHandleMaxBytes];
    std::memcpy(copy, &bad, sizeof bad);
    void* s = reinterpret_cast<void*>(uintptr_t{0xdead});
    EXPECT_EQ(net_->connect(ctx_, 0, copy, &s, nullptr), kNetInvalidArgument)
        << int(stripes) << " x " << bytes;
    EXPECT_EQ(s, nullptr);
    EXPECT_TRUE(
        warned("the handle names " + std::to_string(stripes) + " stripes of " + std::to_string(bytes)));
  }
  EXPECT_EQ(net_->closeListen(listen_comm), kNetSuccess);
}

TEST_F(PluginMisuse, ConnectRefusesAnotherContextsConnectInProgress) {
  char handle[kNetHandleMaxBytes] = {};
  void* listen_comm = nullptr;
  ASSERT_EQ(net_->listen(ctx_, 0, handle, &listen_comm), kNetSuccess);
  // The first connect call writes its token into the handle (NCCL calls again with the same buffer);
  // that handle in a second communicator's context names nothing there.
  void* s = nullptr;
  ASSERT_EQ(net_->connect(ctx_, 0, handle, &s, nullptr), kNetSuccess);
  if (s != nullptr) GTEST_SKIP() << "the first connect call finished at once: no connect in progress to test";
  char copy[kNetHandleMaxBytes];
  std::memcpy(copy, handle, sizeof copy);
  void* other = init_ctx();
  ASSERT_NE(other, nullptr);
  void* s2 = reinterpret_cast<void*>(uintptr_t{0xdead});
  EXPECT_EQ(net_->connect(other, 0, copy, &s2, nullptr), kNetInvalidUsage);
  EXPECT_EQ(s2, nullptr);
  EXPECT_TRUE(warned("belongs to another context"));
  EXPECT_EQ(net_->finalize(other), kNetSuccess);
  // The connection the token belongs to still comes up in its own context and moves data.
  void* r = nullptr;
  connect_and_accept([&] { ASSERT_EQ(net_->connect(ctx_, 0, handle, &s, nullptr), kNetSuccess); },
                     [&] { ASSERT_EQ(net_->accept(listen_comm, &r, nullptr), kNetSuccess); }, &s, &r);
  ASSERT_NE(s, nullptr);
  ASSERT_NE(r, nullptr);
  round_trip(s, r, 100000, 3);
  EXPECT_EQ(net_->closeListen(listen_comm), kNetSuccess);
  EXPECT_EQ(net_->closeSend(s), kNetSuccess);
  EXPECT_EQ(net_->closeRecv(r), kNetSuccess);
}

TEST_F(PluginMisuse, DevicesOutOfRangeAndNonListenCommsAreRefused) {
  int ndev = 0;
  ASSERT_EQ(net_->devices(&ndev), kNetSuccess);
  ASSERT_GE(ndev, 1);
  NetPropertiesV11 props{};
  EXPECT_EQ(net_->getProperties(ndev, &props), kNetInvalidArgument);
  EXPECT_TRUE(warned("bad device"));
  char handle[kNetHandleMaxBytes] = {};
  void* l = reinterpret_cast<void*>(uintptr_t{0xdead});
  EXPECT_EQ(net_->listen(ctx_, -1, handle, &l), kNetInvalidArgument);
  EXPECT_TRUE(warned("listen: bad arguments"));
  EXPECT_EQ(l, nullptr);
  void* s = reinterpret_cast<void*>(uintptr_t{0xdead});
  EXPECT_EQ(net_->connect(ctx_, ndev, handle, &s, nullptr), kNetInvalidArgument);
  EXPECT_EQ(s, nullptr);
  EXPECT_TRUE(warned("connect: bad arguments"));
  void* r = reinterpret_cast<void*>(uintptr_t{0xdead});
  uint8_t junk[256] = {};
  EXPECT_EQ(net_->accept(junk, &r, nullptr), kNetInvalidArgument);
  EXPECT_EQ(r, nullptr);
  EXPECT_TRUE(warned("is not a listen comm"));
}

TEST_F(PluginMisuse, WrongObjectsAndArgumentsAreRefusedAndThePairKeepsWorking) {
  void *s = nullptr, *r = nullptr;
  connect_pair(&s, &r);
  round_trip(s, r, 4096, 1);

  alignas(64) uint8_t junk[256] = {};  // zeroed memory that is no plugin object
  uint8_t buf[64] = {};
  void* req = reinterpret_cast<void*>(uintptr_t{0xdead});
  // A comm of the other direction.
  EXPECT_EQ(net_->isend(r, buf, sizeof buf, 0, nullptr, nullptr, &req), kNetInvalidArgument);
  EXPECT_TRUE(warned("is not a send comm"));
  void* data = buf;
  size_t size = sizeof buf;
  int tag = 0;
  EXPECT_EQ(net_->irecv(s, 1, &data, &size, &tag, nullptr, nullptr, &req), kNetInvalidArgument);
  EXPECT_TRUE(warned("is not a recv comm"));
  int isize = 64;
  EXPECT_EQ(net_->iflush(s, 1, &data, &isize, nullptr, &req), kNetInvalidArgument);
  EXPECT_TRUE(warned("iflush"));
  EXPECT_EQ(net_->closeSend(r), kNetInvalidArgument);
  EXPECT_TRUE(warned("is not a send comm"));
  EXPECT_EQ(net_->closeRecv(s), kNetInvalidArgument);
  EXPECT_TRUE(warned("is not a recv comm"));
  // Something that is not a plugin object at all.
  int done = 0;
  EXPECT_EQ(net_->test(junk, &done, nullptr), kNetInvalidArgument);
  EXPECT_TRUE(warned("is not a live request"));
  EXPECT_EQ(net_->test(s, &done, nullptr), kNetInvalidArgument);
  EXPECT_TRUE(warned("is not a live request"));
  void* mh = reinterpret_cast<void*>(uintptr_t{0xdead});
  EXPECT_EQ(net_->regMr(junk, buf, sizeof buf, kPtrHost, &mh), kNetInvalidArgument);
  EXPECT_TRUE(warned("is not a send or recv comm"));
  EXPECT_EQ(net_->deregMr(s, junk), kNetInvalidArgument);
  EXPECT_TRUE(warned("is not a memory handle"));
  EXPECT_EQ(net_->finalize(junk), kNetInvalidArgument);
  EXPECT_TRUE(warned("is not a context"));
  // Memory the UDP wire cannot send from.
  EXPECT_EQ(net_->regMr(s, buf, sizeof buf, kPtrCuda, &mh), kNetInternalError);
  EXPECT_EQ(mh, nullptr);
  EXPECT_TRUE(warned("only host memory"));
  // Bad arguments on the right comms.
  req = reinterpret_cast<void*>(uintptr_t{0xdead});
  EXPECT_EQ(net_->isend(s, nullptr, 10, 0, nullptr, nullptr, &req), kNetInvalidArgument);
  EXPECT_EQ(req, nullptr);
  EXPECT_TRUE(warned("isend: bad arguments"));
  EXPECT_EQ(net_->isend(s, buf, sizeof buf, -1, nullptr, nullptr, &req), kNetInvalidArgument);
  EXPECT_TRUE(warned("isend: bad arguments"));
  void* datas[9];
  size_t sizes[9];
  int tags[9];
  for (int i = 0; i < 9; ++i) {
    datas[i] = buf;
    sizes[i] = sizeof buf;
    tags[i] = i;
  }
  NetPropertiesV11 props{};
  ASSERT_EQ(net_->getProperties(0, &props), kNetSuccess);
  ASSERT_LT(props.maxRecvs, 9);
  EXPECT_EQ(net_->irecv(r, props.maxRecvs + 1, datas, sizes, tags, nullptr, nullptr, &req),
            kNetInvalidArgument);
  EXPECT_TRUE(warned("irecv: bad arguments"));
  tags[0] = -3;
  EXPECT_EQ(net_->irecv(r, 1, datas, sizes, tags, nullptr, nullptr, &req), kNetInvalidArgument);
  EXPECT_TRUE(warned("irecv: bad buffer 0"));

  // Nothing above touched the pair: it moves data as before, and closes cleanly.
  round_trip(s, r, 1 << 20, 2);
  EXPECT_EQ(net_->closeSend(s), kNetSuccess);
  EXPECT_EQ(net_->closeRecv(r), kNetSuccess);
  EXPECT_TRUE(take_warns().empty());
}

// A failure's kind decides NCCL's code (net_result.h): a peer that closed its end fails the other side's
// pending send with ncclRemoteError.
TEST_F(PluginMisuse, APeerThatClosesFailsThePendingSendWithRemoteError) {
  void *s = nullptr, *r = nullptr;
  connect_pair(&s, &r);
  uint8_t buf[64] = {};
  void* req = nullptr;
  call_until([&] { ASSERT_EQ(net_->isend(s, buf, sizeof buf, 3, nullptr, nullptr, &req), kNetSuccess); },
             [&] { return req != nullptr; });
  ASSERT_NE(req, nullptr);
  EXPECT_EQ(net_->closeRecv(r), kNetSuccess);  // no receive was ever posted for the send
  int size = 0;
  EXPECT_EQ(wait(req, &size), kNetRemoteError);
  EXPECT_TRUE(warned("failed"));
  EXPECT_EQ(net_->closeSend(s), kNetSuccess);
  take_warns();
}

// A message larger than its receive fails that request alone (the connection is fine): invalid usage,
// on the receiving side as on the sending side.
TEST_F(PluginMisuse, AMessageLargerThanItsReceiveIsInvalidUsage) {
  void *s = nullptr, *r = nullptr;
  connect_pair(&s, &r);
  std::vector<uint8_t> out(4096, 7), in(100, 0);
  void* data = in.data();
  size_t size = in.size();
  int tag = 9;
  void* rreq = nullptr;
  ASSERT_EQ(net_->irecv(r, 1, &data, &size, &tag, nullptr, nullptr, &rreq), kNetSuccess);
  ASSERT_NE(rreq, nullptr);
  void* sreq = nullptr;
  call_until(
      [&] { ASSERT_EQ(net_->isend(s, out.data(), out.size(), tag, nullptr, nullptr, &sreq), kNetSuccess); },
      [&] { return sreq != nullptr; });
  ASSERT_NE(sreq, nullptr);
  int sent = -1, got = -1;
  EXPECT_EQ(wait(sreq, &sent), kNetInvalidUsage);
  EXPECT_TRUE(warned("larger than the peer's receive buffer of 100 bytes"));
  EXPECT_EQ(wait(rreq, &got), kNetInvalidUsage);
  EXPECT_TRUE(warned("larger than this receive's buffer of 100 bytes"));
  EXPECT_EQ(net_->closeSend(s), kNetSuccess);
  EXPECT_EQ(net_->closeRecv(r), kNetSuccess);
  take_warns();
}

TEST_F(PluginMisuse, InitRefusesATrafficClassOutsideAByte) {
  void* ctx = reinterpret_cast<void*>(uintptr_t{0xdead});
  NetCommConfig cfg{300};
  EXPECT_EQ(net_->init(&ctx, 0x99, &cfg, warn_logger, nullptr), kNetInvalidArgument);
  EXPECT_EQ(ctx, nullptr);
  EXPECT_TRUE(warned("trafficClass=300"));
}

// v8 (NCCL 2.20-2.23) passes sizes as int: a negative one is refused by name, and the adapter's NULL
// properties get the core's WARN.
TEST_F(PluginMisuse, TheV8TableRefusesNegativeSizesNamingThem) {
  auto* v8 = static_cast<NetV8*>(dlsym(lib_, "ncclNetPlugin_v8"));
  ASSERT_NE(v8, nullptr);
  ASSERT_EQ(v8->init(warn_logger), kNetSuccess);
  take_warns();
  EXPECT_EQ(v8->getProperties(0, nullptr), kNetInvalidArgument);
  EXPECT_TRUE(warned("NULL props"));
  char handle[kNetHandleMaxBytes] = {};
  void *l = nullptr, *s = nullptr, *r = nullptr;
  ASSERT_EQ(v8->listen(0, handle, &l), kNetSuccess);
  connect_and_accept([&] { ASSERT_EQ(v8->connect(0, handle, &s, nullptr), kNetSuccess); },
                     [&] { ASSERT_EQ(v8->accept(l, &r, nullptr), kNetSuccess); }, &s, &r);
  ASSERT_NE(s, nullptr);
  ASSERT_NE(r, nullptr);
  uint8_t buf[64] = {};
  void* req = nullptr;
  EXPECT_EQ(v8->isend(s, buf, -1, 0, nullptr, &req), kNetInvalidArgument);
  EXPECT_TRUE(warned("isend: bad arguments (size -1)"));
  void* data = buf;
  int size = -5;
  int tag = 0;
  EXPECT_EQ(v8->irecv(r, 1, &data, &size, &tag, nullptr, &req), kNetInvalidArgument);
  EXPECT_TRUE(warned("irecv: bad buffer 0 (size -5)"));
  EXPECT_EQ(v8->closeListen(l), kNetSuccess);
  EXPECT_EQ(v8->closeSend(s), kNetSuccess);
  EXPECT_EQ(v8->closeRecv(r), kNetSuccess);
}

}  // namespace

namespace {

// megascaleNetCounters_v1 (megascale/nccl/counters.h), exported beside the net tables: the process's
// connections added up, open and closed, between two points of the caller's.
class PluginCounters : public PluginMisuse {
 protected:
  megascaleNetCounters_v1_t counters() {
    auto get = reinterpret_cast<megascaleNetCounters_v1_fn>(dlsym(lib_, MEGASCALE_NET_COUNTERS_V1));
    megascaleNetCounters_v1_t c{};
    EXPECT_NE(get, nullptr) << "the plugin does not export " << MEGASCALE_NET_COUNTERS_V1;
    if (get != nullptr) {
      EXPECT_EQ(get(&c), 0);
    }
    return c;
  }
};

TEST_F(PluginCounters, CountEveryConnectionOpenAndClosed) {
  auto get = reinterpret_cast<megascaleNetCounters_v1_fn>(dlsym(lib_, MEGASCALE_NET_COUNTERS_V1));
  ASSERT_NE(get, nullptr);
  EXPECT_EQ(get(nullptr), -1);
  const megascaleNetCounters_v1_t before = counters();
  EXPECT_EQ(before.version, 1u);
  EXPECT_EQ(before.rtt_buckets, static_cast<uint32_t>(MEGASCALE_NET_COUNTERS_RTT_BUCKETS));
  void *s = nullptr, *r = nullptr;
  connect_pair(&s, &r);
  constexpr size_t kBytes = 1 << 20;
  round_trip(s, r, kBytes, 3);
  const megascaleNetCounters_v1_t open = counters();
  EXPECT_EQ(open.connections, before.connections + 2) << "a send and a receive comm";
  EXPECT_GE(open.bytes_sent - before.bytes_sent, kBytes);
  // The message's bytes, and the few that the receive's CREDIT carries the other way.
  EXPECT_GE(open.bytes_received - before.bytes_received, kBytes);
  EXPECT_LT(open.bytes_received - before.bytes_received, kBytes + 4096);
  EXPECT_GT(open.rtt_samples, before.rtt_samples);
  uint64_t in_buckets = 0;
  for (int b = 0; b < MEGASCALE_NET_COUNTERS_RTT_BUCKETS; ++b) in_buckets += open.rtt_bucket_counts[b];
  EXPECT_EQ(in_buckets, open.rtt_samples);
  for (int b = 1; b < MEGASCALE_NET_COUNTERS_RTT_BUCKETS; ++b)
    EXPECT_GT(open.rtt_bucket_upper_ns[b], open.rtt_bucket_upper_ns[b - 1]) << "bucket " << b;
  EXPECT_EQ(net_->closeSend(s), kNetSuccess);
  EXPECT_EQ(net_->closeRecv(r), kNetSuccess);
  // Closed, their counters stay in the totals.
  const megascaleNetCounters_v1_t closed = counters();
  EXPECT_EQ(closed.connections, open.connections);
  EXPECT_GE(closed.bytes_sent, open.bytes_sent);
  EXPECT_EQ(closed.bytes_received, open.bytes_received);
  EXPECT_GE(closed.rtt_samples, open.rtt_samples);
}

}  // namespace
