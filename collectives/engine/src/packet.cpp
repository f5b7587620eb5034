// Packet encoding and validating decoding (layouts: packet.h).
#include "megascale/engine/packet.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "megascale/engine/crc32c.h"

namespace megascale::engine {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

namespace {

constexpr size_t kCrcOffset = 20;
constexpr uint8_t kMaxLaneId = 63;

template <class T>
void put(uint8_t* p, size_t off, T v) {
  std::memcpy(p + off, &v, sizeof v);
}
template <class T>
T get(const uint8_t* p, size_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof v);
  return v;
}

// CRC32C of a received header with its crc field taken as zero: one pass over a copy (a header is at
// most kMaxHeaderBytes; one contiguous CRC is cheaper than three calls around the field).
uint32_t header_crc(const uint8_t* p, size_t header_len) {
  uint8_t copy[kMaxHeaderBytes];
  std::memcpy(copy, p, header_len);
  std::memset(copy + kCrcOffset, 0, 4);
  return crc32c(copy, header_len);
}

void put_common(uint8_t* p, const CommonHeader& h) {
  put<uint32_t>(p, 0, kMagic);
  p[4] = h.version;
  p[5] = static_cast<uint8_t>(h.type);
  p[6] = h.lane;
  p[7] = h.flags;
  put<uint64_t>(p, 8, h.dst_conn_id);
  put<uint64_t>(p, 16, 0);  // reserved and header_crc (filled in by seal)
}

// The encoder's crc field is still zero (put_common wrote it): CRC the header in place.
size_t seal(uint8_t* p, size_t header_len) {
  put<uint32_t>(p, kCrcOffset, crc32c(p, header_len));
  return header_len;
}

// A sealed header whose fields were changed after encoding: clear the old CRC, then seal again.
void reseal(uint8_t* p, size_t header_len) {
  put<uint32_t>(p, kCrcOffset, 0);
  seal(p, header_len);
}

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

// The header length of a packet of this type, judged from the bytes present; 0 when too short.
size_t header_len_of(PacketType type, const uint8_t* p, size_t len) {
  switch (type) {
    case PacketType::kSeg:
      return kSegHeaderBytes;
    case PacketType::kAck:
      return len >= kAckFixedBytes ? kAckFixedBytes + size_t{p[55]} * 16 : kAckFixedBytes;
    case PacketType::kCnp:
      return kCnpBytes;
    case PacketType::kSyn:
    case PacketType::kSynAck:
      return kHandshakeBytes;
    case PacketType::kFin:
      return kFinBytes;
    case PacketType::kRst:
      return len >= kRstFixedBytes ? kRstFixedBytes + get<uint16_t>(p, 26) : kRstFixedBytes;
  }
  return 0;
}

bool known_type(uint8_t t) {
  return t >= 1 && t <= 7;
}

}  // namespace

std::string_view to_string(DecodeResult r) {
  switch (r) {
    case DecodeResult::kOk:
      return "ok";
    case DecodeResult::kTruncated:
      return "truncated";
    case DecodeResult::kBadMagic:
      return "bad magic";
    case DecodeResult::kBadVersion:
      return "bad version";
    case DecodeResult::kBadType:
      return "bad type";
    case DecodeResult::kBadHeaderCrc:
      return "bad header crc";
    case DecodeResult::kBadLength:
      return "bad length";
    case DecodeResult::kBadField:
      return "bad field";
    case DecodeResult::kBadPayloadCrc:
      return "bad payload crc";
  }
  return "?";
}

std::string_view to_string(PacketType t) {
  switch (t) {
    case PacketType::kSeg:
      return "SEG";
    case PacketType::kAck:
      return "ACK";
    case PacketType::kCnp:
      return "CNP";
    case PacketType::kSyn:
      return "SYN";
    case PacketType::kSynAck:
      return "SYN_ACK";
    case PacketType::kFin:
      return "FIN";
    case PacketType::kRst:
      return "RST";
  }
  return "?";
}

