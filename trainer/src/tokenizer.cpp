// Byte-level tokenizer (tokenizer.h).
#include "megascale/trainer/tokenizer.h"

#include <fmt/format.h>

namespace megascale::trainer {

std::vector<uint16_t> byte_encode(std::string_view text) {
  std::vector<uint16_t> ids;
  ids.reserve(text.size());
  for (char c : text) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

std::string byte_decode_token(uint16_t token) {
  if (token < 256) return std::string(1, static_cast<char>(static_cast<uint8_t>(token)));
  if (token == kByteEotToken) return std::string(kEotText);
  return fmt::format("<|{}|>", token);
}

std::string byte_decode(std::span<const uint16_t> tokens) {
  std::string text;
  text.reserve(tokens.size());
  for (uint16_t t : tokens) {
    if (t < 256) {
      text += static_cast<char>(static_cast<uint8_t>(t));
    } else {
      text += byte_decode_token(t);
    }
  }
  return text;
}

}  // namespace megascale::trainer
