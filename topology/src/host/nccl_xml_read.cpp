// Reads an NCCL topology XML into the host model (format: nccl_xml.h). tinyxml2 parses; this file maps
// its elements onto the model. Strict where NCCL is strict (busid, class, numaid), tolerant of what NCCL
// ignores (unknown elements such as <nvlink>, <pcilink>).
#include <fmt/format.h>
#include <tinyxml2.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "megascale/topology/nccl_xml.h"
#include "sysfs.h"

namespace megascale::topo::host {
namespace {

using Element = tinyxml2::XMLElement;
using Attribute = std::optional<std::string_view>;

// The attribute's value, or nullopt when absent.
Attribute attr(const Element& e, const char* key) {
  const char* value = e.Attribute(key);
  if (value == nullptr) return std::nullopt;
  return std::string_view(value);
}

std::string_view name_of(const Element& e) {
  return e.Name();
}

bool parse_unsigned(std::string_view text, uint64_t& out, int base) {
  if (base == 16 && (text.substr(0, 2) == "0x" || text.substr(0, 2) == "0X")) text.remove_prefix(2);
  if (text.empty()) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
  return ec == std::errc() && ptr == text.data() + text.size();
}

bool parse_signed(std::string_view text, int64_t& out) {
  if (text.empty()) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && ptr == text.data() + text.size();
}

// "ffffffff,00000000" (most significant word first) -> the CPUs whose bits are set.
Result<std::vector<int>> cpus_from_mask(std::string_view mask) {
  std::vector<std::string_view> words;
  size_t start = 0;
  while (start <= mask.size()) {
    size_t comma = mask.find(',', start);
    if (comma == std::string_view::npos) comma = mask.size();
    words.push_back(mask.substr(start, comma - start));
    start = comma + 1;
  }
  std::vector<int> cpus;
  int base = 0;
  for (size_t i = words.size(); i-- > 0; base += 32) {
    uint64_t word = 0;
    if (!parse_unsigned(words[i], word, 16) || word > 0xffffffffULL) {
      return make_error(fmt::format("'{}' is not a CPU mask (32-bit hex words separated by commas)", mask));
    }
    for (int b = 0; b < 32; ++b) {
      if ((word >> b) & 1U) cpus.push_back(base + b);
    }
  }
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

// RDMA device names of the Linux RDMA drivers (rdma-core providers); anything else is a netdev name, as
// NCCL's Socket transport reports it.
bool looks_like_rdma_device(std::string_view name) {
  for (std::string_view prefix :
       {"mlx4_", "mlx5_", "bnxt_re", "irdma", "i40iw", "rxe", "siw", "efa", "hns_", "qedr", "erdma", "ionic",
        "rocep", "roceo", "vmw_pvrdma", "cxgb4_", "mana_"}) {
    if (name.substr(0, prefix.size()) == prefix) return true;
  }
  return false;
}

// tinyxml2's error in words, with the element it names ("XMLElement name=cpu" -> "<cpu>").
std::string xml_error(const tinyxml2::XMLDocument& doc) {
  std::string what;
  switch (doc.ErrorID()) {
    case tinyxml2::XML_ERROR_PARSING_ELEMENT:
      what = "an element that is not well formed";
      break;
    case tinyxml2::XML_ERROR_PARSING_ATTRIBUTE:
      what = "an attribute that is not well formed (a value not quoted, or a name given twice)";
      break;
    case tinyxml2::XML_ERROR_PARSING_TEXT:
      what = "text that is not well formed";
      break;
    case tinyxml2::XML_ERROR_PARSING_CDATA:
      what = "a CDATA section that is not closed";
      break;
    case tinyxml2::XML_ERROR_PARSING_COMMENT:
      what = "a comment that is not closed";
      break;
    case tinyxml2::XML_ERROR_PARSING_DECLARATION:
      what = "a <?...?> declaration that is not closed";
      break;
    case tinyxml2::XML_ERROR_PARSING_UNKNOWN:
      what = "a <!...> construct that is not closed";
      break;
    case tinyxml2::XML_ERROR_EMPTY_DOCUMENT:
      what = "the document is empty";
      break;
    case tinyxml2::XML_ERROR_MISMATCHED_ELEMENT:
      what = "an element whose end tag is missing or does not match";
      break;
    case tinyxml2::XML_ELEMENT_DEPTH_EXCEEDED:
      what = fmt::format("elements nested deeper than {}", TINYXML2_MAX_ELEMENT_DEPTH);
      break;
    default:
      what = doc.ErrorName();
      break;
  }
  // ErrorStr() is "Error=... ErrorID=... Line number=N[: detail]"; the detail names the element.
  const std::string_view full = doc.ErrorStr();
  const size_t at = full.find("Line number=");
  const size_t colon = at == std::string_view::npos ? at : full.find(": ", at);
  if (colon != std::string_view::npos) {
    std::string_view detail = full.substr(colon + 2);
    constexpr std::string_view kElement = "XMLElement name=";
    if (detail.substr(0, kElement.size()) == kElement) {
      what += fmt::format(": <{}>", detail.substr(kElement.size()));
    } else if (!detail.empty()) {
      what += fmt::format(": {}", detail);
    }
  }
  return what;
}

class Reader {
 public:
  explicit Reader(std::string_view source) : source_(source) {}

  Result<HostTopology> run(const Element& root) {
    if (name_of(root) != "system") {
      std::string hint =
          name_of(root) == "topology" ? " (this is an hwloc XML: use it with --hwloc-xml)" : "";
      return fail(root, fmt::format("root element is <{}>, expected <system>: not an NCCL topology file{}",
                                    name_of(root), hint));
    }
    Attribute version = attr(root, "version");
    int64_t v = 0;
    if (version == std::nullopt)
      return fail(root, "<system> has no version attribute (NCCL writes version=\"1\")");
    if (!parse_signed(*version, v) || v != 1) {
      return fail(root, fmt::format("<system version=\"{}\"> is not supported (NCCL's format is version 1)",
                                    *version));
    }
    for (const Element* child = root.FirstChildElement(); child != nullptr;
         child = child->NextSiblingElement()) {
      if (name_of(*child) != "cpu") continue;  // NCCL ignores anything else at this level too
      if (Status s = read_cpu(*child); !s) return s.error();
    }
    finish();
    return std::move(host_);
  }

 private:
  Error fail(const Element& e, const std::string& what) const {
    return make_error(fmt::format("{}: line {}: {}", source_, e.GetLineNum(), what));
  }

  Status read_cpu(const Element& cpu) {
    Attribute numaid = attr(cpu, "numaid");
    int64_t numa = 0;
    if (numaid == std::nullopt) return fail(cpu, "<cpu> has no numaid attribute");
    if (!parse_signed(*numaid, numa) || numa < -1 || numa > 1 << 20) {
      return fail(cpu, fmt::format("<cpu numaid=\"{}\">: not a NUMA node number", *numaid));
    }
    if (Attribute mask = attr(cpu, "affinity")) {
      auto cpus = cpus_from_mask(*mask);
      if (!cpus) return fail(cpu, fmt::format("<cpu affinity>: {}", cpus.error().message));
      if (numa >= 0 && host_.find_numa(static_cast<int>(numa)) == nullptr) {
        host_.numa_nodes.push_back({static_cast<int>(numa), -1, std::move(*cpus)});
      }
    } else if (numa >= 0 && host_.find_numa(static_cast<int>(numa)) == nullptr) {
      host_.numa_nodes.push_back({static_cast<int>(numa), -1, {}});
    }
    if (Attribute arch = attr(cpu, "arch"); arch && host_.arch.empty()) host_.arch = *arch;
    if (Attribute vendor = attr(cpu, "vendor"); vendor && host_.cpu_vendor.empty())
      host_.cpu_vendor = *vendor;
    int64_t number = 0;
    if (Attribute f = attr(cpu, "familyid"); f && parse_signed(*f, number))
      host_.cpu_family = static_cast<int>(number);
    if (Attribute m = attr(cpu, "modelid"); m && parse_signed(*m, number))
      host_.cpu_model_number = static_cast<int>(number);

    for (const Element* child = cpu.FirstChildElement(); child != nullptr;
         child = child->NextSiblingElement()) {
      if (name_of(*child) == "pci") {
        // Each top-level <pci> stands for a host bridge of its own (nccl_xml.h says why).
        const int bridge = static_cast<int>(host_.host_bridges.size());
        host_.host_bridges.push_back(
            {fmt::format("cpu{}/{}", numa, attr(*child, "busid").value_or("?")), static_cast<int>(numa)});
        if (Status s = read_pci(*child, static_cast<int>(numa), bridge, {}); !s) return s;
      } else if (name_of(*child) == "nic") {
        PciDevice none;
        none.numa_node = static_cast<int>(numa);
        if (Status s = read_nic(*child, none); !s) return s;
      }
    }
    return {};
  }

  Status read_pci(const Element& e, int numa, int bridge, const std::vector<std::string>& switches) {
    PciDevice pci;
    Attribute busid = attr(e, "busid");
    if (busid == std::nullopt) return fail(e, "<pci> has no busid attribute");
    auto normalized = normalize_bus_id(*busid);
    if (!normalized) return fail(e, fmt::format("<pci busid>: {}", normalized.error().message));
    pci.bus_id = *normalized;
    // A PCI function is in one place in the tree; NCCL looks a <pci> up by busid and finds the first.
    if (auto [at, fresh] = busid_lines_.emplace(pci.bus_id, e.GetLineNum()); !fresh) {
      return fail(e,
                  fmt::format("<pci busid=\"{}\">: the same busid is also at line {}", *busid, at->second));
    }
    Attribute cls = attr(e, "class");
    uint64_t value = 0;
    if (cls == std::nullopt) return fail(e, fmt::format("<pci busid=\"{}\"> has no class attribute", *busid));
    if (!parse_unsigned(*cls, value, 16) || value > 0xffffff) {
      return fail(
          e, fmt::format("<pci busid=\"{}\" class=\"{}\">: class is not a 24-bit hex number", *busid, *cls));
    }
    pci.class_code = static_cast<uint32_t>(value);
    auto id16 = [&](const char* key, uint16_t& out) -> Status {
      Attribute text = attr(e, key);
      if (text == std::nullopt) return {};
      uint64_t v = 0;
      if (!parse_unsigned(*text, v, 16) || v > 0xffff) {
        return fail(e, fmt::format("<pci busid=\"{}\" {}=\"{}\">: not a 16-bit hex id", *busid, key, *text));
      }
      out = static_cast<uint16_t>(v);
      return {};
    };
    for (auto [key, field] : {std::pair{"vendor", &pci.vendor_id}, std::pair{"device", &pci.device_id},
                              std::pair{"subsystem_vendor", &pci.subsystem_vendor_id},
                              std::pair{"subsystem_device", &pci.subsystem_device_id}}) {
      if (Status s = id16(key, *field); !s) return s;
    }
    if (Attribute speed = attr(e, "link_speed"))
      pci.link_gts = sysfs::parse_link_speed_gts(std::string(*speed));
    int64_t width = 0;
    if (Attribute w = attr(e, "link_width"); w && parse_signed(*w, width) && width > 0) {
      pci.link_width = static_cast<int>(width);
    }
    pci.numa_node = numa;
    pci.host_bridge = bridge;
    pci.switches = switches;

    const Element* nic = nullptr;
    const Element* gpu = nullptr;
    bool has_pci_children = false;
    for (const Element* child = e.FirstChildElement(); child != nullptr;
         child = child->NextSiblingElement()) {
      if (name_of(*child) == "nic") nic = child;
      if (name_of(*child) == "gpu") gpu = child;
      if (name_of(*child) == "pci") has_pci_children = true;
    }
    if (nic != nullptr) return read_nic(*nic, pci);
    // GPUs are NVIDIA's (or of a vendor the file does not give), as host discovery finds them: another
    // vendor's display device (a BMC's VGA) is none, <gpu> child or not, so that what the writer
    // writes (no <gpu> children) reads back the same.
    if ((pci.class_code >> 16) == 0x03 && (pci.vendor_id == 0x10de || pci.vendor_id == 0)) {
      Gpu g;
      g.pci = pci;
      g.name = pci.device_id != 0 ? fmt::format("NVIDIA GPU [{:04x}:{:04x}]", 0x10de, pci.device_id)
                                  : "NVIDIA GPU";
      int64_t dev = -1;
      if (gpu != nullptr) {
        if (Attribute d = attr(*gpu, "dev"); d && !parse_signed(*d, dev)) {
          return fail(*gpu, fmt::format("<gpu dev=\"{}\">: not a number", *d));
        }
      }
      gpu_devs_.push_back(static_cast<int>(dev));
      host_.gpus.push_back(std::move(g));
      return {};
    }
    if (has_pci_children || (pci.class_code >> 8) == 0x0604) {
      host_.switches.push_back({pci});
      std::vector<std::string> below = switches;
      below.insert(below.begin(), pci.bus_id);
      for (const Element* child = e.FirstChildElement(); child != nullptr;
           child = child->NextSiblingElement()) {
        if (name_of(*child) != "pci") continue;
        if (Status s = read_pci(*child, numa, bridge, below); !s) return s;
      }
    }
    return {};
  }

  Status read_nic(const Element& nic, const PciDevice& pci) {
    for (const Element* net = nic.FirstChildElement(); net != nullptr; net = net->NextSiblingElement()) {
      if (name_of(*net) != "net") continue;
      Attribute name = attr(*net, "name");
      if (name == std::nullopt || name->empty()) return fail(*net, "<net> has no name attribute");
      Nic n;
      n.pci = pci;
      if (attr(*net, "guid") != std::nullopt || looks_like_rdma_device(*name)) {
        n.rdma_device = *name;
      } else {
        n.netdev = *name;
      }
      int64_t number = 0;
      if (Attribute speed = attr(*net, "speed"); speed && parse_signed(*speed, number) && number > 0) {
        n.speed_mbps = number;
      }
      // A verbs port number is a u8 (1..255); anything else is ignored like an unreadable number.
      if (Attribute port = attr(*net, "port");
          port && parse_signed(*port, number) && number > 0 && number <= 255) {
        n.port = static_cast<int>(number);
      }
      if (Attribute guid = attr(*net, "guid")) {
        uint64_t g = 0;
        if (!parse_unsigned(*guid, g, 16))
          return fail(*net, fmt::format("<net guid=\"{}\">: not a hex number", *guid));
        n.node_guid = g;
      }
      host_.nics.push_back(std::move(n));
    }
    return {};
  }

  void finish() {
    const bool all_dev =
        !gpu_devs_.empty() && std::all_of(gpu_devs_.begin(), gpu_devs_.end(), [](int d) { return d >= 0; });
    std::vector<size_t> order(host_.gpus.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return host_.gpus[a].pci.bus_id < host_.gpus[b].pci.bus_id; });
    for (size_t rank = 0; rank < order.size(); ++rank) {
      Gpu& g = host_.gpus[order[rank]];
      g.cuda_index = all_dev ? gpu_devs_[order[rank]] : static_cast<int>(rank);
      g.index_source = all_dev ? Gpu::IndexSource::kNvml : Gpu::IndexSource::kBusOrder;
    }
    std::sort(host_.gpus.begin(), host_.gpus.end(), [](const Gpu& a, const Gpu& b) {
      return a.cuda_index != b.cuda_index ? a.cuda_index < b.cuda_index : a.pci.bus_id < b.pci.bus_id;
    });
    // NICs ordered by all the writer places them by (bus id, <cpu>, switches), so that a file written
    // from this model numbers its <net dev> the same when read again.
    std::stable_sort(host_.nics.begin(), host_.nics.end(), [](const Nic& a, const Nic& b) {
      return std::tie(a.pci.bus_id, a.name(), a.pci.numa_node, a.pci.switches) <
             std::tie(b.pci.bus_id, b.name(), b.pci.numa_node, b.pci.switches);
    });
    std::sort(host_.switches.begin(), host_.switches.end(),
              [](const PcieSwitch& a, const PcieSwitch& b) { return a.pci.bus_id < b.pci.bus_id; });
    std::sort(host_.numa_nodes.begin(), host_.numa_nodes.end(),
              [](const NumaNode& a, const NumaNode& b) { return a.os_index < b.os_index; });
  }

  std::string source_;
  HostTopology host_;
  std::vector<int> gpu_devs_;               // <gpu dev>, per GPU in document order; -1 = absent
  std::map<std::string, int> busid_lines_;  // normalized busid -> line of its <pci>
};

}  // namespace

Result<HostTopology> parse_nccl_topo_xml(std::string_view text, std::string_view source) {
  tinyxml2::XMLDocument doc;
  if (doc.Parse(text.data(), text.size()) != tinyxml2::XML_SUCCESS) {
    return make_error(fmt::format("{}: {}malformed XML: {}", source,
                                  doc.ErrorLineNum() > 0 ? fmt::format("line {}: ", doc.ErrorLineNum()) : "",
                                  xml_error(doc)));
  }
  const Element* root = doc.RootElement();
  if (root == nullptr) return make_error(fmt::format("{}: malformed XML: no root element", source));
  if (const Element* second = root->NextSiblingElement()) {
    return make_error(fmt::format("{}: line {}: malformed XML: a second root element <{}> after <{}>", source,
                                  second->GetLineNum(), second->Name(), root->Name()));
  }
  return Reader(source).run(*root);
}

Result<HostTopology> read_nccl_topo_xml(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(fmt::format("{}: cannot open", path));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_nccl_topo_xml(text.str(), path);
}

}  // namespace megascale::topo::host
