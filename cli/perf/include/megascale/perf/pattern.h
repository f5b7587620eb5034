// Data patterns that let the receiver check perf's messages. Every 8-byte word depends on the message's
// key and on its position, so a misplaced, stale, duplicated-over or corrupted segment shows.
//
//   fill_pattern(buf, size, key);                      // --check: every byte, before each send
//   int64_t bad = find_mismatch(buf, size, key);       // -1 when intact
//   stamp_ends(buf, size, key);                        // default: the first and last 8 bytes only
//   int64_t bad2 = check_ends(buf, size, key);
//
// Keys: message_key(row, index, reply) is unique per row, message and direction.
#pragma once

#include <cstdint>
#include <string>

namespace megascale::perf {

uint64_t message_key(uint64_t row, uint64_t index, bool reply);
uint64_t pattern_word(uint64_t key, uint64_t word_index);

void fill_pattern(uint8_t* buf, uint64_t size_bytes, uint64_t key);
// Offset of the first byte that differs from fill_pattern's, or -1.
int64_t find_mismatch(const uint8_t* buf, uint64_t size_bytes, uint64_t key);

// Writes the pattern's first 8 bytes at the start and its last 8 at the end (a message shorter than
// 16 bytes gets its whole pattern).
void stamp_ends(uint8_t* buf, uint64_t size_bytes, uint64_t key);
int64_t check_ends(const uint8_t* buf, uint64_t size_bytes, uint64_t key);

// "message 17 (65536 B): byte 4096 is 0x3a, expected 0x91".
std::string describe_mismatch(const uint8_t* buf, uint64_t size_bytes, uint64_t key, int64_t offset,
                              uint64_t index);

}  // namespace megascale::perf
