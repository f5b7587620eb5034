// The byte-level tokenizer: every byte round-trips, EOT and padding ids decode visibly.
#include "megascale/trainer/tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace megascale::trainer {
namespace {

TEST(ByteTokenizer, EveryByteRoundTrips) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::vector<uint16_t> ids = byte_encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[static_cast<size_t>(b)], b);
  EXPECT_EQ(byte_decode(ids), all);
}

TEST(ByteTokenizer, EotAndPaddingIds) {
  std::vector<uint16_t> ids = byte_encode("1 + 1 = 2.");
  EXPECT_EQ(ids.size(), 10u);
  EXPECT_EQ(ids[0], '1');
  ids.push_back(kByteEotToken);
  ids.push_back(300);
  EXPECT_EQ(byte_decode(ids), "1 + 1 = 2.<|endoftext|><|300|>");
  EXPECT_EQ(byte_decode_token('a'), "a");
  EXPECT_EQ(kByteVocabSize, kByteEotToken + 1);
  EXPECT_EQ(kBytePaddedVocabSize % 64, 0);
  EXPECT_GE(kBytePaddedVocabSize, kByteVocabSize);
}

}  // namespace
}  // namespace megascale::trainer
