// rib/flat_map.h: a small open-addressing hash map for the owner's hot
// per-op tables (request-id dedup window, the group's key index), where
// std::unordered_map's node allocation per insert dominated the profile.
//
// Linear probing over a power-of-two slot array, load <= 1/2 (grows by
// doubling), deletion by backward shift (no tombstones, so probe lengths
// never degrade). Keys need ==, a hasher, and an `empty` key value that is
// never inserted (passed at construction).
//
// Thread safety: none (one owner thread). Pointers returned by find() are
// invalidated by any insert or erase.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace sb::rib {

template <typename K, typename V, typename Hash>
class FlatMap {
 public:
  explicit FlatMap(K empty, size_t initial = 16) : empty_(empty) { rehash(initial); }

  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }

  V* find(const K& k) {
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (keys_[i] == k) return &vals_[i];
      if (keys_[i] == empty_) return nullptr;
    }
  }
  const V* find(const K& k) const { return const_cast<FlatMap*>(this)->find(k); }
  bool contains(const K& k) const { return find(k) != nullptr; }

  // Inserts or overwrites; returns true when the key was new.
  bool put(const K& k, const V& v) {
    if ((n_ + 1) * 2 > keys_.size()) rehash(keys_.size() * 2);
    for (size_t i = slot(k);; i = (i + 1) & mask_) {
      if (keys_[i] == k) { vals_[i] = v; return false; }
      if (keys_[i] == empty_) {
        keys_[i] = k;
        vals_[i] = v;
        ++n_;
        return true;
      }
    }
  }

  bool erase(const K& k) {
    size_t i = slot(k);
    for (;; i = (i + 1) & mask_) {
      if (keys_[i] == empty_) return false;
      if (keys_[i] == k) break;
    }
    // Backward shift: pull later entries of the cluster into the hole when
    // their home slot does not lie in (hole, j].
    size_t hole = i;
    for (size_t j = (i + 1) & mask_; !(keys_[j] == empty_); j = (j + 1) & mask_) {
      const size_t home = slot(keys_[j]);
      const bool between = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!between) {
        keys_[hole] = keys_[j];
        vals_[hole] = std::move(vals_[j]);
        hole = j;
      }
    }
    keys_[hole] = empty_;
    vals_[hole] = V();
    --n_;
    return true;
  }

  // Calls f(key, value) for every entry (slot order).
  template <typename Fn>
  void for_each(Fn&& f) const {
    for (size_t i = 0; i < keys_.size(); ++i)
      if (!(keys_[i] == empty_)) f(keys_[i], vals_[i]);
  }

  // Removes everything, keeping the slot array (cheap reuse per group).
  void clear() {
    if (n_ == 0) return;
    for (size_t i = 0; i < keys_.size(); ++i) keys_[i] = empty_;
    n_ = 0;
  }
  void reserve(size_t n) {
    size_t c = keys_.size();
    while (c < n * 2) c *= 2;
    if (c != keys_.size()) rehash(c);
  }

 private:
  size_t slot(const K& k) const { return size_t(Hash()(k)) & mask_; }
  void rehash(size_t cap) {
    size_t c = 16;
    while (c < cap) c *= 2;
    std::vector<K> ok(c, empty_);
    std::vector<V> ov(c);
    ok.swap(keys_);
    ov.swap(vals_);
    mask_ = c - 1;
    n_ = 0;
    for (size_t i = 0; i < ok.size(); ++i)
      if (!(ok[i] == empty_)) put(ok[i], ov[i]);
  }

  K empty_;
  std::vector<K> keys_;
  std::vector<V> vals_;
  size_t mask_ = 0, n_ = 0;
};

}  // namespace sb::rib
