// The plugin's choice of wire (MEGASCALE_WIRE, wire_choice.h) over sysfs-like device listings, the verbs
// devices built from it (properties, ptrSupport with and without MEGASCALE_GDR_COPY), the listen
// handle's wire addresses (handle.h: UDP and verbs forms, damage refused), and init on this host with
// an explicit verbs wire and no RDMA device: a failed init whose WARN says why.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "config.h"
#include "handle.h"
#include "megascale/nccl/abi/net_v11.h"
#include "stats_writer.h"
#include "warn_capture.h"
#if MEGASCALE_NCCL_VERBS
#include "megascale/wire/verbs/port.h"
#include "megascale/wire/verbs/ptr_support.h"
#include "wire_choice.h"
#endif

namespace megascale::nccl {
namespace {

TEST(PluginWire, ParsesTheFourKindsAndRefusesOthersNamingThem) {
  EXPECT_EQ(*parse_wire_kind(nullptr), WireKind::kAuto);
  EXPECT_EQ(*parse_wire_kind(""), WireKind::kAuto);
  EXPECT_EQ(*parse_wire_kind("auto"), WireKind::kAuto);
  EXPECT_EQ(*parse_wire_kind("udp"), WireKind::kUdp);
  EXPECT_EQ(*parse_wire_kind("verbs-ud"), WireKind::kVerbsUd);
  EXPECT_EQ(*parse_wire_kind("verbs-rc"), WireKind::kVerbsRc);
  for (const char* bad : {"verbs", "UDP", "verbs-ud ", "rc"}) {
    auto k = parse_wire_kind(bad);
    ASSERT_FALSE(k) << bad;
    EXPECT_EQ(k.error().message,
              "MEGASCALE_WIRE=" + std::string(bad) + ": must be auto, udp, verbs-ud or verbs-rc");
  }
}

TEST(PluginWire, TheKnobIsReadThroughTheSchemaAndEchoed) {
  const auto env = [](const char* value) {
    return [value](const char* name) -> const char* {
      return std::string(name) == "MEGASCALE_WIRE" ? value : nullptr;
    };
  };
  auto c = load_plugin_config(env("verbs-rc"));
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->wire, WireKind::kVerbsRc);
  bool echoed = false;
  for (const Setting& s : c->settings) echoed |= echo_line(s) == "MEGASCALE_WIRE=verbs-rc (environment)";
  EXPECT_TRUE(echoed);
  auto d = load_plugin_config(env(nullptr));
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->wire, WireKind::kAuto);
  auto bad = load_plugin_config(env("ib"));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("MEGASCALE_WIRE=ib: must be auto, udp, verbs-ud or verbs-rc"),
            std::string::npos);
}

#if MEGASCALE_NCCL_VERBS
namespace verbs = wire::verbs;

verbs::Gid v4_gid(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return verbs::Gid{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
}

// A RoCE device with one port: ACTIVE or not, Ethernet or InfiniBand, with an IPv4 RoCE v2 GID at
// index 1 (and a link-local v2 GID at 0) or none.
verbs::DeviceListing device(const std::string& name, bool active, const std::string& link_layer, bool gids,
                            const std::string& pci = "") {
  verbs::DeviceListing l;
  l.info.name = name;
  verbs::PortInfo p;
  p.port = 1;
  p.state = active ? "4: ACTIVE" : "1: DOWN";
  p.active = active;
  p.link_layer = link_layer;
  p.rate_gbps = 100;
  p.active_mtu_bytes = 4096;
  if (gids) {
    p.gids.push_back({0,
                      verbs::Gid{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56},
                      verbs::GidType::kRoceV2, "eth0"});
    p.gids.push_back({1, v4_gid(10, 0, 2, 15), verbs::GidType::kRoceV2, "eth0"});
  }
  l.info.ports.push_back(p);
  l.ports.push_back({"5: LinkUp", "100 Gb/sec (4X EDR)", "eth0", {}});
  l.pci_path = pci;
  return l;
}

TEST(PluginWire, AutoTakesVerbsUdWhenAPortIsUsable) {
  auto d = decide_wire(WireKind::kAuto, {device("rxe0", true, "Ethernet", true)}, verbs::GidSelector{});
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->kind, WireKind::kVerbsUd);
  ASSERT_EQ(d->ports.size(), 1u);
  EXPECT_EQ(d->ports[0].device, "rxe0");
  EXPECT_EQ(d->ports[0].port, 1u);
  EXPECT_EQ(d->ports[0].gid.index, 1u) << "the global IPv4 RoCE v2 GID before the link-local one";
  EXPECT_EQ(d->ports[0].rate_gbps, 100);
  EXPECT_EQ(d->ports[0].netdev, "eth0");
  EXPECT_NE(d->reason.find("verbs-ud (MEGASCALE_WIRE=auto: 1 usable RDMA port(s)"), std::string::npos)
      << d->reason;
}

