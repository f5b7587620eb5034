// The libibverbs calls behind ib_device.h.
#include "megascale/wire/verbs/ib_device.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "megascale/wire/verbs/ptr_support.h"

namespace megascale::wire::verbs {

// The plain mirrors of completion.h must equal libibverbs' values.
static_assert(static_cast<uint32_t>(WcStatus::kRetryExcErr) == IBV_WC_RETRY_EXC_ERR);
static_assert(static_cast<uint32_t>(WcStatus::kRnrRetryExcErr) == IBV_WC_RNR_RETRY_EXC_ERR);
static_assert(static_cast<uint32_t>(WcStatus::kWrFlushErr) == IBV_WC_WR_FLUSH_ERR);
static_assert(static_cast<uint32_t>(WcStatus::kLocProtErr) == IBV_WC_LOC_PROT_ERR);
static_assert(static_cast<uint32_t>(WcStatus::kRemAccessErr) == IBV_WC_REM_ACCESS_ERR);
static_assert(static_cast<uint32_t>(WcStatus::kRespTimeoutErr) == IBV_WC_RESP_TIMEOUT_ERR);
static_assert(static_cast<uint32_t>(WcStatus::kGeneralErr) == IBV_WC_GENERAL_ERR);
static_assert(static_cast<uint32_t>(WcOpcode::kSend) == IBV_WC_SEND);
static_assert(static_cast<uint32_t>(WcOpcode::kRdmaWrite) == IBV_WC_RDMA_WRITE);
static_assert(static_cast<uint32_t>(WcOpcode::kRecv) == IBV_WC_RECV);
static_assert(static_cast<uint32_t>(WcOpcode::kRecvRdmaWithImm) == IBV_WC_RECV_RDMA_WITH_IMM);
static_assert(kGrhBytes == sizeof(ibv_grh));

namespace {

// ibv_reg_mr's access flags as int: libibverbs' ibv_reg_mr macro ANDs them with an enumerator of another
// enum, which clang refuses as a deprecated enum-enum operation when given an ibv_access_flags.
constexpr int kLocalAccess = IBV_ACCESS_LOCAL_WRITE;
constexpr int kRingAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

Error sys_error(const std::string& what, int err) {
  return make_error(ErrorCode::kSystem, what + ": " + std::strerror(err));
}

// One receive WR (at most one SGE) posted on `qp`; `what` names the call in the error.
Status post_recv_wr(ibv_qp* qp, const RecvWr& in, const char* what) {
  ibv_sge sge{in.sge.addr, in.sge.length, in.sge.lkey};
  ibv_recv_wr wr{};
  wr.wr_id = in.wr_id;
  wr.sg_list = in.num_sge > 0 ? &sge : nullptr;
  wr.num_sge = static_cast<int>(in.num_sge);
  ibv_recv_wr* bad = nullptr;
  if (int err = ibv_post_recv(qp, &wr, &bad); err != 0) return sys_error(what, err);
  return {};
}

class Cq final : public IbCq {
 public:
  Cq(ibv_cq* cq, ibv_comp_channel* channel) : cq_(cq), channel_(channel) {}
  ~Cq() override {
    if (unacked_ > 0) ibv_ack_cq_events(cq_, unacked_);
    ibv_destroy_cq(cq_);
    if (channel_ != nullptr) ibv_destroy_comp_channel(channel_);
  }
  ibv_cq* get() const { return cq_; }
  int event_fd() const override { return channel_ != nullptr ? channel_->fd : -1; }
  Status arm() override {
    if (channel_ == nullptr)
      return make_error(ErrorCode::kInvalidUsage, "ibv_req_notify_cq: the CQ has no channel");
    const int rc = ibv_req_notify_cq(cq_, 0);
    if (rc != 0) return sys_error("ibv_req_notify_cq", rc);
    return {};
  }
  void drain_events() override {
    if (channel_ == nullptr) return;
    void* ctx = nullptr;
    ibv_cq* got = nullptr;
    while (ibv_get_cq_event(channel_, &got, &ctx) == 0) ++unacked_;  // the fd is non-blocking
    // Acknowledged in batches: ibv_ack_cq_events takes a mutex.
    if (unacked_ >= 64) {
      ibv_ack_cq_events(cq_, unacked_);
      unacked_ = 0;
    }
  }
  Result<uint32_t> poll(std::vector<WorkCompletion>& out, uint32_t max) override {
    ibv_wc wc[32];
    uint32_t total = 0;
    while (total < max) {
      const int want = static_cast<int>(std::min<uint32_t>(max - total, 32));
      const int n = ibv_poll_cq(cq_, want, wc);
      if (n < 0) return make_error(ErrorCode::kSystem, "ibv_poll_cq failed (" + std::to_string(n) + ")");
      for (int i = 0; i < n; ++i) {
        WorkCompletion w;
        w.wr_id = wc[i].wr_id;
        w.status = static_cast<WcStatus>(wc[i].status);
        w.opcode = static_cast<WcOpcode>(wc[i].opcode);
        w.byte_len = wc[i].byte_len;
        w.with_imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0;
        w.imm_data = w.with_imm ? ntohl(wc[i].imm_data) : 0;
        w.grh = (wc[i].wc_flags & IBV_WC_GRH) != 0;
        w.qp_num = wc[i].qp_num;
        w.src_qp = wc[i].src_qp;
        out.push_back(w);
      }
      total += static_cast<uint32_t>(n);
      if (n < want) break;
    }
    return total;
  }

