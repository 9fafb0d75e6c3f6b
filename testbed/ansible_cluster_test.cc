// Ansible against a real testbed: a 2-node cluster of `sb-node
// --control-only` processes provisioned by site.yml. The first run reports
// changes, a second run reports changed=0 (no changed_when shortcuts on
// the tasks that change things), changing one node's variable rewrites and
// restarts only that node, and the cluster answers `sb-ctl cluster status`.
// Runs as root, serially, on testbed index 14, and tears down by itself.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>

#include "core/test_util.h"

using sb::test::has;
using sb::test::Run;
using sb::test::sh;

namespace {


std::string src() { return sb::test::src_dir(); }

// "n1 : ok=14 changed=0 ..." -> 0
int changed(const std::string& out, const std::string& host) {
  std::smatch m;
  const std::regex re(host + R"(\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0)");
  if (!std::regex_search(out, m, re)) return -1;
  return std::stoi(m[1]);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

// Tears the testbed down whatever happens in the test.
struct Teardown {
  ~Teardown() {
    sh("rm -rf " + src() + "/ansible/inventories/testbed/host_vars");
    sh(src() + "/testbed/down --index 14");
  }
};

}  // namespace

TEST_CASE("ansible site.yml on the testbed: changes, then none, then only the changed node", "[testbed][large]") {
  REQUIRE(geteuid() == 0);
  Teardown td;
  sh(src() + "/testbed/down --index 14");
  const Run up = sh(src() + "/testbed/up --nodes 2 --index 14");
  INFO(up.out);
  REQUIRE(up.rc == 0);
  const std::string play = "cd " + src() + "/ansible && ANSIBLE_NOCOLOR=1 ANSIBLE_CONFIG=ansible.cfg "
                           "ansible-playbook -i inventories/testbed/hosts.yml site.yml "
                           "-e sb_build_dir=" SB_BUILD_DIR " -e sb_node_args=--control-only -e health_mode=ctl";
  const Run first = sh(play);
  INFO(first.out);
  REQUIRE(first.rc == 0);
  CHECK(changed(first.out, "n1") > 0);
  CHECK(changed(first.out, "n2") > 0);

  const Run second = sh(play);
  INFO(second.out);
  REQUIRE(second.rc == 0);
  CHECK(changed(second.out, "n1") == 0);
  CHECK(changed(second.out, "n2") == 0);

  const std::string st = "/run/sb-testbed/sb14";
  const std::string pid1 = slurp(st + "/n1/sb-node.pid"), pid2 = slurp(st + "/n2/sb-node.pid");
  REQUIRE(sh("mkdir -p " + src() + "/ansible/inventories/testbed/host_vars && echo 'sb_fib_capacity: 2097152' > " +
             src() + "/ansible/inventories/testbed/host_vars/n2.yml").rc == 0);
  const Run third = sh(play);
  INFO(third.out);
  REQUIRE(third.rc == 0);
  CHECK(changed(third.out, "n1") == 0);
  CHECK(changed(third.out, "n2") == 2);  // its config file, its restart
  CHECK(slurp(st + "/n1/sb-node.pid") == pid1);
  CHECK(slurp(st + "/n2/sb-node.pid") != pid2);
  CHECK(has(slurp(st + "/n2/sb-node.yaml") + sh("cat " + st + "/n2/sb-node.yaml").out, "fib_capacity: 2097152"));

  const Run status = sh(SB_BUILD_DIR "/bin/sb-ctl --config " + st + "/n1/sb-node.yaml --key " + st +
                        "/keys/admin.key cluster status");
  INFO(status.out);
  CHECK(status.rc == 0);
  CHECK(has(status.out, "2 members"));
  CHECK(has(status.out, "sees 1:live 2:live"));
}
