#include "gpt/gpt.h"

#include <string>

#include "gpt/ludo.h"
#include "gpt/setsep.h"

namespace sb::gpt {

namespace {
SetSepConfig setsep_config(const GptConfig& c) {
  SetSepConfig s;
  s.value_bits = c.value_bits;
  s.index_bits = c.index_bits;
  s.array_bits = c.array_bits;
  s.capacity = c.capacity;
  s.log2_partitions = c.log2_partitions;
  s.hash_seed = c.hash_seed;
  s.seed = c.seed;
  return s;
}

// ---- Ludo (gpt/ludo.h) ----
LudoConfig ludo_config(const GptConfig& c) {
  LudoConfig l;
  l.value_bits = c.value_bits;
  l.capacity = c.capacity;
  l.log2_partitions = c.log2_partitions;
  l.shards_per_partition = c.ludo_shards;
  l.hash_seed = c.hash_seed;
  l.seed = c.seed;
  return l;
}
}  // namespace

Result<std::unique_ptr<GptTable>> deserialize_gpt(std::span<const uint8_t> bytes) {
  if (bytes.size() < 5) return Status::Corrupt("gpt snapshot: too short");
  switch (Backend(bytes[4])) {
    case Backend::kSetSep: {
      auto r = SetSep::deserialize(bytes);
      if (!r.ok()) return r.status();
      return std::unique_ptr<GptTable>(std::move(r.value()));
    }
    case Backend::kLudo: {  // Ludo
      auto r = LudoTable::deserialize(bytes);
      if (!r.ok()) return r.status();
      return std::unique_ptr<GptTable>(std::move(r.value()));
    }
    default:
      return Status::InvalidArgument("gpt snapshot: backend byte " + std::to_string(bytes[4]) +
                                     " not built into this binary");
  }
}

Result<std::unique_ptr<GptBuilder>> make_gpt_builder(const GptConfig& cfg) {
  switch (cfg.backend) {
    case Backend::kSetSep: {
      auto r = SetSepBuilder::create(setsep_config(cfg));
      if (!r.ok()) return r.status();
      return std::unique_ptr<GptBuilder>(std::move(r.value()));
    }
    case Backend::kLudo: {  // Ludo
      auto r = LudoBuilder::create(ludo_config(cfg));
      if (!r.ok()) return r.status();
      return std::unique_ptr<GptBuilder>(std::move(r.value()));
    }
    default:
      return Status::InvalidArgument(std::string("gpt: backend ") + backend_name(cfg.backend) +
                                     " not built into this binary");
  }
}

Result<std::unique_ptr<GptTable>> make_gpt_table(const GptConfig& cfg) {
  switch (cfg.backend) {
    case Backend::kSetSep: {
      auto r = SetSep::create(setsep_config(cfg));
      if (!r.ok()) return r.status();
      return std::unique_ptr<GptTable>(std::move(r.value()));
    }
    case Backend::kLudo: {  // Ludo
      auto r = LudoTable::create(ludo_config(cfg));
      if (!r.ok()) return r.status();
      return std::unique_ptr<GptTable>(std::move(r.value()));
    }
    default:
      return Status::InvalidArgument(std::string("gpt: backend ") + backend_name(cfg.backend) +
                                     " not built into this binary");
  }
}

}  // namespace sb::gpt
