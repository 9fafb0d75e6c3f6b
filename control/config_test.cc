#include "control/config.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

using namespace sb;
using namespace sb::control;

static const char* kGood = R"(
cluster:
  name: lab
  hash_seed: 42
  partitions: 8
  capacity: 100000
  architecture: scalebricks
  curve: false
  members:
    - {id: 0, control: "tcp://127.0.0.1:7000", publish: "tcp://127.0.0.1:7001", fabric_mac: "02:00:00:00:00:01"}
    - {id: 1, control: "tcp://127.0.0.1:7010", publish: "tcp://127.0.0.1:7011", weight: 3}
  ownership:
    - {node: 0, partitions: "0-3"}
    - {node: 1, partitions: "4-7"}
node:
  id: 1
  data_dir: /tmp/x
  fsync: batch
)";

TEST_CASE("config: a good file parses") {
  Result<Config> r = parse_config(kGood);
  REQUIRE(r.ok());
  const Config& c = r.value();
  CHECK(c.node.dp.ue_source_check);  // anti-spoofing on unless turned off
  CHECK(c.cluster.name == "lab");
  CHECK(c.cluster.hash_seed == 42);
  CHECK(c.cluster.members.size() == 2);
  CHECK(c.cluster.members[1].weight == 3.0);
  CHECK(c.cluster.owner == std::vector<uint32_t>{0, 0, 0, 0, 1, 1, 1, 1});
  CHECK(c.node.id == 1);
  CHECK(c.node.fsync == FsyncPolicy::kBatch);
}

static std::string err(const std::string& from, const std::string& to) {
  std::string y = kGood;
  const size_t at = y.find(from);
  REQUIRE(at != std::string::npos);
  y.replace(at, from.size(), to);
  Result<Config> r = parse_config(y, "t.yaml");
  REQUIRE(!r.ok());
  return r.status().message();
}

TEST_CASE("config: errors name the field") {
  CHECK(err("partitions: 8", "partitions: 6").find("cluster.partitions") != std::string::npos);
  CHECK(err("hash_seed: 42", "hash_seed: x").find("cluster.hash_seed") != std::string::npos);
  CHECK(err("hash_seed: 42", "hash_sed: 42").find("cluster.hash_sed: unknown key") != std::string::npos);
  CHECK(err("\"4-7\"", "\"5-7\"").find("partition 4 has no owner") != std::string::npos);
  CHECK(err("\"4-7\"", "\"3-7\"").find("assigned twice") != std::string::npos);
  CHECK(err("id: 1\n  data_dir", "id: 5\n  data_dir").find("node.id") != std::string::npos);
  CHECK(err("fsync: batch", "fsync: sometimes").find("node.fsync") != std::string::npos);
  CHECK(err("architecture: scalebricks", "architecture: x").find("cluster.architecture") != std::string::npos);
  CHECK(err(", control: \"tcp://127.0.0.1:7010\"", "").find("members[1].control: missing") != std::string::npos);
  CHECK(err("curve: false", "curve: true").find("curve_public") != std::string::npos);
  CHECK(err("members:", "members: [\n").find("t.yaml") != std::string::npos);
  CHECK(err("name: lab", "name: lab\n  - x").find("t.yaml") != std::string::npos);
  // The name is a path component (DPDK's --file-prefix sb-NAME-ID).
  for (const char* bad : {"\"\"", "\"a/b\"", "\"lab x\"", "\"..\"", "-lab", "\"abcdefghijklmnopqrstuvwxyz0123456\""}) {
    INFO(bad);
    CHECK(err("name: lab", std::string("name: ") + bad).find("cluster.name") != std::string::npos);
  }
  // A repeated key is refused (yaml-cpp would silently use the first).
  CHECK(err("fsync: batch", "fsync: none\n  fsync: batch").find("node.fsync: appears twice") != std::string::npos);
  CHECK(err("fsync: batch", "fsync: batch\n  eal_args: [[\"-l\", \"0\"]]")
            .find("node.eal_args[0]: expected a string") != std::string::npos);
}

TEST_CASE("config: a file holds one YAML document (a second would be ignored)") {
  CHECK(parse_config(std::string("---\n") + kGood).ok());          // a leading marker is one document
  CHECK(parse_config(std::string(kGood) + "...\n").ok());          // so is an end marker
  for (const std::string tail : {"---\nnode: {id: 0, data_dir: /tmp/y}\n", "---\n", "---\ncluster: {}\n---\n"}) {
    INFO(tail);
    const Result<Config> r = parse_config(std::string(kGood) + tail, "t.yaml");
    REQUIRE_FALSE(r.ok());
    INFO(r.status().message());
    CHECK(r.status().message().find("t.yaml: ") == 0);
    CHECK(r.status().message().find(" YAML documents (separated by '---'): expected one") != std::string::npos);
  }
}

