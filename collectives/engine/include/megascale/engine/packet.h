// The engine's wire format: encoding and validating decoding of every packet type.
//
// Every packet starts with a 24-byte common header; a type-specific body follows; SEG DATA packets carry
// payload after the header. All fields are little-endian with fixed offsets (the engine assumes a
// little-endian host, as every x86-64 and arm64 Linux host is). The header CRC (CRC32C of the whole
// header with the crc field zeroed, payload excluded) protects every header byte; SEG packets also carry
// a CRC32C of their payload (unless flagged kFlagNoPayloadCrc, version 2).
//
//   uint8_t hdr[kMaxHeaderBytes];
//   SegHeader seg{.seq = 7, .send_ts_ns = now, .payload_len = n, .payload_crc = crc32c(p, n), ...};
//   size_t hlen = encode_seg(CommonHeader{.type = PacketType::kSeg, .lane = 2, .dst_conn_id = id},
//                            seg, hdr);
//   // transmit hdr[0..hlen) followed by p[0..n)
//
//   Packet pkt;
//   if (DecodeResult r = decode_packet(bytes, len, pkt); r != DecodeResult::kOk) { count(r); drop(); }
//
// Decoding never trusts a length: every length is checked against the bytes actually present and every
// enumerated field against its range. The layouts of SYN, SYN_ACK and RST are frozen for all protocol
// versions (so two peers can always tell each other that their versions differ); every other type
// must carry the version negotiated at connection setup (kVersionMin..kVersion, below).
//
// Layout (byte offsets):
//   common  0 u32 magic kMagic | 4 u8 version | 5 u8 type | 6 u8 lane | 7 u8 flags |
//           8 u64 dst_conn_id (receiver's id; 0 in SYN) | 16 u32 reserved (0) | 20 u32 header_crc
//   SEG    24 u64 seq | 32 i64 send_ts_ns | 40 u32 payload_len | 44 u32 payload_crc |
//          DATA:   48 u32 slot | 52 i32 tag | 56 u64 offset | 64 u64 msg_len             (72 bytes)
//          CREDIT: 48 u32 slot | 52 i32 tag | 56 u64 capacity_bytes | 64 u64 reserved   (72 bytes)
//   ACK    24 u64 cum_ack | 32 u64 echo_seq | 40 i64 echo_ts_ns | 48 u32 remote_delay_ns |
//          52 u16 ce_count | 54 u8 echo_lane | 55 u8 nsack | 56 nsack x (u64 start, u64 end)
//   CNP    24 u8 lane | 25..31 zero                                                          (32 bytes)
//   SYN, SYN_ACK
//          24 u64 src_conn_id | 32 u16 version_min | 34 u16 version_max | 36 u16 lanes |
//          38 u8 cc_kind | 39 u8 reserved | 40 u32 mss_bytes | 44 u32 recv_slots |
//          48 u32 window_segments | 52 u32 reserved                                          (56 bytes)
//   FIN    24 u64 final_seq | 32 u32 unfinished_sends | 36 u32 unfinished_recvs | 40 u64 cum_ack (48 bytes)
//   RST    24 u16 reason | 26 u16 text_len | 28 u32 reserved | 32 u64 ref_conn_id | 40 text
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "megascale/common/units.h"

