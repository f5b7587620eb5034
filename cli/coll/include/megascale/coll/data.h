// `megascale coll`'s data check, host side: what each rank sends, and what each rank's receive buffer
// must hold after the collective, for every type and op, so that a wrong element is counted exactly.
//
// Rank r's element i (its global index in the collective's array) is 1 + (3r + i) mod 7, or for prod
// 1 + (r + i) mod 2 (products stay exact in every type up to 8 ranks, and wrap in the integer types as
// NCCL's do). Sums and averages of these are exact in half and bfloat16 up to dozens of ranks; a
// floating average is compared within a relative 1e-2 (half, bfloat16) or 1e-6 (float, double).
//
//   std::vector<unsigned char> send = send_data(c, t, op, rank, shape);   // cudaMemcpy to the GPU
//   ... the collective ...
//   std::vector<unsigned char> want = expected_data(c, t, op, root, rank, n, shape);
//   int64_t wrong = count_wrong(t, op, got.data(), want.data(), want.size() / type_size(t));
#pragma once

#include <cstdint>
#include <vector>

#include "megascale/coll/coll.h"

namespace megascale::coll {

// Rank `rank`'s send buffer (shape.send_count elements of t) before collective c.
std::vector<unsigned char> send_data(Collective c, DataType t, RedOp op, int rank, const Shape& shape);

// What rank `rank`'s receive buffer (shape.recv_count elements) holds after c: all_reduce the op over
// the ranks; reduce and broadcast at `root` (other ranks' buffers are not checked: empty); all_gather
// every rank's part in rank order; reduce_scatter the op over the ranks of this rank's part; alltoall
// part j from rank j; sendrecv the previous rank's data.
std::vector<unsigned char> expected_data(Collective c, DataType t, RedOp op, int root, int rank, int nranks,
                                         const Shape& shape);

// Elements of `got` that differ from `expected` (count of them each), floating averages within the
// tolerance above.
int64_t count_wrong(DataType t, RedOp op, const void* got, const void* expected, uint64_t count);

// half and bfloat16 from and to float (round to nearest even), for the host side.
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bfloat16(float f);
float bfloat16_to_float(uint16_t b);

}  // namespace megascale::coll
