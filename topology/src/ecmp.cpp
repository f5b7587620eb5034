// ECMP hash models (ecmp.h): table-driven CRCs generated at compile time from the catalogue parameters,
// checked against the bit-at-a-time reference in tests/unit/topology/ecmp_test.cpp.
#include "megascale/topology/ecmp.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>

namespace megascale::topo {
namespace {

constexpr uint32_t reflect(uint32_t value, uint32_t bits) {
  uint32_t out = 0;
  for (uint32_t i = 0; i < bits; ++i) {
    if (value & (1u << i)) out |= 1u << (bits - 1 - i);
  }
  return out;
}

// Byte tables: for reflected CRCs the register shifts right with the reflected polynomial; otherwise it
// shifts left with the top byte selecting the entry.
constexpr std::array<uint32_t, 256> make_table(const CrcParams& p) {
  std::array<uint32_t, 256> table{};
  const uint32_t top = 1u << (p.width - 1);
  const uint32_t mask = p.width == 32 ? 0xFFFFFFFFu : (1u << p.width) - 1;
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = 0;
    if (p.refin) {
      const uint32_t poly = reflect(p.poly, p.width);
      crc = i;
      for (int b = 0; b < 8; ++b) crc = (crc & 1) ? (crc >> 1) ^ poly : crc >> 1;
    } else {
      crc = i << (p.width - 8);
      for (int b = 0; b < 8; ++b) crc = (crc & top) ? (crc << 1) ^ p.poly : crc << 1;
    }
    table[i] = crc & mask;
  }
  return table;
}

constexpr auto kArcTable = make_table(kCrc16Arc);
constexpr auto kCcittTable = make_table(kCrc16Ibm3740);
constexpr auto kCrc32Table = make_table(kCrc32IsoHdlc);

// The seed XORs the catalogue's initial value; a reflected CRC's table loop runs on the reflected register.
uint16_t crc16_arc(uint32_t seed, std::span<const uint8_t> bytes) {
  uint32_t crc = reflect((kCrc16Arc.init ^ seed) & 0xFFFF, 16);
  for (uint8_t b : bytes) crc = (crc >> 8) ^ kArcTable[(crc ^ b) & 0xFF];
  return static_cast<uint16_t>(crc ^ kCrc16Arc.xorout);
}

uint16_t crc16_ccitt(uint32_t seed, std::span<const uint8_t> bytes) {
  uint32_t crc = (kCrc16Ibm3740.init ^ seed) & 0xFFFF;
  for (uint8_t b : bytes) crc = ((crc << 8) & 0xFFFF) ^ kCcittTable[((crc >> 8) ^ b) & 0xFF];
  return static_cast<uint16_t>(crc ^ kCrc16Ibm3740.xorout);
}

uint32_t crc32_iso_hdlc(uint32_t seed, std::span<const uint8_t> bytes) {
  uint32_t crc = reflect(kCrc32IsoHdlc.init ^ seed, 32);
  for (uint8_t b : bytes) crc = (crc >> 8) ^ kCrc32Table[(crc ^ b) & 0xFF];
  return crc ^ kCrc32IsoHdlc.xorout;
}

uint16_t xor_fold(std::span<const uint8_t> bytes, uint32_t bits) {
  uint32_t x = 0;
  for (uint8_t b : bytes) x ^= b;
  for (uint32_t width = 8; width > bits; width /= 2) x = (x ^ (x >> (width / 2))) & ((1u << (width / 2)) - 1);
  return static_cast<uint16_t>(x);
}

// Murmur3's 32-bit finaliser: a switch id becomes a well-spread seed.
uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  return x;
}

struct Name {
  HashFunction function;
  std::string_view name;
};
constexpr std::array<Name, 9> kNames = {{{HashFunction::crc16_bisync, "crc16-bisync"},
                                         {HashFunction::crc16_xor8, "crc16-xor8"},
                                         {HashFunction::crc16_xor4, "crc16-xor4"},
                                         {HashFunction::crc16_xor2, "crc16-xor2"},
                                         {HashFunction::crc16_xor1, "crc16-xor1"},
                                         {HashFunction::crc16_ccitt, "crc16-ccitt"},
                                         {HashFunction::crc32_lo, "crc32-lo"},
                                         {HashFunction::crc32_hi, "crc32-hi"},
                                         {HashFunction::xor16, "xor16"}}};

bool parse_u32(std::string_view text, uint32_t& out) {
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    text.remove_prefix(2);
    base = 16;
  }
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

uint32_t crc_reference(const CrcParams& p, std::span<const uint8_t> bytes) {
  const uint32_t top = 1u << (p.width - 1);
  const uint32_t mask = p.width == 32 ? 0xFFFFFFFFu : (1u << p.width) - 1;
  uint32_t crc = p.init & mask;
  for (uint8_t byte : bytes) {
    uint32_t in = p.refin ? reflect(byte, 8) : byte;
    for (int bit = 7; bit >= 0; --bit) {
      bool feedback = ((crc & top) != 0) != (((in >> bit) & 1) != 0);
      crc = (crc << 1) & mask;
      if (feedback) crc ^= p.poly;
    }
  }
  if (p.refout) crc = reflect(crc, p.width);
  return (crc ^ p.xorout) & mask;
}

