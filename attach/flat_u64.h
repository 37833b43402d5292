#pragma once
// Open-addressing tables keyed by 64-bit block hashes, for the per-block bookkeeping an attach
// does at up to millions of events a second: one flat array, linear probing, no allocation per
// entry (std::unordered_map allocates a node for every block stored and frees it on removal).
// Keys are mixed before use, so structured hashes (SGLang's page hashes, tests' small integers)
// spread as well as random ones.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace kvscope::attach {

// A map from uint64_t to V (trivially copyable, default-constructible). Erase shifts the
// probe run back, so there are no tombstones and lookups stay short however much is erased.
template <typename V>
class FlatU64Map {
  public:
    size_t size() const { return size_ + (has_zero_ ? 1 : 0); }

    V* find(uint64_t key) {
        if (key == 0) return has_zero_ ? &zero_ : nullptr;
        if (slots_.empty()) return nullptr;
        for (size_t i = home(key);; i = (i + 1) & mask_) {
            if (slots_[i].key == key) return &slots_[i].value;
            if (slots_[i].key == 0) return nullptr;
        }
    }
    // The value for `key`, default-constructed when it was not there; `added` says which.
    V& get(uint64_t key, bool& added) {
        if (key == 0) {
            added = !has_zero_;
            if (added) zero_ = V{};
            has_zero_ = true;
            return zero_;
        }
        if ((size_ + 1) * 2 > slots_.size()) grow();
        for (size_t i = home(key);; i = (i + 1) & mask_) {
            if (slots_[i].key == key) {
                added = false;
                return slots_[i].value;
            }
            if (slots_[i].key == 0) {
                added = true;
                ++size_;
                slots_[i].key = key;
                slots_[i].value = V{};
                return slots_[i].value;
            }
        }
    }
    bool erase(uint64_t key) {
        if (key == 0) return std::exchange(has_zero_, false);
        if (slots_.empty()) return false;
        size_t i = home(key);
        for (;; i = (i + 1) & mask_) {
            if (slots_[i].key == key) break;
            if (slots_[i].key == 0) return false;
        }
        // Backward shift: move later entries of the run into the hole when their home allows.
        for (size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
            if (slots_[j].key == 0) break;
            const size_t h = home(slots_[j].key);
            if (((j - h) & mask_) >= ((j - i) & mask_)) {
                slots_[i] = slots_[j];
                i = j;
            }
        }
        slots_[i].key = 0;
        --size_;
        return true;
    }
    void clear() {
        slots_.clear();
        mask_ = 0;
        size_ = 0;
        has_zero_ = false;
    }
    // Calls f(key, value) for every entry, in no particular order.
    template <typename F>
    void for_each(F&& f) const {
        if (has_zero_) f(uint64_t{0}, zero_);
        for (const Slot& s : slots_)
            if (s.key != 0) f(s.key, s.value);
    }

  private:
    struct Slot {
        uint64_t key = 0;  // 0: empty (the key 0 itself is kept aside, in zero_)
        V value{};
    };
    size_t home(uint64_t key) const {
        return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
    }
    void grow() {
        std::vector<Slot> old = std::move(slots_);
        const size_t n = old.empty() ? 64 : old.size() * 2;
        slots_.assign(n, Slot{});
        mask_ = n - 1;
        shift_ = 64 - std::countr_zero(n);
        size_ = 0;
        for (const Slot& s : old)
            if (s.key != 0) {
                bool added = false;
                get(s.key, added) = s.value;
            }
    }

    std::vector<Slot> slots_;
    size_t mask_ = 0, size_ = 0;
    int shift_ = 58;
    bool has_zero_ = false;
    V zero_{};
};

}  // namespace kvscope::attach
