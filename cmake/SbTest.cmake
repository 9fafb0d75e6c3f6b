# sb_add_tests(<target> SOURCES ... [LIBS ...] [SERIAL])
#
# One Catch2 test binary per folder; each TEST_CASE becomes its own CTest
# test. Catch tags map to CTest labels:
#   [large]  longer than 30 s: label `large` (still in the default run)
#   [tsan]   concurrency test: label `tsan` (the ThreadSanitizer tree runs
#            only these; the normal tree runs them too)
# Other tests carry the label `unit`. SERIAL: the tests change machine-wide
# state (network namespaces, ...) and run alone (CTest RUN_SERIAL).
function(sb_add_tests target)
  cmake_parse_arguments(A "SERIAL" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${target} ${A_SOURCES} ${PROJECT_SOURCE_DIR}/core/test_main.cc)
  target_link_libraries(${target} PRIVATE ${A_LIBS} Catch2::Catch2 sb_flags)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR})
  set(_env "SB_TEST_SRCDIR=${PROJECT_SOURCE_DIR}")
  set(_serial "")
  if(A_SERIAL)
    set(_serial RUN_SERIAL TRUE)
  endif()
  catch_discover_tests(${target} TEST_SPEC "~[large]~[tsan]"
    PROPERTIES LABELS unit ENVIRONMENT "${_env}" ${_serial})
  catch_discover_tests(${target} TEST_SPEC "[tsan]~[large]"
    PROPERTIES LABELS tsan ENVIRONMENT "${_env}" ${_serial})
  catch_discover_tests(${target} TEST_SPEC "[large]"
    PROPERTIES LABELS large ENVIRONMENT "${_env}" ${_serial})
endfunction()

# sb_add_fuzz_corpus_test(<name> GENERATOR <target> CORPUS <dir>)
#
# The CTest test <name> (label `unit`): the generator target writes its
# corpus into a scratch folder of the build tree, and the committed corpus
# <dir> (relative to the source tree) must hold the same files, byte for
# byte, plus only fuzzer-found inputs named by the SHA-1 of their bytes
# (cmake/CheckFuzzCorpus.cmake has the rule). A seed edited in the corpus
# instead of the generator, or a generator change not regenerated, fails.
function(sb_add_fuzz_corpus_test name)
  cmake_parse_arguments(A "" "GENERATOR;CORPUS" "" ${ARGN})
  add_test(NAME ${name}
           COMMAND ${CMAKE_COMMAND} -DGEN=$<TARGET_FILE:${A_GENERATOR}> -DCORPUS=${PROJECT_SOURCE_DIR}/${A_CORPUS}
                   -DSRC=${PROJECT_SOURCE_DIR} -DSCRATCH=${CMAKE_CURRENT_BINARY_DIR}/${name}.scratch
                   -P ${PROJECT_SOURCE_DIR}/cmake/CheckFuzzCorpus.cmake)
  set_tests_properties(${name} PROPERTIES LABELS unit)
endfunction()
