// Loading a net plugin as NCCL does, and the per-version call adapters (see net.h).
#include "net.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <type_traits>

#include "isolate.h"

namespace megascale::nccl::conformance {
namespace {

// NCCL's logger is a C variadic function; this one collects the plugin's lines.
void harness_logger(abi::NetLogLevel level, unsigned long flags, const char* file, int line, const char* fmt,
                    ...) {
  (void)flags;
  char text[2048];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(text, sizeof text, fmt, args);
  va_end(args);
  const char* tag = level == abi::kLogWarn ? "WARN" : level == abi::kLogInfo ? "INFO" : "LOG";
  char full[2300];
  std::snprintf(full, sizeof full, "%s %s:%d %s", tag, file != nullptr ? file : "?", line, text);
  LogCapture::get().add(level, full);
}

template <class Props>
void fill_base(const Props& p, DeviceProps* out) {
  out->name = p.name != nullptr ? p.name : "";
  out->pci_path_null = p.pciPath == nullptr;
  out->pci_path = p.pciPath != nullptr ? p.pciPath : "";
  out->guid = p.guid;
  out->ptr_support = p.ptrSupport;
  out->speed_mbps = p.speed;
  out->max_comms = p.maxComms;
  out->max_recvs = p.maxRecvs;
  out->device_type = p.netDeviceType;
  out->device_version = p.netDeviceVersion;
}

template <class Props>
void fill_v9(const Props& p, DeviceProps* out) {
  fill_base(p, out);
  out->has_v9_fields = true;
  out->vdev_count = p.vProps.ndevs;
  out->vdev0 = p.vProps.ndevs > 0 ? p.vProps.devs[0] : -1;
  out->max_p2p_bytes = p.maxP2pBytes;
  out->max_coll_bytes = p.maxCollBytes;
}

void fill_v12(const abi::NetPropertiesV12& p, DeviceProps* out) {
  fill_v9(p, out);
  out->has_v12_fields = true;
  out->rail_id = p.railId;
  out->plane_id = p.planeId;
}

// The table's entries NCCL calls without checking them for NULL, comma-separated, that are NULL.
template <class Table>
std::string null_entries(const Table& t) {
  std::string missing;
  auto need = [&](const void* fn, const char* name) {
    if (fn == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
#define MS_NEED(field) need(reinterpret_cast<const void*>(t.field), #field)
  MS_NEED(init);
  MS_NEED(devices);
  MS_NEED(getProperties);
  MS_NEED(listen);
  MS_NEED(connect);
  MS_NEED(accept);
  MS_NEED(regMr);
  MS_NEED(deregMr);
  MS_NEED(isend);
  MS_NEED(irecv);
  MS_NEED(iflush);
  MS_NEED(test);
  MS_NEED(closeSend);
  MS_NEED(closeRecv);
  MS_NEED(closeListen);
  if constexpr (std::is_same_v<Table, abi::NetV11> || std::is_same_v<Table, abi::NetV12>) MS_NEED(finalize);
#undef MS_NEED
  return missing;
}

void* const kLegacyCtx = reinterpret_cast<void*>(uintptr_t{0x1e6ac7});

}  // namespace

LogCapture& LogCapture::get() {
  static LogCapture capture;
  return capture;
}

void LogCapture::set_verbose(bool v) {
  std::lock_guard<std::mutex> lock(mu_);
  verbose_ = v;
}

void LogCapture::mark() {
  std::lock_guard<std::mutex> lock(mu_);
  mark_ = warnings_.size();
}

std::vector<std::string> LogCapture::warnings_since_mark() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::vector<std::string>(warnings_.begin() + static_cast<std::ptrdiff_t>(mark_), warnings_.end());
}

std::vector<std::string> LogCapture::tail(size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t from = lines_.size() > n ? lines_.size() - n : 0;
  return std::vector<std::string>(lines_.begin() + static_cast<std::ptrdiff_t>(from), lines_.end());
}

void LogCapture::set_sink(std::function<void(int level, const std::string& line)> sink) {
  std::lock_guard<std::mutex> lock(mu_);
  sink_ = std::move(sink);
}

void LogCapture::add(int level, const std::string& line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (sink_) sink_(level, line);
  if (verbose_) std::fprintf(stderr, "  [plugin] %s\n", line.c_str());
  if (lines_.size() >= 4096) lines_.erase(lines_.begin(), lines_.begin() + 1024);
  lines_.push_back(line);
  if (level == abi::kLogWarn) warnings_.push_back(line);
}

Result<std::unique_ptr<Net>> Net::load(const std::string& path, int abi) {
  if (abi != 0 && (abi < 8 || abi > 12))
    return make_error("ABI version " + std::to_string(abi) + ": the harness speaks 8..12");
  void* lib = nullptr;
  {
    const InCall in(Call::kDlopen);
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  if (lib == nullptr) {
    const char* e = dlerror();
    return make_error("dlopen " + path + ": " + (e != nullptr ? e : "unknown error"));
  }
  std::unique_ptr<Net> net(new Net);
  net->lib_ = lib;
  for (int v = 12; v >= 8; --v) {
    if (abi != 0 && v != abi) continue;
    void* sym = dlsym(lib, ("ncclNetPlugin_v" + std::to_string(v)).c_str());
    if (sym == nullptr) continue;
    net->version_ = v;
    switch (v) {
      case 12:
        net->v12_ = static_cast<abi::NetV12*>(sym);
        break;
      case 11:
        net->v11_ = static_cast<abi::NetV11*>(sym);
        break;
      case 10:
        net->v10_ = static_cast<abi::NetV10*>(sym);
        break;
      case 9:
        net->v9_ = static_cast<abi::NetV9*>(sym);
        break;
      default:
        net->v8_ = static_cast<abi::NetV8*>(sym);
        break;
    }
    break;
  }
  if (net->version_ == 0) {
    return make_error(path + " exports no " +
                      (abi ? "ncclNetPlugin_v" + std::to_string(abi) : "ncclNetPlugin_v12..v8") + " symbol");
  }
  const std::string missing = net->v12_   ? null_entries(*net->v12_)
                              : net->v11_ ? null_entries(*net->v11_)
                              : net->v10_ ? null_entries(*net->v10_)
                              : net->v9_  ? null_entries(*net->v9_)
                                          : null_entries(*net->v8_);
  if (!missing.empty()) {
    return make_error("ncclNetPlugin_v" + std::to_string(net->version_) +
                      " has NULL entries that NCCL calls: " + missing);
  }
  const char* name = net->v12_   ? net->v12_->name
                     : net->v11_ ? net->v11_->name
                     : net->v10_ ? net->v10_->name
                     : net->v9_  ? net->v9_->name
                                 : net->v8_->name;
  net->name_ = name != nullptr ? name : "";
  return net;
}

#define MS_DISPATCH(call, ...)      \
  (v12_   ? v12_->call(__VA_ARGS__) \
   : v11_ ? v11_->call(__VA_ARGS__) \
   : v10_ ? v10_->call(__VA_ARGS__) \
   : v9_  ? v9_->call(__VA_ARGS__)  \
          : v8_->call(__VA_ARGS__))

NetResult Net::init(void** ctx) {
  const InCall in(Call::kInit);
  if (v12_ || v11_) {
    abi::NetCommConfig cfg{abi::kTrafficClassUndef};
    static std::atomic<uint64_t> next_comm_id{0x5eed0000};
    return v12_ ? v12_->init(ctx, ++next_comm_id, &cfg, harness_logger, nullptr)
                : v11_->init(ctx, ++next_comm_id, &cfg, harness_logger, nullptr);
  }
  std::call_once(legacy_once_, [&] {
    legacy_init_result_ = v10_  ? v10_->init(harness_logger, nullptr)
                          : v9_ ? v9_->init(harness_logger)
                                : v8_->init(harness_logger);
  });
  *ctx = legacy_init_result_ == abi::kNetSuccess ? kLegacyCtx : nullptr;
  return legacy_init_result_;
}

NetResult Net::finalize(void* ctx) {
  const InCall in(Call::kFinalize);
  return v12_ ? v12_->finalize(ctx) : v11_ ? v11_->finalize(ctx) : abi::kNetSuccess;
}

NetResult Net::devices(int* n) {
  const InCall in(Call::kDevices);
  return MS_DISPATCH(devices, n);
}

NetResult Net::properties(int dev, DeviceProps* out) {
  const InCall in(Call::kGetProperties);
  NetResult r = abi::kNetSuccess;
  if (v12_) {
    abi::NetPropertiesV12 p{};
    if ((r = v12_->getProperties(dev, &p)) == abi::kNetSuccess) fill_v12(p, out);
  } else if (v11_) {
    abi::NetPropertiesV11 p{};
    if ((r = v11_->getProperties(dev, &p)) == abi::kNetSuccess) fill_v9(p, out);
  } else if (v10_) {
    abi::NetPropertiesV10 p{};
    if ((r = v10_->getProperties(dev, &p)) == abi::kNetSuccess) fill_v9(p, out);
  } else if (v9_) {
    abi::NetPropertiesV9 p{};
    if ((r = v9_->getProperties(dev, &p)) == abi::kNetSuccess) fill_v9(p, out);
  } else {
    abi::NetPropertiesV8 p{};
    if ((r = v8_->getProperties(dev, &p)) == abi::kNetSuccess) fill_base(p, out);
  }
  return r;
}

NetResult Net::listen(void* ctx, int dev, void* handle, void** listen_comm) {
  const InCall in(Call::kListen);
  if (v12_) return v12_->listen(ctx, dev, handle, listen_comm);
  if (v11_) return v11_->listen(ctx, dev, handle, listen_comm);
  if (v10_) return v10_->listen(dev, handle, listen_comm);
  return v9_ ? v9_->listen(dev, handle, listen_comm) : v8_->listen(dev, handle, listen_comm);
}

NetResult Net::connect(void* ctx, int dev, void* handle, void** send_comm) {
  const InCall in(Call::kConnect);
  abi::NetDeviceHandle* dev_comm = nullptr;
  if (v12_) return v12_->connect(ctx, dev, handle, send_comm, &dev_comm);
  if (v11_) return v11_->connect(ctx, dev, handle, send_comm, &dev_comm);
  if (v10_) {
    abi::NetCommConfig cfg{abi::kTrafficClassUndef};
    return v10_->connect(dev, &cfg, handle, send_comm, &dev_comm);
  }
  return v9_ ? v9_->connect(dev, handle, send_comm, &dev_comm)
             : v8_->connect(dev, handle, send_comm, &dev_comm);
}

NetResult Net::accept(void* listen_comm, void** recv_comm) {
  const InCall in(Call::kAccept);
  abi::NetDeviceHandle* dev_comm = nullptr;
  return MS_DISPATCH(accept, listen_comm, recv_comm, &dev_comm);
}

NetResult Net::reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
  const InCall in(Call::kRegMr);
  return MS_DISPATCH(regMr, comm, data, size, type, mhandle);
}

NetResult Net::dereg_mr(void* comm, void* mhandle) {
  const InCall in(Call::kDeregMr);
  return MS_DISPATCH(deregMr, comm, mhandle);
}

NetResult Net::isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request) {
  const InCall in(Call::kIsend);
  if (v12_) return v12_->isend(send_comm, data, size, tag, mhandle, nullptr, request);
  if (v11_) return v11_->isend(send_comm, data, size, tag, mhandle, nullptr, request);
  if (v10_) return v10_->isend(send_comm, data, size, tag, mhandle, nullptr, request);
  if (v9_) return v9_->isend(send_comm, data, size, tag, mhandle, request);
  if (size > 0x7FFFFFFF) return abi::kNetInvalidArgument;
  return v8_->isend(send_comm, data, static_cast<int>(size), tag, mhandle, request);
}

NetResult Net::irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                     void** request) {
  const InCall in(Call::kIrecv);
  if (v12_) return v12_->irecv(recv_comm, n, data, sizes, tags, mhandles, nullptr, request);
  if (v11_) return v11_->irecv(recv_comm, n, data, sizes, tags, mhandles, nullptr, request);
  if (v10_) return v10_->irecv(recv_comm, n, data, sizes, tags, mhandles, nullptr, request);
  if (v9_) return v9_->irecv(recv_comm, n, data, sizes, tags, mhandles, request);
  // NCCL's v8 adapter clears the optional-completion hint and narrows the sizes.
  *request = nullptr;
  int narrow[64];
  if (n < 0 || n > 64) return abi::kNetInvalidArgument;
  for (int i = 0; i < n; ++i) {
    if (sizes[i] > 0x7FFFFFFF) return abi::kNetInvalidArgument;
    narrow[i] = static_cast<int>(sizes[i]);
  }
  return v8_->irecv(recv_comm, n, data, narrow, tags, mhandles, request);
}