uint16_t hash_bytes(HashFunction function, uint32_t seed, std::span<const uint8_t> bytes) {
  switch (function) {
    case HashFunction::crc16_bisync:
      return crc16_arc(seed, bytes);
    case HashFunction::crc16_xor8:
      return crc16_arc(seed, bytes) ^ xor_fold(bytes, 8);
    case HashFunction::crc16_xor4:
      return crc16_arc(seed, bytes) ^ xor_fold(bytes, 4);
    case HashFunction::crc16_xor2:
      return crc16_arc(seed, bytes) ^ xor_fold(bytes, 2);
    case HashFunction::crc16_xor1:
      return crc16_arc(seed, bytes) ^ xor_fold(bytes, 1);
    case HashFunction::crc16_ccitt:
      return crc16_ccitt(seed, bytes);
    case HashFunction::crc32_lo:
      return static_cast<uint16_t>(crc32_iso_hdlc(seed, bytes));
    case HashFunction::crc32_hi:
      return static_cast<uint16_t>(crc32_iso_hdlc(seed, bytes) >> 16);
    case HashFunction::xor16: {
      uint32_t x = 0;
      for (size_t i = 0; i < bytes.size(); i += 2) {
        x ^= uint32_t{bytes[i]} << 8 | (i + 1 < bytes.size() ? bytes[i + 1] : 0);
      }
      return static_cast<uint16_t>(x ^ seed);
    }
  }
  return 0;
}

uint16_t ecmp_hash(const HashModel& model, uint32_t switch_id, const FiveTuple& t) {
  const std::array<uint8_t, 13> key = {static_cast<uint8_t>(t.src_ip >> 24),
                                       static_cast<uint8_t>(t.src_ip >> 16),
                                       static_cast<uint8_t>(t.src_ip >> 8),
                                       static_cast<uint8_t>(t.src_ip),
                                       static_cast<uint8_t>(t.dst_ip >> 24),
                                       static_cast<uint8_t>(t.dst_ip >> 16),
                                       static_cast<uint8_t>(t.dst_ip >> 8),
                                       static_cast<uint8_t>(t.dst_ip),
                                       static_cast<uint8_t>(t.src_port >> 8),
                                       static_cast<uint8_t>(t.src_port),
                                       static_cast<uint8_t>(t.dst_port >> 8),
                                       static_cast<uint8_t>(t.dst_port),
                                       t.protocol};
  uint32_t seed = model.seed_per_switch ? model.seed ^ mix32(switch_id + 1) : model.seed;
  return hash_bytes(model.function, seed, key);
}

uint32_t ecmp_select(const HashModel& model, uint32_t switch_id, const FiveTuple& tuple,
                     uint32_t group_size) {
  if (group_size <= 1) return 0;
  uint32_t h = ecmp_hash(model, switch_id, tuple);
  uint32_t r = model.offset_bits % 16;
  uint32_t rotated = ((h >> r) | (h << (16 - r))) & 0xFFFF;
  return rotated % group_size;
}

std::string_view hash_function_name(HashFunction function) {
  for (const Name& n : kNames) {
    if (n.function == function) return n.name;
  }
  return "?";
}

Result<HashModel> parse_hash_model(std::string_view spec) {
  HashModel m;
  std::string_view rest = spec;
  size_t colon = rest.find(':');
  std::string_view name = rest.substr(0, colon);
  bool found = false;
  for (const Name& n : kNames) {
    if (n.name == name) {
      m.function = n.function;
      found = true;
    }
  }
  if (!found) {
    std::string names;
    for (const Name& n : kNames) names += fmt::format("{}{}", names.empty() ? "" : ", ", n.name);
    return make_error(fmt::format("hash '{}': unknown function '{}'; known: {}", spec, name, names));
  }
  while (colon != std::string_view::npos) {
    rest.remove_prefix(colon + 1);
    colon = rest.find(':');
    std::string_view part = rest.substr(0, colon);
    if (part == "per-switch") {
      m.seed_per_switch = true;
    } else if (part.starts_with("seed=")) {
      if (!parse_u32(part.substr(5), m.seed))
        return make_error(fmt::format("hash '{}': seed '{}' is not a 32-bit number", spec, part.substr(5)));
    } else if (part.starts_with("offset=")) {
      if (!parse_u32(part.substr(7), m.offset_bits) || m.offset_bits > 15)
        return make_error(fmt::format("hash '{}': offset '{}' is not 0..15", spec, part.substr(7)));
    } else {
      return make_error(
          fmt::format("hash '{}': unknown option '{}' (seed=N, offset=N, per-switch)", spec, part));
    }
  }
  return m;
}

std::string to_string(const HashModel& m) {
  std::string out(hash_function_name(m.function));
  if (m.seed != 0) out += fmt::format(":seed={:#x}", m.seed);
  if (m.offset_bits != 0) out += fmt::format(":offset={}", m.offset_bits);
  if (m.seed_per_switch) out += ":per-switch";
  return out;
}

double expected_links_used_fraction(uint32_t flows, uint32_t links) {
  if (links == 0) return 0;
  return 1.0 - std::pow(1.0 - 1.0 / links, static_cast<double>(flows));
}

}  // namespace megascale::topo
