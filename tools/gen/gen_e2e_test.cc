// sb-gen end to end without the gateway, through DPDK net_pcap ports:
//
//   sb-gen send (2 ports, tx_pcap) -> this test plays the gateway: every
//   known-flow frame GTP-U encapsulated with node/packet.h write_gtpu_encap
//   toward its session's eNodeB (a few with a wrong TEID or eNodeB address,
//   a few dropped, a few duplicated, a few unknown flows let through, two
//   Echo Responses added) -> sb-gen sink (rx_pcap, tx_pcap for its echo
//   requests and upstream G-PDUs) -> sb-gen report --json, every count
//   checked against what the test did. Then the sink's upstream G-PDUs,
//   decapsulated as the gateway would, go to `sb-gen send --count-upstream`.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/hash.h"
#include "core/keygen.h"
#include "core/test_util.h"
#include "node/packet_builder.h"
#include "tools/gen/frame.h"
#include "tools/gen/pcap.h"
#include "tools/gen/report.h"
#include "tools/gen/sessions.h"

using namespace sb;
using namespace sb::gen;

namespace {

const std::string kBin = SB_GEN_BIN;
const Mac kEnbMac{{0x02, 0x5b, 0x0e, 0x00, 0x01, 0x00}};   // the sink
const Mac kNodeMac{{0x02, 0x5b, 0x0e, 0x01, 0x03, 0x00}};  // a node's enb port
const uint32_t kS1u = 0xc612090b;                           // 198.18.9.11, the node's S1-U address

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/sbgen-test-XXXXXX";
    REQUIRE(mkdtemp(t) != nullptr);
    path = t;
  }
  ~TempDir() { (void)test::sh("rm -rf '" + path + "'"); }
  // path/s.csv: one session (choose, teid_dl 16, eNodeB 198.19.0.200).
  void one_session_csv() const {
    std::ofstream o(path + "/s.csv");
    o << "src_ip,dst_ip,src_port,dst_port,proto,node,teid_dl,enb_ip,bearer\n"
      << "198.18.0.1,198.19.0.1,1024,80,udp,choose,16,198.19.0.200,5\n";
  }
};

std::map<std::string, std::string> json_fields(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> v;
  const size_t b = text.find('{');
  REQUIRE(b != std::string::npos);
  REQUIRE(parse_json_object(text.substr(b, text.rfind('}') - b + 1), &v).ok());
  return {v.begin(), v.end()};
}

std::map<std::string, std::string> json_file(const std::string& path) {
  std::ifstream in(path);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(path);
  return json_fields(s);
}

uint64_t u(const std::map<std::string, std::string>& f, const std::string& k) {
  INFO(k);
  REQUIRE(f.count(k));
  return std::stoull(f.at(k));
}

std::vector<uint8_t> encap(const std::vector<uint8_t>& down, uint32_t teid, uint32_t enb_ip) {
  std::vector<uint8_t> out(node::kEncapHdr + down.size() - 14);
  node::EncapParams p;
  p.src_mac = kNodeMac;
  p.dst_mac = kEnbMac;
  p.src_ip = kS1u;
  p.dst_ip = enb_ip;
  p.teid = teid;
  p.src_port = 0xc000 | uint16_t(teid);
  node::write_gtpu_encap(out.data(), p, uint16_t(down.size() - 14), down[15]);
  std::memcpy(out.data() + node::kEncapHdr, down.data() + 14, down.size() - 14);
  node::ipv4_dec_ttl(out.data() + node::kEncapHdr);
  return out;
}

}  // namespace

