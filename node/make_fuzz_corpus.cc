// Writes the seed corpus of the packet fuzzer (node/fuzz_corpus/) from the
// test fixtures' packet builder. Run by hand when the seeds should change:
//   build/bin/sb-make-fuzz-corpus node/fuzz_corpus
// Every committed seed comes from here (a run over the committed corpus
// leaves it unchanged unless a seed here changed), so a seed is reviewed
// as code. The corpus is what ctest replays under ASan
// (packet_fuzz_replay_test.cc) and where `make fuzz` starts; inputs a
// fuzzing run found and that were copied in by hand (Makefile) under the
// name libFuzzer gave them (the SHA-1 of their bytes) are the only files
// not written here. ctest's node_fuzz_corpus_matches_generator checks
// both (README "Tests").
#include <cstdio>
#include <string>
#include <vector>

#include "node/fabric_shim.h"
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
  // Fabric shim frames (fabric_shim.h) from another member's MAC. Their
  // payload was written by hand when the shim seeds were first committed
  // (22f46f9), not by the builder, and is kept byte for byte: IPv4 ID 1,
  // header checksum left 0 (parse_shim and ipv4_packet_len check lengths
  // only), UDP 80 -> 40000 without a checksum.
  const Mac member{{0x02, 0x5b, 0, 0x02, 0x02, 0}};
  const std::vector<uint8_t> shim_payload = {
      0x45, 0x00, 0x00, 0x1c, 0x00, 0x01, 0x00, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc6, 0x13,
      0x00, 0x01, 0xc6, 0x12, 0x64, 0x01, 0x00, 0x50, 0x9c, 0x40, 0x00, 0x08, 0x00, 0x00};
  auto shim = [&](const Shim& s) {
    std::vector<uint8_t> h(kShimLen);
    write_shim(h.data(), s);
    return PacketBuilder().eth(mine, member, kEthShim).raw(h).raw(shim_payload).build();
  };
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
      // Comprehended types of fixed length (TS 29.281 5.2.2.2, 5.2.2.2A):
      // right lengths pass, wrong ones are gtpu_bad.
      {"up_ext_pdcp_lengths", s1().gtpu(0x34, kGtpGpdu, 7, 0, {{0xc0, 1}, {0x82, 2}}).raw(inner).build()},
      {"up_ext_pdcp_wrong_length", s1().gtpu(0x34, kGtpGpdu, 7, 0, {{0xc0, 2}}).raw(inner).build()},
      {"up_ext_long_pdcp_wrong_length", s1().gtpu(0x34, kGtpGpdu, 7, 0, {{0x85, 1}, {0x82, 1}}).raw(inner).build()},
      // A UDP checksum over a GTP-U header damaged since (version 1 -> 3):
      // gtpu_bad, with the outer offsets the caller checks first.
      {"up_damaged_udp_checksum", [&] {
         auto f = PacketBuilder().eth(mine, peer).ipv4(enb, s1u, 17).udp(2152, kGtpuPort, true)
                      .gtpu(0x30, kGtpGpdu, 7).raw(inner).build();
         f[14 + 20 + 8] ^= 0x40;
         return f;
       }()},
      {"up_echo", s1().gtpu(0x32, kGtpEchoRequest, 0, 42).build()},
      {"up_end_marker", s1().gtpu(0x30, 254, 7).build()},
      {"up_dns_on_2152", s1().payload(30, 0x01).build()},
      {"up_frag_first", PacketBuilder().eth(mine, peer).ipv4(enb, s1u, 17, 64, 0, 0x2000).udp(2152, kGtpuPort)
                            .gtpu(0x30, kGtpGpdu, 7).raw(inner).build()},
      {"arp", PacketBuilder().eth(mine, peer, 0x0806).payload(28).build()},
      {"shim_resolved", shim(Shim{ShimKind::kResolved, 0x1001, 0xc612c801, 0xc123})},
      {"shim_upstream", shim(Shim{ShimKind::kUpstream, 0, 0, 0})},
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
