// A foreign net plugin that misbehaves in one way, chosen by FOREIGN_MODE when it is built, for
// plugin_isolation_test.cpp: the conformance harness must fail the case and name the call, never crash
// or hang itself. Otherwise it is the least plugin that loads: one device, comms that connect at once,
// requests that complete at once (no bytes move).
//   1 spin_init    init never returns
//   2 null_entries isend and test are NULL in the table
//   3 abort_init   init calls abort()
//   4 segv_isend   isend writes through a NULL pointer
//   5 spin_test    test never returns
//   6 bad_rail     also exports a v12 table (which the harness prefers) whose device reports railId -7
#include <cstdlib>
#include <cstring>

#include "megascale/nccl/abi/net_v12.h"
#include "megascale/nccl/abi/net_v8.h"

namespace {

using namespace megascale::nccl::abi;

int g_token;  // the address every comm, registration and request points to
void* const kObject = &g_token;
volatile int* volatile g_null = nullptr;  // volatile: the compiler cannot prove the write faults
volatile unsigned long g_spins;

[[noreturn]] void spin() {
  for (;;) g_spins = g_spins + 1;
}

NetResult init(NetDebugLogger /*logger*/) {
  if (FOREIGN_MODE == 1) {
    spin();
  }
  if (FOREIGN_MODE == 3) std::abort();
  return kNetSuccess;
}

NetResult devices(int* n) {
  *n = 1;
  return kNetSuccess;
}

NetResult get_properties(int /*dev*/, NetPropertiesV8* p) {
  std::memset(p, 0, sizeof *p);
  static char name[] = "foreign0";
  p->name = name;
  p->ptrSupport = kPtrHost;
  p->speed = 1000;
  p->maxComms = 1024;
  p->maxRecvs = 1;
  p->netDeviceType = kNetDeviceHost;
  return kNetSuccess;
}

NetResult listen(int /*dev*/, void* handle, void** comm) {
  std::memset(handle, 0, kNetHandleMaxBytes);
  *comm = kObject;
  return kNetSuccess;
}

NetResult connect(int /*dev*/, void* /*handle*/, void** comm, NetDeviceHandle** /*dev_comm*/) {
  *comm = kObject;
  return kNetSuccess;
}

NetResult accept(void* /*listen*/, void** comm, NetDeviceHandle** /*dev_comm*/) {
  *comm = kObject;
  return kNetSuccess;
}

NetResult reg_mr(void* /*comm*/, void* /*data*/, size_t /*size*/, int /*type*/, void** mhandle) {
  *mhandle = kObject;
  return kNetSuccess;
}

NetResult dereg_mr(void* /*comm*/, void* /*mhandle*/) {
  return kNetSuccess;
}

// UndefinedBehaviorSanitizer would stop the store to NULL itself (sanitizer builds): the fault is the point.
__attribute__((no_sanitize("undefined"))) NetResult isend(void* /*comm*/, void* /*data*/, int /*size*/,
                                                          int /*tag*/, void* /*mh*/, void** request) {
  if (FOREIGN_MODE == 4) *g_null = 1;
  *request = kObject;
  return kNetSuccess;
}

NetResult irecv(void* /*comm*/, int /*n*/, void** /*data*/, int* /*sizes*/, int* /*tags*/, void** /*mh*/,
                void** request) {
  *request = kObject;
  return kNetSuccess;
}

NetResult iflush(void* /*comm*/, int /*n*/, void** /*data*/, int* /*sizes*/, void** /*mh*/, void** request) {
  *request = nullptr;
  return kNetSuccess;
}

NetResult test(void* /*request*/, int* done, int* sizes) {
  if (FOREIGN_MODE == 5) {
    spin();
  }
  *done = 1;
  if (sizes != nullptr) *sizes = 0;
  return kNetSuccess;
}

NetResult close_comm(void* /*comm*/) {
  return kNetSuccess;
}

#if FOREIGN_MODE == 6
// The v12 forms of the calls above: one context for every communicator.
NetResult init_v12(void** ctx, uint64_t /*comm_id*/, NetCommConfig* /*config*/, NetDebugLogger logger,
                   NetProfilerCallback /*profiler*/) {
  *ctx = kObject;
  return init(logger);
}

NetResult get_properties_v12(int dev, NetPropertiesV12* p) {
  NetPropertiesV8 base;
  get_properties(dev, &base);
  std::memset(p, 0, sizeof *p);
  p->name = base.name;
  p->ptrSupport = base.ptrSupport;
  p->speed = base.speed;
  p->maxComms = base.maxComms;
  p->maxRecvs = base.maxRecvs;
  p->netDeviceType = base.netDeviceType;
  p->vProps.ndevs = 1;
  p->vProps.devs[0] = dev;
  p->maxP2pBytes = size_t{1} << 30;
  p->maxCollBytes = size_t{1} << 30;
  p->maxMultiRequestSize = 1;
  p->railId = -7;  // the misbehaviour: neither kNetIdUndef nor a rail index
  p->planeId = kNetIdUndef;
  return kNetSuccess;
}

NetResult listen_v12(void* /*ctx*/, int dev, void* handle, void** comm) {
  return listen(dev, handle, comm);
}

NetResult connect_v12(void* /*ctx*/, int dev, void* handle, void** comm, NetDeviceHandle** dev_comm) {
  return connect(dev, handle, comm, dev_comm);
}

NetResult isend_v12(void* comm, void* data, size_t size, int tag, void* mh, void* /*phandle*/,
                    void** request) {
  return isend(comm, data, static_cast<int>(size), tag, mh, request);
}

NetResult irecv_v12(void* comm, int n, void** data, size_t* /*sizes*/, int* tags, void** mh,
                    void** /*phandles*/, void** request) {
  return irecv(comm, n, data, nullptr, tags, mh, request);
}

NetResult finalize_v12(void* /*ctx*/) {
  return kNetSuccess;
}
#endif

}  // namespace

extern "C" {
#if FOREIGN_MODE == 6
extern __attribute__((visibility("default"))) NetV12 ncclNetPlugin_v12;
NetV12 ncclNetPlugin_v12 = {
    "Foreign",    init_v12,    devices,    get_properties_v12,
    listen_v12,   connect_v12, accept,     reg_mr,
    nullptr,  // regMrDmaBuf
    dereg_mr,     isend_v12,   irecv_v12,  iflush,
    test,         close_comm,  close_comm, close_comm,
    nullptr,  // getDeviceMr
    nullptr,  // irecvConsumed
    nullptr,  // makeVDevice
    finalize_v12,
    nullptr,  // setNetAttr
};
#endif

extern __attribute__((visibility("default"))) NetV8 ncclNetPlugin_v8;
NetV8 ncclNetPlugin_v8 = {
    "Foreign",
    init,
    devices,
    get_properties,
    listen,
    connect,
    accept,
    reg_mr,
    nullptr,  // regMrDmaBuf
    dereg_mr,
    FOREIGN_MODE == 2 ? nullptr : isend,
    irecv,
    iflush,
    FOREIGN_MODE == 2 ? nullptr : test,
    close_comm,
    close_comm,
    close_comm,
    nullptr,  // getDeviceMr
    nullptr,  // irecvConsumed
};
}