 private:
  ibv_cq* cq_;
  ibv_comp_channel* channel_;
  unsigned unacked_ = 0;  // events taken and not yet acknowledged
};

// A UD QP from RESET (or just created) through INIT and RTR to RTS.
Status ud_to_rts(ibv_qp* qp, const std::string& name, uint32_t port, const UdQpConfig& config) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = static_cast<uint8_t>(port);
  attr.qkey = config.qkey;
  if (int err = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) {
    return sys_error(name + ": UD QP to INIT", err);
  }
  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  if (int err = ibv_modify_qp(qp, &attr, IBV_QP_STATE)) return sys_error(name + ": UD QP to RTR", err);
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.sq_psn = config.psn & 0xFFFFFF;
  if (int err = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN)) {
    return sys_error(name + ": UD QP to RTS", err);
  }
  return {};
}

class UdQp final : public IbUdQp {
 public:
  UdQp(ibv_qp* qp, std::string name, uint32_t port, const UdQpConfig& config)
      : qp_(qp), name_(std::move(name)), port_(port), config_(config) {}
  ~UdQp() override { ibv_destroy_qp(qp_); }
  uint32_t qpn() const override { return qp_->qp_num; }

  Status post_send(const SendWr& in, void* ah_handle) override {
    ibv_sge sge[2];
    for (uint32_t i = 0; i < in.num_sge; ++i) sge[i] = {in.sge[i].addr, in.sge[i].length, in.sge[i].lkey};
    ibv_send_wr wr{};
    wr.wr_id = in.wr_id;
    wr.sg_list = sge;
    wr.num_sge = static_cast<int>(in.num_sge);
    wr.opcode = in.opcode == SendOpcode::kSend ? (in.has_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND)
                                               : IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = in.signaled ? IBV_SEND_SIGNALED : 0;
    if (in.has_imm) wr.imm_data = htonl(in.imm_data);
    wr.wr.ud.ah = static_cast<ibv_ah*>(ah_handle);
    wr.wr.ud.remote_qpn = in.remote_qpn;
    wr.wr.ud.remote_qkey = in.remote_qkey;
    ibv_send_wr* bad = nullptr;
    if (int err = ibv_post_send(qp_, &wr, &bad); err != 0) return sys_error("ibv_post_send (UD)", err);
    return {};
  }

  Status post_recv(const RecvWr& in) override { return post_recv_wr(qp_, in, "ibv_post_recv (UD)"); }

  Status reset() override {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RESET;
    if (int err = ibv_modify_qp(qp_, &attr, IBV_QP_STATE)) return sys_error(name_ + ": UD QP to RESET", err);
    return ud_to_rts(qp_, name_, port_, config_);
  }

 private:
  ibv_qp* qp_;
  std::string name_;
  uint32_t port_;
  UdQpConfig config_;
};

ibv_mtu to_ibv_mtu(uint32_t bytes) {
  switch (bytes) {
    case 256:
      return IBV_MTU_256;
    case 512:
      return IBV_MTU_512;
    case 2048:
      return IBV_MTU_2048;
    case 4096:
      return IBV_MTU_4096;
    default:
      return IBV_MTU_1024;
  }
}

