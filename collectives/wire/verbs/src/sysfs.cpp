// discover_devices: the sysfs-like tree (gid.h) read into DeviceInfo.
#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "megascale/wire/verbs/gid.h"

namespace megascale::wire::verbs {
namespace {

namespace fs = std::filesystem;

// The file's first line without trailing whitespace; nullopt when it cannot be read (sysfs answers
// EINVAL for an empty GID entry's attributes).
std::optional<std::string> read_line(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return std::nullopt;
  std::string line;
  if (!std::getline(in, line) && !in.eof()) return std::nullopt;
  if (in.bad()) return std::nullopt;
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ' || line.back() == '\r')) line.pop_back();
  return line;
}

// Numbered entries of a folder ("1", "2", ... ), sorted by number; other names are ignored.
std::vector<uint32_t> numbered_entries(const fs::path& dir) {
  std::vector<uint32_t> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    uint32_t v = 0;
    auto [end, err] = std::from_chars(name.data(), name.data() + name.size(), v);
    if (err == std::errc() && end == name.data() + name.size()) out.push_back(v);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// "fe80:0000:0000:0000:5054:00ff:fe12:3456": eight groups of four hex digits.
std::optional<Gid> parse_sysfs_gid(std::string_view s) {
  if (s.size() != 39) return std::nullopt;
  Gid g{};
  for (size_t i = 0; i < 8; ++i) {
    if (i > 0 && s[i * 5 - 1] != ':') return std::nullopt;
    uint32_t v = 0;
    const char* b = s.data() + i * 5;
    auto [end, err] = std::from_chars(b, b + 4, v, 16);
    if (err != std::errc() || end != b + 4) return std::nullopt;
    g[2 * i] = static_cast<uint8_t>(v >> 8);
    g[2 * i + 1] = static_cast<uint8_t>(v & 0xff);
  }
  return g;
}

GidType parse_gid_type(std::string_view s) {
  if (s == "RoCE v2") return GidType::kRoceV2;
  if (s == "IB/RoCE v1" || s == "RoCE v1") return GidType::kRoceV1;
  return GidType::kUnknown;
}

// Records a problem: the error when reading strictly, a line in `problems` when listing.
class Problems {
 public:
  explicit Problems(std::vector<std::string>* sink) : sink_(sink) {}
  // True when reading goes on (listing: `message` and what the listing does instead); false when
  // `message` is now the error to return.
  bool note(std::string message, std::string_view instead) {
    if (sink_ != nullptr) {
      sink_->push_back(message + " (" + std::string(instead) + ")");
      return true;
    }
    error_ = std::move(message);
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  std::vector<std::string>* sink_;
  std::string error_;
};

// One port into `port` and, when listing, `listing` (whose `problems` then collects what strict reading
// would refuse).
Result<PortInfo> read_port(const fs::path& dir, uint32_t number, PortListing* listing) {
  PortInfo port;
  port.port = number;
  Problems problems(listing != nullptr ? &listing->problems : nullptr);
  std::optional<std::string> state = read_line(dir / "state");
  if (!state) {
    if (!problems.note((dir / "state").string() + ": cannot read the port's state", "listed as not active"))
      return make_error(ErrorCode::kSystem, problems.error());
    state = "";
  }
  port.state = *state;
  int state_num = 0;
  std::from_chars(state->data(), state->data() + state->size(), state_num);
  port.active = state_num == 4;  // IBV_PORT_ACTIVE
  port.link_layer = read_line(dir / "link_layer").value_or("");
  if (listing != nullptr) listing->phys_state = read_line(dir / "phys_state").value_or("");
  if (std::optional<std::string> mtu = read_line(dir / "active_mtu")) {
    uint32_t v = 0;
    auto [end, err] = std::from_chars(mtu->data(), mtu->data() + mtu->size(), v);
    if (err != std::errc() || (v != 256 && v != 512 && v != 1024 && v != 2048 && v != 4096)) {
      if (!problems.note((dir / "active_mtu").string() + ": \"" + *mtu + "\" is not an IB MTU (256..4096)",
                         "MTU listed as unknown"))
        return make_error(problems.error());
    } else {
      port.active_mtu_bytes = v;
    }
  }
  if (std::optional<std::string> rate = read_line(dir / "rate")) {
    // "100 Gb/sec (2X HDR)", "2.5 Gb/sec (1X SDR)": the leading number.
    port.rate_gbps = std::strtod(rate->c_str(), nullptr);
    if (listing != nullptr) listing->rate = *rate;
  }
  for (uint32_t i : numbered_entries(dir / "gids")) {
    const std::string idx = std::to_string(i);
    std::optional<std::string> text = read_line(dir / "gids" / idx);
    if (!text) continue;
    std::optional<Gid> gid = parse_sysfs_gid(*text);
    if (!gid) {
      if (!problems.note((dir / "gids" / idx).string() + ": \"" + *text + "\" is not a GID",
                         "entry left out"))
        return make_error(problems.error());
      continue;
    }
    if (std::all_of(gid->begin(), gid->end(), [](uint8_t b) { return b == 0; })) continue;
    std::optional<std::string> type = read_line(dir / "gid_attrs" / "types" / idx);
    if (!type || type->empty()) continue;  // an entry being filled or torn down
    port.gids.push_back(GidEntry{.index = i,
                                 .gid = *gid,
                                 .type = parse_gid_type(*type),
                                 .ndev = read_line(dir / "gid_attrs" / "ndevs" / idx).value_or("")});
    if (listing != nullptr && listing->netdev.empty()) listing->netdev = port.gids.back().ndev;
  }
  return port;
}

// The device's optional attributes (gid.h): node GUID, parent netdev, PCI function and its driver.
void read_device_attributes(const fs::path& dir, DeviceListing& dev) {
  dev.node_guid = read_line(dir / "node_guid").value_or("");
  dev.parent = read_line(dir / "parent").value_or("");
  std::error_code ec;
  const fs::path device = fs::canonical(dir / "device", ec);
  if (ec) return;
  dev.pci_path = device.string();
  const fs::path driver = fs::canonical(device / "driver", ec);
  if (!ec) dev.driver = driver.filename().string();
}

// The PCI function's only netdev (device/net/<name>); "" with none or several.
std::string only_function_netdev(const fs::path& dir) {
  std::error_code ec;
  std::vector<std::string> names;
  for (const fs::directory_entry& e : fs::directory_iterator(dir / "device" / "net", ec))
    names.push_back(e.path().filename().string());
  return names.size() == 1 ? names[0] : "";
}

// The tree under `root`: strict (discover_devices: the first bad entry is the error) or keep_going
// (list_devices: bad entries noted in `problems`).
Result<std::vector<DeviceListing>> read_tree(const std::string& root, bool keep_going) {
  std::vector<DeviceListing> out;
  std::error_code ec;
  if (!fs::exists(root, ec)) return out;
  fs::directory_iterator it(root, ec);
  if (ec) return make_error(ErrorCode::kSystem, root + ": " + ec.message());
  std::vector<std::string> names;
  for (const fs::directory_entry& e : it) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const fs::path dir = fs::path(root) / name;
    const fs::path ports = dir / "ports";
    DeviceListing dev;
    dev.info.name = name;
    if (!fs::is_directory(ports, ec)) {
      const std::string why = ports.string() + ": no ports folder (not an RDMA device?)";
      if (!keep_going) return make_error(ErrorCode::kSystem, why);
      dev.problems.push_back(why + " (listed without ports)");
    }
    if (keep_going) read_device_attributes(dir, dev);
    const std::string function_netdev = keep_going ? only_function_netdev(dir) : "";
    for (uint32_t n : numbered_entries(ports)) {
      PortListing listing;
      Result<PortInfo> port = read_port(ports / std::to_string(n), n, keep_going ? &listing : nullptr);
      if (!port) return port.error();
      if (listing.netdev.empty()) listing.netdev = !dev.parent.empty() ? dev.parent : function_netdev;
      dev.info.ports.push_back(std::move(*port));
      dev.ports.push_back(std::move(listing));
    }
    out.push_back(std::move(dev));
  }
  return out;
}

}  // namespace

std::string_view to_string(GidType t) {
  switch (t) {
    case GidType::kRoceV1:
      return "RoCE v1";
    case GidType::kRoceV2:
      return "RoCE v2";
    case GidType::kUnknown:
      break;
  }
  return "unknown type";
}

std::string gid_to_string(const Gid& gid) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, gid.data(), buf, sizeof buf);
  return buf;
}

bool gid_is_ipv4(const Gid& gid) {
  for (size_t i = 0; i < 10; ++i) {
    if (gid[i] != 0) return false;
  }
  return gid[10] == 0xff && gid[11] == 0xff;
}

bool gid_is_link_local(const Gid& gid) {
  return gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80;
}

std::string_view state_name(std::string_view state) {
  const size_t colon = state.find(": ");
  return colon == std::string_view::npos ? state : state.substr(colon + 2);
}

Result<std::vector<DeviceInfo>> discover_devices(const std::string& root) {
  Result<std::vector<DeviceListing>> listed = read_tree(root, /*keep_going=*/false);
  if (!listed) return listed.error();
  std::vector<DeviceInfo> out;
  for (DeviceListing& d : *listed) out.push_back(std::move(d.info));
  return out;
}

Result<std::vector<DeviceListing>> list_devices(const std::string& root) {
  return read_tree(root, /*keep_going=*/true);
}

}  // namespace megascale::wire::verbs
