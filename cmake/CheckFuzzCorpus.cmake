# cmake -DGEN=<generator> -DCORPUS=<corpus dir> -DSRC=<source dir> -DSCRATCH=<dir> -P CheckFuzzCorpus.cmake
#
# Fails when a committed fuzz corpus is not what its generator writes. The
# generator runs into SCRATCH (emptied first, removed after), and every
# entry of CORPUS must be one of:
#   - a file the generator writes, with the same name and the same bytes;
#   - an input a fuzzing run found, copied in by hand under the name
#     libFuzzer gave it: the SHA-1 of its bytes (40 lowercase hex digits),
#     after an optional artifact prefix of letters and '-' (crash-,
#     timeout-, control-crash-, ...). The name is checked against the
#     bytes, so such a file cannot be edited unnoticed either.
# Each file the generator writes must be in CORPUS. Anything else (a file
# written by hand, a subfolder, an editor's backup) fails the test: a seed
# is code in the generator, reviewed as code. The failure names every
# missing, extra or differing entry and the command that regenerates.
cmake_minimum_required(VERSION 3.25)
foreach(v GEN CORPUS SRC SCRATCH)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "CheckFuzzCorpus.cmake: -D${v}= is required")
  endif()
endforeach()
get_filename_component(_gen_name ${GEN} NAME)

# The command a developer runs from the source tree (relative paths when
# the build tree is inside it).
file(RELATIVE_PATH _corpus_rel "${SRC}" "${CORPUS}")
file(RELATIVE_PATH _gen_rel "${SRC}" "${GEN}")
if(_gen_rel MATCHES "^\\.\\./")
  set(_gen_rel ${GEN})
endif()
set(_regen "${_gen_rel} ${_corpus_rel}")

file(REMOVE_RECURSE "${SCRATCH}")
file(MAKE_DIRECTORY "${SCRATCH}")
execute_process(COMMAND "${GEN}" "${SCRATCH}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
if(NOT _rc EQUAL 0)
  file(REMOVE_RECURSE "${SCRATCH}")
  message(FATAL_ERROR "${_gen_name} ${SCRATCH} failed (${_rc}):\n${_out}")
endif()

file(GLOB _generated RELATIVE "${SCRATCH}" LIST_DIRECTORIES true "${SCRATCH}/*")
file(GLOB _committed RELATIVE "${CORPUS}" LIST_DIRECTORIES true "${CORPUS}/*")
set(_bad "")
set(_matching 0)
foreach(f ${_generated})
  if(NOT f IN_LIST _committed)
    string(APPEND _bad "  missing:  ${f} (the generator writes it)\n")
    continue()
  endif()
  file(READ "${SCRATCH}/${f}" _want HEX)
  file(READ "${CORPUS}/${f}" _have HEX)
  if(_want STREQUAL _have)
    math(EXPR _matching "${_matching} + 1")
  else()
    file(SIZE "${SCRATCH}/${f}" _want_size)
    file(SIZE "${CORPUS}/${f}" _have_size)
    string(APPEND _bad "  differs:  ${f} (corpus ${_have_size} bytes, generator ${_want_size} bytes)\n")
  endif()
endforeach()
set(_found "")
foreach(f ${_committed})
  if(f IN_LIST _generated)
    continue()
  endif()
  # libFuzzer's name: [prefix-]<40 hex digits> (CMake regexes have no {n}).
  set(_named "")
  if(f MATCHES "^([a-z-]*-)?([0-9a-f]+)$")
    string(LENGTH "${CMAKE_MATCH_2}" _len)
    if(_len EQUAL 40)
      set(_named ${CMAKE_MATCH_2})
    endif()
  endif()
  if(IS_DIRECTORY "${CORPUS}/${f}")
    string(APPEND _bad "  extra:    ${f}/ (a folder: the replay tests read only the corpus's own files)\n")
  elseif(_named)
    file(SHA1 "${CORPUS}/${f}" _sha1)
    if(_sha1 STREQUAL _named)
      list(APPEND _found ${f})
    else()
      # Edited since it was copied in, or libFuzzer's minimized reproducer
      # (minimized-from-<SHA-1 of the input it came from>).
      string(APPEND _bad "  differs:  ${f} (named like a fuzzer-found input, but its bytes' SHA-1 is "
                         "${_sha1}: git checkout it if it was edited; a minimized reproducer is renamed "
                         "crash-${_sha1})\n")
    endif()
  else()
    string(APPEND _bad "  extra:    ${f} (the generator does not write it, and it is not named by the "
                       "SHA-1 of its bytes as a fuzzer-found input is)\n")
  endif()
endforeach()
file(REMOVE_RECURSE "${SCRATCH}")

if(_bad)
  message(FATAL_ERROR "${_corpus_rel} is not what ${_gen_name} writes:\n${_bad}"
    "The corpus is regenerated, never edited: change a seed in the generator's source (or, when the "
    "code the generator calls changed what it writes, only regenerate). Build ${_gen_name} and run "
    "from the source tree\n  ${_regen}\nthen git rm the extra files the generator no longer writes "
    "(a fuzzer-found input stays, named by the SHA-1 of its bytes: libFuzzer's name) and commit the "
    "corpus with the change that caused it.")
endif()
list(LENGTH _found _nfound)
message(STATUS "${_corpus_rel}: ${_matching} files as ${_gen_name} writes them, ${_nfound} fuzzer-found")
foreach(f ${_found})
  message(STATUS "  fuzzer-found: ${f}")
endforeach()