TEST(PluginWire, AutoFallsBackToUdpSayingWhy) {
  auto none = decide_wire(WireKind::kAuto, {}, verbs::GidSelector{}, "/sys/class/infiniband");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->kind, WireKind::kUdp);
  EXPECT_TRUE(none->ports.empty());
  EXPECT_EQ(none->reason, "udp (MEGASCALE_WIRE=auto: no RDMA device under /sys/class/infiniband)");

  auto unusable =
      decide_wire(WireKind::kAuto,
                  {device("mlx5_0", false, "Ethernet", true), device("mlx5_1", true, "InfiniBand", true),
                   device("rxe0", true, "Ethernet", false)},
                  verbs::GidSelector{});
  ASSERT_TRUE(unusable);
  EXPECT_EQ(unusable->kind, WireKind::kUdp);
  EXPECT_NE(unusable->reason.find("mlx5_0 port 1: not ACTIVE (1: DOWN)"), std::string::npos)
      << unusable->reason;
  EXPECT_NE(unusable->reason.find("mlx5_1 port 1: link layer InfiniBand, not Ethernet (RoCE)"),
            std::string::npos)
      << unusable->reason;
  EXPECT_NE(unusable->reason.find("rxe0 port 1: "), std::string::npos) << unusable->reason;
}

TEST(PluginWire, AGidSelectorThatMatchesNothingLeavesThePortOut) {
  auto sel = verbs::with_addr_range(verbs::GidSelector{}, "192.168.0.0/16");
  ASSERT_TRUE(sel) << sel.error().message;
  auto d = decide_wire(WireKind::kAuto, {device("rxe0", true, "Ethernet", true)}, *sel);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->kind, WireKind::kUdp);
  auto in_range = verbs::with_addr_range(verbs::GidSelector{}, "10.0.0.0/8");
  ASSERT_TRUE(in_range);
  auto e = decide_wire(WireKind::kAuto, {device("rxe0", true, "Ethernet", true)}, *in_range);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, WireKind::kVerbsUd);
}

TEST(PluginWire, AnExplicitVerbsWireWithoutAUsablePortIsAnError) {
  auto d = decide_wire(WireKind::kVerbsUd, {}, verbs::GidSelector{}, "/sys/class/infiniband");
  ASSERT_FALSE(d);
  EXPECT_EQ(
      d.error().message,
      "MEGASCALE_WIRE=verbs-ud: no usable RDMA port (ACTIVE, RoCE, with a GID matching MEGASCALE_IB_*): "
      "no RDMA device under /sys/class/infiniband");
  auto rc =
      decide_wire(WireKind::kVerbsRc, {device("mlx5_0", false, "Ethernet", true)}, verbs::GidSelector{});
  ASSERT_FALSE(rc);
  EXPECT_NE(rc.error().message.find("MEGASCALE_WIRE=verbs-rc: no usable RDMA port"), std::string::npos);
  EXPECT_NE(rc.error().message.find("mlx5_0 port 1: not ACTIVE (1: DOWN)"), std::string::npos);
}

TEST(PluginWire, ExplicitKindsAreKeptAndUdpNeedsNoListing) {
  const std::vector<verbs::DeviceListing> two = {
      device("mlx5_0", true, "Ethernet", true, "/sys/devices/pci0000:00/0000:3b:00.0"),
      device("mlx5_1", true, "Ethernet", true)};
  auto rc = decide_wire(WireKind::kVerbsRc, two, verbs::GidSelector{});
  ASSERT_TRUE(rc);
  EXPECT_EQ(rc->kind, WireKind::kVerbsRc);
  ASSERT_EQ(rc->ports.size(), 2u);
  EXPECT_EQ(rc->ports[0].pci_path, "/sys/devices/pci0000:00/0000:3b:00.0");
  EXPECT_EQ(rc->ports[1].device, "mlx5_1");
  auto udp = decide_wire(WireKind::kUdp, two, verbs::GidSelector{});
  ASSERT_TRUE(udp);
  EXPECT_EQ(udp->kind, WireKind::kUdp);
  EXPECT_TRUE(udp->ports.empty());
}

