// What travels between the two sides of a connection outside the data path: the listen handle (through
// NCCL's bootstrap) and the hello message (the first message on a new connection).
//
// One UDP wire serves every listen of a device, so a connection that arrives must be told which listen
// it is for: the connecting side sends a Hello naming the listen id from the handle, on a tag NCCL
// never uses, and the accepting side routes the connection to that listen's accept().
//
// A comm may run over several connections, its stripes (MEGASCALE_LAYOUT stripes=), each on its own wire of
// the listening device, every one of which holds the listen under the same id: the handle then carries each
// wire's port, and the connecting side opens one connection to each, from its own wires, each with its
// own hello. The listening side's accept() returns the comm once every stripe has arrived.
//
// The handle carries the wire's address: on UDP the listener's IP address and each stripe's port; on
// verbs (`wire` 1 verbs-ud, 2 verbs-rc) its port's GID in `addr` and each stripe's home QP number in
// `stripe_qpns`, which the connecting side turns into the port's address text "[GID]/0xQPN"
// (wire/verbs port.h). `check` covers every field but connect_token, so a handle damaged on its way
// through NCCL's bootstrap is refused with a message rather than connected somewhere else.
//
// connect() is non-blocking and NCCL calls it again with the same handle buffer until it returns a comm
// (as NCCL's IB net keeps its stage in the handle), so connect keeps a token in the handle that finds
// its in-progress state; the token is looked up, never dereferenced.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "megascale/common/result.h"
#include "megascale/nccl/abi/common.h"

namespace megascale::nccl {

inline constexpr uint32_t kHandleMagic = 0x484E534D;  // "MSNH"
inline constexpr uint16_t kHandleVersion = 3;         // 2: stripes; 3: verbs, check
inline constexpr uint32_t kHelloMagic = 0x4C454D48;   // "HMEL"

// Tags the plugin itself uses on a connection. NCCL's tags are ranks (>= 0 and far below these).
inline constexpr int32_t kHelloTag = 0x7FFFFFFF;

// The most stripes a comm has, and the smallest part they cut (MEGASCALE_LAYOUT stripes=, stripe_bytes=).
inline constexpr uint32_t kMaxStripes = 8;
inline constexpr uint32_t kMinStripeBytes = 4096;

// Copied in and out with memcpy (NCCL's buffer need not be aligned). Host byte order: both sides run the same
// plugin on the same architecture (NCCL requires it).
struct ListenHandle {
  uint32_t magic;    // kHandleMagic
  uint16_t version;  // kHandleVersion
  uint8_t family;    // 4 or 6
  uint8_t dscp;      // the listener's DSCP (informational)
  uint16_t port;     // the listener's UDP port (its wire's socket 0): stripe 0's
  uint8_t stripes;   // connections the comm runs over, 1..kMaxStripes
  uint8_t wire;      // HandleWire: what `addr` and the stripes' fields hold
  uint8_t addr[16];  // IPv4 in the first 4 bytes, or IPv6
  uint32_t reserved1;
  uint64_t listen_id;      // names the listen on its wires (random, nonzero)
  uint64_t connect_token;  // 0 from listen; set by the first connect() call on the connecting side
  char ifname[16];         // the listener's interface, for messages
  uint16_t stripe_ports[kMaxStripes - 1];  // stripes 1..stripes-1: each one's wire's port
  uint16_t reserved2;
  // Where the listener cuts a message into stripes (its MEGASCALE_LAYOUT stripe_bytes): the connecting side
  // cuts its sends there too, whatever its own setting, since the receiver places the parts by it.
  uint32_t stripe_bytes;
  uint32_t stripe_qpns[kMaxStripes];  // verbs: each stripe's wire's home QP number (24 bits, nonzero)
  uint32_t check;                     // handle_check(): every byte but connect_token and check
  uint8_t reserved[8];
};
static_assert(sizeof(ListenHandle) == abi::kNetHandleMaxBytes, "the handle is NCCL's 128 bytes");

// ListenHandle::wire.
enum class HandleWire : uint8_t { kUdp = 0, kVerbsUd = 1, kVerbsRc = 2 };
const char* to_string(HandleWire w);  // "udp", "verbs-ud", "verbs-rc", "unknown"

// FNV-1a over the handle's bytes but connect_token and check.
uint32_t handle_check(const ListenHandle& h);
inline void seal_handle(ListenHandle& h) {
  h.check = handle_check(h);
}

// A handle as it arrived: magic, version, check, wire kind, stripe count and part size, and per wire
// kind its addresses (UDP: family 4 or 6 and nonzero ports; verbs: QP numbers in 1..0xFFFFFF). The
// error says what is wrong ("the handle is damaged: ...").
Status check_listen_handle(const ListenHandle& h);

// What stripe `i` (< h.stripes) connects to, as UdpWire::connect(address) takes it: "10.0.0.1:5000",
// "[fd00::1]:5000", or on verbs the port's "[GID]/0xQPN".
std::string stripe_address(const ListenHandle& h, uint32_t i);

// Puts a verbs port's address text ("[GID]/0xQPN", wire/verbs port.h) into the handle as stripe `i`'s:
// the GID into `addr` (every stripe of a device has the same), the QP number into stripe_qpns[i]. The
// error names the text when it is not that form or its GID differs from stripe 0's.
Status put_verbs_address(ListenHandle& h, uint32_t i, std::string_view address);

struct Hello {
  uint32_t magic;  // kHelloMagic
  uint16_t version;
  uint16_t stripe;  // which of the comm's stripes this connection is (stripes may share a wire)
  uint64_t listen_id;
  uint64_t connect_token;
};

}  // namespace megascale::nccl