TEST_CASE("config: control timing and the data plane section") {
  std::string y = kGood;
  y.replace(y.find("  fsync: batch\n"), 14,
            "  fsync: batch\n  dead_after_ms: 5000\n  heartbeat_ms: 200\n  outer_df: true\n  ue_source_check: false\n"
            "  fib: othello\n  lcores: \"0@(0-1)\"\n  s1u_ip: 198.18.9.1\n"
            "  next_hops: {ext: \"02:00:00:00:00:fe\", enb: \"02:00:00:00:00:fd\"}\n"
            "  ports:\n    ext: {device: \"net_af_packet0,iface=ext\", queues: 2}\n"
            "    fabric: {device: net_null1}\n    enb: {device: net_null2, mac: \"02:00:00:00:00:33\"}\n");
  y.replace(y.find("weight: 3}"), 10, "weight: 3, fabric_mac: \"02:00:00:00:00:02\"}");
  Result<Config> r = parse_config(y);
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  const NodeSpec& n = r.value().node;
  CHECK(n.dead_after_ms == 5000);
  CHECK(n.dp.outer_df);
  CHECK_FALSE(n.dp.ue_source_check);
  CHECK(n.heartbeat_ms == 200);
  CHECK(n.dp.has_ports);
  CHECK(n.dp.fib_othello);
  CHECK(n.dp.ports[0].queues == 2);
  CHECK(n.dp.ports[2].has_mac);
  CHECK(n.dp.ports[2].mac[5] == 0x33);
  CHECK(n.dp.s1u_ip == 0xc6120901);
  CHECK(n.dp.lcores == "0@(0-1)");
  CHECK(n.dp.metrics.empty());  // off unless asked for
  CHECK(err("fsync: batch", "fsync: batch\n  dead_after_ms: 100").find("node.dead_after_ms") != std::string::npos);
  CHECK(err("fsync: batch", "fsync: batch\n  heartbeat_ms: 1").find("node.heartbeat_ms") != std::string::npos);
}

