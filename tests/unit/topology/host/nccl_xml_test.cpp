// NCCL topology XML: what is written, the round trip write -> read, reading NCCL-style files, and the
// errors for files that are not NCCL's.
#include "megascale/topology/nccl_xml.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "fixtures.h"

namespace megascale::topo::host {
namespace {

using testing::fixture;
using testing::nccl_fixture;
using testing::nccl_fixture_dir;

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::vector<std::vector<PathType>> paths(const HostTopology& host) {
  std::vector<std::vector<PathType>> out;
  for (const Gpu& g : host.gpus) {
    out.emplace_back();
    for (const Nic& n : host.nics) out.back().push_back(path_between(host, g.pci, n.pci));
  }
  return out;
}

// What `host` writes reads back into a host that writes the same text (the property fuzz_nccl_xml checks).
void expect_written_reads_back_the_same(const HostTopology& host) {
  const std::string text = nccl_topo_xml(host);
  auto back = parse_nccl_topo_xml(text, "written");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(nccl_topo_xml(*back), text);
}

void expect_same_devices(const HostTopology& a, const HostTopology& b) {
  ASSERT_EQ(a.gpus.size(), b.gpus.size());
  for (size_t i = 0; i < a.gpus.size(); ++i) {
    EXPECT_EQ(a.gpus[i].pci.bus_id, b.gpus[i].pci.bus_id);
    EXPECT_EQ(a.gpus[i].cuda_index, b.gpus[i].cuda_index);
    EXPECT_EQ(a.gpus[i].pci.numa_node, b.gpus[i].pci.numa_node);
    EXPECT_EQ(a.gpus[i].pci.device_id, b.gpus[i].pci.device_id);
    EXPECT_EQ(a.gpus[i].pci.switches, b.gpus[i].pci.switches);
    EXPECT_EQ(a.gpus[i].pci.link_gts, b.gpus[i].pci.link_gts);
    EXPECT_EQ(a.gpus[i].pci.link_width, b.gpus[i].pci.link_width);
  }
  ASSERT_EQ(a.nics.size(), b.nics.size());
  for (size_t i = 0; i < a.nics.size(); ++i) {
    EXPECT_EQ(a.nics[i].name(), b.nics[i].name());
    EXPECT_EQ(a.nics[i].rdma_device, b.nics[i].rdma_device);
    EXPECT_EQ(a.nics[i].pci.bus_id, b.nics[i].pci.bus_id);
    EXPECT_EQ(a.nics[i].pci.numa_node, b.nics[i].pci.numa_node);
    EXPECT_EQ(a.nics[i].pci.class_code, b.nics[i].pci.class_code);
    EXPECT_EQ(a.nics[i].speed_mbps, b.nics[i].speed_mbps);
    EXPECT_EQ(a.nics[i].node_guid, b.nics[i].node_guid);
    EXPECT_EQ(a.nics[i].port, b.nics[i].port);
  }
  ASSERT_EQ(a.numa_nodes.size(), b.numa_nodes.size());
  for (size_t i = 0; i < a.numa_nodes.size(); ++i) {
    EXPECT_EQ(a.numa_nodes[i].os_index, b.numa_nodes[i].os_index);
    EXPECT_EQ(a.numa_nodes[i].cpus, b.numa_nodes[i].cpus);
  }
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.cpu_vendor, b.cpu_vendor);
  EXPECT_EQ(a.cpu_family, b.cpu_family);
  EXPECT_EQ(a.cpu_model_number, b.cpu_model_number);
}

TEST(NcclXml, WrittenDgxFile) {
  auto host = load_hwloc_xml(fixture("dgx-h100.xml"), {.sysfs_root = fixture("dgx-h100-sysfs")});
  ASSERT_TRUE(host.ok()) << host.error().message;
  const std::string text = nccl_topo_xml(*host);
  EXPECT_EQ(text.rfind("<system version=\"1\">\n", 0), 0U);
  EXPECT_EQ(count(text, "<cpu "), 2U);
  EXPECT_EQ(count(text, "class=\"0x060400\""), 4U);  // one <pci> per switch, not one per port
  EXPECT_EQ(count(text, "class=\"0x030200\""), 8U);
  EXPECT_EQ(count(text, "<net "), 9U);
  EXPECT_EQ(count(text, "<gpu"), 0U);  // NCCL fills <gpu> itself
  EXPECT_EQ(count(text, "speed=\"400000\""), 8U);
  EXPECT_EQ(count(text, "link_speed=\"32.0 GT/s PCIe\" link_width=\"16\""),
            20U);  // 4 switches, 8 GPUs, 8 NICs
  EXPECT_NE(text.find("<cpu numaid=\"0\" affinity=\"000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff\" "
                      "arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"143\">"),
            std::string::npos);
  EXPECT_NE(
      text.find("<net name=\"mlx5_0\" dev=\"1\" speed=\"400000\" port=\"1\" guid=\"0x946dae0300001900\"/>"),
      std::string::npos);
}

// NCCL's ncclTopoAddPci requires link_width and link_speed on every <pci>: without them NCCL 2.28 fails
// init ("Attribute link_width of node pci not found"), as it did on a GPU host with a virtio NIC.
TEST(NcclXml, EveryPciElementCarriesLinkAttributes) {
  for (const char* name : {"dgx-h100.xml", "nics-on-socket0.xml", "no-gpu.xml"}) {
    auto host = load_hwloc_xml(fixture(name));
    ASSERT_TRUE(host.ok()) << host.error().message;
    const std::string text = nccl_topo_xml(*host);
    EXPECT_GT(count(text, "<pci "), 0U) << name;
    EXPECT_EQ(count(text, "<pci "), count(text, " link_width=\"")) << name << "\n" << text;
    EXPECT_EQ(count(text, "<pci "), count(text, " link_speed=\"")) << name;
  }
  // A device that reports no link is written as NCCL's sysfs reader leaves it, and reads back unknown.
  auto host = load_hwloc_xml(fixture("dgx-h100.xml"));
  ASSERT_TRUE(host.ok());
  ASSERT_FALSE(host->nics.empty());
  host->nics[0].pci.link_gts = 0;
  host->nics[0].pci.link_width = 0;
  const std::string text = nccl_topo_xml(*host);
  EXPECT_EQ(count(text, "link_speed=\"\" link_width=\"0\""), 1U);
  auto back = parse_nccl_topo_xml(text, "test");
  ASSERT_TRUE(back.ok()) << back.error().message;
}

// A link speed that is not one of PCIe's rates is written in full, so it reads back the same (found by
// fuzz_nccl_xml: 0.032 was written as "0.0", which reads back as unknown).
TEST(NcclXml, OddLinkSpeedsReadBackTheSame) {
  auto host = read_nccl_topo_xml(nccl_fixture("nics-on-socket0.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  ASSERT_GE(host->gpus.size(), 2U);
  host->gpus[0].pci.link_gts = 0.032;
  host->gpus[1].pci.link_gts = 2.5;
  const std::string text = nccl_topo_xml(*host);
  EXPECT_NE(text.find("link_speed=\"0.032 GT/s PCIe\""), std::string::npos) << text;
  EXPECT_NE(text.find("link_speed=\"2.5 GT/s PCIe\""), std::string::npos) << text;
  auto back = parse_nccl_topo_xml(text, "written");
  ASSERT_TRUE(back.ok()) << back.error().message;
  expect_same_devices(*host, *back);
  EXPECT_EQ(nccl_topo_xml(*back), text);
}

// A <net port> outside a verbs port number's 1..255 is ignored (the NIC keeps port 1), so what is written
// reads back the same (found by fuzz_nccl_xml: port 3378626320 became -916340976 when narrowed to int,
// was written so, and read back as 1).
TEST(NcclXml, PortOutsideAVerbsPortNumberIsIgnored) {
  for (const std::string port : {"3378626320", "256", "0", "-3"}) {
    const std::string text =
        "<system version=\"1\">\n  <cpu numaid=\"0\" affinity=\"00000001\">\n    <nic>\n"
        "      <net name=\"mlx5_0\" dev=\"0\" port=\"" +
        port + "\"/>\n    </nic>\n  </cpu>\n</system>\n";
    auto host = parse_nccl_topo_xml(text, "port");
    ASSERT_TRUE(host.ok()) << host.error().message;
    ASSERT_EQ(host->nics.size(), 1U);
    EXPECT_EQ(host->nics[0].port, 1) << port;
    SCOPED_TRACE("port=" + port);
    expect_written_reads_back_the_same(*host);
  }
}

TEST(NcclXml, RoundTripDgx) {
  auto host = load_hwloc_xml(fixture("dgx-h100.xml"), {.sysfs_root = fixture("dgx-h100-sysfs")});
  ASSERT_TRUE(host.ok()) << host.error().message;
  const std::string path = ::testing::TempDir() + "/dgx-nccl-topo.xml";
  ASSERT_TRUE(write_nccl_topo_xml(*host, path).ok());
  auto back = read_nccl_topo_xml(path);
  ASSERT_TRUE(back.ok()) << back.error().message;
  expect_same_devices(*host, *back);
  EXPECT_EQ(paths(*host), paths(*back));
  ASSERT_EQ(back->switches.size(), 4U);
  EXPECT_EQ(back->switches[2].pci.bus_id, host->switches[2].pci.bus_id);
  // Written again, the file is the same: nothing is lost or invented on the second pass.
  EXPECT_EQ(nccl_topo_xml(*back), nccl_topo_xml(*host));
}

TEST(NcclXml, RoundTripNicsOnSocket0LosesOnlyPhb) {
  auto host = load_hwloc_xml(fixture("nics-on-socket0.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  auto back = parse_nccl_topo_xml(nccl_topo_xml(*host));
  ASSERT_TRUE(back.ok()) << back.error().message;
  expect_same_devices(*host, *back);
  auto before = paths(*host);
  auto after = paths(*back);
  // NCCL's format has no host bridges: GPU0 and mlx5_0 share a root complex (PHB) but read back as
  // NODE; every other pair is unchanged.
  ASSERT_EQ(before[0][0], PathType::kPhb);
  EXPECT_EQ(after[0][0], PathType::kNode);
  after[0][0] = PathType::kPhb;
  EXPECT_EQ(before, after);
}

TEST(NcclXml, RoundTripNoGpu) {
  auto host = load_hwloc_xml(fixture("no-gpu.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  auto back = parse_nccl_topo_xml(nccl_topo_xml(*host));
  ASSERT_TRUE(back.ok()) << back.error().message;
  expect_same_devices(*host, *back);
}

// An NCCL-style file as NCCL dumps it: nested switches, <gpu> with dev, nvlinks, a NIC under <cpu>.
TEST(NcclXml, ReadsNcclStyleFile) {
  auto host = read_nccl_topo_xml(nccl_fixture("nccl-dump-style.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  ASSERT_EQ(host->gpus.size(), 2U);
  EXPECT_EQ(host->gpus[0].pci.bus_id, "0000:03:00.0");  // <gpu dev="0">
  EXPECT_EQ(host->gpus[1].pci.bus_id, "0000:43:00.0");
  EXPECT_EQ(host->gpus[1].index_source, Gpu::IndexSource::kNvml);
  ASSERT_EQ(host->nics.size(), 2U);
  EXPECT_EQ(host->nics[0].netdev, "eth0");  // no guid, not an RDMA driver's name
  EXPECT_TRUE(host->nics[0].pci.bus_id.empty());
  EXPECT_EQ(host->nics[1].rdma_device, "mlx5_1");
  EXPECT_EQ(host->nics[1].speed_mbps, 200000);
  EXPECT_EQ(host->nics[1].node_guid, 0xb8cef60300e1a2b4ULL);
  EXPECT_EQ(host->nics[1].pci.class_code, 0x020700U);
  EXPECT_EQ(host->switches.size(), 3U);
  EXPECT_EQ(format_cpu_list(host->numa_nodes.at(0).cpus), "0-15");
  // GPU1 and mlx5_1 sit under different switches below a shared one: PXB.
  EXPECT_EQ(path_between(*host, host->gpus[1].pci, host->nics[1].pci), PathType::kPxb);
  EXPECT_EQ(path_between(*host, host->gpus[0].pci, host->nics[1].pci), PathType::kNode);
  EXPECT_EQ(path_between(*host, host->gpus[0].pci, host->nics[0].pci), PathType::kNode);
}

// Every NCCL topology XML in fixtures/nccl/ reads, is written, and reads back the same host; written
// again it is the same text. A file added there is covered without touching this test.
TEST(NcclXml, EveryNcclFixtureRoundTrips) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(nccl_fixture_dir())) {
    if (entry.is_regular_file() && entry.path().extension() == ".xml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 5U) << nccl_fixture_dir();
  for (const auto& file : files) {
    SCOPED_TRACE(file.string());
    auto first = read_nccl_topo_xml(file.string());
    ASSERT_TRUE(first.ok()) << first.error().message;
    EXPECT_FALSE(first->gpus.empty() && first->nics.empty()) << "a fixture with no devices tests nothing";
    const std::string text = nccl_topo_xml(*first);
    auto back = parse_nccl_topo_xml(text, file.string());
    ASSERT_TRUE(back.ok()) << back.error().message << "\n" << text;
    expect_same_devices(*first, *back);
    EXPECT_EQ(paths(*first), paths(*back));
    ASSERT_EQ(first->switches.size(), back->switches.size());
    for (size_t i = 0; i < first->switches.size(); ++i)
      EXPECT_EQ(first->switches[i].pci.bus_id, back->switches[i].pci.bus_id);
    EXPECT_EQ(first->host_bridges.size(), back->host_bridges.size());
    EXPECT_EQ(nccl_topo_xml(*back), text);
  }
}

// Values with XML's special characters are escaped on the way out and decoded on the way in.
TEST(NcclXml, SpecialCharactersRoundTrip) {
  auto host = read_nccl_topo_xml(nccl_fixture("nics-on-socket0.xml"));
  ASSERT_TRUE(host.ok()) << host.error().message;
  host->cpu_vendor = R"(A&B "<vendor>" 'x')";
  ASSERT_FALSE(host->nics.empty());
  host->nics[0].rdma_device = "mlx5_<0>&";
  const std::string text = nccl_topo_xml(*host);
  EXPECT_NE(text.find("vendor=\"A&amp;B &quot;&lt;vendor&gt;&quot;"), std::string::npos) << text;
  auto back = parse_nccl_topo_xml(text, "escaped.xml");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->cpu_vendor, host->cpu_vendor);
  EXPECT_EQ(back->nics[0].name(), "mlx5_<0>&");
  // Character references as a hand-written file may have them.
  auto refs = parse_nccl_topo_xml(
      "<system version=\"&#x31;\"><cpu numaid=\"0\" vendor=\"&#65;MD\"/></system>", "refs.xml");
  ASSERT_TRUE(refs.ok()) << refs.error().message;
  EXPECT_EQ(refs->cpu_vendor, "AMD");
  // Control characters go out as references: a raw CR would come back as LF (found by fuzz_nccl_xml).
  host->cpu_vendor = "A\rB\nC\tD";
  const std::string controls = nccl_topo_xml(*host);
  EXPECT_NE(controls.find("vendor=\"A&#13;B&#10;C&#9;D\""), std::string::npos) << controls;
  auto controls_back = parse_nccl_topo_xml(controls, "controls.xml");
  ASSERT_TRUE(controls_back.ok()) << controls_back.error().message;
  EXPECT_EQ(controls_back->cpu_vendor, host->cpu_vendor);
  EXPECT_EQ(nccl_topo_xml(*controls_back), controls);
}

// Another vendor's display device is not a GPU, whether or not it has a <gpu> child: the writer writes
// none, so counting it would lose it on the way back (found by fuzz_nccl_xml).
TEST(NcclXml, OnlyNvidiaDisplayDevicesAreGpus) {
  auto host = parse_nccl_topo_xml(R"(<system version="1"><cpu numaid="0">
    <pci busid="0000:03:00.0" class="0x030000" vendor="0x1a03" device="0x2000"/>
    <pci busid="0000:43:00.0" class="0x030200" vendor="0x12de" device="0x20b2"><gpu dev="1"/></pci>
    <pci busid="0000:44:00.0" class="0x030200" vendor="0x10de" device="0x20b2"><gpu dev="0"/></pci>
    <pci busid="0000:45:00.0" class="0x030200"/>
  </cpu></system>)",
                                  "vendors.xml");
  ASSERT_TRUE(host.ok()) << host.error().message;
  ASSERT_EQ(host->gpus.size(), 2U);
  EXPECT_EQ(host->gpus[0].pci.bus_id, "0000:44:00.0");
  EXPECT_EQ(host->gpus[1].pci.bus_id, "0000:45:00.0");
  expect_written_reads_back_the_same(*host);
}

// Two socket NICs of one name under different <cpu>s: ordered by NUMA node, so each keeps its <net dev>
// through a write and a read (found by fuzz_nccl_xml).
TEST(NcclXml, NicsOfOneNameOnTwoCpusKeepTheirOrder) {
  auto host = parse_nccl_topo_xml(R"(<system version="1">
    <cpu numaid="5"><nic><net name="eth0" speed="100000" port="1"/></nic></cpu>
    <cpu numaid="0"><nic><net name="eth0" speed="25000" port="1"/></nic></cpu>
  </system>)",
                                  "two-cpus.xml");
  ASSERT_TRUE(host.ok()) << host.error().message;
  ASSERT_EQ(host->nics.size(), 2U);
  EXPECT_EQ(host->nics[0].pci.numa_node, 0);
  EXPECT_EQ(host->nics[0].speed_mbps, 25000);
  expect_written_reads_back_the_same(*host);
}

// A device of unknown NUMA node on a host of two: it stays under numaid -1, and the NUMA node without
// devices is written too, so that the file read back does not put it under the only one (found by
// fuzz_nccl_xml).
TEST(NcclXml, UnknownNumaNodeStaysUnknown) {
  auto host = parse_nccl_topo_xml(R"(<system version="1">
    <cpu numaid="-1"><nic><net name="eth1" port="1"/></nic></cpu>
    <cpu numaid="2" affinity="0000ff00"><nic><net name="eth2" port="1"/></nic></cpu>
    <cpu numaid="3" affinity="000000ff"/>
  </system>)",
                                  "numa.xml");
  ASSERT_TRUE(host.ok()) << host.error().message;
  ASSERT_EQ(host->numa_nodes.size(), 2U);
  const std::string text = nccl_topo_xml(*host);
  EXPECT_NE(text.find("<cpu numaid=\"3\" affinity=\"000000ff\"/>"), std::string::npos) << text;
  auto back = parse_nccl_topo_xml(text, "written");
  ASSERT_TRUE(back.ok()) << back.error().message;
  expect_same_devices(*host, *back);
  EXPECT_EQ(back->nics[0].pci.numa_node, -1);
  EXPECT_EQ(nccl_topo_xml(*back), text);
}

void expect_error(const std::string& text, std::initializer_list<const char*> words) {
  auto r = parse_nccl_topo_xml(text, "bad.xml");
  ASSERT_FALSE(r.ok()) << "accepted: " << text;
  for (const char* w : words) EXPECT_NE(r.error().message.find(w), std::string::npos) << r.error().message;
}

TEST(NcclXml, RejectsFilesThatAreNotNccls) {
  std::ifstream hwloc(fixture("no-gpu.xml"));
  std::ostringstream hwloc_text;
  hwloc_text << hwloc.rdbuf();
  expect_error(hwloc_text.str(), {"bad.xml", "<topology>", "expected <system>", "hwloc", "--hwloc-xml"});
  expect_error("<graphs version=\"1\"/>", {"<graphs>", "not an NCCL topology"});
  expect_error("<system/>", {"version"});
  expect_error("<system version=\"2\"/>", {"version=\"2\"", "not supported"});
  expect_error("<system version=\"1\">\n  <cpu arch=\"x86_64\"/>\n</system>", {"line 2", "numaid"});
  expect_error("<system version=\"1\">\n<cpu numaid=\"0\">\n<pci class=\"0x030200\"/>\n</cpu>\n</system>",
               {"line 3", "<pci>", "busid"});
  expect_error(
      "<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"18:00\" class=\"0x030200\"/></cpu></system>",
      {"busid", "'18:00'"});
  expect_error("<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"0000:18:00.0\"/></cpu></system>",
               {"0000:18:00.0", "class"});
  expect_error(
      "<system version=\"1\">\n<cpu numaid=\"0\"><pci busid=\"0000:36:00.0\" class=\"0x060400\"/></cpu>\n"
      "<cpu numaid=\"1\"><pci busid=\"0000:36:00.0\" class=\"0x060400\"/></cpu>\n</system>",
      {"line 3", "busid=\"0000:36:00.0\"", "also at line 2"});
  expect_error("<system version=\"1\"><cpu numaid=\"0\" affinity=\"zz\"/></system>", {"affinity", "'zz'"});
  // XML that is not well formed: the line where the element at fault opens, and its name.
  expect_error("<system version=\"1\">\n<cpu numaid=\"0\">\n<pci busid=\"0000:01:00.0\">\n</cpu>\n</system>",
               {"bad.xml: line 3: malformed XML", "end tag", "<pci>"});
  expect_error("<system version=\"1\"><cpu numaid=\"0\">", {"line 1", "malformed XML", "<cpu>", "end tag"});
  expect_error("<system version=\"1\">\n<cpu numaid=\"0\" numaid=\"1\"/>\n</system>",
               {"line 2", "given twice", "<cpu>"});
  expect_error("<system version=1/>", {"line 1", "not quoted", "<system>"});
  expect_error("<system version=\"1\">\n<!-- no end\n</system>", {"line 2", "comment"});
  expect_error("<system version=\"1\">\n\n<cpu numaid=\"0\"><pci busid=\"0000:01:00.0\"</cpu></system>",
               {"line 3", "malformed XML"});
  expect_error("", {"malformed XML", "empty"});
  expect_error("<system version=\"1\"/>\n<system version=\"1\"/>", {"line 2", "second root", "<system>"});
  expect_error(std::string(200, '<'), {"malformed XML"});
  std::string deep = "<system version=\"1\"><cpu numaid=\"0\">";
  for (int i = 0; i < 200; ++i) deep += "<pci busid=\"0000:01:00.0\" class=\"0x060400\">";
  expect_error(deep, {"line 1", "nested deeper than"});
  expect_error("<system version=\"1\"><cpu numaid=\"0\"><nic><net dev=\"0\"/></nic></cpu></system>",
               {"<net>", "name"});

  auto missing = read_nccl_topo_xml(::testing::TempDir() + "/no-such-topo.xml");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("no-such-topo.xml"), std::string::npos);
  HostTopology empty;
  auto unwritable = write_nccl_topo_xml(empty, "/nonexistent-dir/topo.xml");
  ASSERT_FALSE(unwritable.ok());
  EXPECT_NE(unwritable.error().message.find("/nonexistent-dir/topo.xml"), std::string::npos);
}

}  // namespace
}  // namespace megascale::topo::host
