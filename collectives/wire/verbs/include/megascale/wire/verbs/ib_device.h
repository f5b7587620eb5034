// The thin layer over libibverbs: a device with its protection domain and port, completion queues,
// UD queue pairs brought to RTS, RC queue pairs connected with the NIC's retry parameters, address
// handles, RC receive rings and a registration cache. It turns the plain work
// requests of work_request.h into ibv_post_send / ibv_post_recv calls and ibv_wc into WorkCompletion;
// every decision lives in the pure parts, so this file only calls and checks. This header includes no
// verbs header: the wire's other parts and their tests build without it.
//
//   auto dev = IbDevice::open("rxe0", /*port=*/1);             // "" = the first device
//   auto cq = dev->create_cq(1024);
//   auto qp = dev->create_ud_qp(**cq, {.qkey = 0x4D53, .send_depth = 256, .recv_depth = 256});
//   Result<uint32_t> ah = dev->create_ah({.dgid = peer_gid, .sgid_index = gid_index, ...});
//   (*qp)->post_recv(make_ud_recv(...));  (*qp)->post_send(make_ud_send(...), dev->ah(*ah));
//   std::vector<WorkCompletion> wcs; (*cq)->poll(wcs, 32);
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "megascale/common/result.h"
#include "megascale/wire/verbs/completion.h"
#include "megascale/wire/verbs/gid.h"
#include "megascale/wire/verbs/mr_cache.h"
#include "megascale/wire/verbs/rc_recovery.h"
#include "megascale/wire/verbs/work_request.h"

namespace megascale::wire::verbs {

// Names of the RDMA devices libibverbs sees (with a provider loaded); empty on a host without any.
std::vector<std::string> list_devices();

class IbCq {
 public:
  virtual ~IbCq() = default;
  // Appends up to `max` completions to `out`; returns how many. Errors: ibv_poll_cq failed.
  virtual Result<uint32_t> poll(std::vector<WorkCompletion>& out, uint32_t max) = 0;
  // Sleeping on the CQ: every CQ has a completion channel whose (non-blocking) fd becomes readable after
  // arm() when a completion arrives. To sleep: arm(), poll once more (a completion that came before the
  // arm raises no event), then wait on event_fd(); after waking, drain_events() and poll.
  virtual int event_fd() const = 0;
  virtual Status arm() = 0;
  virtual void drain_events() = 0;
};

struct UdQpConfig {
  uint32_t qkey = 0x4D53;  // bit 31 clear
  uint32_t send_depth = 256;
  uint32_t recv_depth = 256;
  uint32_t psn = 0;  // initial send PSN
};

// Where an RC QP's peer is, and how to reach it (from its ConnHandle and this end's GID choice).
struct RcPeer {
  AhSpec path;                // the peer's GID, this end's sgid index, traffic class, flow label
  uint32_t qpn = 0;           // the peer's QP for this lane
  uint32_t psn = 0;           // the peer's initial send PSN (our receive PSN)
  uint32_t mtu_bytes = 1024;  // the smaller of both ports' active MTUs
};

class IbRcQp {
 public:
  virtual ~IbRcQp() = default;
  virtual uint32_t qpn() const = 0;
  // Moves the QP from INIT through RTR (to `peer`) to RTS with the NIC's retry parameters and our
  // initial send PSN. Errors name the transition and errno's text.
  virtual Status connect(const RcPeer& peer, const NicRetry& nic, uint32_t send_psn) = 0;
  // An RDMA write with immediate (make_rc_write, make_rc_credit).
  virtual Status post_write(const SendWr& wr) = 0;
  virtual Status post_recv(const RecvWr& wr) = 0;
};

class IbUdQp {
 public:
  virtual ~IbUdQp() = default;
  virtual uint32_t qpn() const = 0;
  // ah_handle: IbDevice::ah(). Errors name the call and errno's text.
  virtual Status post_send(const SendWr& wr, void* ah_handle) = 0;
  virtual Status post_recv(const RecvWr& wr) = 0;
  // Back to RTS after the QP went to the error state (rxe errors a UD QP whose send could not leave:
  // its netdev was down), keeping its QPN, so peers that know it still reach it: RESET, INIT, RTR,
  // RTS. Every WR posted before is gone (its completion may still come, flushed): post receives again.
  virtual Status reset() = 0;
};

// CQs and QPs must be destroyed before the device they came from.
class IbDevice {
 public:
  // Opens device `name` ("" = the first one) and its protection domain; `port` must be ACTIVE.
  static Result<std::unique_ptr<IbDevice>> open(const std::string& name, uint32_t port);
  virtual ~IbDevice() = default;

  virtual const std::string& name() const = 0;
  virtual uint32_t port() const = 0;
  virtual uint32_t active_mtu_bytes() const = 0;
  virtual Result<Gid> query_gid(uint32_t index) const = 0;
  // Whether the port is ACTIVE now (ibv_query_port; false when the query fails). A send posted while
  // it is not fails on rxe and errors its QP as a whole, so set-up messages wait for it. Devices that
  // cannot tell say true.
  virtual bool port_active() const { return true; }
  virtual Result<std::unique_ptr<IbCq>> create_cq(uint32_t depth) = 0;
  // Created and moved through INIT and RTR to RTS, sending and receiving on `cq`.
  virtual Result<std::unique_ptr<IbUdQp>> create_ud_qp(IbCq& cq, const UdQpConfig& config) = 0;
  // Created and moved to INIT with remote write access (its peer writes into this end's ring); connect()
  // brings it to RTS.
  virtual Result<std::unique_ptr<IbRcQp>> create_rc_qp(IbCq& cq, uint32_t send_depth,
                                                       uint32_t recv_depth) = 0;
  // An RC receive ring: registered on its own, with remote write access, for the device's life.
  virtual Result<MrKeys> register_ring(void* addr, uint64_t len) = 0;
  // An address handle for `spec`, kept for the device's life; the index for ah().
  virtual Result<uint32_t> create_ah(const AhSpec& spec) = 0;
  virtual void* ah(uint32_t index) const = 0;
  // Send and receive buffers, registered for local access only (rings: register_ring). Host memory
  // through ibv_reg_mr; dma-bufs (GPU memory, cuda_dmabuf.h) through ibv_reg_dmabuf_mr, where
  // probe_dmabuf() says the device takes them.
  virtual MrCache& mr_cache() = 0;
  // Whether this device registers dma-bufs: ok, or why not (its provider or the kernel lacks
  // ibv_reg_dmabuf_mr, or this build's libibverbs predates it: rdma-core 34). ptr_support.h decides
  // from it.
  virtual Status probe_dmabuf() = 0;
};

}  // namespace megascale::wire::verbs
