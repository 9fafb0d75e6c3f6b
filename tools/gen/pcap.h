// tools/gen/pcap.h: classic pcap files (Ethernet link type), written by
// `sb-gen send --pcap` / `sb-gen sink --pcap` and read by the tests.
//
// The writer uses microsecond timestamps (magic a1b2c3d4); the reader also
// takes nanosecond files (a1b23c4d, what DPDK's net_pcap tx_pcap writes)
// and byte-swapped ones. Writing goes through stdio with a 1 MiB buffer:
// no allocation per frame, but it is disk I/O on the hot path, meant for
// tests and captures, not for rate measurements.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/status.h"

namespace sb::gen {

class PcapWriter {
 public:
  PcapWriter() = default;
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;
  ~PcapWriter() { (void)close(); }

  Status open(const std::string& path);
  bool is_open() const { return f_ != nullptr; }
  // ts_ns: wall-clock (CLOCK_REALTIME) nanoseconds.
  void write(const uint8_t* frame, uint32_t len, uint64_t ts_ns);
  Status close();

 private:
  FILE* f_ = nullptr;
  bool err_ = false;
  std::string path_;
};

// Reads every frame of a pcap file (tests).
Status read_pcap(const std::string& path, std::vector<std::vector<uint8_t>>* frames);
// Writes frames into a new pcap file (tests).
Status write_pcap(const std::string& path, const std::vector<std::vector<uint8_t>>& frames);

}  // namespace sb::gen
