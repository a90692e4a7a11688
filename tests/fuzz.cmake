# libFuzzer targets. The project compiler is gcc, so every fuzzer is built by a custom command
# with clang -fsanitize=fuzzer,address,undefined and registered as a short ctest run on a copy
# of its committed seed corpus. Gated by DF_FUZZ (top-level option); when clang or its fuzzer
# runtime (Debian: libclang-rt-<version>-dev) is missing, fuzzers are skipped with a message
# at configure time and df_add_fuzzer does nothing.
#
#   df_add_fuzzer(NAME SOURCES file.c... [DEPENDS header...] [PKGS JANSSON...]
#                 CORPUS seed_dir [DICT file.dict] [SECONDS n])
#     builds ${CMAKE_CURRENT_BINARY_DIR}/NAME (target NAME, part of `all`), and adds the test
#     NAME: copy CORPUS to NAME_run/corpus in the build dir, run n seconds (default 5; the seed
#     corpus itself runs in well under a second) with -rss_limit_mb=1024; crash reproducers
#     land in NAME_artifacts/.
#     PKGS names pkg_check_modules prefixes whose CFLAGS / LDFLAGS are passed to clang.
include_guard(GLOBAL)

set(DF_FUZZ_ENABLED OFF)
if(DF_FUZZ)
  find_program(DF_CLANG NAMES clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14)
  if(NOT DF_CLANG)
    message(STATUS "Fuzzers: skipped, clang not found (DF_FUZZ=ON needs clang with libFuzzer)")
  else()
    # Probe once per clang; a failed probe is retried at every configure.
    if(NOT DF_FUZZ_RUNTIME_OK OR NOT DF_FUZZ_RUNTIME_CLANG STREQUAL DF_CLANG)
      set(_probe ${CMAKE_BINARY_DIR}/CMakeFiles/df_fuzz_probe)
      file(WRITE ${_probe}/probe.c
        "#include <stddef.h>\n#include <stdint.h>\n"
        "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n")
      execute_process(
        COMMAND ${DF_CLANG} -fsanitize=fuzzer,address,undefined ${_probe}/probe.c -o ${_probe}/probe
        RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
      if(_rc EQUAL 0)
        set(DF_FUZZ_RUNTIME_OK ON CACHE INTERNAL "clang links -fsanitize=fuzzer")
      else()
        set(DF_FUZZ_RUNTIME_OK OFF CACHE INTERNAL "clang links -fsanitize=fuzzer")
      endif()
      set(DF_FUZZ_RUNTIME_CLANG ${DF_CLANG} CACHE INTERNAL "clang the fuzzer probe used")
    endif()
    if(DF_FUZZ_RUNTIME_OK)
      set(DF_FUZZ_ENABLED ON)
      message(STATUS "Fuzzers: enabled with ${DF_CLANG}")
    else()
      message(STATUS "Fuzzers: skipped, ${DF_CLANG} cannot link -fsanitize=fuzzer "
                     "(install the clang runtime, e.g. libclang-rt-14-dev)")
    endif()
  endif()
else()
  message(STATUS "Fuzzers: off (DF_FUZZ=OFF)")
endif()

function(df_add_fuzzer name)
  if(NOT DF_FUZZ_ENABLED)
    return()
  endif()
  cmake_parse_arguments(F "" "CORPUS;DICT;SECONDS" "SOURCES;DEPENDS;PKGS" ${ARGN})
  if(NOT F_SECONDS)
    set(F_SECONDS 5)
  endif()
  set(cflags)
  set(ldflags)
  foreach(p ${F_PKGS})
    list(APPEND cflags ${${p}_CFLAGS})
    list(APPEND ldflags ${${p}_LDFLAGS})
  endforeach()
  set(bin ${CMAKE_CURRENT_BINARY_DIR}/${name})
  add_custom_command(OUTPUT ${bin}
    COMMAND ${DF_CLANG} -std=c11 -g -O1 -fno-omit-frame-pointer
            -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
            -Wall -Wextra -Wno-unused-parameter
            -I${PROJECT_SOURCE_DIR} ${cflags} ${F_SOURCES} -o ${bin} ${ldflags}
    DEPENDS ${F_SOURCES} ${F_DEPENDS}
    COMMENT "Building libFuzzer target ${name} with clang"
    COMMAND_EXPAND_LISTS VERBATIM)
  add_custom_target(${name} ALL DEPENDS ${bin})
  set(run ${CMAKE_CURRENT_BINARY_DIR}/${name}_run)
  set(art ${CMAKE_CURRENT_BINARY_DIR}/${name}_artifacts)
  set(dict)
  if(F_DICT)
    set(dict -dict=${F_DICT})
  endif()
  add_test(NAME ${name}
    COMMAND sh -c "rm -rf \"$1\" && mkdir -p \"$1/corpus\" \"$2\" && cp -R \"$3\"/. \"$1/corpus\"/ && shift 3 && exec \"$@\""
            sh ${run} ${art} ${F_CORPUS}
            ${bin} -max_total_time=${F_SECONDS} -rss_limit_mb=1024 -print_final_stats=1
            -artifact_prefix=${art}/ ${dict} ${run}/corpus)
  set_tests_properties(${name} PROPERTIES LABELS fuzz TIMEOUT 300)
endfunction()
