// A send's arguments, checked once where the request enters (the NCCL plugin's isend, UdpWire's
// post_send, Connection::post_send) and passed inward as a value that cannot hold bad arguments, so the
// layers below assert rather than check again.
//
//   Result<SendRequest> req = SendRequest::make(data, size, /*tag=*/7);
//   if (!req) return req.error();                 // "post_send: tag must be >= 0, got -1"
//   connection->post_send(*req);                  // or a part of it: req->part(offset, length)
#pragma once

#include <cassert>
#include <cstdint>
#include <string>

#include "megascale/common/result.h"

namespace megascale::engine {

class SendRequest {
 public:
  SendRequest() = default;  // an empty message with tag 0

  // A message of `size_bytes` bytes at `data` with `tag`. Errors: a negative tag; a null buffer for a
  // non-empty message, unless `virtual_payload` (EngineConfig::virtual_payload: a simulation, where
  // only the byte count exists).
  static Result<SendRequest> make(const void* data, uint64_t size_bytes, int32_t tag,
                                  bool virtual_payload = false) {
    if (tag < 0) return make_error("post_send: tag must be >= 0, got " + std::to_string(tag));
    if (data == nullptr && size_bytes > 0 && !virtual_payload) {
      return make_error("post_send: null buffer for a non-empty message");
    }
    return SendRequest(data, size_bytes, tag);
  }

  // The bytes [offset, offset + length) of this message as a message of its own, with the same tag
  // (a stripe's part). Requires offset + length <= size_bytes().
  SendRequest part(uint64_t offset, uint64_t length) const {
    assert(offset <= size_ && length <= size_ - offset);
    const void* at = data_ == nullptr ? nullptr : static_cast<const uint8_t*>(data_) + offset;
    return SendRequest(at, length, tag_);
  }

  // The same message read from `copy` instead (a staging copy of the same bytes). Requires a non-null
  // `copy` for a non-empty message.
  SendRequest read_from(const void* copy) const {
    assert(copy != nullptr || size_ == 0);
    return SendRequest(copy, size_, tag_);
  }

  const void* data() const { return data_; }
  uint64_t size_bytes() const { return size_; }
  int32_t tag() const { return tag_; }

 private:
  SendRequest(const void* data, uint64_t size_bytes, int32_t tag)
      : data_(data), size_(size_bytes), tag_(tag) {}

  const void* data_ = nullptr;
  uint64_t size_ = 0;
  int32_t tag_ = 0;
};

}  // namespace megascale::engine