PluginConfig config_with_gdr_copy(const char* value) {
  auto c = load_plugin_config([value](const char* name) -> const char* {
    return std::string(name) == "MEGASCALE_GDR_COPY" ? value : nullptr;
  });
  EXPECT_TRUE(c) << c.error().message;
  return c ? *c : PluginConfig{};
}

// Two ports: rxe0 (its provider refuses dma-buf registration) and mlx5_0 (takes it), as the probe says.
std::vector<Device> two_verbs_devices(const PluginConfig& config, std::vector<std::string>* probed) {
  auto d = decide_wire(WireKind::kVerbsUd,
                       {device("mlx5_0", true, "Ethernet", true, "/sys/devices/pci0000:00/0000:3b:00.0"),
                        device("rxe0", true, "Ethernet", true)},
                       verbs::GidSelector{});
  EXPECT_TRUE(d) << d.error().message;
  if (!d) return {};
  return verbs_devices(*d, config, [probed](const VerbsPortChoice& p) -> Status {
    probed->push_back(p.device);
    if (p.device == "rxe0") return verbs::dmabuf_probe_verdict("rxe0", EOPNOTSUPP);
    return {};
  });
}

TEST(PluginWire, VerbsDevicesAreThePortsWithTheirProperties) {
  std::vector<std::string> probed;
  const std::vector<Device> devs = two_verbs_devices(config_with_gdr_copy(nullptr), &probed);
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(probed, (std::vector<std::string>{"mlx5_0", "rxe0"})) << "each port probed once";
  EXPECT_EQ(devs[0].iface.name, "mlx5_0");
  EXPECT_EQ(devs[0].wire, WireKind::kVerbsUd);
  EXPECT_EQ(devs[0].rdma_port, 1u);
  EXPECT_EQ(devs[0].gid_index, 1u);
  EXPECT_EQ(devs[0].iface.address, "::ffff:10.0.2.15");
  EXPECT_EQ(devs[0].iface.speed_mbps, 100000);
  EXPECT_EQ(devs[0].iface.mtu_bytes, 4096);
  EXPECT_EQ(devs[0].iface.pci_path, "/sys/devices/pci0000:00/0000:3b:00.0");
  EXPECT_EQ(devs[0].segment_bytes, 4096u);
  EXPECT_EQ(devs[1].iface.name, "rxe0");
  EXPECT_EQ(devs[1].iface.pci_path, "");
}

// Without MEGASCALE_GDR_COPY a verbs device takes host memory only, and says why: no copier, and no
// direct path for the NIC whatever its dma-buf probe found.
TEST(PluginWire, VerbsDevicesTakeHostMemoryOnlyWithoutGdrCopy) {
  std::vector<std::string> probed;
  for (const Device& d : two_verbs_devices(config_with_gdr_copy("0"), &probed)) {
    EXPECT_EQ(d.ptr_support, abi::kPtrHost) << d.iface.name;
    EXPECT_EQ(d.ptr_reason.rfind("HOST only (NCCL_PTR_HOST): GPU buffers need MEGASCALE_GDR_COPY=1", 0), 0u)
        << d.ptr_reason;
    EXPECT_NE(d.ptr_reason.find("needs a data path where the NIC writes into the posted buffers, which this "
                                "wire does not have"),
              std::string::npos)
        << d.ptr_reason;
  }
  const std::vector<Device> devs = two_verbs_devices(config_with_gdr_copy(nullptr), &probed);
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_NE(devs[0].ptr_reason.find("dma-buf: the NIC could register dma-bufs"), std::string::npos)
      << devs[0].ptr_reason;
  EXPECT_NE(devs[1].ptr_reason.find("dma-buf: rxe0 cannot register dma-bufs (ibv_reg_dmabuf_mr: its provider "
                                    "does not support it)"),
            std::string::npos)
      << devs[1].ptr_reason;
}

