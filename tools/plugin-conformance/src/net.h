// A loaded net plugin behind one interface, whatever ABI version it exports: the harness speaks v12
// semantics and this class adapts the call to the table it found (as NCCL's own adapters do: v11 has
// v12's calls with a smaller properties layout; v8..v10 are initialised once per process and have no
// contexts or finalize; v8 takes int sizes).
//
//   auto net = Net::load("libnccl-net-megascale.so", /*abi=*/0);   // Result<std::unique_ptr<Net>>
//   void* ctx = nullptr;
//   net->init(&ctx);                 // per communicator with v11, v12
//   net->listen(ctx, 0, handle, &listen_comm);
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/nccl/abi/net_v10.h"
#include "megascale/nccl/abi/net_v11.h"
#include "megascale/nccl/abi/net_v12.h"
#include "megascale/nccl/abi/net_v8.h"
#include "megascale/nccl/abi/net_v9.h"

namespace megascale::nccl::conformance {

using abi::NetResult;

// The device properties every version reports, plus the v9+ fields (has_v9_fields) and the v12 ones
// (has_v12_fields).
struct DeviceProps {
  std::string name;
  std::string pci_path;  // empty when NULL
  bool pci_path_null = true;
  uint64_t guid = 0;
  int ptr_support = 0;
  int speed_mbps = 0;
  int max_comms = 0;
  int max_recvs = 0;
  int device_type = 0;
  int device_version = 0;
  bool has_v9_fields = false;
  int vdev_count = 0;
  int vdev0 = -1;
  size_t max_p2p_bytes = 0;
  size_t max_coll_bytes = 0;
  bool has_v12_fields = false;
  int rail_id = abi::kNetIdUndef;
  int plane_id = abi::kNetIdUndef;
};

// WARN and INFO lines the plugin logs, collected for reports (thread-safe; the logger is process-wide
// because NCCL's logger is a plain C function).
class LogCapture {
 public:
  static LogCapture& get();
  void set_verbose(bool v);
  // Marks the start of a case; warnings() returns the WARN lines logged since.
  void mark();
  std::vector<std::string> warnings_since_mark();
  std::vector<std::string> tail(size_t n);
  void add(int level, const std::string& line);
  // Also hands each line to `sink` as it comes (a case's process sends them to the harness).
  void set_sink(std::function<void(int level, const std::string& line)> sink);

 private:
  std::mutex mu_;
  bool verbose_ = false;
  std::function<void(int, const std::string&)> sink_;
  std::vector<std::string> lines_;
  std::vector<std::string> warnings_;
  size_t mark_ = 0;
};

class Net {
 public:
  // dlopen(path, RTLD_NOW | RTLD_LOCAL) and dlsym ncclNetPlugin_v12, v11, .. v8 in that order (or only
  // ncclNetPlugin_v<abi> when abi != 0). A table with a NULL entry that NCCL calls unconditionally is
  // an error naming the entries (NCCL would jump to address 0). The library stays loaded for the life of the
  // process (as NCCL keeps it while comms use it; the harness may load the same path again).
  static Result<std::unique_ptr<Net>> load(const std::string& path, int abi);

  int version() const { return version_; }
  const std::string& name() const { return name_; }

  // v11, v12: a new context per call (per communicator). v8..v10: the plugin's init runs on the first call
  // only (NCCL's adapters do the same) and *ctx is set to a dummy non-null value.
  NetResult init(void** ctx);
  NetResult finalize(void* ctx);  // v11, v12; a no-op otherwise
  NetResult devices(int* n);
  NetResult properties(int dev, DeviceProps* out);
  NetResult listen(void* ctx, int dev, void* handle, void** listen_comm);
  NetResult connect(void* ctx, int dev, void* handle, void** send_comm);
  NetResult accept(void* listen_comm, void** recv_comm);
  NetResult reg_mr(void* comm, void* data, size_t size, int type, void** mhandle);
  NetResult dereg_mr(void* comm, void* mhandle);
  NetResult isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request);
  // *request is passed in as given (NCCL's optional-completion hint), as NCCL's adapter would: cleared
  // for v8.
  NetResult irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                  void** request);
  NetResult iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
  NetResult test(void* request, int* done, int* sizes);
  NetResult close_send(void* c);
  NetResult close_recv(void* c);
  NetResult close_listen(void* c);
  bool has_irecv_consumed() const;
  NetResult irecv_consumed(void* recv_comm, int n, void* request);

 private:
  Net() = default;
  int version_ = 0;
  std::string name_;
  void* lib_ = nullptr;
  abi::NetV12* v12_ = nullptr;
  abi::NetV11* v11_ = nullptr;
  abi::NetV10* v10_ = nullptr;
  abi::NetV9* v9_ = nullptr;
  abi::NetV8* v8_ = nullptr;
  std::once_flag legacy_once_;
  NetResult legacy_init_result_ = abi::kNetSuccess;
};

const char* result_name(NetResult r);

}  // namespace megascale::nccl::conformance