TEST_CASE("send -> (test encapsulates) -> sink -> report, through net_pcap", "[gen][e2e]") {
  TempDir d;
  const std::string S = d.path + "/sessions.csv";
  {
    Rng rng(test_seed(11));
    std::ofstream o(S);
    o << "src_ip,dst_ip,src_port,dst_port,proto,node,teid_dl,enb_ip,bearer\n";
    for (int i = 0; i < 300; ++i)
      o << "198.18.8." << (i % 250) << ",198.19.14." << (i / 250) << "," << 1024 + i << "," << 80 + i % 3 << ","
        << (i % 2 ? "tcp" : "udp") << ",choose," << (0x10000 + i) << ",198.19.15." << (i % 7) << ",5\n";
  }
  std::vector<Session> sessions;
  REQUIRE(load_sessions(S, &sessions).ok());

  // 1. The generator: 3000 packets over two ports, 5% unknown flows.
  const uint64_t kCount = 3000;
  test::Run r = test::sh(kBin + " send --quiet --sessions " + S + " --port net_pcap0,tx_pcap=" + d.path +
                         "/ext1.pcap --port net_pcap1,tx_pcap=" + d.path +
                         "/ext2.pcap --dst-mac 02:5b:0e:01:01:00 --dst-mac 02:5b:0e:01:02:00 --rate 0 --count " +
                         std::to_string(kCount) + " --unknown 0.05 --size 200 --popularity zipf:0.9 --seed 5 --out " +
                         d.path + "/send.json --file-prefix sbgt-send-" + std::to_string(getpid()));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  auto sj = json_file(d.path + "/send.json");
  CHECK(u(sj, "sent") == kCount);
  const uint64_t unknown_sent = u(sj, "unknown_sent");
  CHECK(unknown_sent > 75);
  CHECK(unknown_sent < 300);

  // 2. The test plays the gateway.
  std::vector<std::vector<uint8_t>> ext[2], enb;
  REQUIRE(read_pcap(d.path + "/ext1.pcap", &ext[0]).ok());
  REQUIRE(read_pcap(d.path + "/ext2.pcap", &ext[1]).ok());
  REQUIRE(ext[0].size() + ext[1].size() == kCount);
  CHECK(!ext[0].empty());
  CHECK(!ext[1].empty());
  std::vector<bool> seen(kCount, false);
  uint64_t known = 0, unknown = 0, wrong_teid = 0, wrong_enb = 0, dropped = 0, dups = 0, unknown_through = 0;
  const Mac gen_macs[2] = {{{0x02, 0x70, 0x63, 0x61, 0x70, 0x00}}, {{0x02, 0x70, 0x63, 0x61, 0x70, 0x01}}};
  for (int p = 0; p < 2; ++p) {
    for (const auto& f : ext[p]) {
      REQUIRE(f.size() >= 200);
      FlowKey k;
      uint8_t ttl;
      Marker m;
      REQUIRE(parse_inner(f.data() + 14, uint32_t(f.size() - 14), &k, &ttl, &m));
      REQUIRE(m.seq < kCount);
      CHECK(!seen[m.seq]);  // every packet numbered once
      seen[m.seq] = true;
      CHECK(std::memcmp(f.data() + 6, gen_macs[p].b, 6) == 0);
      CHECK(f[5] == (p == 0 ? 0x00 : 0x00));
      CHECK(f[4] == uint8_t(p + 1));  // dst-mac of its port
      // ECMP: the port is the flow hash's.
      CHECK(int(reduce(remix(hash_key(k, 0), salt::kEcmp), 2)) == p);
      if (m.flow == kUnknownFlow) {
        ++unknown;
        const uint32_t src = k.src_ip(), dst = k.dst_ip();
        CHECK((src >> 17) == (0xc6120000u >> 17));
        CHECK((dst >> 17) == (0xc6120000u >> 17));
        if (unknown_through < 3) {  // a gateway that wrongly forwards unknown flows
          enb.push_back(encap(f, 1, 0xc6130f00));
          ++unknown_through;
        }
        continue;
      }
      ++known;
      REQUIRE(m.flow < sessions.size());
      const Session& s = sessions[m.flow];
      CHECK(k == s.t.key());
      if (known % 97 == 0) { ++dropped; continue; }
      uint32_t teid = s.teid_dl, ip = s.enb_ip;
      if (known % 131 == 0) { teid ^= 1; ++wrong_teid; }
      else if (known % 151 == 0) { ip ^= 0x100; ++wrong_enb; }
      enb.push_back(encap(f, teid, ip));
      if (known % 211 == 0) { enb.push_back(enb.back()); ++dups; }
    }
  }
  CHECK(unknown == unknown_sent);
  REQUIRE(wrong_teid > 0);
  REQUIRE(wrong_enb > 0);
  REQUIRE(dups > 0);
  // Noise the sink must count but not confuse with traffic: the node's
  // answer (as node/packet.h answers) to the sink's first Echo Request
  // (sequence number 1, sent before its first receive) and a repeat of
  // that answer (unmatched), a frame to another MAC, an ARP.
  for (int i = 0; i < 2; ++i) {
    uint8_t req[64], resp[128];
    const uint32_t n = write_echo_request(req, kEnbMac, kNodeMac, 0xc6130f01, kS1u, 1);
    node::Upstream up;
    REQUIRE(node::parse_upstream(req, n, kNodeMac, kS1u, &up) == node::Drop::kNone);
    const uint32_t rn = node::write_echo_response(req, up, kNodeMac, kS1u, resp);
    enb.emplace_back(resp, resp + rn);
  }
  std::vector<uint8_t> other = enb[0];
  other[0] ^= 0x80;
  enb.push_back(other);
  std::vector<uint8_t> arp(60, 0);
  std::memcpy(arp.data(), kEnbMac.b, 6);
  arp[12] = 0x08;
  arp[13] = 0x06;
  enb.push_back(arp);
  REQUIRE(write_pcap(d.path + "/enb.pcap", enb).ok());

  // 3. The sink, with echo and upstream toward the node.
  {
    std::ofstream o(d.path + "/up.csv");
    o << "teid_ul,ue_ip,server_ip,ue_port,server_port,proto\n"
      << "0x01000001,198.19.14.1,198.18.8.1,4000,80,udp\n"
      << "0x01000002,198.19.14.2,198.18.8.2,4001,443,tcp\n";
  }
  r = test::sh(kBin + " sink --quiet --sessions " + S + " --port net_pcap0,rx_pcap=" + d.path + "/enb.pcap,tx_pcap=" +
               d.path + "/s1u-out.pcap --mac 02:5b:0e:00:01:00 --idle-exit 1 --duration 30 --echo-to 198.18.9.11" +
               " --gw-mac 02:5b:0e:01:03:00 --upstream-teids " + d.path + "/up.csv --upstream-rate 200 --out " +
               d.path + "/sink.json --file-prefix sbgt-sink-" + std::to_string(getpid()));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  auto kj = json_file(d.path + "/sink.json");
  CHECK(kj.at("stopped_by") == "idle");
  CHECK(u(kj, "delivered") == known - dropped);
  CHECK(u(kj, "misdelivered") == wrong_teid + wrong_enb);
  CHECK(u(kj, "wrong_teid") == wrong_teid);
  CHECK(u(kj, "wrong_enb") == wrong_enb);
  CHECK(u(kj, "wrong_inner") == 0);
  CHECK(u(kj, "duplicates") == dups);
  CHECK(u(kj, "unknown_delivered") == unknown_through);
  CHECK(u(kj, "echo_responses") == 1);
  CHECK(u(kj, "echo_responses_unmatched") == 1);
  CHECK(u(kj, "l2_not_mine") == 1);
  CHECK(u(kj, "not_gtpu") == 1);
  CHECK(u(kj, "ttl_not_decremented") == 0);
  CHECK(u(kj, "echo_requests") >= 1);
  CHECK(u(kj, "upstream_sent") >= 2);

  // 4. The merged report.
  r = test::sh(kBin + " report " + d.path + "/send.json " + d.path + "/sink.json --json");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  auto rep = json_fields(r.out);
  CHECK(u(rep, "sent") == kCount);
  CHECK(u(rep, "unknown_sent") == unknown_sent);
  CHECK(u(rep, "delivered") == known - dropped);
  CHECK(u(rep, "delivered_correct") == known - dropped - wrong_teid - wrong_enb);
  CHECK(u(rep, "misdelivered") == wrong_teid + wrong_enb);
  CHECK(u(rep, "lost") == dropped);
  CHECK(u(rep, "duplicates") == dups);
  CHECK(u(rep, "unknown_delivered") == unknown_through);
  CHECK(rep.at("run_id_match") == "true");
  CHECK(u(rep, "echo_responses") == 1);
  CHECK(u(rep, "echo_responses_unmatched") == 1);
  CHECK(rep.count("latency_us_p50"));  // one machine, one clock
  CHECK(rep.count("latency_us_p99"));
  CHECK(rep.count("duration_s"));
  CHECK(rep.count("rate_pps"));
  r = test::sh(kBin + " report " + d.path + "/send.json " + d.path + "/sink.json");
  CHECK(r.rc == 0);
  CHECK(test::has(r.out, "delivered_correct"));

  // 5. What the sink sent toward the node: echo requests and upstream G-PDUs.
  std::vector<std::vector<uint8_t>> s1u, ext_in;
  REQUIRE(read_pcap(d.path + "/s1u-out.pcap", &s1u).ok());
  const uint32_t run = uint32_t(u(sj, "run_id"));
  uint64_t echo = 0, up = 0, up_this_run = 0;
  for (const auto& f : s1u) {
    node::Upstream x;
    REQUIRE(node::parse_upstream(f.data(), uint32_t(f.size()), kNodeMac, kS1u, &x) == node::Drop::kNone);
    if (x.msg_type == node::kGtpEchoRequest) {
      ++echo;
      CHECK(x.has_seq);
      continue;
    }
    REQUIRE(x.msg_type == node::kGtpGpdu);
    CHECK((x.teid == 0x01000001u || x.teid == 0x01000002u));
    ++up;
    // The sink stamps the run it counts: 0 until it latched the
    // generator's run from its first packet, then that run.
    FlowKey k;
    uint8_t ttl;
    Marker m;
    REQUIRE(parse_inner(f.data() + x.inner_off, x.inner_len, &k, &ttl, &m));
    CHECK(m.magic == kMagicUp);
    CHECK((m.run_id == run || m.run_id == 0));
    up_this_run += m.run_id == run;
    // Decapsulated toward the Internet side, as the gateway would.
    std::vector<uint8_t> out(14 + x.inner_len);
    std::memcpy(out.data(), gen_macs[0].b, 6);
    std::memcpy(out.data() + 6, kNodeMac.b, 6);
    out[12] = 0x08;
    std::memcpy(out.data() + 14, f.data() + x.inner_off, x.inner_len);
    ext_in.push_back(out);
  }
  CHECK(echo == u(kj, "echo_requests"));
  CHECK(up == u(kj, "upstream_sent"));
  CHECK(up_this_run > 0);
  // A stale run's upstream packets (still in flight from an earlier run)
  // reach the generator's port too.
  const uint64_t stale = 5;
  for (uint64_t i = 0; i < stale; ++i) {
    Marker m;
    m.magic = kMagicUp;
    m.run_id = run + 2;
    m.seq = i;
    std::vector<uint8_t> f(kMaxFrame);
    f.resize(write_downstream(f.data(), 0, Tuple{0xc6130e01, 0xc6120801, 4000, 80, kProtoUdp}, kNodeMac, gen_macs[0],
                              m));
    ext_in.insert(ext_in.begin() + long(i * 3 % ext_in.size()), f);
  }
  REQUIRE(write_pcap(d.path + "/ext-in.pcap", ext_in).ok());

  // 6. The generator counts the upstream packets of its run arriving on
  // its port (this send plays the run the sink counted: the same run id),
  // and those of any other run apart.
  r = test::sh(kBin + " send --quiet --sessions " + S + " --port net_pcap0,rx_pcap=" + d.path +
               "/ext-in.pcap,tx_pcap=" + d.path + "/x.pcap --dst-mac 02:5b:0e:01:01:00 --rate 1000 --count 200" +
               " --count-upstream --run-id " + std::to_string(run) + " --out " + d.path + "/send2.json");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  auto s2 = json_file(d.path + "/send2.json");
  CHECK(u(s2, "upstream_received") == up_this_run);
  CHECK(u(s2, "upstream_foreign_run") == up - up_this_run + stale);
  // The report carries both.
  r = test::sh(kBin + " report " + d.path + "/send2.json " + d.path + "/sink.json --json");
  INFO(r.out);
  auto rep2 = json_fields(r.out);
  CHECK(u(rep2, "upstream_received") == up_this_run);
  CHECK(u(rep2, "upstream_foreign_run") == up - up_this_run + stale);
}