void fill_ah(ibv_ah_attr& attr, const AhSpec& spec) {
  attr.is_global = 1;
  attr.port_num = spec.port_num;
  std::memcpy(attr.grh.dgid.raw, spec.dgid.data(), 16);
  attr.grh.sgid_index = spec.sgid_index;
  attr.grh.hop_limit = spec.hop_limit;
  attr.grh.traffic_class = spec.traffic_class;
  attr.grh.flow_label = spec.flow_label;
}

class RcQp final : public IbRcQp {
 public:
  RcQp(ibv_qp* qp, std::string name) : qp_(qp), name_(std::move(name)) {}
  ~RcQp() override { ibv_destroy_qp(qp_); }
  uint32_t qpn() const override { return qp_->qp_num; }

  Status connect(const RcPeer& peer, const NicRetry& nic, uint32_t send_psn) override {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = to_ibv_mtu(peer.mtu_bytes);
    attr.dest_qp_num = peer.qpn;
    attr.rq_psn = peer.psn & 0xFFFFFF;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer = 12;  // 0.64 ms before an RNR NAK's retry
    fill_ah(attr.ah_attr, peer.path);
    if (int err = ibv_modify_qp(qp_, &attr,
                                IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
      return sys_error(name_ + ": RC QP to RTR (peer QPN " + std::to_string(peer.qpn) + ")", err);
    }
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = nic.timeout_exp;
    attr.retry_cnt = nic.retry_cnt;
    attr.rnr_retry = nic.rnr_retry;
    attr.sq_psn = send_psn & 0xFFFFFF;
    attr.max_rd_atomic = 1;
    if (int err = ibv_modify_qp(qp_, &attr,
                                IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
      return sys_error(name_ + ": RC QP to RTS", err);
    }
    return {};
  }

  Status post_write(const SendWr& in) override {
    ibv_sge sge[2];
    for (uint32_t i = 0; i < in.num_sge; ++i) sge[i] = {in.sge[i].addr, in.sge[i].length, in.sge[i].lkey};
    ibv_send_wr wr{};
    wr.wr_id = in.wr_id;
    wr.sg_list = in.num_sge > 0 ? sge : nullptr;
    wr.num_sge = static_cast<int>(in.num_sge);
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = in.signaled ? IBV_SEND_SIGNALED : 0;
    wr.imm_data = htonl(in.imm_data);
    wr.wr.rdma.remote_addr = in.remote_addr;
    wr.wr.rdma.rkey = in.rkey;
    ibv_send_wr* bad = nullptr;
    if (int err = ibv_post_send(qp_, &wr, &bad); err != 0) return sys_error("ibv_post_send (RC write)", err);
    return {};
  }

  Status post_recv(const RecvWr& in) override { return post_recv_wr(qp_, in, "ibv_post_recv (RC)"); }

 private:
  ibv_qp* qp_;
  std::string name_;
};

class Device final : public IbDevice {
 public:
  Device(std::string name, ibv_context* ctx, ibv_pd* pd, uint32_t port, uint32_t mtu)
      : name_(std::move(name)),
        ctx_(ctx),
        pd_(pd),
        port_(port),
        mtu_(mtu),
        cache_(
            [this](uint64_t addr, uint64_t len) -> Result<Registration> {
              // Local access only: the cache widens regions to whole pages, and a peer must never
              // write into memory around a send buffer. RC receive rings register on their own.
              ibv_mr* mr = ibv_reg_mr(pd_, reinterpret_cast<void*>(addr), len, kLocalAccess);
              if (mr == nullptr) return sys_error("ibv_reg_mr of " + std::to_string(len) + " bytes", errno);
              return Registration{.keys = {.lkey = mr->lkey, .rkey = mr->rkey}, .handle = mr};
            },
            [](void* mr) { ibv_dereg_mr(static_cast<ibv_mr*>(mr)); },
            [this](uint64_t iova, uint64_t len, DmabufRef buf) { return register_dmabuf(iova, len, buf); }) {}

  ~Device() override {
    cache_.invalidate(0, UINT64_MAX);
    for (ibv_mr* mr : rings_) ibv_dereg_mr(mr);
    for (ibv_ah* ah : ahs_) ibv_destroy_ah(ah);
    ibv_dealloc_pd(pd_);
    ibv_close_device(ctx_);
  }

  const std::string& name() const override { return name_; }
  uint32_t port() const override { return port_; }
  uint32_t active_mtu_bytes() const override { return mtu_; }
  bool port_active() const override {
    ibv_port_attr attr{};
    return ibv_query_port(ctx_, static_cast<uint8_t>(port_), &attr) == 0 && attr.state == IBV_PORT_ACTIVE;
  }
  MrCache& mr_cache() override { return cache_; }
  void* ah(uint32_t index) const override { return index < ahs_.size() ? ahs_[index] : nullptr; }

  Status probe_dmabuf() override {
#if MEGASCALE_HAVE_IBV_REG_DMABUF_MR
    // No dma-buf behind fd -1: the call fails, and its errno says whether the verb exists.
    errno = 0;
    ibv_mr* mr = ibv_reg_dmabuf_mr(pd_, 0, 0, 0, -1, IBV_ACCESS_LOCAL_WRITE);
    const int err = mr == nullptr ? errno : 0;
    if (mr != nullptr) ibv_dereg_mr(mr);
    return dmabuf_probe_verdict(name_, err);
#else
    return make_error(ErrorCode::kUnsupported,
                      name_ +
                          " cannot register dma-bufs: this build's libibverbs has no ibv_reg_dmabuf_mr "
                          "(rdma-core 34 or later)");
#endif
  }

  Result<Gid> query_gid(uint32_t index) const override {
    ibv_gid gid{};
    if (int err = ibv_query_gid(ctx_, static_cast<uint8_t>(port_), static_cast<int>(index), &gid); err != 0) {
      return sys_error(
          name_ + " port " + std::to_string(port_) + ": ibv_query_gid(" + std::to_string(index) + ")",
          err < 0 ? -err : err);
    }
    Gid out;
    std::memcpy(out.data(), gid.raw, 16);
    return out;
  }

  Result<std::unique_ptr<IbCq>> create_cq(uint32_t depth) override {
    ibv_comp_channel* channel = ibv_create_comp_channel(ctx_);
    if (channel == nullptr) return sys_error(name_ + ": ibv_create_comp_channel", errno);
    const int flags = fcntl(channel->fd, F_GETFL);
    if (flags < 0 || fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
      const int err = errno;
      ibv_destroy_comp_channel(channel);
      return sys_error(name_ + ": making the completion channel non-blocking", err);
    }
    ibv_cq* cq = ibv_create_cq(ctx_, static_cast<int>(depth), nullptr, channel, 0);
    if (cq == nullptr) {
      const int err = errno;
      ibv_destroy_comp_channel(channel);
      return sys_error(name_ + ": ibv_create_cq(" + std::to_string(depth) + ")", err);
    }
    return std::unique_ptr<IbCq>(new Cq(cq, channel));
  }

  Result<std::unique_ptr<IbUdQp>> create_ud_qp(IbCq& cq, const UdQpConfig& config) override {
    ibv_cq* c = static_cast<Cq&>(cq).get();
    ibv_qp_init_attr init{};
    init.send_cq = c;
    init.recv_cq = c;
    init.cap.max_send_wr = config.send_depth;
    init.cap.max_recv_wr = config.recv_depth;
    init.cap.max_send_sge = 2;
    init.cap.max_recv_sge = 1;
    init.qp_type = IBV_QPT_UD;
    ibv_qp* qp = ibv_create_qp(pd_, &init);
    if (qp == nullptr) return sys_error(name_ + ": ibv_create_qp(UD)", errno);
    auto owned = std::make_unique<UdQp>(qp, name_, port_, config);
    if (Status s = ud_to_rts(qp, name_, port_, config); !s) return s.error();
    return std::unique_ptr<IbUdQp>(std::move(owned));
  }

  Result<std::unique_ptr<IbRcQp>> create_rc_qp(IbCq& cq, uint32_t send_depth, uint32_t recv_depth) override {
    ibv_cq* c = static_cast<Cq&>(cq).get();
    ibv_qp_init_attr init{};
    init.send_cq = c;
    init.recv_cq = c;
    init.cap.max_send_wr = send_depth;
    init.cap.max_recv_wr = recv_depth;
    init.cap.max_send_sge = 2;
    init.cap.max_recv_sge = 1;
    init.qp_type = IBV_QPT_RC;
    ibv_qp* qp = ibv_create_qp(pd_, &init);
    if (qp == nullptr) return sys_error(name_ + ": ibv_create_qp(RC)", errno);
    auto owned = std::make_unique<RcQp>(qp, name_);
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = static_cast<uint8_t>(port_);
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (int err =
            ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
      return sys_error(name_ + ": RC QP to INIT", err);
    }
    return std::unique_ptr<IbRcQp>(std::move(owned));
  }

  // Local access only, as host buffers (the cache's first callback).
  Result<Registration> register_dmabuf(uint64_t iova, uint64_t len, DmabufRef buf) {
#if MEGASCALE_HAVE_IBV_REG_DMABUF_MR
    ibv_mr* mr = ibv_reg_dmabuf_mr(pd_, buf.offset, len, iova, buf.fd, IBV_ACCESS_LOCAL_WRITE);
    if (mr == nullptr) {
      const int err = errno;  // before the message's allocations
      return sys_error(name_ + ": ibv_reg_dmabuf_mr of " + std::to_string(len) + " bytes (fd " +
                           std::to_string(buf.fd) + ", offset " + std::to_string(buf.offset) + ")",
                       err);
    }
    return Registration{.keys = {.lkey = mr->lkey, .rkey = mr->rkey}, .handle = mr};
#else
    (void)iova;
    (void)len;
    (void)buf;
    return make_error(ErrorCode::kUnsupported,
                      name_ + ": this build's libibverbs has no ibv_reg_dmabuf_mr (rdma-core 34 or later)");
#endif
  }

  Result<MrKeys> register_ring(void* addr, uint64_t len) override {
    ibv_mr* mr = ibv_reg_mr(pd_, addr, len, kRingAccess);
    if (mr == nullptr)
      return sys_error(name_ + ": ibv_reg_mr of a " + std::to_string(len) + "-byte ring", errno);
    rings_.push_back(mr);
    return MrKeys{.lkey = mr->lkey, .rkey = mr->rkey};
  }

  Result<uint32_t> create_ah(const AhSpec& spec) override {
    ibv_ah_attr attr{};
    fill_ah(attr, spec);
    ibv_ah* ah = ibv_create_ah(pd_, &attr);
    if (ah == nullptr) return sys_error(name_ + ": ibv_create_ah to " + gid_to_string(spec.dgid), errno);
    ahs_.push_back(ah);
    return static_cast<uint32_t>(ahs_.size() - 1);
  }

 private:
  std::string name_;
  ibv_context* ctx_;
  ibv_pd* pd_;
  uint32_t port_;
  uint32_t mtu_;
  std::vector<ibv_ah*> ahs_;
  std::vector<ibv_mr*> rings_;
  MrCache cache_;
};

}  // namespace

std::vector<std::string> list_devices() {
  std::vector<std::string> out;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return out;
  for (int i = 0; i < n; ++i) out.emplace_back(ibv_get_device_name(list[i]));
  ibv_free_device_list(list);
  return out;
}

Result<std::unique_ptr<IbDevice>> IbDevice::open(const std::string& name, uint32_t port) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n == 0) {
    if (list != nullptr) ibv_free_device_list(list);
    return make_error(ErrorCode::kUnsupported, "no RDMA device (libibverbs found none)");
  }
  ibv_device* chosen = nullptr;
  for (int i = 0; i < n && chosen == nullptr; ++i) {
    if (name.empty() || name == ibv_get_device_name(list[i])) chosen = list[i];
  }
  if (chosen == nullptr) {
    ibv_free_device_list(list);
    return make_error("no RDMA device named " + name);
  }
  const std::string dev_name = ibv_get_device_name(chosen);
  ibv_context* ctx = ibv_open_device(chosen);
  const int open_errno = errno;
  ibv_free_device_list(list);
  if (ctx == nullptr) return sys_error(dev_name + ": ibv_open_device", open_errno);
  ibv_port_attr attr{};
  if (int err = ibv_query_port(ctx, static_cast<uint8_t>(port), &attr); err != 0) {
    ibv_close_device(ctx);
    return sys_error(dev_name + " port " + std::to_string(port) + ": ibv_query_port", err);
  }
  if (attr.state != IBV_PORT_ACTIVE) {
    ibv_close_device(ctx);
    return make_error(ErrorCode::kSystem, dev_name + " port " + std::to_string(port) + ": state " +
                                              ibv_port_state_str(attr.state) + ", not ACTIVE");
  }
  ibv_pd* pd = ibv_alloc_pd(ctx);
  if (pd == nullptr) {
    const int err = errno;
    ibv_close_device(ctx);
    return sys_error(dev_name + ": ibv_alloc_pd", err);
  }
  const uint32_t mtu = 128u << static_cast<uint32_t>(attr.active_mtu);
  return std::unique_ptr<IbDevice>(new Device(dev_name, ctx, pd, port, mtu));
}

}  // namespace megascale::wire::verbs
