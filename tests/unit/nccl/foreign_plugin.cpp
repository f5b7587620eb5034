// A foreign net plugin that misbehaves in one way, chosen by FOREIGN_MODE when it is built, for
// plugin_isolation_test.cpp: the conformance harness must fail the case and name the call, never crash
// or hang itself. Otherwise it is the least plugin that loads: one device, comms that connect at once,
// requests that complete at once (no bytes move).
//   1 spin_init    init never returns
//   2 null_entries isend and test are NULL in the table
//   3 abort_init   init calls abort()
//   4 segv_isend   isend writes through a NULL pointer
//   5 spin_test    test never returns
#include <cstdlib>
#include <cstring>

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

}  // namespace

extern "C" {
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