TEST_CASE("sb-gen CLI: usage errors exit 2 with a message", "[gen]") {
  TempDir d;
  struct Case {
    std::string args, want;
  };
  {
    std::ofstream o(d.path + "/bad.csv");
    o << "src_ip,dst_ip,src_port,dst_port,proto,node,teid_dl,enb_ip,bearer\n"
      << "198.18.0.1,198.19.0.1,1024,80,6,choose,16,198.19.0.200,5\n"
      << "198.18.0.1,198.19.0.1,1024,80,6,choose,16,198.19.0.999,5\n";
  }
  std::vector<Case> cases = {
      {"", "a command is required"},
      {"frobnicate", "unknown command"},
      {"send --port net_null0 --dst-mac 02:00:00:00:00:01", "--sessions FILE is required"},
      {"send --sessions " + d.path + "/bad.csv --port net_null0 --dst-mac 02:00:00:00:00:01", "bad.csv:3: enb_ip"},
      {"send --sessions x --port a --port b --dst-mac 02:00:00:00:00:01 --dst-mac 02:00:00:00:00:02 --dst-mac "
       "02:00:00:00:00:03",
       "one MAC per --port"},
      {"send --sessions x --port a --dst-mac 02:00:00:00:00:01 --size 40", "--size: at least 60"},
      {"send --sessions x --port a --dst-mac 02:00:00:00:00:01 --size 2001",
       "--size: expected a whole number in [60, 2000], got '2001'"},
      {"send --sessions x --port a --dst-mac 02:00:00:00:00:01 --mem 2000000",
       "--mem: expected a whole number in [64, 1048576], got '2000000'"},
      {"send --sessions x --port a --dst-mac 02:00:00:00:00:01 --count 1x", "--count: expected a whole number, got '1x'"},
      {"send --sessions x --port a --dst-mac 02:00:00:00:00:01 --popularity zipf:", "zipf:S"},
      {"send --sessions x --port a --dst-mac 02:00:00:00:00:01 --unknown 2", "--unknown"},
      {"send --sessions x --port a --dst-mac 02:00:00:00:00:01 --rate -5",
       "--rate: expected a number in [0, 1000000000], got '-5'"},
      {"sink --sessions x --port a --idle-exit 0.5s", "--idle-exit: expected a number in [0, 10000000], got '0.5s'"},
      {"send --sessions x --port a --dst-mac zz", "--dst-mac"},
      {"send --bogus", "unknown option --bogus"},
      {"sink --sessions x", "exactly one --port"},
      {"sink --sessions x --port a --echo-to 1.2.3", "--echo-to"},
      {"report a.json", "SEND.json SINK.json"},
      {"report " + d.path + "/none.json " + d.path + "/none.json", "cannot read"},
  };
  for (const auto& c : cases) {
    test::Run r = test::sh(kBin + " " + c.args);
    INFO(c.args << "\n" << r.out);
    CHECK(r.rc == 2);
    CHECK(test::has(r.out, c.want));
  }
  test::Run h = test::sh(kBin + " --help");
  CHECK(h.rc == 0);
  CHECK(test::has(h.out, "sb-gen send"));
}

