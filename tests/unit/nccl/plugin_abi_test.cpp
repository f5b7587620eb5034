// ABI v12 (NCCL 2.30) as the plugin's native table and v8..v11 as adapters over it: the v12 properties
// in each older layout (every shared field kept, railId and planeId dropped, a vProps too large for
// the older layout refused); and the built plugin, loaded with dlopen as NCCL loads it, exporting every
// table from v8 to v12, its v12 device reporting an unknown rail and plane (NCCL_NET_ID_UNDEF) in
// v12's layout and the same device through every older table.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "adapters.h"
#include "megascale/nccl/abi/net_v10.h"
#include "megascale/nccl/abi/net_v11.h"
#include "megascale/nccl/abi/net_v12.h"
#include "megascale/nccl/abi/net_v8.h"
#include "megascale/nccl/abi/net_v9.h"
#include "warn_capture.h"

namespace megascale::nccl {
namespace {

using namespace abi;

char g_name[] = "mlx5_3";
char g_pci[] = "/sys/devices/pci0000:00/0000:00:01.0";

// A v12 device whose every field holds a value no default would give.
NetPropertiesV12 sample_v12() {
  NetPropertiesV12 p;
  std::memset(&p, 0x5a, sizeof p);
  p.name = g_name;
  p.pciPath = g_pci;
  p.guid = 0x1122334455667788;
  p.ptrSupport = kPtrHost | kPtrCuda;
  p.regIsGlobal = 1;
  p.forceFlush = 1;
  p.speed = 400000;
  p.port = 2;
  p.latency = 1.5f;
  p.maxComms = 777;
  p.maxRecvs = 8;
  p.netDeviceType = kNetDeviceHost;
  p.netDeviceVersion = kNetDeviceInvalidVersion;
  p.vProps.ndevs = 2;
  p.vProps.devs[0] = 3;
  p.vProps.devs[1] = 5;
  p.maxP2pBytes = size_t{1} << 33;
  p.maxCollBytes = size_t{1} << 34;
  p.maxMultiRequestSize = 4;
  p.railId = 3;
  p.planeId = 1;
  return p;
}

template <class Props>
void expect_base_fields(const Props& out, const NetPropertiesV12& in) {
  EXPECT_EQ(out.name, in.name);
  EXPECT_EQ(out.pciPath, in.pciPath);
  EXPECT_EQ(out.guid, in.guid);
  EXPECT_EQ(out.ptrSupport, in.ptrSupport);
  EXPECT_EQ(out.regIsGlobal, in.regIsGlobal);
  EXPECT_EQ(out.speed, in.speed);
  EXPECT_EQ(out.port, in.port);
  EXPECT_EQ(out.latency, in.latency);
  EXPECT_EQ(out.maxComms, in.maxComms);
  EXPECT_EQ(out.maxRecvs, in.maxRecvs);
  EXPECT_EQ(out.netDeviceType, in.netDeviceType);
  EXPECT_EQ(out.netDeviceVersion, in.netDeviceVersion);
}

template <class Props>
void expect_v9_fields(const Props& out, const NetPropertiesV12& in) {
  expect_base_fields(out, in);
  EXPECT_EQ(out.forceFlush, in.forceFlush);
  EXPECT_EQ(out.maxP2pBytes, in.maxP2pBytes);
  EXPECT_EQ(out.maxCollBytes, in.maxCollBytes);
  ASSERT_EQ(out.vProps.ndevs, in.vProps.ndevs);
  for (int i = 0; i < in.vProps.ndevs; ++i) EXPECT_EQ(out.vProps.devs[i], in.vProps.devs[i]) << i;
  for (int i = in.vProps.ndevs; i < kMaxDevsPerNic; ++i) EXPECT_EQ(out.vProps.devs[i], 0) << i;
}

// ---- The adapters' conversion of the v12 properties ----

TEST(AbiAdapters, V11KeepsEveryFieldItHasAndDropsRailAndPlane) {
  const NetPropertiesV12 in = sample_v12();
  NetPropertiesV11 out;
  std::memset(&out, 0xee, sizeof out);
  ASSERT_TRUE(copy_props(in, &out));
  expect_v9_fields(out, in);
  EXPECT_EQ(out.maxMultiRequestSize, 4);
}

TEST(AbiAdapters, V9AndV10KeepTheirFields) {
  const NetPropertiesV12 in = sample_v12();
  NetPropertiesV10 out;  // the v9 layout
  std::memset(&out, 0xee, sizeof out);
  ASSERT_TRUE(copy_props(in, &out));
  expect_v9_fields(out, in);
}

TEST(AbiAdapters, V8KeepsItsFields) {
  const NetPropertiesV12 in = sample_v12();
  NetPropertiesV8 out;
  std::memset(&out, 0xee, sizeof out);
  ASSERT_TRUE(copy_props(in, &out));
  expect_base_fields(out, in);
}

// v12 lets a virtual device fuse 8 NICs, v9..v11 only 4: a larger one has no faithful older form.
TEST(AbiAdapters, AVirtualDeviceOfMoreThanFourMembersDoesNotFitTheOlderLayouts) {
  NetPropertiesV12 in = sample_v12();
  in.vProps.ndevs = kMaxDevsPerNic;
  for (int i = 0; i < kMaxDevsPerNic; ++i) in.vProps.devs[i] = 10 + i;
  NetPropertiesV11 out{};
  ASSERT_TRUE(copy_props(in, &out));
  EXPECT_EQ(out.vProps.ndevs, kMaxDevsPerNic);
  EXPECT_EQ(out.vProps.devs[kMaxDevsPerNic - 1], 10 + kMaxDevsPerNic - 1);

  in.vProps.ndevs = kMaxDevsPerNic + 1;
  in.vProps.devs[kMaxDevsPerNic] = 99;
  EXPECT_FALSE(copy_props(in, &out));
  NetPropertiesV9 out9{};
  EXPECT_FALSE(copy_props(in, &out9));
  in.vProps.ndevs = -1;
  EXPECT_FALSE(copy_props(in, &out));
}

// ---- The built plugin, as NCCL loads it ----

class PluginAbi : public ::testing::Test {
 protected:
  void SetUp() override {
    ::setenv("MEGASCALE_IFNAME", "lo", /*overwrite=*/0);
    lib_ = dlopen(MEGASCALE_NCCL_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib_, nullptr) << dlerror();
  }
  template <class Table>
  Table* table(int version) {
    return static_cast<Table*>(dlsym(lib_, ("ncclNetPlugin_v" + std::to_string(version)).c_str()));
  }
  void* lib_ = nullptr;
};

TEST_F(PluginAbi, ExportsEveryTableFromV8ToV12UnderTheOneName) {
  ASSERT_NE(table<NetV12>(12), nullptr);
  ASSERT_NE(table<NetV11>(11), nullptr);
  ASSERT_NE(table<NetV10>(10), nullptr);
  ASSERT_NE(table<NetV9>(9), nullptr);
  ASSERT_NE(table<NetV8>(8), nullptr);
  EXPECT_STREQ(table<NetV12>(12)->name, "MegaScale");
  EXPECT_STREQ(table<NetV11>(11)->name, "MegaScale");
  EXPECT_STREQ(table<NetV10>(10)->name, "MegaScale");
  EXPECT_STREQ(table<NetV9>(9)->name, "MegaScale");
  EXPECT_STREQ(table<NetV8>(8)->name, "MegaScale");
  EXPECT_EQ(table<NetV8>(7), nullptr);   // NCCL 2.19 and older: not supported
  EXPECT_EQ(table<NetV8>(13), nullptr);  // no version beyond the newest known
}

TEST_F(PluginAbi, V12ReportsAnUnknownRailAndPlaneAndOlderTablesTheSameDevice) {
  NetV12* v12 = table<NetV12>(12);
  ASSERT_NE(v12, nullptr);
  void* ctx = nullptr;
  NetCommConfig cfg{kTrafficClassUndef};
  ASSERT_EQ(v12->init(&ctx, 0xab12, &cfg, test::warn_logger, nullptr), kNetSuccess);
  ASSERT_NE(ctx, nullptr);
  int ndev = 0;
  ASSERT_EQ(v12->devices(&ndev), kNetSuccess);
  ASSERT_GE(ndev, 1);

  // Filled from a poisoned buffer: a plugin writing v11's layout would leave v12's tail as 0x5a bytes.
  NetPropertiesV12 p;
  std::memset(&p, 0x5a, sizeof p);
  ASSERT_EQ(v12->getProperties(0, &p), kNetSuccess);
  ASSERT_NE(p.name, nullptr);
  EXPECT_EQ(p.vProps.ndevs, 1);
  EXPECT_EQ(p.vProps.devs[0], 0);
  EXPECT_EQ(p.maxP2pBytes, kMaxNetSizeBytes);
  EXPECT_EQ(p.maxCollBytes, kMaxNetSizeBytes);
  EXPECT_EQ(p.maxMultiRequestSize, 1);
  // The UDP wire's interfaces have no rail map behind them: NCCL_NET_ID_UNDEF, as NCCL's own adapters
  // report for plugins older than v12.
  EXPECT_EQ(p.railId, kNetIdUndef);
  EXPECT_EQ(p.planeId, kNetIdUndef);

  NetPropertiesV11 p11;
  std::memset(&p11, 0x5a, sizeof p11);
  ASSERT_EQ(table<NetV11>(11)->getProperties(0, &p11), kNetSuccess);
  expect_v9_fields(p11, p);
  EXPECT_EQ(p11.maxMultiRequestSize, p.maxMultiRequestSize);
  NetPropertiesV10 p10;
  std::memset(&p10, 0x5a, sizeof p10);
  ASSERT_EQ(table<NetV10>(10)->getProperties(0, &p10), kNetSuccess);
  expect_v9_fields(p10, p);
  NetPropertiesV9 p9;
  std::memset(&p9, 0x5a, sizeof p9);
  ASSERT_EQ(table<NetV9>(9)->getProperties(0, &p9), kNetSuccess);
  expect_v9_fields(p9, p);
  NetPropertiesV8 p8;
  std::memset(&p8, 0x5a, sizeof p8);
  ASSERT_EQ(table<NetV8>(8)->getProperties(0, &p8), kNetSuccess);
  expect_base_fields(p8, p);

  EXPECT_EQ(v12->getProperties(ndev, &p), kNetInvalidArgument);
  EXPECT_TRUE(test::warned("bad device"));
  EXPECT_EQ(v12->finalize(ctx), kNetSuccess);
  EXPECT_TRUE(test::take_warns().empty());
}

}  // namespace
}  // namespace megascale::nccl
