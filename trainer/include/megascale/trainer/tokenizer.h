// The byte-level tokenizer of the embedded dataset: token = byte value (0..255), plus an end-of-text
// token 256 that separates documents, as GPT-2's <|endoftext|> does. Vocabulary 257, padded to 320
// rows of wte so the LM-head matmul stays a multiple of 64 (llm.c pads 50257 to 50304 for the same reason).
//
//   std::vector<uint16_t> ids = byte_encode("17 + 25 = 42.");   // 13 tokens, no EOT
//   ids.push_back(kByteEotToken);
//   std::string text = byte_decode(ids);                          // "17 + 25 = 42.<|endoftext|>"
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace megascale::trainer {

inline constexpr uint16_t kByteEotToken = 256;
inline constexpr int kByteVocabSize = 257;
inline constexpr int kBytePaddedVocabSize = 320;
inline constexpr std::string_view kEotText = "<|endoftext|>";

// One token per byte of `text` (no EOT added).
std::vector<uint16_t> byte_encode(std::string_view text);

// Bytes back; EOT becomes kEotText, ids above 256 (padding rows a model should never sample) become
// "<|id|>" so a bad sample is visible instead of silently dropped.
std::string byte_decode(std::span<const uint16_t> tokens);

// One token as text (same rules as byte_decode).
std::string byte_decode_token(uint16_t token);

}  // namespace megascale::trainer