void set_seg_payload_crc(uint8_t* seg_header, uint32_t payload_crc) {
  put<uint32_t>(seg_header, 44, payload_crc);
  reseal(seg_header, kSegHeaderBytes);
}

bool add_ack_remote_delay(uint8_t* header, size_t header_len, uint32_t delay_ns) {
  if (header_len < kAckFixedBytes || header[5] != static_cast<uint8_t>(PacketType::kAck)) return false;
  const uint64_t sum = uint64_t{get<uint32_t>(header, 48)} + delay_ns;
  put<uint32_t>(header, 48, static_cast<uint32_t>(std::min<uint64_t>(sum, 0xFFFFFFFFu)));
  reseal(header, header_len);
  return true;
}

size_t encode_seg(CommonHeader hdr, const SegHeader& seg, uint8_t* out) {
  hdr.type = PacketType::kSeg;
  put_common(out, hdr);
  put<uint64_t>(out, 24, seg.seq);
  put<int64_t>(out, 32, seg.send_ts_ns);
  put<uint32_t>(out, 40, seg.payload_len);
  put<uint32_t>(out, 44, seg.payload_crc);
  put<uint32_t>(out, 48, seg.slot);
  if (hdr.flags & kFlagCredit) {
    put<int32_t>(out, 52, seg.tag);
    put<uint64_t>(out, 56, seg.capacity_bytes);
    put<uint64_t>(out, 64, 0);
  } else {
    put<int32_t>(out, 52, seg.tag);
    put<uint64_t>(out, 56, seg.offset);
    put<uint64_t>(out, 64, seg.msg_len);
  }
  return seal(out, kSegHeaderBytes);
}

size_t encode_ack(CommonHeader hdr, const AckHeader& ack, uint8_t* out) {
  hdr.type = PacketType::kAck;
  put_common(out, hdr);
  const uint8_t nsack = ack.nsack <= kMaxSackRanges ? ack.nsack : static_cast<uint8_t>(kMaxSackRanges);
  put<uint64_t>(out, 24, ack.cum_ack);
  put<uint64_t>(out, 32, ack.echo_seq);
  put<int64_t>(out, 40, ack.echo_ts_ns);
  put<uint32_t>(out, 48, ack.remote_delay_ns);
  put<uint16_t>(out, 52, ack.ce_count);
  out[54] = ack.echo_lane;
  out[55] = nsack;
  for (size_t i = 0; i < nsack; ++i) {
    put<uint64_t>(out, kAckFixedBytes + i * 16, ack.sack[i].start);
    put<uint64_t>(out, kAckFixedBytes + i * 16 + 8, ack.sack[i].end);
  }
  return seal(out, kAckFixedBytes + size_t{nsack} * 16);
}

size_t encode_cnp(CommonHeader hdr, const CnpBody& cnp, uint8_t* out) {
  hdr.type = PacketType::kCnp;
  put_common(out, hdr);
  std::memset(out + 24, 0, kCnpBytes - 24);
  out[24] = cnp.lane;
  return seal(out, kCnpBytes);
}

size_t encode_handshake(CommonHeader hdr, const HandshakeBody& hs, uint8_t* out) {
  put_common(out, hdr);
  put<uint64_t>(out, 24, hs.src_conn_id);
  put<uint16_t>(out, 32, hs.version_min);
  put<uint16_t>(out, 34, hs.version_max);
  put<uint16_t>(out, 36, hs.lanes);
  out[38] = hs.cc_kind;
  out[39] = 0;
  put<uint32_t>(out, 40, hs.mss_bytes);
  put<uint32_t>(out, 44, hs.recv_slots);
  put<uint32_t>(out, 48, hs.window_segments);
  put<uint32_t>(out, 52, 0);
  return seal(out, kHandshakeBytes);
}