namespace megascale::engine {

inline constexpr uint32_t kMagic = 0x4C43534D;  // "MSCL" in memory order
// Protocol versions this engine implements, kVersionMin..kVersion:
//   1  the first.
//   2  adds kFlagNoPayloadCrc: a SEG DATA whose payload carries no CRC (EngineConfig::payload_crc).
//   3  adds kFlagConfirm: a SYN_ACK that asks the initiator to confirm it (EngineConfig::confirm_handshake).
// Every other layout and rule is the same in all three. A connection speaks the highest version both ends
// offer (EngineConfig::version_min..version_max), so a version-2 engine and a version-1 one talk
// version 1, with every payload checked.
inline constexpr uint8_t kVersionMin = 1;
inline constexpr uint8_t kVersion = 3;
inline constexpr bool version_implemented(uint32_t v) {
  return v >= kVersionMin && v <= kVersion;
}

inline constexpr size_t kCommonHeaderBytes = 24;
inline constexpr size_t kSegHeaderBytes = 72;
inline constexpr size_t kAckFixedBytes = 56;  // ACK header without SACK ranges
inline constexpr size_t kMaxSackRanges = 16;
inline constexpr size_t kAckMaxBytes = kAckFixedBytes + kMaxSackRanges * 16;  // 312
inline constexpr size_t kCnpBytes = 32;
inline constexpr size_t kHandshakeBytes = 56;
inline constexpr size_t kFinBytes = 48;
inline constexpr size_t kRstFixedBytes = 40;
inline constexpr size_t kMaxRstText = 128;
// The largest header any packet has: what TxPacket reserves.
inline constexpr size_t kMaxHeaderBytes = kAckMaxBytes;
// The largest payload a SEG may carry (a jumbo-frame-sized cap; the wire's MTU is usually smaller).
inline constexpr uint32_t kMaxSegmentPayload = 65'000;

enum class PacketType : uint8_t {
  kSeg = 1,     // reliable stream element (DATA or CREDIT)
  kAck = 2,     // cumulative + selective acknowledgement, echoes, ECN count (not sequenced)
  kCnp = 3,     // DCQCN congestion notification for one lane
  kSyn = 4,     // connection request
  kSynAck = 5,  // connection accept
  kFin = 6,     // close (flag kFlagFinReply in the answer)
  kRst = 7,     // reset: version mismatch, unknown connection, ...
};

// Flags, by type.
inline constexpr uint8_t kFlagRetransmit = 0x01;  // SEG: this copy is a retransmission
inline constexpr uint8_t kFlagLast = 0x02;        // SEG DATA: last segment of its message
inline constexpr uint8_t kFlagCredit = 0x04;      // SEG: CREDIT kind (else DATA)
inline constexpr uint8_t kFlagFinReply = 0x08;    // FIN: the answer to a peer's FIN
// SEG DATA: the message for `slot` (msg_len bytes) is larger than the slot's capacity: the send failed
// and the receive must fail too. Carries no payload (offset 0).
inline constexpr uint8_t kFlagTooLarge = 0x10;
// ACK: a keepalive probe; the receiver answers with an ACK at once.
inline constexpr uint8_t kFlagAckRequest = 0x20;
// SEG DATA, version 2 and later: the payload carries no CRC (payload_crc is 0 and nothing checks the
// payload; the header CRC still covers the header). Only the sender's EngineConfig::payload_crc = false
// sets it; the receiver counts such segments (ConnectionStats::segments_unchecked).
inline constexpr uint8_t kFlagNoPayloadCrc = 0x40;
// SYN_ACK, version 3 and later: the acceptor holds the connection back from accept() until a packet
// from the initiator names the acceptor's connection id (src_conn_id here, a fresh random value the
// initiator has only from this SYN_ACK). The initiator answers it with an ACK at once. A SYN replayed
// from an earlier run thus never yields an accepted connection: its sender never sees the SYN_ACK.
inline constexpr uint8_t kFlagConfirm = 0x80;

enum class RstReason : uint16_t {
  kVersionMismatch = 1,    // SYN's version range does not overlap ours
  kUnknownConnection = 2,  // packet for a connection id we do not have
  kRefused = 3,            // not accepting connections / too many
  kAborted = 4,            // the application released the connection while it was open
  kProtocolError = 5,      // the peer broke the protocol (e.g. data for a slot never credited)
};

struct CommonHeader {
  uint8_t version = kVersion;
  PacketType type = PacketType::kSeg;
  uint8_t lane = 0;
  uint8_t flags = 0;
  uint64_t dst_conn_id = 0;
};

// SEG body. For CREDIT (flags & kFlagCredit): slot, tag, capacity_bytes; payload_len is 0.
// For DATA: slot, offset, msg_len; payload_len bytes of payload follow.
struct SegHeader {
  uint64_t seq = 0;
  TimeNs send_ts_ns = 0;
  uint32_t payload_len = 0;
  uint32_t payload_crc = 0;     // CRC32C of the payload; 0 for an empty payload
  uint32_t slot = 0;            // receive slot (cumulative index of the receiver's post_recv)
  int32_t tag = 0;              // CREDIT: the receive's tag (-1 = any); DATA: the send's tag (>= 0)
  uint64_t offset = 0;          // DATA: byte offset of this payload in the message
  uint64_t msg_len = 0;         // DATA: whole message length, bytes
  uint64_t capacity_bytes = 0;  // CREDIT: the receive buffer's size
};

struct SackRange {
  uint64_t start = 0;  // half-open [start, end), all above cum_ack
  uint64_t end = 0;
};

struct AckHeader {
  uint64_t cum_ack = 0;          // every seq < cum_ack was received
  uint64_t echo_seq = 0;         // the segment that triggered this ACK
  TimeNs echo_ts_ns = 0;         // its send_ts_ns, echoed (the sender's clock)
  uint32_t remote_delay_ns = 0;  // its arrival -> this ACK's departure, on the receiver (a wire that
                                 // sends the ACK late adds its wait: add_ack_remote_delay)
  uint16_t ce_count = 0;         // CE-marked segments since the previous ACK
  uint8_t echo_lane = 0;         // lane the triggering segment arrived on
  uint8_t nsack = 0;             // <= kMaxSackRanges
  SackRange sack[kMaxSackRanges];
};

struct CnpBody {
  uint8_t lane = 0;  // the data lane the CE marks arrived on
};

// SYN and SYN_ACK. In SYN_ACK version_min == version_max == the chosen version.
struct HandshakeBody {
  uint64_t src_conn_id = 0;  // the sender's own connection id
  uint16_t version_min = kVersion;
  uint16_t version_max = kVersion;
  uint16_t lanes = 1;            // lanes the sender sends on (the receiver accepts any lane < 64)
  uint8_t cc_kind = 0;           // cc::ControllerKind of the sender's lanes (CNPs are sent to DCQCN)
  uint32_t mss_bytes = 0;        // largest DATA payload the sender accepts
  uint32_t recv_slots = 0;       // receives the sender may have posted at once (credit ring size)
  uint32_t window_segments = 0;  // segments above cum_ack the sender can hold (reorder window)
};

struct FinBody {
  uint64_t final_seq = 0;         // the sender's next seq: everything below was sent and acked
  uint32_t unfinished_sends = 0;  // sends the sender failed at close
  uint32_t unfinished_recvs = 0;  // receives the sender failed at close
  uint64_t cum_ack = 0;           // the sender's receive point: every segment below it arrived. A FIN
                                  // thus acknowledges what its ACKs, if lost, could not: a message the
                                  // closer took just before closing completes at its sender.
};

struct RstBody {
  RstReason reason = RstReason::kUnknownConnection;
  uint64_t ref_conn_id = 0;  // kUnknownConnection: the id that was not found (the recipient's remote
                             // id); kVersionMismatch: the SYN's src_conn_id
  uint16_t text_len = 0;
  const char* text = nullptr;  // decode: points into the packet; encode: read from here
  std::string_view text_view() const { return {text, text_len}; }
};

// A decoded packet. Only the body matching hdr.type is filled in; payload points into the input.
struct Packet {
  CommonHeader hdr;
  SegHeader seg;
  AckHeader ack;
  CnpBody cnp;
  HandshakeBody handshake;
  FinBody fin;
  RstBody rst;
  const uint8_t* payload = nullptr;
  uint32_t payload_len = 0;
  uint32_t header_len = 0;
};

enum class DecodeResult : uint8_t {
  kOk = 0,
  kTruncated,      // shorter than its header says (or than the common header)
  kBadMagic,       // not ours
  kBadVersion,     // a non-handshake packet with a version other than kVersion
  kBadType,        // unknown type
  kBadHeaderCrc,   // header bytes damaged
  kBadLength,      // payload length disagrees with the datagram, or too many SACK ranges, ...
  kBadField,       // a field out of range (lane >= 64, inverted SACK range, reserved bits set, ...)
  kBadPayloadCrc,  // header fine, payload damaged
};

std::string_view to_string(DecodeResult r);
std::string_view to_string(PacketType t);

// The header length a datagram's type byte and count fields (nsack, RST text length) imply, judged from
// the bytes present: 0 when shorter than the common header or of an unknown type. Nothing is validated;
// decode_packet does that (it rejects a length above kMaxHeaderBytes).
size_t packet_header_len(const uint8_t* data, size_t len);

// Decodes and validates one datagram. On kOk every field of the type's body is in range and both CRCs
// matched; with verify_payload_crc = false the payload CRC is not checked (the caller checks it).
// On kBadPayloadCrc the header fields are filled in (the header itself was intact).
DecodeResult decode_packet(const uint8_t* data, size_t len, Packet& out, bool verify_payload_crc = true);

// Virtual payload (EngineConfig::virtual_payload, for simulation): decodes a datagram of which only the
// header, header[0..header_len), exists; a SEG's payload of `absent_payload_bytes` was never there. Every
// header check of decode_packet applies; the SEG's payload_len must equal absent_payload_bytes (and it
// must be 0 for every other type). out.payload is nullptr, out.payload_len the absent length, and no
// payload CRC is checked.
DecodeResult decode_packet_header_only(const uint8_t* header, size_t header_len,
                                       uint32_t absent_payload_bytes, Packet& out);

// Encoders write the header (common + body) to `out` (at least kMaxHeaderBytes), fill in magic and
// header CRC, and return the header length. hdr.type is set by each encoder.
size_t encode_seg(CommonHeader hdr, const SegHeader& seg, uint8_t* out);
// Writes `payload_crc` into a header encode_seg wrote and re-seals its header CRC.
void set_seg_payload_crc(uint8_t* seg_header, uint32_t payload_crc);

// Adds `delay_ns` to the remote_delay_ns of an ACK header encode_ack wrote (saturating at the field's
// 4.29 s) and re-seals its header CRC: for a wire that sends an ACK later than the engine built it, so
// the field stays what it says, arrival -> this ACK's departure. Returns false (and changes nothing)
// if the header is not an ACK.
bool add_ack_remote_delay(uint8_t* header, size_t header_len, uint32_t delay_ns);
size_t encode_ack(CommonHeader hdr, const AckHeader& ack, uint8_t* out);
size_t encode_cnp(CommonHeader hdr, const CnpBody& cnp, uint8_t* out);
// type must be kSyn or kSynAck (the only encoder that keeps hdr.type).
size_t encode_handshake(CommonHeader hdr, const HandshakeBody& hs, uint8_t* out);
size_t encode_fin(CommonHeader hdr, const FinBody& fin, uint8_t* out);
// Text longer than kMaxRstText is cut.
size_t encode_rst(CommonHeader hdr, const RstBody& rst, uint8_t* out);

}  // namespace megascale::engine
