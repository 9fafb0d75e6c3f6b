// EAL and port plumbing shared by `sb-gen send` and `sb-gen sink`.
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <regex>

#include "node/eal_runtime.h"
#include "tools/gen/gen.h"

namespace sb::gen {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_upstream_on{true};

namespace {

bool is_pci(const std::string& dev) {
  static const std::regex re("^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-7](,.*)?$");
  return std::regex_match(dev, re);
}

// "net_af_packet0,iface=x" -> "net_af_packet0"; a PCI address stays itself.
std::string dev_name(const std::string& dev) { return dev.substr(0, dev.find(',')); }

}  // namespace

Status eal_init(const EalOptions& o, const char* mode) {
  const std::string prefix =
      o.file_prefix.empty() ? std::string("sb-gen-") + mode + "-" + std::to_string(getpid()) : o.file_prefix;
  std::vector<std::string> a = {std::string("sb-gen-") + mode, "-l", std::to_string(o.lcore), "--file-prefix", prefix,
                                "-m", std::to_string(o.mem_mb), "--log-level", "lib.eal:error", "--no-telemetry"};
  if (!o.hugepages) a.push_back("--no-huge");
  bool pci = false;
  for (const auto& d : o.devices) {
    if (is_pci(d)) {
      a.push_back("-a");
      pci = true;
    } else {
      a.push_back("--vdev");
    }
    a.push_back(d);
  }
  if (!pci) a.push_back("--no-pci");
  for (const auto& e : o.extra) a.push_back(e);
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  if (rte_eal_init(int(a.size()), argv.data()) < 0)
    return Status::Unavailable(std::string("DPDK EAL init failed (--port, --lcore, --mem, --file-prefix): ") +
                               rte_strerror(rte_errno));
  return Status::Ok();
}

Status port_open(const std::string& dev, rte_mempool* pool, PortInfo* out) {
  uint16_t pid;
  const std::string name = dev_name(dev);
  if (rte_eth_dev_get_port_by_name(name.c_str(), &pid) != 0)
    return Status::InvalidArgument("--port " + dev + ": no DPDK port named '" + name +
                                   "' (probe failed: is the interface there, is the name unique?)");
  rte_eth_conf conf{};
  int rc = rte_eth_dev_configure(pid, 1, 1, &conf);
  if (rc != 0) return Status::InvalidArgument("--port " + dev + ": configure failed: " + rte_strerror(-rc));
  uint16_t nrx = 1024, ntx = 1024;
  rte_eth_dev_adjust_nb_rx_tx_desc(pid, &nrx, &ntx);
  rc = rte_eth_rx_queue_setup(pid, 0, nrx, rte_eth_dev_socket_id(pid), nullptr, pool);
  if (rc != 0) return Status::InvalidArgument("--port " + dev + ": rx queue: " + rte_strerror(-rc));
  rc = rte_eth_tx_queue_setup(pid, 0, ntx, rte_eth_dev_socket_id(pid), nullptr);
  if (rc != 0) return Status::InvalidArgument("--port " + dev + ": tx queue: " + rte_strerror(-rc));
  rc = rte_eth_dev_start(pid);
  if (rc != 0) return Status::Internal("--port " + dev + ": start failed: " + rte_strerror(-rc));
  (void)rte_eth_promiscuous_enable(pid);  // we filter by MAC ourselves (counted)
  rte_ether_addr a;
  if (rte_eth_macaddr_get(pid, &a) != 0) return Status::Internal("--port " + dev + ": cannot read the MAC");
  std::memcpy(out->mac.b, a.addr_bytes, 6);
  out->id = pid;
  out->dev = dev;
  return Status::Ok();
}

Status check_frame_fits(const std::string& dev, uint32_t max_frame) {
  // "net_af_packet0,iface=ext1,qpairs=1" -> "ext1"
  const size_t at = dev.find(",iface=");
  if (at == std::string::npos) return Status::Ok();
  const size_t b = at + 7;
  const std::string iface = dev.substr(b, dev.find(',', b) - b);
  if (iface.empty() || iface.size() >= IFNAMSIZ) return Status::Ok();
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Ok();
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, iface.c_str(), iface.size());
  const int rc = ioctl(fd, SIOCGIFMTU, &ifr);
  close(fd);
  if (rc != 0 || ifr.ifr_mtu <= 0) return Status::Ok();
  const uint32_t fits = uint32_t(ifr.ifr_mtu) + 14;
  if (max_frame > fits)
    return Status::InvalidArgument("frames of " + std::to_string(max_frame) + " bytes do not fit " + iface +
                                   " (MTU " + std::to_string(ifr.ifr_mtu) + ": at most " + std::to_string(fits) +
                                   " bytes; the kernel would discard them)");
  return Status::Ok();
}

void eal_done(const std::vector<PortInfo>& ports) {
  for (const auto& p : ports) {
    (void)rte_eth_dev_stop(p.id);
    (void)rte_eth_dev_close(p.id);
  }
  const std::string rd = node::eal_runtime_dir();
  rte_eal_cleanup();
  node::remove_eal_runtime_dir(rd);
}

uint64_t mono_ns() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return uint64_t(t.tv_sec) * 1000000000u + uint64_t(t.tv_nsec);
}

uint64_t real_ns() {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return uint64_t(t.tv_sec) * 1000000000u + uint64_t(t.tv_nsec);
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string s;
  std::getline(in, s);
  return s;
}

std::string mac_str(const Mac& m) {
  char b[18];
  std::snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", m.b[0], m.b[1], m.b[2], m.b[3], m.b[4], m.b[5]);
  return b;
}

Status write_text(const std::string& path, const std::string& text) {
  if (path.empty()) return Status::Ok();
  if (path == "-") {
    const bool ok = std::printf("%s\n", text.c_str()) >= 0;
    if (std::fflush(stdout) != 0 || !ok || std::ferror(stdout))
      return Status::Io(std::string("stdout: write failed: ") + std::strerror(errno));
    return Status::Ok();
  }
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return Status::Io(path + ": cannot create: " + std::strerror(errno));
  const bool ok = std::fprintf(f, "%s\n", text.c_str()) >= 0;
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0)
    return Status::Io(path + ": write failed");
  return Status::Ok();
}

Status check_output(const std::string& path) {
  if (path.empty() || path == "-") return Status::Ok();
  struct stat sb;
  if (stat(path.c_str(), &sb) == 0 && S_ISDIR(sb.st_mode)) return Status::Io(path + ": is a directory");
  // write_text writes path.tmp, then renames it: try creating that file.
  const std::string tmp = path + ".tmp";
  const bool existed = access(tmp.c_str(), F_OK) == 0;
  FILE* f = std::fopen(tmp.c_str(), "a");
  if (f == nullptr) return Status::Io(path + ": cannot create: " + std::strerror(errno));
  std::fclose(f);
  if (!existed) std::remove(tmp.c_str());
  return Status::Ok();
}

StatusLine::StatusLine(bool quiet) : tty_(isatty(2) != 0), quiet_(quiet) {}

void StatusLine::show(const std::string& line) {
  if (quiet_) return;
  if (tty_) {
    std::string l = line;
    if (l.size() < last_) l.append(last_ - l.size(), ' ');
    last_ = line.size();
    std::fprintf(stderr, "\r%s", l.c_str());
    dirty_ = true;
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

void StatusLine::finish() {
  if (dirty_) std::fprintf(stderr, "\n");
  dirty_ = false;
}

}  // namespace sb::gen