NetResult Net::iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  const InCall in(Call::kIflush);
  return MS_DISPATCH(iflush, recv_comm, n, data, sizes, mhandles, request);
}

NetResult Net::test(void* request, int* done, int* sizes) {
  const InCall in(Call::kTest);
  return MS_DISPATCH(test, request, done, sizes);
}
NetResult Net::close_send(void* c) {
  const InCall in(Call::kCloseSend);
  return MS_DISPATCH(closeSend, c);
}
NetResult Net::close_recv(void* c) {
  const InCall in(Call::kCloseRecv);
  return MS_DISPATCH(closeRecv, c);
}
NetResult Net::close_listen(void* c) {
  const InCall in(Call::kCloseListen);
  return MS_DISPATCH(closeListen, c);
}

bool Net::has_irecv_consumed() const {
  return v12_   ? v12_->irecvConsumed != nullptr
         : v11_ ? v11_->irecvConsumed != nullptr
         : v10_ ? v10_->irecvConsumed != nullptr
         : v9_  ? v9_->irecvConsumed != nullptr
                : v8_->irecvConsumed != nullptr;
}

NetResult Net::irecv_consumed(void* recv_comm, int n, void* request) {
  if (!has_irecv_consumed()) return abi::kNetSuccess;
  const InCall in(Call::kIrecvConsumed);
  return MS_DISPATCH(irecvConsumed, recv_comm, n, request);
}

#undef MS_DISPATCH

const char* result_name(NetResult r) {
  switch (r) {
    case abi::kNetSuccess:
      return "ncclSuccess";
    case abi::kNetUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case abi::kNetSystemError:
      return "ncclSystemError";
    case abi::kNetInternalError:
      return "ncclInternalError";
    case abi::kNetInvalidArgument:
      return "ncclInvalidArgument";
    case abi::kNetInvalidUsage:
      return "ncclInvalidUsage";
    case abi::kNetRemoteError:
      return "ncclRemoteError";
    case abi::kNetInProgress:
      return "ncclInProgress";
  }
  return "(unknown ncclResult_t)";
}

}  // namespace megascale::nccl::conformance