TEST_CASE("config: CURVE key files round trip and are checked") {
  Result<KeyPair> kp = generate_keypair();
  REQUIRE(kp.ok());
  const std::string dir = std::filesystem::temp_directory_path() / ("sbkeys." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string f = dir + "/n0.key";
  REQUIRE(write_key_file(f, kp.value()).ok());
  CHECK(!write_key_file(f, kp.value()).ok());  // never overwrites
  Result<KeyPair> back = load_key_file(f);
  REQUIRE(back.ok());
  CHECK(back.value().public_key == kp.value().public_key);
  KeyPair other = generate_keypair().value();
  KeyPair mixed{other.public_key, kp.value().secret_key};
  REQUIRE(write_key_file(dir + "/bad.key", mixed).ok());
  CHECK(load_key_file(dir + "/bad.key").status().message().find("does not match") != std::string::npos);
  // A secret key others can read is refused, with the way out.
  for (const auto perms : {std::filesystem::perms::group_read, std::filesystem::perms::others_read,
                           std::filesystem::perms::others_write}) {
    std::filesystem::permissions(f, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write | perms);
    const Result<KeyPair> open = load_key_file(f);
    REQUIRE(!open.ok());
    CHECK(open.status().message().find("chmod 600") != std::string::npos);
  }
  std::filesystem::permissions(f, std::filesystem::perms::owner_read);
  CHECK(load_key_file(f).ok());  // 0400 is fine
  std::filesystem::remove_all(dir);
}

TEST_CASE("config: a key file holds public: and secret: once each, an empty key_file is named") {
  CHECK(err("data_dir: /tmp/x", "data_dir: /tmp/x\n  key_file: \"\"")
            .find("t.yaml: node.key_file: empty (expected the path of this node's keypair") != std::string::npos);
  CHECK(load_key_file("").status().message() == "the key file path is empty");
  const KeyPair kp = generate_keypair().value();
  const KeyPair other = generate_keypair().value();
  const std::string dir = std::filesystem::temp_directory_path() / ("sbkeys2." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto load = [&](const std::string& text) {
    const std::string f = dir + "/k.key";
    std::filesystem::remove(f);
    std::ofstream(f) << text;
    std::filesystem::permissions(f, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    return load_key_file(f);
  };
  const std::string pub = "public: \"" + kp.public_key + "\"\n", sec = "secret: \"" + kp.secret_key + "\"\n";
  REQUIRE(load(pub + sec).ok());
  const std::pair<std::string, std::string> bad[] = {
      {pub + sec + "public: \"" + other.public_key + "\"\n", "k.key: public: appears twice in the key file"},
      {pub + "public: \"" + kp.public_key + "\"\n" + sec, "k.key: public: appears twice in the key file"},
      {pub + sec + sec, "k.key: secret: appears twice in the key file"},
      {pub + sec + "secrte: x\n", "k.key: secrte: unknown key in the key file (expected public: and secret:)"},
      {pub + "secrte: \"" + kp.secret_key + "\"\n", "k.key: secrte: unknown key"},
      {pub + sec + "---\n" + pub, "k.key: more than one YAML document in the key file"},
      {pub + "secret: [x]\n", "k.key: secret: expected a Z85 key string"},
  };
  for (const auto& [text, why] : bad) {
    INFO(text);
    const Result<KeyPair> r = load(text);
    REQUIRE_FALSE(r.ok());
    INFO(r.status().message());
    CHECK(r.status().message().find(why) != std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

// Parses kGood with `from` replaced by `to` (must succeed).
static Config good_with(const std::string& from, const std::string& to) {
  std::string y = kGood;
  const size_t at = y.find(from);
  REQUIRE(at != std::string::npos);
  y.replace(at, from.size(), to);
  Result<Config> r = parse_config(y, "t.yaml");
  INFO(r.status().to_string());
  REQUIRE(r.ok());
  return r.value();
}

TEST_CASE("config: integers are decimal (a leading zero is not octal) or 0x hex, as in sb-ctl") {
  CHECK(good_with("fsync: batch", "fsync: batch\n  mtu: 01500").node.dp.mtu == 1500);
  CHECK(good_with("hash_seed: 42", "hash_seed: 0042").cluster.hash_seed == 42);
  CHECK(good_with("hash_seed: 42", "hash_seed: 0x2a").cluster.hash_seed == 42);
  CHECK(good_with("hash_seed: 42", "hash_seed: 18446744073709551615").cluster.hash_seed == UINT64_MAX);
  CHECK(good_with("id: 1\n  data_dir", "id: 01\n  data_dir").node.id == 1);
  CHECK(good_with("partitions: 8", "partitions: 08").cluster.partitions == 8);  // not "bad octal"
  CHECK(good_with("fsync: batch", "fsync: batch\n  idle_sleep_us: 010").node.dp.idle_sleep_us == 10);
  CHECK(good_with("fsync: batch", "fsync: batch\n  mbufs: \"4096\"").node.dp.mbufs == 4096);  // quoted is fine
  // Negative, fractional, signed, blank-padded, too large for the field,
  // octal or binary prefixes: an error naming the field.
  const std::pair<std::string, std::string> bad[] = {
      {"mtu: -1", "node.mtu: bad value '-1'"},
      {"mtu: 1500.5", "node.mtu: bad value '1500.5'"},
      {"mtu: +1500", "node.mtu: bad value '+1500'"},
      {"mtu: \" 1500\"", "node.mtu: bad value ' 1500'"},
      {"mtu: 4294967296", "node.mtu: bad value '4294967296'"},
      {"mtu: 0o17", "node.mtu: bad value '0o17'"},
      {"mtu: 0x", "node.mtu: bad value '0x'"},
      {"mtu: 1e3", "node.mtu: bad value '1e3'"},
      {"fib_capacity: 18446744073709551616", "node.fib_capacity: bad value '18446744073709551616'"},
  };
  for (const auto& [line, want] : bad) {
    INFO(line);
    const std::string m = err("fsync: batch", "fsync: batch\n  " + line);
    INFO(m);
    CHECK(m.find(want) != std::string::npos);
  }
  CHECK(err("hash_seed: 42", "hash_seed: -42").find("cluster.hash_seed: bad value '-42'") != std::string::npos);
  CHECK(err("id: 1\n  data_dir", "id: 1.0\n  data_dir").find("node.id: bad value '1.0'") != std::string::npos);
}

TEST_CASE("config: cluster.members[].weight is in [0, 1e9], as on the wire") {
  CHECK(good_with("weight: 3", "weight: 1e9").cluster.members[1].weight == 1e9);
  for (const char* w : {"1000000001", "1e10", "1.7e308", ".inf", "-1", ".nan"}) {
    INFO(w);
    const std::string m = err("weight: 3", std::string("weight: ") + w);
    INFO(m);
    CHECK(m.find("t.yaml: cluster.members[1].weight: must be a number in [0, 1e9]") != std::string::npos);
  }
}

TEST_CASE("config: member endpoints are checked before anything binds them") {
  const std::pair<std::string, std::string> bad[] = {
      {"tcp://198.18.0.1", "cluster.members[1].control: 'tcp://198.18.0.1': no :PORT"},
      {"tpc://127.0.0.1:7010", "cluster.members[1].control: 'tpc://127.0.0.1:7010': unknown transport"},
      {"tcp://gw1:7010", "cluster.members[1].control: 'tcp://gw1:7010': the host must be an IPv4 address"},
      {"tcp://127.0.0.1:70100", "the port must be a decimal number in [1, 65535]"},
      {"tcp://127.0.0.1:7000", "cluster.members[1].control: 'tcp://127.0.0.1:7000' is also cluster.members[0].control"},
      {"tcp://127.0.0.1:7011", "cluster.members[1].publish: 'tcp://127.0.0.1:7011' is also cluster.members[1].control"},
      {"inproc://n1", "cluster.members[1].control: 'inproc://n1': inproc:// reaches only inside one process"},
  };
  for (const auto& [ep, want] : bad) {
    INFO(ep);
    const std::string m = err("control: \"tcp://127.0.0.1:7010\"", "control: \"" + ep + "\"");
    INFO(m);
    CHECK(m.find("t.yaml") != std::string::npos);
    CHECK(m.find(want) != std::string::npos);
  }
  CHECK(good_with("\"tcp://127.0.0.1:7010\"", "\"ipc:///tmp/sb-n1.ctl\"").cluster.members[1].control ==
        "ipc:///tmp/sb-n1.ctl");
}

// kGood with a data plane section (both members have fabric MACs).
static std::string with_ports() {
  std::string y = kGood;
  y.replace(y.find("  fsync: batch\n"), 14,
            "  fsync: batch\n  s1u_ip: 198.18.9.1\n"
            "  next_hops: {ext: \"02:00:00:00:00:fe\", enb: \"02:00:00:00:00:fd\"}\n"
            "  ports:\n    ext: {device: net_null0, mac: \"02:00:00:00:00:31\"}\n"
            "    fabric: {device: net_null1}\n    enb: {device: net_null2, mac: \"02:00:00:00:00:33\"}\n");
  y.replace(y.find("weight: 3}"), 10, "weight: 3, fabric_mac: \"02:00:00:00:00:02\"}");
  return y;
}

static std::string err_in(std::string y, const std::string& from, const std::string& to) {
  const size_t at = y.find(from);
  REQUIRE(at != std::string::npos);
  y.replace(at, from.size(), to);
  Result<Config> r = parse_config(y, "t.yaml");
  REQUIRE(!r.ok());
  return r.status().message();
}

// y with `from` replaced by `to`, which must still parse.
static std::string err_in_ok(std::string y, const std::string& from, const std::string& to) {
  const size_t at = y.find(from);
  REQUIRE(at != std::string::npos);
  y.replace(at, from.size(), to);
  REQUIRE(parse_config(y, "t.yaml").ok());
  return y;
}

// Found by the loader (exit 3), not when the HTTP server fails to bind
// after the ports started (exit 4, which systemd restarts forever).
TEST_CASE("config: node.metrics never takes a port this node's endpoints bind") {
  // node 1's endpoints: tcp://127.0.0.1:7010 (control), :7011 (publish); node 0's :7000, :7001.
  const std::pair<std::string, std::string> bad[] = {
      {"127.0.0.1:7010", "port 7010 is also bound by cluster.members[1].control ('tcp://127.0.0.1:7010', this node's)"},
      {"127.0.0.1:7011", "port 7011 is also bound by cluster.members[1].publish"},
      {"0.0.0.0:7011", "port 7011 is also bound by cluster.members[1].publish"},  // a wildcard covers it
      {"127.0.0.1:7000", "port 7000 is also bound by cluster.members[0].control ('tcp://127.0.0.1:7000')"},
      {"0.0.0.0:7001", "cluster.members[0].publish"},  // a loopback member is on this machine
      {"255.255.255.255:9100", "the broadcast address"},
      {"224.0.0.1:9100", "a multicast address"},
      {"239.255.0.1:9100", "a multicast address"},
  };
  for (const auto& [m, why] : bad) {
    INFO(m);
    const std::string e = err("fsync: batch", "fsync: batch\n  metrics: \"" + m + "\"");
    INFO(e);
    CHECK(e.find("t.yaml: node.metrics: '" + m + "': ") == 0);
    CHECK(e.find(why) != std::string::npos);
  }
  for (const char* m : {"127.0.0.1:9100", "127.0.0.2:7010", "0.0.0.0:9100", "127.0.0.1:0", "0.0.0.0:0"}) {
    INFO(m);
    CHECK(good_with("fsync: batch", std::string("fsync: batch\n  metrics: \"") + m + "\"").node.dp.metrics == m);
  }
  // Node 1 on 198.18.0.2: the same port on another of its addresses is free.
  std::string y = kGood;
  y.replace(y.find("tcp://127.0.0.1:7010"), 20, "tcp://198.18.0.2:7010");
  y.replace(y.find("tcp://127.0.0.1:7011"), 20, "tcp://198.18.0.2:7011");
  CHECK(err_in_ok(y, "fsync: batch", "fsync: batch\n  metrics: \"198.18.16.1:7010\"").size() > 0);
  CHECK(err_in_ok(y, "fsync: batch", "fsync: batch\n  metrics: \"127.0.0.1:7011\"").size() > 0);
  CHECK(err_in(y, "fsync: batch", "fsync: batch\n  metrics: \"0.0.0.0:7010\"")
            .find("node.metrics: '0.0.0.0:7010': port 7010 is also bound by cluster.members[1].control") != std::string::npos);
  CHECK(err_in(y, "fsync: batch", "fsync: batch\n  metrics: \"198.18.0.2:7011\"")
            .find("cluster.members[1].publish ('tcp://198.18.0.2:7011', this node's)") != std::string::npos);
}

TEST_CASE("config: node.file_prefix is a directory name short enough for EAL's sockets") {
  CHECK(good_with("fsync: batch", "fsync: batch\n  file_prefix: sb-x").node.dp.file_prefix == "sb-x");
  CHECK(good_with("fsync: batch", "fsync: batch\n  file_prefix: " + std::string(kMaxFilePrefix, 'a'))
            .node.dp.file_prefix.size() == kMaxFilePrefix);
  CHECK(good_with("fsync: batch", "fsync: batch\n  file_prefix: \"..x\"").node.dp.file_prefix == "..x");
  CHECK(parse_config(kGood).value().node.dp.file_prefix == "sb-lab-1");
  for (const char* p : {"\".\"", "\"..\""}) {
    INFO(p);
    const std::string m = err("fsync: batch", std::string("fsync: batch\n  file_prefix: ") + p);
    INFO(m);
    CHECK(m.find("t.yaml: node.file_prefix: '") != std::string::npos);
    CHECK(m.find("is not a directory name") != std::string::npos);
    CHECK(m.find("sb-lab-1") != std::string::npos);
  }
  const std::string m = err("fsync: batch", "fsync: batch\n  file_prefix: " + std::string(kMaxFilePrefix + 1, 'a'));
  INFO(m);
  CHECK(m.find("t.yaml: node.file_prefix: longer than 48 bytes (49)") != std::string::npos);
  CHECK(err("fsync: batch", "fsync: batch\n  file_prefix: " + std::string(300, 'a')).find("node.file_prefix") !=
        std::string::npos);
  CHECK(err("fsync: batch", "fsync: batch\n  file_prefix: a/b").find("node.file_prefix") != std::string::npos);
}

// sb-node sets these EAL options from its own fields (node/dataplane.cc
// eal_args()); given again in eal_args, EAL would use the later one.
TEST_CASE("config: node.eal_args cannot override what sb-node sets from its own fields") {
  const std::pair<std::string, std::string> bad[] = {
      {R"("--file-prefix", "x")", "'--file-prefix' is EAL's --file-prefix, which sb-node sets from node.file_prefix: "
                                  "set node.file_prefix instead"},
      {R"("--file-prefix=x")", "--file-prefix, which sb-node sets from node.file_prefix"},
      {R"("--file-pre=x")", "--file-prefix, which sb-node sets from node.file_prefix"},  // getopt_long abbreviation
      {R"("-l", "0-3")", "'-l' is EAL's -l, which sb-node sets from node.lcores"},
      {R"("-l0-3")", "-l, which sb-node sets from node.lcores"},
      {R"("-vl0")", "-l, which sb-node sets from node.lcores"},
      {R"("--lcores=0@1")", "--lcores, which sb-node sets from node.lcores"},
      {R"("-c", "0x3")", "-c, which sb-node sets from node.lcores"},
      {R"("-m", "1024")", "-m, which sb-node sets from node.memory_mb"},
      {R"("-m1024")", "-m, which sb-node sets from node.memory_mb"},
      {R"("--socket-mem=1024")", "--socket-mem, which sb-node sets from node.memory_mb"},
      {R"("--no-huge")", "--no-huge, which sb-node sets from node.hugepages"},
      {R"("-a", "0000:3b:00.0")", "-a, which sb-node sets from node.ports.*.device"},
      {R"("--allow=0000:3b:00.0")", "--allow, which sb-node sets from node.ports.*.device"},
      {R"("-b", "0000:3b:00.0")", "-b, which sb-node sets from node.ports.*.device"},
      {R"("--block", "0000:3b:00.0")", "--block, which sb-node sets from node.ports.*.device"},
      {R"("--vdev", "net_null9")", "--vdev, which sb-node sets from node.ports.*.device"},
      {R"("--vdev=net_null9")", "--vdev, which sb-node sets from node.ports.*.device"},
      {R"("--no-pci")", "--no-pci, which sb-node sets from node.ports.*.device"},
      {R"("-w", "0000:3b:00.0")", "-w, which sb-node sets from node.ports.*.device"},
  };
  for (const auto& [args, why] : bad) {
    INFO(args);
    const std::string m = err("fsync: batch", "fsync: batch\n  eal_args: [\"--log-level=pmd:debug\", " + args + "]");
    INFO(m);
    CHECK(m.find("t.yaml: node.eal_args[1]: ") != std::string::npos);
    CHECK(m.find(why) != std::string::npos);
  }
  // EAL's other options are the point of the field.
  const Config c = good_with("fsync: batch",
                             "fsync: batch\n  eal_args: [\"--log-level\", \"lib.eal:debug\", \"-n\", \"4\", "
                             "\"--huge-dir=/mnt/huge\", \"--iova-mode=va\", \"--main-lcore\", \"1\", \"-v\", "
                             "\"--no-such-eal-option\", \"--\", \"-\"]");
  CHECK(c.node.dp.eal_args.size() == 12);
}

TEST_CASE("config: port and next-hop MACs are unicast, fabric MACs distinct") {
  const std::string y = with_ports();
  REQUIRE(parse_config(y).ok());
  const std::pair<std::string, std::string> macs[] = {
      {"00:00:00:00:00:00", "all-zero"}, {"ff:ff:ff:ff:ff:ff", "broadcast"}, {"01:00:5e:00:00:fb", "multicast"}};
  for (const auto& [mac, why] : macs) {
    INFO(mac);
    std::string m = err_in(y, "ext: \"02:00:00:00:00:fe\"", "ext: \"" + mac + "\"");
    CHECK(m.find("node.next_hops.ext") != std::string::npos);
    CHECK(m.find(why) != std::string::npos);
    m = err_in(y, "enb: \"02:00:00:00:00:fd\"", "enb: \"" + mac + "\"");
    CHECK(m.find("node.next_hops.enb") != std::string::npos);
    m = err_in(y, "mac: \"02:00:00:00:00:33\"", "mac: \"" + mac + "\"");
    CHECK(m.find("node.ports.enb.mac") != std::string::npos);
    CHECK(m.find(why) != std::string::npos);
    m = err_in(y, "mac: \"02:00:00:00:00:31\"", "mac: \"" + mac + "\"");
    CHECK(m.find("node.ports.ext.mac") != std::string::npos);
    m = err_in(y, "fabric_mac: \"02:00:00:00:00:02\"", "fabric_mac: \"" + mac + "\"");
    CHECK(m.find("cluster.members[1].fabric_mac") != std::string::npos);
    CHECK(m.find(why) != std::string::npos);
  }
  const std::string m = err_in(y, "fabric_mac: \"02:00:00:00:00:02\"", "fabric_mac: \"02:00:00:00:00:01\"");
  CHECK(m.find("cluster.members[1].fabric_mac") != std::string::npos);
  CHECK(m.find("cluster.members[0].fabric_mac") != std::string::npos);
}

TEST_CASE("config: node.s1u_ip is a unicast address (required with ports, checked whenever given)") {
  const std::string y = with_ports();
  const std::pair<std::string, std::string> bad[] = {
      {"\"\"", "missing"},  // an empty value is no address
      {"0.0.0.0", "0.0.0.0"},
      {"0.1.2.3", "0.0.0.0/8"},
      {"255.255.255.255", "broadcast"},
      {"224.0.0.5", "multicast"},
      {"239.1.1.1", "multicast"},
      {"240.0.0.1", "reserved"},
      {"127.0.0.1", "loopback"},
      {"198.18.9", "not an IPv4 address"},
  };
  for (const auto& [ip, why] : bad) {
    INFO(ip);
    std::string m = err_in(y, "s1u_ip: 198.18.9.1", "s1u_ip: " + ip);
    INFO(m);
    CHECK(m.find("node.s1u_ip") != std::string::npos);
    CHECK(m.find(why) != std::string::npos);
    // No ports (sb-node --control-only): optional, but a given value is checked too.
    m = err("fsync: batch", "fsync: batch\n  s1u_ip: " + ip);
    CHECK(m.find("node.s1u_ip") != std::string::npos);
  }
  CHECK(err_in(y, "  s1u_ip: 198.18.9.1\n", "").find("node.s1u_ip: missing") != std::string::npos);
  CHECK(good_with("fsync: batch", "fsync: batch\n  s1u_ip: 10.0.0.1").node.dp.s1u_ip == 0x0a000001);
  CHECK(parse_config(kGood).value().node.dp.s1u_ip == 0);  // no ports, none given
}

TEST_CASE("config: node.ports.fabric.mac is refused: the fabric MAC is the member's fabric_mac") {
  const std::string m =
      err_in(with_ports(), "fabric: {device: net_null1}", "fabric: {device: net_null1, mac: \"02:00:00:00:00:02\"}");
  INFO(m);
  CHECK(m.find("node.ports.fabric.mac") != std::string::npos);
  CHECK(m.find("cluster.members[id=1].fabric_mac") != std::string::npos);
}

TEST_CASE("config: ownership ranges are exact decimal numbers (no sign, blank or 32-bit wrap)") {
  for (const std::string r : {"0-4294967299", "4294967296-4294967299", "+0-3", " 0-3", "0- 3", "0-+3", "0-3 ", "0x0-3",
                              "-3", "0-", "0--3", "", "0-3-5", "99999999999999999999-3"}) {
    INFO("'" << r << "'");
    const std::string m = err("\"0-3\"", "\"" + r + "\"");
    INFO(m);
    CHECK(m.find("cluster.ownership[0].partitions") != std::string::npos);
  }
  CHECK(err("\"0-3\"", "\"3-0\"").find("range '3-0' is empty") != std::string::npos);
  CHECK(good_with("\"0-3\"", "\"00-03\"").cluster.owner[3] == 0);  // decimal, as everywhere
  Config c = good_with("    - {node: 0, partitions: \"0-3\"}\n", "    - {node: 0, partitions: \"0-2\"}\n    - {node: 0, partitions: \"3\"}\n");
  CHECK(c.cluster.owner == std::vector<uint32_t>{0, 0, 0, 0, 1, 1, 1, 1});
}

TEST_CASE("config: snapshot_every is bounded (a WAL segment is read whole at recovery)") {
  CHECK(good_with("fsync: batch", "fsync: batch\n  snapshot_every: 16777216").node.snapshot_every == 16777216);
  CHECK(good_with("fsync: batch", "fsync: batch\n  snapshot_every: 16").node.snapshot_every == 16);
  for (const char* v : {"16777217", "1000000000000", "15"}) {
    INFO(v);
    const std::string m = err("fsync: batch", std::string("fsync: batch\n  snapshot_every: ") + v);
    INFO(m);
    CHECK(m.find("node.snapshot_every: must be in [16, 16777216]") != std::string::npos);
  }
}

// What the RIB's node state would refuse at start, found by the loader
// (sb-node exits 3 before EAL starts, not 4 after the ports were probed).
TEST_CASE("config: node.data_dir is not empty, and the baselines' tables fit 2^27 entries") {
  CHECK(err("data_dir: /tmp/x", "data_dir: \"\"").find("t.yaml: node.data_dir: empty") != std::string::npos);
  // scalebricks: only this node's sessions, node.fib_capacity's own bound.
  CHECK(good_with("fsync: batch", "fsync: batch\n  fib_capacity: 134217728").node.fib_capacity == 134217728);
  // The baselines also hold copies: fib_capacity + cluster.capacity (100000 here) <= 2^27.
  auto parse = [](const std::string& arch, uint64_t fib_capacity) {
    std::string y = kGood;
    y.replace(y.find("architecture: scalebricks"), 25, "architecture: " + arch);
    y.replace(y.find("fsync: batch"), 12, "fsync: batch\n  fib_capacity: " + std::to_string(fib_capacity));
    return parse_config(y, "t.yaml");
  };
  for (const std::string arch : {"full-duplication", "hash-partition"}) {
    INFO(arch);
    CHECK(parse(arch, 134217728 - 100000).ok());
    const Result<Config> r = parse(arch, 134217728 - 100000 + 1);
    REQUIRE_FALSE(r.ok());
    INFO(r.status().message());
    CHECK(r.status().message().find("t.yaml: node.fib_capacity: 134117729 + cluster.capacity 100000 (architecture " +
                                    arch) != std::string::npos);
    CHECK(r.status().message().find("is 134217729, above 2^27") != std::string::npos);
  }
}

// node.lcores in EAL's grammar (-l list, or the --lcores map with '@' and
// groups): what EAL would refuse with its whole usage text is refused here,
// naming the field; the lcores and CPUs of a good list are what EAL reads.
TEST_CASE("config: node.lcores is an EAL lcore list, parsed as EAL reads it") {
  struct Good {
    std::string list;
    std::vector<uint32_t> lcores, cpus;
  };
  const Good good[] = {
      {"0", {0}, {0}},
      {"1-3", {1, 2, 3}, {1, 2, 3}},
      {"1,3", {1, 3}, {1, 3}},
      {"0@(0-1)", {0}, {0, 1}},
      {"(0,6)", {0, 6}, {0, 6}},
      {"2-3@5", {2, 3}, {5}},
      // EAL's own example (eal_parse_lcores).
      {"1,2@(5-7),(3-5)@(0,2),(0,6),7-8", {0, 1, 2, 3, 4, 5, 6, 7, 8}, {0, 1, 2, 5, 6, 7, 8}},
  };
  for (const Good& g : good) {
    INFO(g.list);
    const Result<LcoreSet> r = parse_lcores(g.list);
    INFO(r.status().to_string());
    REQUIRE(r.ok());
    CHECK(r.value().lcores == g.lcores);
    CHECK(r.value().cpus == g.cpus);
    CHECK(good_with("fsync: batch", "fsync: batch\n  lcores: \"" + g.list + "\"").node.dp.lcores == g.list);
  }
  const std::pair<std::string, std::string> bad[] = {
      {"", "a number is missing at the end"},
      {"0-", "a number is missing at the end"},
      {"-1", "unexpected '-'"},
      {"1,", "a number is missing at the end"},
      {"1,,2", "unexpected ','"},
      {"3-1", "range 3-1 runs backwards"},
      {"1 2", "unexpected ' '"},
      {"0@", "a number is missing at the end"},
      {"0@(0-1", "a group '(' is not closed"},
      {"(0,1", "a group '(' is not closed"},
      {"0@1@2", "unexpected '@'"},
      {"1024", "1024 is not below 1024"},
      {"0x1", "unexpected 'x'"},
  };
  for (const auto& [list, why] : bad) {
    INFO(list);
    const std::string m = err("fsync: batch", "fsync: batch\n  lcores: \"" + list + "\"");
    INFO(m);
    CHECK(m.find("t.yaml: node.lcores: '" + list + "': " + why) != std::string::npos);
  }
}

TEST_CASE("config: PCI port addresses are stored the way EAL names the ethdev") {
  CHECK(canonical_device("0000:3b:00.0") == "0000:3b:00.0");
  CHECK(canonical_device("3b:00.0") == "0000:3b:00.0");  // lspci's form
  CHECK(canonical_device("0000:3B:00.1") == "0000:3b:00.1");
  CHECK(canonical_device("3B:0a.7,rxq_cqe_comp_en=0") == "0000:3b:0a.7,rxq_cqe_comp_en=0");
  CHECK(canonical_device("net_af_packet0,iface=Ab:cd.1") == "net_af_packet0,iface=Ab:cd.1");  // a vdev
  CHECK(canonical_device("net_null0") == "net_null0");
  CHECK(canonical_device("3b:00.8") == "3b:00.8");      // function 8: not a PCI address
  CHECK(canonical_device("x0000:3b:00.0") == "x0000:3b:00.0");
  CHECK(device_name("0000:3b:00.0,a=1") == "0000:3b:00.0");

  std::string y = with_ports();
  y.replace(y.find("device: net_null0"), 17, "device: \"3B:00.0\"");
  Result<Config> r = parse_config(y);
  REQUIRE(r.ok());
  CHECK(r.value().node.dp.ports[0].device == "0000:3b:00.0");
}

TEST_CASE("config: two spellings of one device for two roles are refused") {
  const std::string y = with_ports();
  std::string m = err_in(err_in_ok(y, "device: net_null0", "device: \"0000:3b:00.0\""), "device: net_null1",
                         "device: \"3b:00.0,rxq_cqe_comp_en=0\"");
  CHECK(m.find("node.ports.fabric.device: same device as node.ports.ext") != std::string::npos);
  m = err_in(y, "device: net_null2", "device: \"net_null1,size=64\"");
  CHECK(m.find("node.ports.enb.device: same device as node.ports.fabric") != std::string::npos);
}
