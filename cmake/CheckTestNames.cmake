# cmake -DSRC=<source dir> -P CheckTestNames.cmake
#
# Fails when a Catch2 TEST_CASE name contains ';'. catch_discover_tests
# turns such a name into a CMake list: two CTest entries, each a test spec
# that matches no test case, so Catch2 runs nothing, exits 0, and CTest
# reports both as passed (11 tests went unrun that way until 2026-11-23).
file(GLOB_RECURSE _srcs RELATIVE ${SRC}
     ${SRC}/core/*_test.cc ${SRC}/gpt/*_test.cc ${SRC}/fib/*_test.cc ${SRC}/rib/*_test.cc
     ${SRC}/control/*_test.cc ${SRC}/node/*_test.cc ${SRC}/tools/*_test.cc ${SRC}/testbed/*_test.cc)
set(_bad "")
foreach(f ${_srcs})
  file(STRINGS ${SRC}/${f} _lines REGEX "TEST_CASE\\(\"[^\"]*\\;")
  foreach(l ${_lines})
    string(APPEND _bad "  ${f}: ${l}\n")
  endforeach()
endforeach()
if(_bad)
  message(FATAL_ERROR "TEST_CASE names with ';' never run under ctest (catch_discover_tests splits them); "
                      "use ',' instead:\n${_bad}")
endif()
message(STATUS "test names: none contains a semicolon")
