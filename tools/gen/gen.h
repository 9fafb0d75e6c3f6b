// tools/gen/gen.h: the two DPDK modes of sb-gen (send, sink), their
// options, and the EAL/port plumbing they share.
//
// Each mode is its own process with its own EAL (own --file-prefix,
// --no-huge by default) because on the testbed the generator's ports and
// the eNodeB port live in different network namespaces. One lcore, one rx
// and one tx queue per port; the calling thread is the only one touching
// the ports, so nothing is shared and nothing is locked.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "tools/gen/frame.h"

namespace sb::gen {

struct EalOptions {
  std::vector<std::string> devices;  // DPDK device strings (vdev or PCI address)
  std::string file_prefix;           // default: sb-gen-<mode>-<pid>
  unsigned lcore = 0;
  unsigned mem_mb = 256;
  bool hugepages = false;            // default --no-huge
  std::vector<std::string> extra;    // --eal ARG (repeatable), passed through
};

struct SendOptions {
  EalOptions eal;
  std::string sessions;
  std::vector<Mac> dst_macs;         // one per port (or one for all)
  double rate_pps = 10000;           // 0: as fast as the ports take
  double duration_s = 10;
  uint64_t count = 0;                // stop after this many packets (0: no limit)
  uint32_t size = 128;
  double zipf_s = 0;                 // 0: uniform
  double unknown = 0;                // fraction of packets on unknown flows
  uint64_t seed = 1;
  uint64_t ecmp_seed = 0;
  uint32_t run_id = 0;               // 0: derived from the clock and pid
  std::string out;                   // send.json
  std::string pcap;
  bool count_upstream = false;
  bool quiet = false;
};

struct SinkOptions {
  EalOptions eal;
  std::string sessions;
  bool has_mac = false;
  Mac mac{};                         // our MAC (default: the port's)
  double duration_s = 0;             // 0: until SIGINT/SIGTERM (or idle exit)
  double idle_exit_s = 0;            // exit after this long without any frame but Echo Responses
                                     // (from the start); 0: never
  std::string out;                   // sink.json
  std::string pcap;
  std::vector<uint32_t> echo_to;     // GTP-U peers to send Echo Requests to
  std::vector<Mac> gw_macs;          // MAC per echo target / gateway (else learned)
  uint32_t src_ip = 0;               // our S1-U address (default: enb_ip of session 0)
  uint32_t gw_ip = 0;                // default upstream destination (default: echo_to[0])
  std::string upstream_teids;
  double upstream_pps = 10;
  bool upstream_paused = false;      // upstream waits for SIGUSR1 (g_upstream_on)
  uint32_t run_id = 0;               // expected run id (0: the first one seen)
  bool any_mac = false;              // accept frames to any MAC
  bool plain = false;                // also accept the generator's frames unencapsulated
                                     // (no gateway in the path: calibration, tests)
  bool quiet = false;
};

// Set by SIGINT/SIGTERM.
extern std::atomic<bool> g_stop;
// The sink's upstream G-PDUs flow while set: SIGUSR1 sets it, SIGUSR2
// clears it (sink --upstream-paused starts with it clear).
extern std::atomic<bool> g_upstream_on;

int run_send(const SendOptions& o);
int run_sink(const SinkOptions& o);

// ---- shared plumbing (dpdk_port.cc) ----------------------------------------

Status eal_init(const EalOptions& o, const char* mode);
struct PortInfo {
  uint16_t id = 0;
  Mac mac{};
  std::string dev;
};
// Configures (1 rx + 1 tx queue), starts and puts in promiscuous mode the
// port of a device string. pool: the rx mbuf pool.
Status port_open(const std::string& dev, struct rte_mempool* pool, PortInfo* out);
void eal_done(const std::vector<PortInfo>& ports);
// For a device string naming a kernel interface (iface=NAME: af_packet):
// fails when frames of max_frame bytes (without FCS) exceed that
// interface's MTU + 14, which the kernel discards without an error (they
// would count as sent, then lost). Ok for other devices, or when the
// interface cannot be queried (the EAL then says why the port fails).
Status check_frame_fits(const std::string& dev, uint32_t max_frame);

uint64_t mono_ns();
uint64_t real_ns();
std::string boot_id();
std::string mac_str(const Mac& m);
// Writes text to path ("-" = stdout), with a trailing newline.
Status write_text(const std::string& path, const std::string& text);
// Before a run: fails (with the message write_text would give at its end)
// when path ("" and "-" pass) cannot be written: a directory, a missing
// directory, no permission. The run's counts would otherwise be lost.
Status check_output(const std::string& path);

// One status line per second on stderr: \r-updated on a tty, plain lines otherwise.
class StatusLine {
 public:
  explicit StatusLine(bool quiet);
  void show(const std::string& line);
  void finish();

 private:
  bool tty_, quiet_, dirty_ = false;
  size_t last_ = 0;
};

}  // namespace sb::gen