// With MEGASCALE_GDR_COPY (1 or emulate) verbs devices take GPU buffers through the plugin's host
// shadows, as UDP devices do; never NCCL_PTR_DMABUF (the NIC never registers GPU memory here).
TEST(PluginWire, VerbsDevicesTakeGpuBuffersThroughHostShadowsWithGdrCopy) {
  for (const char* mode : {"1", "emulate"}) {
    std::vector<std::string> probed;
    const std::vector<Device> devs = two_verbs_devices(config_with_gdr_copy(mode), &probed);
    ASSERT_EQ(devs.size(), 2u);
    for (const Device& d : devs) {
      EXPECT_EQ(d.ptr_support, abi::kPtrHost | abi::kPtrCuda) << mode << " " << d.iface.name;
      EXPECT_EQ(
          d.ptr_reason.rfind("GPU buffers through host shadows (MEGASCALE_GDR_COPY=" + std::string(mode) +
                                 "; NCCL_PTR_HOST|NCCL_PTR_CUDA, the wire sees host memory only); ",
                             0),
          0u)
          << d.ptr_reason;
    }
    EXPECT_NE(devs[1].ptr_reason.find("rxe0 cannot register dma-bufs"), std::string::npos)
        << devs[1].ptr_reason;
  }
}

// The handle's verbs form carries what the wire's own address text says, for every stripe.
TEST(PluginWire, TheVerbsHandleRoundTripsThePortsAddresses) {
  ListenHandle h{};
  h.magic = kHandleMagic;
  h.version = kHandleVersion;
  h.wire = static_cast<uint8_t>(HandleWire::kVerbsUd);
  h.stripes = 3;
  h.stripe_bytes = 65536;
  h.listen_id = 42;
  std::vector<std::string> texts;
  for (uint32_t i = 0; i < 3; ++i) {
    verbs::PortAddress a{v4_gid(10, 0, 2, 15), 0x11u + i * 0x1000u};
    texts.push_back(verbs::format_port_address(a));
    ASSERT_TRUE(put_verbs_address(h, i, texts.back()));
  }
  seal_handle(h);
  char wire_bytes[sizeof h];
  std::memcpy(wire_bytes, &h, sizeof h);  // through NCCL's bootstrap
  ListenHandle got;
  std::memcpy(&got, wire_bytes, sizeof got);
  ASSERT_TRUE(check_listen_handle(got));
  for (uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(stripe_address(got, i), texts[i]);
    auto parsed = verbs::parse_port_address(stripe_address(got, i));
    ASSERT_TRUE(parsed) << parsed.error().message;
    EXPECT_EQ(parsed->qpn, 0x11u + i * 0x1000u);
  }
  EXPECT_EQ(texts[0], "[::ffff:10.0.2.15]/0x000011");
  // connect() writes its token in place: the check does not cover it.
  got.connect_token = 7;
  EXPECT_TRUE(check_listen_handle(got));
}

TEST(PluginWire, AVerbsAddressThatIsNotOneIsRefusedNamingIt) {
  ListenHandle h{};
  for (const char* bad : {"10.0.0.1:5000", "[::ffff:10.0.0.1]/0x0", "[::ffff:10.0.0.1]/0x1000000",
                          "[zz]/0x11", "[::ffff:10.0.0.1]/11g"}) {
    Status s = put_verbs_address(h, 0, bad);
    ASSERT_FALSE(s) << bad;
    EXPECT_NE(s.error().message.find(std::string("verbs port address \"") + bad + "\""), std::string::npos)
        << s.error().message;
  }
  ASSERT_TRUE(put_verbs_address(h, 0, "[::ffff:10.0.0.1]/0x11"));
  Status other = put_verbs_address(h, 1, "[::ffff:10.0.0.2]/0x12");
  ASSERT_FALSE(other);
  EXPECT_NE(other.error().message.find("its GID differs from stripe 0's"), std::string::npos);
}
#endif  // MEGASCALE_NCCL_VERBS

ListenHandle udp_handle() {
  ListenHandle h{};
  h.magic = kHandleMagic;
  h.version = kHandleVersion;
  h.wire = static_cast<uint8_t>(HandleWire::kUdp);
  h.family = 4;
  h.port = 5000;
  h.stripes = 2;
  h.stripe_ports[0] = 5001;
  h.stripe_bytes = 65536;
  const uint8_t addr[4] = {10, 0, 0, 1};
  std::memcpy(h.addr, addr, 4);
  seal_handle(h);
  return h;
}

TEST(PluginWire, TheUdpHandleGivesHostAndPortPerStripe) {
  ListenHandle h = udp_handle();
  ASSERT_TRUE(check_listen_handle(h));
  EXPECT_EQ(stripe_address(h, 0), "10.0.0.1:5000");
  EXPECT_EQ(stripe_address(h, 1), "10.0.0.1:5001");
  h.family = 6;
  std::memset(h.addr, 0, 16);
  h.addr[15] = 1;
  EXPECT_EQ(stripe_address(h, 0), "[::1]:5000");
}

