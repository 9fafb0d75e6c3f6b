# Third-party dependencies, all from Debian 12 packages (tools/install-deps).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)

if(NOT SB_SANITIZER_TREE)
  # DPDK: its pkg-config flags carry -march=corei7 (dropped: the project's
  # own -march policy decides) and its headers trip -Wvolatile under C++20
  # and -Wpedantic on flexible arrays: include them as SYSTEM headers so our
  # code still builds with -Wall -Wextra -Werror.
  pkg_check_modules(DPDK REQUIRED libdpdk)
  set(_dpdk_opts "")
  foreach(f ${DPDK_CFLAGS_OTHER})
    if(NOT f MATCHES "^-march=")
      list(APPEND _dpdk_opts ${f})
    endif()
  endforeach()
  add_library(sb_dpdk INTERFACE)
  target_include_directories(sb_dpdk SYSTEM INTERFACE ${DPDK_INCLUDE_DIRS})
  # "-include rte_config.h" arrives as two list items; keep them together.
  string(REPLACE ";-include;" ";-include " _dpdk_opts "${_dpdk_opts}")
  string(REPLACE "-include;" "-include " _dpdk_opts "${_dpdk_opts}")
  separate_arguments(_dpdk_opts UNIX_COMMAND "${_dpdk_opts}")
  target_compile_options(sb_dpdk INTERFACE "SHELL:-include rte_config.h")
  target_link_libraries(sb_dpdk INTERFACE ${DPDK_LINK_LIBRARIES} ${DPDK_LDFLAGS_OTHER})
  target_link_directories(sb_dpdk INTERFACE ${DPDK_LIBRARY_DIRS})
  set(SB_DPDK_VERSION ${DPDK_VERSION})
  add_library(sb::dpdk ALIAS sb_dpdk)
endif()

# Control plane (rib/, control/, node/ --control-only): protobuf, ZeroMQ with
# the C++ binding, yaml-cpp. Not in the sanitizer tree (not instrumented).
if(NOT SB_SANITIZER_TREE)
  find_package(Protobuf REQUIRED)
  pkg_check_modules(ZMQ REQUIRED IMPORTED_TARGET libzmq)
  find_package(cppzmq QUIET)
  find_package(yaml-cpp REQUIRED)
endif()
