# sb_add_tests(<target> SOURCES ... LIBS ...)
#
# One Catch2 test binary per folder; each TEST_CASE becomes its own CTest
# test. Catch tags map to CTest labels:
#   [large]  longer than 30 s: label `large` (still in the default run)
#   [tsan]   concurrency test: label `tsan` (the ThreadSanitizer tree runs
#            only these; the normal tree runs them too)
# Other tests carry the label `unit`.
function(sb_add_tests target)
  cmake_parse_arguments(A "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${target} ${A_SOURCES} ${PROJECT_SOURCE_DIR}/core/test_main.cc)
  target_link_libraries(${target} PRIVATE ${A_LIBS} Catch2::Catch2 sb_flags)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR})
  set(_env "SB_TEST_SRCDIR=${PROJECT_SOURCE_DIR}")
  catch_discover_tests(${target} TEST_SPEC "~[large]~[tsan]"
    PROPERTIES LABELS unit ENVIRONMENT "${_env}")
  catch_discover_tests(${target} TEST_SPEC "[tsan]~[large]"
    PROPERTIES LABELS tsan ENVIRONMENT "${_env}")
  catch_discover_tests(${target} TEST_SPEC "[large]"
    PROPERTIES LABELS large ENVIRONMENT "${_env}")
endfunction()
