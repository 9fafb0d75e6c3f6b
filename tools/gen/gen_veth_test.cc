// sb-gen over real af_packet ports: two network namespaces this test
// creates (names prefixed sbgt, one veth pair between them, no addresses),
// `sb-gen send` in one, `sb-gen sink --plain` in the other (no gateway in
// the path, so frames arrive unencapsulated), then `sb-gen report`.
// Everything is removed by a trap in the script, whatever happens. Needs
// root and iproute2; skipped (with a message) otherwise. Runs serially.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/test_util.h"
#include "tools/gen/sessions.h"

using namespace sb;

TEST_CASE("send -> sink over a veth pair between two namespaces (af_packet)", "[gen][veth]") {
  if (geteuid() != 0 || test::sh("command -v ip").rc != 0) {
    WARN("skipped: needs root and iproute2");
    return;
  }
  char t[] = "/tmp/sbgen-veth-XXXXXX";
  REQUIRE(mkdtemp(t) != nullptr);
  const std::string dir = t;
  {
    std::ofstream o(dir + "/s.csv");
    o << "src_ip,dst_ip,src_port,dst_port,proto,node,teid_dl,enb_ip,bearer\n";
    for (int i = 0; i < 500; ++i)
      o << "198.18.8." << (i % 250) << ",198.19.14." << (i / 250) << "," << 2000 + i << ",443,"
        << (i % 2 ? "tcp" : "udp") << ",choose," << 100 + i << ",198.19.15.1,5\n";
  }
  const std::string id = std::to_string(getpid() % 100000);
  const std::string A = "sbgtA" + id, B = "sbgtB" + id, ia = "sbgt" + id + "a", ib = "sbgt" + id + "b";
  const std::string bin = SB_GEN_BIN;
  const std::string script =
      "set -e\n"
      "cleanup() { [ -n \"$SP\" ] && kill $SP 2>/dev/null; ip netns del " + A + " 2>/dev/null; ip netns del " + B +
      " 2>/dev/null; true; }\n"
      "trap cleanup EXIT\n"
      "ip netns add " + A + "\nip netns add " + B + "\n"
      "ip link add " + ia + " netns " + A + " type veth peer name " + ib + " netns " + B + "\n"
      "ip -n " + A + " link set " + ia + " mtu 1600 up\n"
      "ip -n " + B + " link set " + ib + " mtu 1600 up\n"
      "ip netns exec " + A + " sysctl -qw net.ipv6.conf." + ia + ".disable_ipv6=1\n"
      "ip netns exec " + B + " sysctl -qw net.ipv6.conf." + ib + ".disable_ipv6=1\n"
      "MB=$(ip -n " + B + " -o link show " + ib + " | grep -o 'link/ether [0-9a-f:]*' | cut -d' ' -f2)\n"
      "ip netns exec " + B + " timeout 60 " + bin + " sink --sessions " + dir + "/s.csv --port net_af_packet0,iface=" +
      ib + " --plain --idle-exit 3 --duration 40 --out " + dir + "/sink.json --file-prefix sbgt-vsink-" + id + " 2>" +
      dir + "/sink.log &\n"
      "SP=$!\n"
      // The sender starts once the sink listens (its first status line,
      // a second after its port started): a fixed sleep lost the first
      // packets whenever EAL and port set-up took longer (a loaded host).
      "for i in $(seq 1 300); do grep -qE '^sb-gen sink: +[0-9.]+ s  rx ' " + dir + "/sink.log && break; "
      "kill -0 $SP 2>/dev/null || { cat " + dir + "/sink.log; exit 1; }; sleep 0.1; done\n"
      "grep -qE '^sb-gen sink: +[0-9.]+ s  rx ' " + dir + "/sink.log || { cat " + dir + "/sink.log; exit 1; }\n"
      "ip netns exec " + A + " timeout 60 " + bin + " send --quiet --sessions " + dir + "/s.csv --port net_af_packet0,iface=" +
      ia + " --dst-mac $MB --rate 5000 --duration 2 --unknown 0.02 --size 300 --out " + dir +
      "/send.json --file-prefix sbgt-vsend-" + id + "\n"
      "wait $SP\n"
      "SP=\n"
      "" + bin + " report " + dir + "/send.json " + dir + "/sink.json --json\n";
  test::Run r = test::sh(script);
  (void)test::sh("rm -rf '" + dir + "'");
  INFO(r.out);
  REQUIRE(r.rc == 0);
  CHECK(test::sh("ip netns list | grep -c " + A).out.find('1') == std::string::npos);
  const size_t b = r.out.rfind("{\"run_id\"");
  REQUIRE(b != std::string::npos);
  std::vector<std::pair<std::string, std::string>> v;
  REQUIRE(gen::parse_json_object(r.out.substr(b, r.out.find('\n', b) - b), &v).ok());
  std::map<std::string, std::string> f(v.begin(), v.end());
  const uint64_t sent = std::stoull(f.at("sent")), unknown = std::stoull(f.at("unknown_sent"));
  const uint64_t delivered = std::stoull(f.at("delivered_correct"));
  CHECK(sent > 8000);
  CHECK(unknown > 0);
  CHECK(std::stoull(f.at("misdelivered")) == 0);
  CHECK(std::stoull(f.at("duplicates")) == 0);
  CHECK(std::stoull(f.at("unknown_delivered")) <= unknown);
  // A veth pair at 5 kpps loses nothing in practice; allow 0.1% for a
  // machine under heavy load rather than fail on scheduling noise.
  CHECK(delivered * 1000 >= (sent - unknown) * 999);
  CHECK(f.count("latency_us_p50"));
}