TEST_CASE("sink --upstream-rate 0 sends no upstream G-PDUs, a tiny rate at most one", "[gen]") {
  TempDir d;
  {
    d.one_session_csv();
    std::ofstream u(d.path + "/up.csv");
    u << "teid_ul,ue_ip,server_ip,ue_port,server_port,proto\n"
      << "0x01000001,198.19.14.1,198.18.8.1,4000,80,udp\n";
  }
  std::vector<uint8_t> arp(60, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  REQUIRE(write_pcap(d.path + "/in.pcap", {arp}).ok());
  for (const std::string rate : {"0", "1e-20"}) {
    test::Run r = test::sh(kBin + " sink --quiet --sessions " + d.path + "/s.csv --port net_pcap0,rx_pcap=" + d.path +
                           "/in.pcap,tx_pcap=" + d.path + "/out.pcap --duration 0.5 --gw-ip 198.18.9.11" +
                           " --gw-mac 02:5b:0e:01:03:00 --upstream-teids " + d.path + "/up.csv --upstream-rate " +
                           rate + " --out " + d.path + "/sink.json --file-prefix sbgt-uprate-" +
                           std::to_string(getpid()));
    INFO(rate << "\n" << r.out);
    REQUIRE(r.rc == 0);
    auto kj = json_file(d.path + "/sink.json");
    CHECK(u(kj, "upstream_sent") <= (rate == "0" ? 0u : 1u));
  }
}

TEST_CASE("sink --upstream-paused sends upstream only between SIGUSR1 and SIGUSR2", "[gen]") {
  TempDir d;
  {
    d.one_session_csv();
    std::ofstream u(d.path + "/up.csv");
    u << "teid_ul,ue_ip,server_ip,ue_port,server_port,proto\n"
      << "0x01000001,198.19.14.1,198.18.8.1,4000,80,udp\n";
  }
  std::vector<uint8_t> arp(60, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  REQUIRE(write_pcap(d.path + "/in.pcap", {arp}).ok());
  const std::string sink = kBin + " sink --quiet --sessions " + d.path + "/s.csv --port net_pcap0,rx_pcap=" + d.path +
                           "/in.pcap,tx_pcap=" + d.path + "/out.pcap --gw-ip 198.18.9.11 --gw-mac 02:5b:0e:01:03:00" +
                           " --upstream-teids " + d.path + "/up.csv --upstream-rate 200 --upstream-paused --out " +
                           d.path + "/sink.json --file-prefix sbgt-uppause-" + std::to_string(getpid());
  // Never resumed: nothing sent.
  test::Run r = test::sh(sink + " --duration 1");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(u(json_file(d.path + "/sink.json"), "upstream_sent") == 0);
  // Resumed for about 1 s, then paused for 1.5 s: about 200 sent (the
  // process may still be starting when SIGUSR1 comes: fewer), and the
  // pause holds.
  r = test::sh(sink + " --duration 3.5 & p=$!; sleep 1; kill -USR1 $p; sleep 1; kill -USR2 $p; wait $p");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  const uint64_t sent = u(json_file(d.path + "/sink.json"), "upstream_sent");
  CHECK(sent >= 20);
  CHECK(sent <= 260);
  // Every G-PDU the sink wrote to its tx pcap is counted.
  std::vector<std::vector<uint8_t>> frames;
  REQUIRE(read_pcap(d.path + "/out.pcap", &frames).ok());
  CHECK(frames.size() == sent);
}

TEST_CASE("sb-gen send: a --rate too small to pace is refused, not a run that sends nothing", "[gen]") {
  TempDir d;
  d.one_session_csv();
  test::Run r = test::sh(kBin + " send --quiet --sessions " + d.path + "/s.csv --port net_null0 --dst-mac " +
                         "02:00:00:00:00:01 --rate 0.0001 --count 1 --duration 0.5 --out " + d.path +
                         "/send.json --file-prefix sbgt-rate-" + std::to_string(getpid()));
  INFO(r.out);
  CHECK(r.rc == 2);
  CHECK(test::has(r.out, "--rate"));
}

TEST_CASE("sb-gen CLI: a single-valued option given twice is refused", "[gen]") {
  for (const std::string args :
       {"send --sessions a --port x --dst-mac 02:00:00:00:00:01 --rate 10 --rate 20",
        "send --sessions a --sessions b --port x --dst-mac 02:00:00:00:00:01",
        "sink --sessions a --port x --duration 1 --duration=2"}) {
    test::Run r = test::sh(kBin + " " + args);
    INFO(args << "\n" << r.out);
    CHECK(r.rc == 2);
    CHECK(test::has(r.out, "given twice"));
  }
}

TEST_CASE("sb-gen send: --count alone runs until that many are sent, past the default 10 s", "[gen]") {
  // The default duration (10 s) used to stop a --count run that needed
  // longer: 1575 packets at 150 pps take 10.5 s.
  TempDir d;
  d.one_session_csv();
  test::Run r = test::sh(kBin + " send --quiet --sessions " + d.path + "/s.csv --port net_null0 --dst-mac " +
                         "02:00:00:00:00:01 --rate 150 --count 1575 --out " + d.path + "/send.json --file-prefix sbgt-cnt-" +
                         std::to_string(getpid()));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  auto s = json_file(d.path + "/send.json");
  CHECK(u(s, "sent") == 1575);
  CHECK(s.at("stopped_by") == "count");
}

TEST_CASE("sb-gen send and sink: an --out that cannot be written is refused before the run", "[gen]") {
  // It used to be found only when the report was written, after the whole
  // run (exit 1): the run's counts were lost.
  TempDir d;
  d.one_session_csv();
  const std::string out = d.path + "/no-such-dir/out.json";
  for (const std::string& cmd : std::vector<std::string>
       {" send --quiet --sessions " + d.path + "/s.csv --port net_null0 --dst-mac 02:00:00:00:00:01 --rate 100 " +
            "--duration 2 --file-prefix sbgt-out-s-" + std::to_string(getpid()),
        " sink --quiet --sessions " + d.path + "/s.csv --port net_null0 --duration 2 --file-prefix sbgt-out-k-" +
            std::to_string(getpid())}) {
    test::Run r = test::sh(kBin + cmd + " --out " + out);
    INFO(cmd << "\n" << r.out);
    CHECK(r.rc == 2);
    CHECK(test::has(r.out, out + ": cannot create"));
  }
  // A directory is not a file to write either.
  test::Run r = test::sh(kBin + " send --quiet --sessions " + d.path + "/s.csv --port net_null0 --dst-mac " +
                         "02:00:00:00:00:01 --count 1 --out " + d.path + " --file-prefix sbgt-out-d-" +
                         std::to_string(getpid()));
  INFO(r.out);
  CHECK(r.rc == 2);
  CHECK(test::has(r.out, "is a directory"));
}

TEST_CASE("sb-gen send: send.json states a small --rate and --unknown as given, not rounded to 0", "[gen]") {
  // rate_target_pps had one decimal (--rate 0.001 read 0.0, which means "as
  // fast as the ports take") and unknown_fraction four (--unknown 0.00001
  // read 0.0000: no unknown flows).
  TempDir d;
  d.one_session_csv();
  test::Run r = test::sh(kBin + " send --quiet --sessions " + d.path + "/s.csv --port net_null0 --dst-mac " +
                         "02:00:00:00:00:01 --rate 0.001 --unknown 0.00001 --duration 0.2 --out " + d.path +
                         "/send.json --file-prefix sbgt-prec-" + std::to_string(getpid()));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  auto s = json_file(d.path + "/send.json");
  INFO(s.at("rate_target_pps") << " " << s.at("unknown_fraction"));
  CHECK(std::stod(s.at("rate_target_pps")) == 0.001);
  CHECK(std::stod(s.at("unknown_fraction")) == 0.00001);
}

TEST_CASE("sb-gen report: run ids that differ exit 1 with a message, no loss figure", "[gen]") {
  TempDir d;
  {
    std::ofstream o(d.path + "/send.json");
    o << "{\"mode\":\"send\",\"run_id\":9,\"sent\":1000,\"unknown_sent\":0,\"sessions\":1,"
         "\"duration_s\":1.0,\"rate_pps\":1000.0}\n";
    std::ofstream k(d.path + "/sink.json");
    k << "{\"mode\":\"sink\",\"run_id\":8,\"received\":1000,\"delivered\":0,\"delivered_correct\":0,"
         "\"misdelivered\":0,\"duplicates\":0,\"unknown_delivered\":0,\"other_run\":1000}\n";
  }
  for (const std::string& fmt : std::vector<std::string>{" --json", ""}) {
    test::Run r = test::sh(kBin + " report " + d.path + "/send.json " + d.path + "/sink.json" + fmt);
    INFO(fmt << "\n" << r.out);
    CHECK(r.rc == 1);
    CHECK(test::has(r.out, "--run-id"));
    CHECK(!test::has(r.out, "\"lost\""));
  }
}

TEST_CASE("sb-gen send: a closed stderr pipe does not kill the run before its JSON", "[gen]") {
  // `sb-gen send ... 2>&1 | head -1`, or a tee that died: the next status
  // line raised SIGPIPE and the process died without writing send.json.
  TempDir d;
  d.one_session_csv();
  test::Run r = test::sh("bash -c '" + kBin + " send --sessions " + d.path + "/s.csv --port net_null0 --dst-mac " +
                         "02:00:00:00:00:01 --rate 100 --duration 2.5 --out " + d.path + "/send.json --file-prefix " +
                         "sbgt-pipe-" + std::to_string(getpid()) +
                         " 2>&1 | head -c 1 >/dev/null; echo rc=${PIPESTATUS[0]}'");
  INFO(r.out);
  CHECK(test::has(r.out, "rc=0"));
  auto s = json_file(d.path + "/send.json");
  CHECK(s.at("stopped_by") == "duration");
  CHECK(u(s, "sent") >= 200);
}

TEST_CASE("sb-gen sink: a G-PDU with a broken IPv4 header checksum is not delivered correct", "[gen]") {
  // A gateway that decrements the inner TTL (or writes the outer header)
  // with a wrong checksum sends packets every real eNodeB/UE drops; the
  // sink counted them delivered_correct.
  TempDir d;
  d.one_session_csv();
  const Tuple t{0xc6120001, 0xc6130001, 1024, 80, kProtoUdp};
  std::vector<std::vector<uint8_t>> frames;
  for (uint64_t i = 0; i < 3; ++i) {
    Marker m;
    m.run_id = 7;
    m.seq = i;
    m.flow = 0;
    std::vector<uint8_t> down(kMaxFrame);
    down.resize(write_downstream(down.data(), 128, t, kNodeMac, kEnbMac, m));
    frames.push_back(encap(down, 16, 0xc61300c8));
  }
  frames[1][node::kEncapHdr + 10] ^= 0x01;  // inner IPv4 header checksum
  frames[2][14 + 10] ^= 0x01;               // outer IPv4 header checksum
  REQUIRE(write_pcap(d.path + "/in.pcap", frames).ok());
  test::Run r = test::sh(kBin + " sink --quiet --sessions " + d.path + "/s.csv --port net_pcap0,rx_pcap=" + d.path +
                         "/in.pcap,tx_pcap=" + d.path + "/out.pcap --mac 02:5b:0e:00:01:00 --run-id 7 --duration 0.5" +
                         " --out " + d.path + "/sink.json --file-prefix sbgt-csum-" + std::to_string(getpid()));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  auto k = json_file(d.path + "/sink.json");
  CHECK(u(k, "delivered") == 3);
  CHECK(u(k, "delivered_correct") == 1);
  CHECK(u(k, "misdelivered") == 2);
  CHECK(u(k, "bad_ip_checksum") == 2);
}

TEST_CASE("sb-gen sink: a G-PDU with an extension header it must comprehend and does not is discarded", "[gen]") {
  // TS 29.281 5.2.1: the gateway discards such a message (node's
  // gtpu_ext_acceptable); the sink, an endpoint receiver of the gateway's
  // GTP-U, counted it delivered_correct. It is counted gtpu_ext_unsupported.
  TempDir d;
  d.one_session_csv();
  const Tuple t{0xc6120001, 0xc6130001, 1024, 80, kProtoUdp};
  std::vector<std::vector<uint8_t>> frames;
  const std::vector<std::vector<std::pair<uint8_t, uint8_t>>> chains = {
      {}, {{0xc0, 1}}, {{0x85, 1}}, {{0x81, 1}}, {{0x20, 1}, {0xe1, 1}}};
  for (uint64_t i = 0; i < chains.size(); ++i) {
    Marker m;
    m.run_id = 7;
    m.seq = i;
    m.flow = 0;
    std::vector<uint8_t> down(kMaxFrame);
    down.resize(write_downstream(down.data(), 128, t, kNodeMac, kEnbMac, m));
    std::vector<uint8_t> inner(down.begin() + 14, down.end());
    node::ipv4_dec_ttl(inner.data());
    frames.push_back(node::PacketBuilder().eth(kEnbMac, kNodeMac).ipv4(kS1u, 0xc61300c8, 17).udp(0xc000, 2152)
                         .gtpu(chains[i].empty() ? 0x30 : 0x34, 0xff, 16, 0, chains[i]).raw(inner).build());
  }
  REQUIRE(write_pcap(d.path + "/in.pcap", frames).ok());
  test::Run r = test::sh(kBin + " sink --quiet --sessions " + d.path + "/s.csv --port net_pcap0,rx_pcap=" + d.path +
                         "/in.pcap,tx_pcap=" + d.path + "/out.pcap --mac 02:5b:0e:00:01:00 --run-id 7 --duration 0.5" +
                         " --out " + d.path + "/sink.json --file-prefix sbgt-ext-" + std::to_string(getpid()));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  auto k = json_file(d.path + "/sink.json");
  CHECK(u(k, "delivered") == 3);
  CHECK(u(k, "delivered_correct") == 3);
  CHECK(u(k, "gtpu_ext_unsupported") == 2);
  CHECK(u(k, "malformed") == 0);
}

TEST_CASE("sb-gen sink: an Echo Response counts only as the answer to an outstanding request of ours", "[gen]") {
  // Any Echo Response was counted: a repeat, one with a sequence number the
  // sink never sent, one from an address it never asked. They are matched
  // by address and sequence number to the sink's outstanding requests.
  TempDir d;
  d.one_session_csv();
  auto response = [](uint32_t from, uint16_t seq) {
    uint8_t req[64], resp[128];
    const uint32_t n = write_echo_request(req, kEnbMac, kNodeMac, 0xc61300c8, from, seq);
    node::Upstream up;
    REQUIRE(node::parse_upstream(req, n, kNodeMac, from, &up) == node::Drop::kNone);
    const uint32_t rn = node::write_echo_response(req, up, kNodeMac, from, resp);
    return std::vector<uint8_t>(resp, resp + rn);
  };
  // The sink sends request 1 to 198.18.9.11 before it first receives; the
  // run is shorter than the next request (1 s later).
  std::vector<std::vector<uint8_t>> frames = {
      response(kS1u, 2),           // never sent (yet): unmatched
      response(kS1u, 1),           // the answer
      response(kS1u, 1),           // a repeat: unmatched
      response(kS1u + 1, 1),       // right number, an address never asked: unmatched
  };
  std::vector<uint8_t> no_recovery = response(kS1u, 1);  // malformed: bad, not unmatched
  no_recovery.resize(14 + rd16(no_recovery.data() + 14 + 2) - 2);  // the IE off (and the Ethernet padding)
  wr16(no_recovery.data() + 14 + 2, uint16_t(no_recovery.size() - 14));
  wr16(no_recovery.data() + 14 + 10, 0);
  wr16(no_recovery.data() + 14 + 10, node::ipv4_checksum(no_recovery.data() + 14, 20));
  wr16(no_recovery.data() + 34 + 4, uint16_t(no_recovery.size() - 34));
  wr16(no_recovery.data() + 42 + 2, uint16_t(no_recovery.size() - 50));
  frames.push_back(no_recovery);
  REQUIRE(write_pcap(d.path + "/in.pcap", frames).ok());
  test::Run r = test::sh(kBin + " sink --quiet --sessions " + d.path + "/s.csv --port net_pcap0,rx_pcap=" + d.path +
                         "/in.pcap,tx_pcap=" + d.path + "/out.pcap --mac 02:5b:0e:00:01:00 --echo-to 198.18.9.11" +
                         " --gw-mac 02:5b:0e:01:03:00 --duration 0.5 --out " + d.path + "/sink.json --file-prefix " +
                         "sbgt-echo-" + std::to_string(getpid()));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  auto k = json_file(d.path + "/sink.json");
  REQUIRE(u(k, "echo_requests") == 1);
  CHECK(u(k, "echo_responses") == 1);
  CHECK(u(k, "echo_responses_unmatched") == 3);
  CHECK(u(k, "echo_responses_bad") == 1);
  INFO(k.at("peers"));  // re-serialised by the JSON reader: keys in order
  CHECK(test::has(k.at("peers"), "\"echo_responses\":1,\"echo_responses_unmatched\":2,\"echo_sent\":1"));
}

TEST_CASE("sb-gen send: --out - to a closed stdout fails, not exit 0 with the JSON gone", "[gen]") {
  TempDir d;
  d.one_session_csv();
  test::Run r = test::sh("bash -c '" + kBin + " send --quiet --sessions " + d.path + "/s.csv --port net_null0 " +
                         "--dst-mac 02:00:00:00:00:01 --rate 0 --count 5 --out - --file-prefix sbgt-stdout-" +
                         std::to_string(getpid()) + " | true; echo rc=${PIPESTATUS[0]}'");
  INFO(r.out);
  CHECK(test::has(r.out, "rc=1"));
  CHECK(test::has(r.out, "stdout: write failed"));
}

TEST_CASE("sb-gen sink --idle-exit: the Echo Responses its own --echo-to draws do not keep it running", "[gen]") {
  // With --echo-to, the peers answer an Echo Request every second: the
  // sink took those answers for traffic and never went idle (the README's
  // testbed example, --idle-exit 5 --echo-to ..., never ended). Here the
  // port delivers the node's Echo Responses without end (infinite_rx).
  TempDir d;
  d.one_session_csv();
  uint8_t req[64], resp[128];
  const uint32_t n = write_echo_request(req, kEnbMac, kNodeMac, 0xc61300c8, kS1u, 1);
  node::Upstream up;
  REQUIRE(node::parse_upstream(req, n, kNodeMac, kS1u, &up) == node::Drop::kNone);
  const uint32_t rn = node::write_echo_response(req, up, kNodeMac, kS1u, resp);
  REQUIRE(write_pcap(d.path + "/echo.pcap", {std::vector<uint8_t>(resp, resp + rn)}).ok());
  test::Run r = test::sh(kBin + " sink --quiet --sessions " + d.path + "/s.csv --port net_pcap0,rx_pcap=" + d.path +
                         "/echo.pcap,infinite_rx=1,tx_pcap=" + d.path + "/out.pcap --mac 02:5b:0e:00:01:00" +
                         " --echo-to 198.18.9.11 --gw-mac 02:5b:0e:01:03:00 --idle-exit 1 --duration 8 --out " +
                         d.path + "/sink.json --file-prefix sbgt-idle-" + std::to_string(getpid()));
  INFO(r.out);
  REQUIRE(r.rc == 0);
  auto k = json_file(d.path + "/sink.json");
  CHECK(u(k, "echo_responses") == 1);  // the answer to the first request; the same answer again is not
  CHECK(u(k, "echo_responses_unmatched") > 0);
  CHECK(k.at("stopped_by") == "idle");
}
