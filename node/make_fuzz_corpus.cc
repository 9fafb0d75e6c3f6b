// Writes the seed corpus of the packet fuzzer (node/fuzz_corpus/) from the
// test fixtures' packet builder. Run by hand when the seeds should change:
//   build/bin/sb-make-fuzz-corpus node/fuzz_corpus
#include <cstdio>
#include <string>
#include <vector>

#include "node/packet_builder.h"

using namespace sb::node;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: sb-make-fuzz-corpus DIR\n");
    return 2;
  }
  const Mac mine{{0x02, 0x5b, 0, 0x01, 0x01, 0}}, peer{{0x02, 0x5b, 0, 0x11, 0x01, 0}};
  const uint32_t server = 0xc6120801, ue = 0xc6130005, s1u = 0xc612090b, enb = 0xc61209c8;
  auto inner = PacketBuilder().ipv4(ue, server, 17).udp(4000, 53).payload(12).build();
  auto s1 = [&] { return PacketBuilder().eth(mine, peer).ipv4(enb, s1u, 17).udp(2152, kGtpuPort); };
  std::vector<std::pair<std::string, std::vector<uint8_t>>> seeds = {
      {"down_udp", PacketBuilder().eth(mine, peer).ipv4(server, ue, 17).udp(53, 4000).payload(10).build()},
      {"down_tcp", PacketBuilder().eth(mine, peer).ipv4(server, ue, 6).tcp(443, 40000).build()},
      {"down_vlan", PacketBuilder().eth(mine, peer, kEthVlan).vlan(100).ipv4(server, ue, 17).udp(1, 2).build()},
      {"down_options", PacketBuilder().eth(mine, peer).ipv4(server, ue, 17, 64, 0, 0, 12).udp(1, 2).build()},
      {"down_frag_first", PacketBuilder().eth(mine, peer).ipv4(server, ue, 17, 64, 0, 0x2000).udp(1, 2).payload(30).build()},
      {"down_frag_later", PacketBuilder().eth(mine, peer).ipv4(server, ue, 17, 64, 0, 0x0010).payload(30).build()},
      {"down_icmp", PacketBuilder().eth(mine, peer).ipv4(server, ue, 1).payload(8).build()},
      {"up_gpdu", s1().gtpu(0x30, kGtpGpdu, 7).raw(inner).build()},
      {"up_seq", s1().gtpu(0x32, kGtpGpdu, 7, 99).raw(inner).build()},
      {"up_ext_chain", s1().gtpu(0x36, kGtpGpdu, 7, 5, {{0x85, 2}, {0x40, 1}}).raw(inner).build()},
      // A PDCP PDU number (comprehended), then an unknown comprehension-required
      // type: gtpu_unsupported (TS 29.281 5.2.1).
      {"up_ext_required_unknown", s1().gtpu(0x34, kGtpGpdu, 7, 0, {{0xc0, 1}, {0x87, 1}}).raw(inner).build()},
      {"up_echo", s1().gtpu(0x32, kGtpEchoRequest, 0, 42).build()},
      {"up_end_marker", s1().gtpu(0x30, 254, 7).build()},
      {"up_dns_on_2152", s1().payload(30, 0x01).build()},
      {"up_frag_first", PacketBuilder().eth(mine, peer).ipv4(enb, s1u, 17, 64, 0, 0x2000).udp(2152, kGtpuPort)
                            .gtpu(0x30, kGtpGpdu, 7).raw(inner).build()},
      {"arp", PacketBuilder().eth(mine, peer, 0x0806).payload(28).build()},
  };
  for (const auto& [name, bytes] : seeds) {
    const std::string path = std::string(argv[1]) + "/" + name;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
      std::fprintf(stderr, "sb-make-fuzz-corpus: cannot write %s\n", path.c_str());
      return 1;
    }
    std::fclose(f);
  }
  return 0;
}
