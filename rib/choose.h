// rib/choose.h: `node: choose`, weighted assignment of new sessions
// (Concury, SoCC'20, §5.3: a code table with many codes per node).
//
// A table of kCodes = 4096 codes (l_d = 12, as Concury uses; > 8x the
// 32-node maximum so weights have a granularity of 1/4096). Node i holds a
// number of codes proportional to its weight (largest-remainder
// apportionment, so counts differ from the exact share by < 1 code). A new
// session's code is reduce(remix(h, salt::kChoose), kCodes): uniform over
// codes, so the node share follows the weights. Codes are laid out
// interleaved (code c -> a pseudo-random permutation) so that similar
// weights do not give contiguous code ranges, which keeps nodes' shares
// independent of any structure in the hash.
//
// The choice is recorded in the RIB record: changing the weights (a new
// table) affects only sessions added afterwards, never existing ones.
// A node with weight 0 gets no code (it can still be named explicitly).
//
// Thread safety: immutable after construction; const use from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/hash.h"
#include "core/status.h"

namespace sb::rib {

class CodeTable {
 public:
  static constexpr uint32_t kCodes = 4096;

  // (node id, weight) pairs; weights >= 0, at least one > 0.
  static Result<CodeTable> build(const std::vector<std::pair<uint32_t, double>>& weights);

  uint32_t code_of(uint64_t h) const { return uint32_t(reduce(remix(h, salt::kChoose), kCodes)); }
  uint32_t choose(uint64_t h) const { return table_[code_of(h)]; }
  // Codes node `id` holds.
  uint32_t codes_of(uint32_t id) const;

 private:
  std::array<uint8_t, kCodes> table_{};
};

}  // namespace sb::rib