size_t encode_fin(CommonHeader hdr, const FinBody& fin, uint8_t* out) {
  hdr.type = PacketType::kFin;
  put_common(out, hdr);
  put<uint64_t>(out, 24, fin.final_seq);
  put<uint32_t>(out, 32, fin.unfinished_sends);
  put<uint32_t>(out, 36, fin.unfinished_recvs);
  put<uint64_t>(out, 40, fin.cum_ack);
  return seal(out, kFinBytes);
}

size_t encode_rst(CommonHeader hdr, const RstBody& rst, uint8_t* out) {
  hdr.type = PacketType::kRst;
  put_common(out, hdr);
  const uint16_t n = rst.text == nullptr          ? 0
                     : rst.text_len > kMaxRstText ? static_cast<uint16_t>(kMaxRstText)
                                                  : rst.text_len;
  put<uint16_t>(out, 24, static_cast<uint16_t>(rst.reason));
  put<uint16_t>(out, 26, n);
  put<uint32_t>(out, 28, 0);
  put<uint64_t>(out, 32, rst.ref_conn_id);
  if (n > 0) std::memcpy(out + kRstFixedBytes, rst.text, n);
  return seal(out, kRstFixedBytes + n);
}

namespace {

// The decoder behind decode_packet and decode_packet_header_only. `payload_absent`: p[0..len) is the
// header alone and a SEG's payload (absent_payload_bytes of it) was never there (virtual payload, in
// simulation); with payload_absent false this is the wire decoder, and absent_payload_bytes is unused.
DecodeResult decode_impl(const uint8_t* p, size_t len, Packet& out, bool verify_payload_crc,
                         bool payload_absent, uint32_t absent_payload_bytes) {
  if (len < kCommonHeaderBytes) return DecodeResult::kTruncated;
  if (get<uint32_t>(p, 0) != kMagic) return DecodeResult::kBadMagic;
  const uint8_t type_byte = p[5];
  if (!known_type(type_byte)) return DecodeResult::kBadType;
  const auto type = static_cast<PacketType>(type_byte);
  const size_t hlen = header_len_of(type, p, len);
  // A count field (nsack, RST text length) may claim a header longer than any we send; the CRC check
  // below works on a bounded copy, so reject that before touching it (found by fuzz_packet).
  if (hlen > kMaxHeaderBytes) return DecodeResult::kBadLength;
  if (len < hlen) return DecodeResult::kTruncated;
  // The CRC first: a damaged length or version byte must read as damage, not as a protocol fact.
  if (get<uint32_t>(p, kCrcOffset) != header_crc(p, hlen)) return DecodeResult::kBadHeaderCrc;

  const bool handshake_layout =
      type == PacketType::kSyn || type == PacketType::kSynAck || type == PacketType::kRst;
  if (!handshake_layout && !version_implemented(p[4])) return DecodeResult::kBadVersion;
  if (get<uint32_t>(p, 16) != 0) return DecodeResult::kBadField;

  out.hdr.version = p[4];
  out.hdr.type = type;
  out.hdr.lane = p[6];
  out.hdr.flags = p[7];
  out.hdr.dst_conn_id = get<uint64_t>(p, 8);
  out.header_len = static_cast<uint32_t>(hlen);
  out.payload = nullptr;
  out.payload_len = 0;
  if (out.hdr.lane > kMaxLaneId) return DecodeResult::kBadField;
  if (payload_absent && type != PacketType::kSeg && absent_payload_bytes != 0)
    return DecodeResult::kBadLength;

  switch (type) {
    case PacketType::kSeg: {
      SegHeader& s = out.seg;
      s.seq = get<uint64_t>(p, 24);
      s.send_ts_ns = get<int64_t>(p, 32);
      s.payload_len = get<uint32_t>(p, 40);
      s.payload_crc = get<uint32_t>(p, 44);
      s.slot = get<uint32_t>(p, 48);
      const uint8_t known =
          kFlagRetransmit | kFlagLast | kFlagCredit | kFlagTooLarge | (p[4] >= 2 ? kFlagNoPayloadCrc : 0);
      if (out.hdr.flags & ~known) return DecodeResult::kBadField;
      if (payload_absent ? (len != hlen || absent_payload_bytes != s.payload_len)
                         : (len - hlen != s.payload_len)) {
        return DecodeResult::kBadLength;
      }
      if (s.payload_len > kMaxSegmentPayload) return DecodeResult::kBadLength;
      if (out.hdr.dst_conn_id == 0) return DecodeResult::kBadField;
      if (out.hdr.flags & kFlagCredit) {
        s.tag = get<int32_t>(p, 52);
        s.capacity_bytes = get<uint64_t>(p, 56);
        s.offset = 0;
        s.msg_len = 0;
        if (s.payload_len != 0 || s.tag < -1 || get<uint64_t>(p, 64) != 0 ||
            (out.hdr.flags & (kFlagLast | kFlagTooLarge | kFlagNoPayloadCrc))) {
          return DecodeResult::kBadField;
        }
      } else {
        s.tag = get<int32_t>(p, 52);
        s.capacity_bytes = 0;
        s.offset = get<uint64_t>(p, 56);
        s.msg_len = get<uint64_t>(p, 64);
        if (s.tag < 0) return DecodeResult::kBadField;
        if (out.hdr.flags & kFlagTooLarge) {
          if (s.payload_len != 0 || s.payload_crc != 0 || s.offset != 0 || (out.hdr.flags & kFlagLast)) {
            return DecodeResult::kBadField;
          }
          out.payload = payload_absent ? nullptr : p + hlen;
          return DecodeResult::kOk;
        }
        // offset + payload_len <= msg_len, written so that it cannot overflow.
        if (s.offset > s.msg_len || s.msg_len - s.offset < s.payload_len) return DecodeResult::kBadField;
        const bool last = (out.hdr.flags & kFlagLast) != 0;
        if (last != (s.offset + s.payload_len == s.msg_len)) return DecodeResult::kBadField;
        if (s.payload_len == 0 && s.msg_len != 0) return DecodeResult::kBadField;
      }
      out.payload = payload_absent ? nullptr : p + hlen;
      out.payload_len = s.payload_len;
      if (s.payload_len == 0 && s.payload_crc != 0) return DecodeResult::kBadField;
      // An unchecked payload (version 2) has one to leave unchecked, and a CRC field of 0.
      const bool unchecked = (out.hdr.flags & kFlagNoPayloadCrc) != 0;
      if (unchecked && (s.payload_len == 0 || s.payload_crc != 0)) return DecodeResult::kBadField;
      if (verify_payload_crc && !unchecked && !payload_absent && s.payload_len > 0 &&
          crc32c(out.payload, s.payload_len) != s.payload_crc) {
        return DecodeResult::kBadPayloadCrc;
      }
      return DecodeResult::kOk;
    }
    case PacketType::kAck: {
      AckHeader& a = out.ack;
      a.cum_ack = get<uint64_t>(p, 24);
      a.echo_seq = get<uint64_t>(p, 32);
      a.echo_ts_ns = get<int64_t>(p, 40);
      a.remote_delay_ns = get<uint32_t>(p, 48);
      a.ce_count = get<uint16_t>(p, 52);
      a.echo_lane = p[54];
      a.nsack = p[55];
      if (a.nsack > kMaxSackRanges) return DecodeResult::kBadLength;
      if (len != hlen) return DecodeResult::kBadLength;
      if ((out.hdr.flags & ~kFlagAckRequest) != 0 || a.echo_lane > kMaxLaneId || out.hdr.dst_conn_id == 0) {
        return DecodeResult::kBadField;
      }
      for (size_t i = 0; i < a.nsack; ++i) {
        a.sack[i].start = get<uint64_t>(p, kAckFixedBytes + i * 16);
        a.sack[i].end = get<uint64_t>(p, kAckFixedBytes + i * 16 + 8);
        if (a.sack[i].start <= a.cum_ack || a.sack[i].end <= a.sack[i].start) return DecodeResult::kBadField;
      }
      return DecodeResult::kOk;
    }
    case PacketType::kCnp:
      if (len != hlen) return DecodeResult::kBadLength;
      out.cnp.lane = p[24];
      if (out.cnp.lane > kMaxLaneId || !all_zero(p + 25, kCnpBytes - 25) || out.hdr.flags != 0 ||
          out.hdr.dst_conn_id == 0) {
        return DecodeResult::kBadField;
      }
      return DecodeResult::kOk;
    case PacketType::kSyn:
    case PacketType::kSynAck: {
      if (len != hlen) return DecodeResult::kBadLength;
      HandshakeBody& h = out.handshake;
      h.src_conn_id = get<uint64_t>(p, 24);
      h.version_min = get<uint16_t>(p, 32);
      h.version_max = get<uint16_t>(p, 34);
      h.lanes = get<uint16_t>(p, 36);
      h.cc_kind = p[38];
      h.mss_bytes = get<uint32_t>(p, 40);
      h.recv_slots = get<uint32_t>(p, 44);
      h.window_segments = get<uint32_t>(p, 48);
      // Reserved bytes are zero (a future version may give them meaning; this one refuses them).
      const uint8_t known = type == PacketType::kSynAck && p[4] >= 3 ? kFlagConfirm : 0;
      if (h.src_conn_id == 0 || h.version_min > h.version_max || (out.hdr.flags & ~known) != 0 ||
          p[39] != 0 || get<uint32_t>(p, 52) != 0) {
        return DecodeResult::kBadField;
      }
      if ((type == PacketType::kSyn) != (out.hdr.dst_conn_id == 0)) return DecodeResult::kBadField;
      return DecodeResult::kOk;
    }
    case PacketType::kFin:
      if (len != hlen) return DecodeResult::kBadLength;
      out.fin.final_seq = get<uint64_t>(p, 24);
      out.fin.unfinished_sends = get<uint32_t>(p, 32);
      out.fin.unfinished_recvs = get<uint32_t>(p, 36);
      out.fin.cum_ack = get<uint64_t>(p, 40);
      if ((out.hdr.flags & ~kFlagFinReply) != 0 || out.hdr.dst_conn_id == 0) return DecodeResult::kBadField;
      return DecodeResult::kOk;
    case PacketType::kRst: {
      if (len != hlen) return DecodeResult::kBadLength;
      RstBody& r = out.rst;
      const uint16_t reason = get<uint16_t>(p, 24);
      r.text_len = get<uint16_t>(p, 26);
      r.ref_conn_id = get<uint64_t>(p, 32);
      r.text = reinterpret_cast<const char*>(p + kRstFixedBytes);
      if (reason < 1 || reason > 5 || r.text_len > kMaxRstText || out.hdr.flags != 0 ||
          get<uint32_t>(p, 28) != 0) {
        return DecodeResult::kBadField;
      }
      r.reason = static_cast<RstReason>(reason);
      return DecodeResult::kOk;
    }
  }
  return DecodeResult::kBadType;
}

}  // namespace

size_t packet_header_len(const uint8_t* data, size_t len) {
  if (len < kCommonHeaderBytes || !known_type(data[5])) return 0;
  return header_len_of(static_cast<PacketType>(data[5]), data, len);
}

DecodeResult decode_packet(const uint8_t* p, size_t len, Packet& out, bool verify_payload_crc) {
  return decode_impl(p, len, out, verify_payload_crc, false, 0);
}

DecodeResult decode_packet_header_only(const uint8_t* header, size_t header_len,
                                       uint32_t absent_payload_bytes, Packet& out) {
  return decode_impl(header, header_len, out, false, true, absent_payload_bytes);
}

}  // namespace megascale::engine