TEST_CASE("send refuses a --size whose frames do not fit the af_packet interface's MTU", "[gen][veth]") {
  // The kernel discards an af_packet frame longer than the interface's MTU
  // + 14 without an error (PACKET_LOSS): sb-gen counted every such frame in
  // `sent` (opackets too, oerrors 0) and the report called them all lost.
  if (geteuid() != 0 || test::sh("command -v ip").rc != 0) {
    WARN("skipped: needs root and iproute2");
    return;
  }
  char t[] = "/tmp/sbgen-mtu-XXXXXX";
  REQUIRE(mkdtemp(t) != nullptr);
  const std::string dir = t;
  {
    std::ofstream o(dir + "/s.csv");
    o << "src_ip,dst_ip,src_port,dst_port,proto,node,teid_dl,enb_ip,bearer\n"
      << "198.18.8.1,198.19.14.1,2000,443,udp,choose,100,198.19.15.1,5\n";
  }
  const std::string id = std::to_string(getpid() % 100000);
  const std::string A = "sbgtM" + id, ia = "sbgt" + id + "m", ib = "sbgt" + id + "n";
  const std::string send = "ip netns exec " + A + " timeout 60 " + std::string(SB_GEN_BIN) + " send --quiet --sessions " +
                           dir + "/s.csv --port net_af_packet0,iface=" + ia +
                           " --dst-mac 02:5b:0e:00:00:01 --rate 0 --count 1 --file-prefix sbgt-mtu-" + id;
  const std::string script = "exec 2>&1\n"
                             "cleanup() { ip netns del " + A + " 2>/dev/null; true; }\n"
                             "trap cleanup EXIT\n"
                             "set -e\n"
                             "ip netns add " + A + "\n"
                             "ip -n " + A + " link add " + ia + " mtu 1600 type veth peer name " + ib + " mtu 1600\n"
                             "ip -n " + A + " link set " + ia + " up\n"
                             "ip -n " + A + " link set " + ib + " up\n"
                             "set +e\n" +
                             send + " --size 1614 --out " + dir + "/fits.json; echo \"fits rc=$?\"\n" +
                             send + " --size 1615 --out " + dir + "/big.json; echo \"big rc=$?\"\n";
  test::Run r = test::sh(script);
  const std::string fits = test::sh("cat " + dir + "/fits.json").out;
  (void)test::sh("rm -rf '" + dir + "'");
  INFO(r.out);
  CHECK(test::sh("ip netns list | grep -c " + A).out.find('1') == std::string::npos);
  CHECK(test::has(r.out, "fits rc=0"));
  CHECK(test::has(fits, "\"sent\":1,"));
  CHECK(test::has(r.out, "big rc=2"));
  CHECK(test::has(r.out, "MTU 1600"));
}
