// Connection id -> connection: open addressing with linear probing over a power-of-two table. Ids are
// random 64-bit values, so their low bits index the table directly. Lookups never allocate; inserts
// grow the table (connection setup only).
#pragma once

#include <cstdint>
#include <vector>

namespace megascale::engine::detail {

template <class V>
class ConnTable {
 public:
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kTombstone = ~uint64_t{0};  // ids are never 0 or ~0

  V* find(uint64_t id) const {
    if (slots_.empty() || id == kEmpty || id == kTombstone) return nullptr;
    for (uint64_t i = id & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == id) return s.value;
      if (s.key == kEmpty) return nullptr;
    }
  }

  void insert(uint64_t id, V* value) {
    if ((used_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    for (uint64_t i = id & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == kEmpty || s.key == kTombstone) {
        if (s.key == kEmpty) ++used_;
        s = Slot{id, value};
        return;
      }
    }
  }

  void erase(uint64_t id) {
    if (slots_.empty()) return;
    for (uint64_t i = id & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.key == id) {
        s.key = kTombstone;
        s.value = nullptr;
        return;
      }
      if (s.key == kEmpty) return;
    }
  }

 private:
  struct Slot {
    uint64_t key = kEmpty;
    V* value = nullptr;
  };

  void rehash(size_t n) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(n, Slot{});
    mask_ = n - 1;
    used_ = 0;
    for (const Slot& s : old) {
      if (s.key != kEmpty && s.key != kTombstone) insert(s.key, s.value);
    }
  }

  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
  size_t used_ = 0;  // non-empty slots (live + tombstones)
};

}  // namespace megascale::engine::detail
