#include "fib/fib.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "core/checksum.h"

namespace sb::fib {

namespace {
constexpr uint32_t kMagic = 0x42494653u;  // "SFIB"
constexpr uint32_t kFormat = 1;
struct Header {
  uint32_t magic, format, kind, reserved;
  uint64_t hash_seed, count;
};
static_assert(sizeof(Header) == 32);
constexpr size_t kPair = 16 + 4;
}  // namespace

std::string Fib::serialize() const {
  Header hd{kMagic, kFormat, uint32_t(kind()), 0, hash_seed_, size()};
  std::string out(reinterpret_cast<const char*>(&hd), sizeof hd);
  out.reserve(sizeof hd + size() * kPair + 8);
  for_each([&](const FlowKey& k, uint32_t v) {
    out.append(reinterpret_cast<const char*>(k.bytes), 16);
    out.append(reinterpret_cast<const char*>(&v), 4);
  });
  const uint64_t sum = checksum64(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(&sum), 8);
  return out;
}

Status Fib::deserialize(std::string_view bytes) {
  if (bytes.size() < sizeof(Header) + 8) return Status::Corrupt("fib image: truncated");
  uint64_t sum;
  std::memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
  if (checksum64(bytes.data(), bytes.size() - 8) != sum) return Status::Corrupt("fib image: checksum mismatch");
  Header hd;
  std::memcpy(&hd, bytes.data(), sizeof hd);
  if (hd.magic != kMagic) return Status::Corrupt("fib image: bad magic");
  if (hd.format != kFormat) return Status::Corrupt("fib image: unknown format " + std::to_string(hd.format));
  if (hd.kind != uint32_t(kind())) return Status::Corrupt("fib image: written by another backend");
  if (hd.hash_seed != hash_seed_) return Status::InvalidArgument("fib image: different hash seed");
  // The pair bytes present bound the count BEFORE it is multiplied: a
  // count near 2^64 / kPair would wrap `count * kPair` to the real length.
  const uint64_t body = bytes.size() - sizeof hd - 8;
  if (hd.count > body / kPair || hd.count * kPair != body)
    return Status::Corrupt("fib image: length mismatch (" + std::to_string(hd.count) + " pairs in " +
                           std::to_string(body) + " bytes)");
  if (size() != 0) return Status::FailedPrecondition("fib image: target fib is not empty");
  if (hd.count > capacity())
    return Status::Capacity("fib image: " + std::to_string(hd.count) + " pairs, this fib holds " +
                            std::to_string(capacity()));
  const size_t n = size_t(hd.count);
  std::vector<FlowKey> keys(n);
  std::vector<uint32_t> vals(n);
  const char* p = bytes.data() + sizeof hd;
  for (size_t i = 0; i < n; ++i, p += kPair) {
    std::memcpy(keys[i].bytes, p, 16);
    std::memcpy(&vals[i], p + 16, 4);
    if (!keys[i].canonical())
      return Status::Corrupt("fib image: pair " + std::to_string(i) + ": key bytes 13..15 are not zero");
    if (vals[i] == kFibMiss)
      return Status::Corrupt("fib image: pair " + std::to_string(i) + ": value 0xffffffff is the miss marker");
  }
  // A key twice would make build() fail part-way: refuse the image first.
  std::vector<std::pair<uint64_t, uint64_t>> sorted(n);
  for (size_t i = 0; i < n; ++i) sorted[i] = {keys[i].lo(), keys[i].hi()};
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    return Status::Corrupt("fib image: a key appears twice");
  // build() is all-or-nothing (a backend-specific refusal, e.g. an Othello
  // value that is not a live record of its key, leaves the fib empty).
  return build(keys.data(), vals.data(), n).with_context("fib image");
}

}  // namespace sb::fib