TEST(PluginWire, ADamagedHandleIsRefusedSayingWhat) {
  ListenHandle flipped = udp_handle();
  flipped.addr[2] ^= 0x40;  // a bit flipped on the way: would connect to another host
  Status s = check_listen_handle(flipped);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("the handle is damaged: its check is"), std::string::npos)
      << s.error().message;

  ListenHandle kind = udp_handle();
  kind.wire = 9;
  seal_handle(kind);
  s = check_listen_handle(kind);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("wire kind 9 (0 udp, 1 verbs-ud, 2 verbs-rc)"), std::string::npos);

  ListenHandle qpn = udp_handle();
  qpn.wire = static_cast<uint8_t>(HandleWire::kVerbsRc);
  qpn.stripe_qpns[0] = 0x11;  // stripe 1 has none
  seal_handle(qpn);
  s = check_listen_handle(qpn);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("stripe 1 has QP number 0x0"), std::string::npos) << s.error().message;

  ListenHandle port = udp_handle();
  port.stripe_ports[0] = 0;
  seal_handle(port);
  s = check_listen_handle(port);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("stripe 1 has UDP port 0"), std::string::npos);

  ListenHandle old = udp_handle();
  old.version = 2;
  s = check_listen_handle(old);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().message.find("not a MegaScale listen handle of version 3"), std::string::npos);
}

// A verbs wire's port counters (UdpWireStats::port) in the .prom, under the wire metrics' prefix.
TEST(PluginWire, PortCountersGoToThePromUnderTheWirePrefix) {
  EXPECT_EQ(port_metrics_prom({}), "");
  const std::string prom =
      port_metrics_prom({{"{ifname=\"rxe0\",wire=\"0\",dscp=\"0\"}", {{"send_cqes", 5}, {"rnr.retries", 2}}},
                         {"{ifname=\"rxe0\",wire=\"1\",dscp=\"0\"}", {{"send_cqes", 7}}}});
  EXPECT_NE(prom.find("# TYPE megascale_nccl_wire_port_send_cqes_total counter\n"), std::string::npos)
      << prom;
  EXPECT_NE(prom.find("megascale_nccl_wire_port_send_cqes_total{ifname=\"rxe0\",wire=\"0\",dscp=\"0\"} 5\n"),
            std::string::npos)
      << prom;
  EXPECT_NE(prom.find("megascale_nccl_wire_port_send_cqes_total{ifname=\"rxe0\",wire=\"1\",dscp=\"0\"} 7\n"),
            std::string::npos)
      << prom;
  EXPECT_NE(
      prom.find("megascale_nccl_wire_port_rnr_retries_total{ifname=\"rxe0\",wire=\"0\",dscp=\"0\"} 2\n"),
      std::string::npos)
      << prom;
  EXPECT_LT(prom.find("rnr_retries"), prom.find("send_cqes")) << "sorted by name";
}

// Init with MEGASCALE_WIRE=verbs-ud where no RDMA device exists (this host; CI's): NCCL gets an error
// and a WARN naming the variable and why. In a child process: the plugin reads its environment once.
TEST(PluginWire, AnExplicitVerbsWireWithoutADeviceFailsInitClearly) {
  if (access("/sys/class/infiniband", F_OK) == 0) {
    GTEST_SKIP() << "this host has RDMA devices (/sys/class/infiniband): the no-device init is not testable";
  }
  EXPECT_EXIT(
      {
        ::setenv("MEGASCALE_WIRE", "verbs-ud", 1);
        ::setenv("MEGASCALE_IFNAME", "lo", 1);
        void* lib = dlopen(MEGASCALE_NCCL_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
        if (lib == nullptr) std::_Exit(3);
        auto* net = static_cast<abi::NetV11*>(dlsym(lib, "ncclNetPlugin_v11"));
        void* ctx = nullptr;
        abi::NetCommConfig cfg{abi::kTrafficClassUndef};
        const abi::NetResult r = net->init(&ctx, 0x1234, &cfg, test::warn_logger, nullptr);
        for (const std::string& w : test::take_warns()) std::fprintf(stderr, "WARN %s\n", w.c_str());
        std::_Exit(r == abi::kNetSuccess ? 1 : 0);
      },
      ::testing::ExitedWithCode(0),
      "WARN .*MEGASCALE_WIRE=verbs-ud: (no usable RDMA port \\(ACTIVE, RoCE, with a GID matching "
      "MEGASCALE_IB_\\*\\): no RDMA device under /sys/class/infiniband|this plugin was built without "
      "libibverbs)");
}

}  // namespace
}  // namespace megascale::nccl
