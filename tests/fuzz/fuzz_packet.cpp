// libFuzzer target: decode_packet on arbitrary bytes. It must never read outside the input, crash or
// hang (ASan/UBSan watch), and whatever it accepts must survive a round trip through the encoders:
// re-encoding the decoded fields gives the same header bytes (except reserved bytes the decoder
// ignores, listed below), and decoding that again gives the same fields.
//
//   fuzz_packet -max_total_time=60 corpus/ tests/fuzz/corpus/fuzz_packet/
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "megascale/engine/packet.h"

namespace {

using namespace megascale::engine;

[[noreturn]] void fail(const char* what, const Packet& p) {
  std::fprintf(stderr, "fuzz_packet: %s (type %s, header %u bytes, payload %u bytes)\n", what,
               std::string(to_string(p.hdr.type)).c_str(), p.header_len, p.payload_len);
  std::abort();
}

// Re-encodes a decoded packet's header into `out`; returns its length.
size_t encode_again(const Packet& p, uint8_t* out) {
  switch (p.hdr.type) {
    case PacketType::kSeg:
      return encode_seg(p.hdr, p.seg, out);
    case PacketType::kAck:
      return encode_ack(p.hdr, p.ack, out);
    case PacketType::kCnp:
      return encode_cnp(p.hdr, p.cnp, out);
    case PacketType::kSyn:
    case PacketType::kSynAck:
      return encode_handshake(p.hdr, p.handshake, out);
    case PacketType::kFin:
      return encode_fin(p.hdr, p.fin, out);
    case PacketType::kRst:
      return encode_rst(p.hdr, p.rst, out);
  }
  return 0;
}

// Bytes the decoder accepts with any value and the encoders write as zero: the reserved fields of the
// frozen handshake layouts (SYN/SYN_ACK byte 39 and 52..55, RST 28..31). The header CRC covers them, so
// it differs too when they are nonzero.
bool ignored_by_decoder(PacketType t, size_t offset) {
  if (offset >= 20 && offset < 24) return true;  // header CRC
  if (t == PacketType::kSyn || t == PacketType::kSynAck) return offset == 39 || (offset >= 52 && offset < 56);
  if (t == PacketType::kRst) return offset >= 28 && offset < 32;
  return false;
}

bool same_fields(const Packet& a, const Packet& b) {
  if (a.hdr.version != b.hdr.version || a.hdr.type != b.hdr.type || a.hdr.lane != b.hdr.lane ||
      a.hdr.flags != b.hdr.flags || a.hdr.dst_conn_id != b.hdr.dst_conn_id || a.header_len != b.header_len ||
      a.payload_len != b.payload_len) {
    return false;
  }
  switch (a.hdr.type) {
    case PacketType::kSeg:
      return a.seg.seq == b.seg.seq && a.seg.send_ts_ns == b.seg.send_ts_ns &&
             a.seg.payload_len == b.seg.payload_len && a.seg.payload_crc == b.seg.payload_crc &&
             a.seg.slot == b.seg.slot && a.seg.tag == b.seg.tag && a.seg.offset == b.seg.offset &&
             a.seg.msg_len == b.seg.msg_len && a.seg.capacity_bytes == b.seg.capacity_bytes;
    case PacketType::kAck:
      if (a.ack.cum_ack != b.ack.cum_ack || a.ack.echo_seq != b.ack.echo_seq ||
          a.ack.echo_ts_ns != b.ack.echo_ts_ns || a.ack.remote_delay_ns != b.ack.remote_delay_ns ||
          a.ack.ce_count != b.ack.ce_count || a.ack.echo_lane != b.ack.echo_lane ||
          a.ack.nsack != b.ack.nsack) {
        return false;
      }
      for (size_t i = 0; i < a.ack.nsack; ++i) {
        if (a.ack.sack[i].start != b.ack.sack[i].start || a.ack.sack[i].end != b.ack.sack[i].end)
          return false;
      }
      return true;
    case PacketType::kCnp:
      return a.cnp.lane == b.cnp.lane;
    case PacketType::kSyn:
    case PacketType::kSynAck:
      return a.handshake.src_conn_id == b.handshake.src_conn_id &&
             a.handshake.version_min == b.handshake.version_min &&
             a.handshake.version_max == b.handshake.version_max && a.handshake.lanes == b.handshake.lanes &&
             a.handshake.cc_kind == b.handshake.cc_kind && a.handshake.mss_bytes == b.handshake.mss_bytes &&
             a.handshake.recv_slots == b.handshake.recv_slots &&
             a.handshake.window_segments == b.handshake.window_segments;
    case PacketType::kFin:
      return a.fin.final_seq == b.fin.final_seq && a.fin.unfinished_sends == b.fin.unfinished_sends &&
             a.fin.unfinished_recvs == b.fin.unfinished_recvs && a.fin.cum_ack == b.fin.cum_ack;
    case PacketType::kRst:
      return a.rst.reason == b.rst.reason && a.rst.ref_conn_id == b.rst.ref_conn_id &&
             a.rst.text_view() == b.rst.text_view();
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Packet pkt;
  const DecodeResult r = decode_packet(data, size, pkt, true);
  (void)to_string(r);

  // Skipping the payload CRC changes only that verdict.
  Packet lax;
  const DecodeResult r_lax = decode_packet(data, size, lax, false);
  if ((r == DecodeResult::kOk || r == DecodeResult::kBadPayloadCrc) != (r_lax == DecodeResult::kOk)) {
    fail("verify_payload_crc=false disagrees beyond the payload CRC", lax);
  }
  if (r != DecodeResult::kOk) return 0;

  // An accepted packet's lengths add up to the datagram's.
  if (pkt.header_len > size || pkt.header_len > kMaxHeaderBytes) fail("header_len beyond the input", pkt);
  if (pkt.payload_len != 0 &&
      (pkt.payload != data + pkt.header_len || pkt.header_len + pkt.payload_len != size)) {
    fail("payload does not follow the header", pkt);
  }
  if (pkt.payload_len == 0 && pkt.header_len != size) fail("accepted trailing bytes", pkt);

  // Round trip through the encoders.
  uint8_t again[kMaxHeaderBytes + 8];
  std::memset(again, 0xEE, sizeof again);
  const size_t hlen = encode_again(pkt, again);
  if (hlen != pkt.header_len) fail("re-encoded header has another length", pkt);
  bool reserved_differ = false;
  for (size_t i = 0; i < hlen; ++i) {
    if (again[i] == data[i]) continue;
    if (!ignored_by_decoder(pkt.hdr.type, i)) fail("re-encoded header differs", pkt);
    if (i < 20 || i >= 24) reserved_differ = true;
  }
  if (!reserved_differ && std::memcmp(again, data, hlen) != 0)
    fail("header CRC differs after re-encoding", pkt);

  // Decoding the re-encoded packet (with the original payload) gives the same fields.
  static uint8_t whole[kMaxHeaderBytes + kMaxSegmentPayload];
  std::memcpy(whole, again, hlen);
  if (pkt.payload_len != 0) std::memcpy(whole + hlen, pkt.payload, pkt.payload_len);
  Packet back;
  if (decode_packet(whole, hlen + pkt.payload_len, back, true) != DecodeResult::kOk) {
    fail("re-encoded packet does not decode", pkt);
  }
  back.payload = pkt.payload;  // points into `whole`; compare the rest
  if (!same_fields(pkt, back)) fail("fields changed in the round trip", pkt);
  return 0;
}
