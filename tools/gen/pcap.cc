#include "tools/gen/pcap.h"

#include <cerrno>
#include <cstring>

namespace sb::gen {

namespace {

uint32_t swap32(uint32_t v) { return __builtin_bswap32(v); }

}  // namespace

Status PcapWriter::open(const std::string& path) {
  (void)close();
  f_ = std::fopen(path.c_str(), "wb");
  if (f_ == nullptr) return Status::Io(path + ": cannot create: " + std::strerror(errno));
  std::setvbuf(f_, nullptr, _IOFBF, 1 << 20);
  path_ = path;
  err_ = false;
  const uint32_t hdr[6] = {0xa1b2c3d4u, 2u | (4u << 16), 0, 0, 65535, 1};
  if (std::fwrite(hdr, sizeof hdr, 1, f_) != 1) err_ = true;
  return Status::Ok();
}

void PcapWriter::write(const uint8_t* frame, uint32_t len, uint64_t ts_ns) {
  if (f_ == nullptr) return;
  const uint32_t rec[4] = {uint32_t(ts_ns / 1000000000u), uint32_t(ts_ns % 1000000000u / 1000u), len, len};
  if (std::fwrite(rec, sizeof rec, 1, f_) != 1 || std::fwrite(frame, 1, len, f_) != len) err_ = true;
}

Status PcapWriter::close() {
  if (f_ == nullptr) return Status::Ok();
  const bool bad = std::fclose(f_) != 0 || err_;
  f_ = nullptr;
  return bad ? Status::Io(path_ + ": write failed") : Status::Ok();
}

Status read_pcap(const std::string& path, std::vector<std::vector<uint8_t>>* frames) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Status::NotFound(path + ": cannot open");
  uint32_t hdr[6];
  if (std::fread(hdr, sizeof hdr, 1, f) != 1) {
    std::fclose(f);
    return Status::Corrupt(path + ": no pcap header");
  }
  bool swap = false;
  const uint32_t m = hdr[0];
  if (m == 0xa1b2c3d4u || m == 0xa1b23c4du) swap = false;
  else if (swap32(m) == 0xa1b2c3d4u || swap32(m) == 0xa1b23c4du) swap = true;
  else {
    std::fclose(f);
    return Status::Corrupt(path + ": not a pcap file");
  }
  frames->clear();
  uint32_t rec[4];
  while (std::fread(rec, sizeof rec, 1, f) == 1) {
    const uint32_t cap = swap ? swap32(rec[2]) : rec[2];
    if (cap > 262144) {
      std::fclose(f);
      return Status::Corrupt(path + ": bad record length");
    }
    std::vector<uint8_t> b(cap);
    if (cap && std::fread(b.data(), 1, cap, f) != cap) {
      std::fclose(f);
      return Status::Corrupt(path + ": truncated record");
    }
    frames->push_back(std::move(b));
  }
  std::fclose(f);
  return Status::Ok();
}

Status write_pcap(const std::string& path, const std::vector<std::vector<uint8_t>>& frames) {
  PcapWriter w;
  SB_RETURN_IF_ERROR(w.open(path));
  uint64_t t = 1700000000ULL * 1000000000ULL;
  for (const auto& fr : frames) w.write(fr.data(), uint32_t(fr.size()), t += 1000);
  return w.close();
}

}  // namespace sb::gen
