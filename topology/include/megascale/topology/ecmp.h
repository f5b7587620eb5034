// ECMP hash models: the switch hash functions that public documentation names, over the RoCEv2/UDP
// 5-tuple, with a seed and a bit offset, so a model can be calibrated to a real switch by probing.
//
//   Result<HashModel> m = parse_hash_model("crc16-bisync:seed=0x1234:offset=5");
//   FiveTuple t{.src_ip = 0x0a000001, .dst_ip = 0x0a000102, .src_port = 49152};   // dst port 4791, UDP
//   uint32_t member = ecmp_select(*m, switch_id, t, 32);   // which of 32 equal-cost links the flow takes
//
// Sources: SAI's sai_hash_algorithm_t (CRC, XOR, CRC_32LO,
// CRC_32HI, CRC_CCITT, CRC_XOR) and Broadcom RTAG7 as FBOSS configures it (CRC16XOR8/4/2/1, CRC16, XOR16,
// CRC16-CCITT, CRC32 LO/HI; 32-bit seeds; bit offsets choosing which hash bits index the group).
// Broadcom's exact key layout and seed handling are not public (§6), so this model fixes them as follows
// and says so; calibrate seed/offset against a real switch:
//  - key: 13 bytes, network byte order: src IP (4), dst IP (4), src port (2), dst port (2), protocol (1);
//  - seed: XORed into the CRC register's standard initial value (seed 0 = the catalogue CRC); for XOR16,
//    XORed into the result; with seed_per_switch it is also mixed with the switch id, as operators give
//    each switch its own seed;
//  - CRC16-XORk: the CRC16 (BISYNC) value XOR the key folded down to k bits by XOR (our reading of the
//    option's name);
//  - offset: the 16-bit hash is rotated right by `offset` bits, then taken modulo the group size.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "megascale/common/result.h"

namespace megascale::topo {

// RoCEv2's UDP destination port (IBTA RoCEv2 annex A17).
inline constexpr uint16_t kRoceV2UdpPort = 4791;
inline constexpr uint8_t kIpProtocolUdp = 17;

struct FiveTuple {
  uint32_t src_ip = 0;  // host byte order
  uint32_t dst_ip = 0;
  uint16_t src_port = 0;
  uint16_t dst_port = kRoceV2UdpPort;
  uint8_t protocol = kIpProtocolUdp;
};

// A CRC in the Rocksoft/Williams parameter model that the CRC catalogue (reveng.sourceforge.net) uses.
struct CrcParams {
  uint32_t width = 16;  // 16 or 32
  uint32_t poly = 0;    // normal (MSB-first) form
  uint32_t init = 0;
  bool refin = false;
  bool refout = false;
  uint32_t xorout = 0;
};

// Catalogue CRCs used by the hash models, with the check value each gives for the ASCII bytes
// "123456789" (reveng CRC catalogue, crc-catalogue/16.htm and 17plus.htm):
inline constexpr CrcParams kCrc16Arc{16, 0x8005, 0x0000, true, true, 0x0000};        // check 0xBB3D
inline constexpr CrcParams kCrc16Umts{16, 0x8005, 0x0000, false, false, 0x0000};     // /BUYPASS, check 0xFEE8
inline constexpr CrcParams kCrc16Ibm3740{16, 0x1021, 0xFFFF, false, false, 0x0000};  // /CCITT-FALSE, 0x29B1
inline constexpr CrcParams kCrc16Xmodem{16, 0x1021, 0x0000, false, false, 0x0000};   // check 0x31C3
inline constexpr CrcParams kCrc32IsoHdlc{32, 0x04C11DB7, 0xFFFFFFFF, true, true, 0xFFFFFFFF};  // 0xCBF43926

// Bit-at-a-time reference CRC (slow; the hash models use table-driven versions checked against it).
uint32_t crc_reference(const CrcParams& params, std::span<const uint8_t> bytes);

enum class HashFunction : uint8_t {
  crc16_bisync,  // CRC-16/ARC: poly 0x8005 (x^16+x^15+x^2+1, the BISYNC CRC-16), reflected, init 0
  crc16_xor8,    // crc16_bisync ^ key folded to 8 bits
  crc16_xor4,
  crc16_xor2,
  crc16_xor1,
  crc16_ccitt,  // CRC-16/IBM-3740 ("CCITT-FALSE"): poly 0x1021, init 0xFFFF
  crc32_lo,     // low 16 bits of CRC-32/ISO-HDLC (Ethernet's CRC-32)
  crc32_hi,     // high 16 bits of it
  xor16,        // XOR of the key's 16-bit words
};

struct HashModel {
  HashFunction function = HashFunction::crc16_bisync;
  uint32_t seed = 0;
  uint32_t offset_bits = 0;  // 0..15: rotation of the 16-bit hash before the modulo
  bool seed_per_switch = false;
};

// The 16-bit hash of a 5-tuple at switch `switch_id` (any stable id; NodeId in the fabric model).
uint16_t ecmp_hash(const HashModel& model, uint32_t switch_id, const FiveTuple& tuple);

// The member (0 .. group_size-1) of an ECMP group of `group_size` links that the flow takes.
uint32_t ecmp_select(const HashModel& model, uint32_t switch_id, const FiveTuple& tuple, uint32_t group_size);

// The 16-bit hash of raw bytes under `function` with `seed` (what ecmp_hash applies to the packed key).
uint16_t hash_bytes(HashFunction function, uint32_t seed, std::span<const uint8_t> bytes);

// "crc16-bisync", "crc16-xor8".."crc16-xor1", "crc16-ccitt", "crc32-lo", "crc32-hi", "xor16".
std::string_view hash_function_name(HashFunction function);
// Parses "NAME[:seed=N][:offset=N][:per-switch]" (N decimal or 0x hex). Errors name the bad part.
Result<HashModel> parse_hash_model(std::string_view spec);
// The spec string parse_hash_model reads back.
std::string to_string(const HashModel& model);

// Expected fraction of `links` links that carry at least one of `flows` flows hashed uniformly at random:
// 1 - (1 - 1/links)^flows (balls into bins); for flows = links = n it tends to 1 - 1/e ~ 0.632.
double expected_links_used_fraction(uint32_t flows, uint32_t links);

}  // namespace megascale::topo
