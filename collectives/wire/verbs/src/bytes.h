// Unaligned native-order field access for the verbs wire's small messages (handle, set-up, re-connect).
// Internal to collectives/wire/verbs.
#pragma once

#include <cstdint>
#include <cstring>

namespace megascale::wire::verbs::detail {

template <class T>
void put(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof v);
}
template <class T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace megascale::wire::verbs::detail
