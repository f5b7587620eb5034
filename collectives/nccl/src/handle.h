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
// connect() is non-blocking and NCCL calls it again with the same handle buffer until it returns a comm
// (as NCCL's IB net keeps its stage in the handle), so connect keeps a token in the handle that finds
// its in-progress state; the token is looked up, never dereferenced.
#pragma once

#include <cstdint>
#include <cstring>

#include "megascale/nccl/abi/common.h"

namespace megascale::nccl {

inline constexpr uint32_t kHandleMagic = 0x484E534D;  // "MSNH"
inline constexpr uint16_t kHandleVersion = 2;         // 2: stripes
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
  uint8_t reserved0;
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
  uint8_t reserved[44];
};
static_assert(sizeof(ListenHandle) == abi::kNetHandleMaxBytes, "the handle is NCCL's 128 bytes");

struct Hello {
  uint32_t magic;  // kHelloMagic
  uint16_t version;
  uint16_t stripe;  // which of the comm's stripes this connection is (stripes may share a wire)
  uint64_t listen_id;
  uint64_t connect_token;
};

}  // namespace megascale::nccl
