# SPDX-License-Identifier: MIT
# The build record: at every configure, df_write_build_record() writes
# ${CMAKE_BINARY_DIR}/deltafin-build.json, the configuration that matters to rebuild this build
# folder identically. `deltafin upgrade` (coordinator/cli/cmd_upgrade.c, docs/UPGRADE.md) reads
# it and reconfigures with exactly these values, whatever the environment says at that time.
#
# Fields (JSON object):
#   deltafin_build_record  format version (1)
#   source_dir, build_dir  the checkout and this build folder (absolute)
#   cmake                  the cmake executable that configured it (absolute)
#   generator              CMAKE_GENERATOR
#   compiler               "<id> <version>" of the C compiler (information only)
#   cache                  [{name, type, value}]: each is passed back as -DNAME:TYPE=VALUE.
#     CMAKE_BUILD_TYPE, the C/C++ compilers, the user's compile and link flags, a toolchain
#     file and compiler launchers when set, CMAKE_PREFIX_PATH (the cache value, else the
#     environment's at configure time, which is what found libtorch) and Torch_DIR (where
#     find_package(Torch) found it), and every DF_* cache option (DF_CUDA, DF_FUZZ,
#     DF_TORCH_ROOT, DF_TORCH_CXX11_ABI, DF_CUDART_ROOT, ...) except results of find_path /
#     find_library / find_program, which the reconfigure finds again from those options.
# The file is replaced atomically (written beside, then renamed).

function(_df_json_str out s)
  string(REPLACE "\\" "\\\\" s "${s}")
  string(REPLACE "\"" "\\\"" s "${s}")
  string(REPLACE "\n" "\\n" s "${s}")
  string(REPLACE "\r" "\\r" s "${s}")
  string(REPLACE "\t" "\\t" s "${s}")
  set(${out} "\"${s}\"" PARENT_SCOPE)
endfunction()

function(df_write_build_record)
  set(names CMAKE_BUILD_TYPE CMAKE_C_COMPILER CMAKE_CXX_COMPILER CMAKE_C_FLAGS CMAKE_CXX_FLAGS
      CMAKE_EXE_LINKER_FLAGS CMAKE_SHARED_LINKER_FLAGS CMAKE_TOOLCHAIN_FILE
      CMAKE_C_COMPILER_LAUNCHER CMAKE_CXX_COMPILER_LAUNCHER CMAKE_PREFIX_PATH Torch_DIR)
  get_cmake_property(all CACHE_VARIABLES)
  list(SORT all)
  foreach(v ${all})
    if(v MATCHES "^DF_")
      get_property(t CACHE ${v} PROPERTY TYPE)
      get_property(h CACHE ${v} PROPERTY HELPSTRING)
      # find_path / find_library / find_program results carry CMake's default help string.
      if(NOT t MATCHES "^(INTERNAL|STATIC)$" AND NOT h MATCHES "^Path to a (file|library|program)\\.$")
        list(APPEND names ${v})
      endif()
    endif()
  endforeach()

  set(entries "")
  foreach(v ${names})
    set(value "")
    set(have OFF)
    if(DEFINED CACHE{${v}})
      set(value "$CACHE{${v}}")
      set(have ON)
      get_property(t CACHE ${v} PROPERTY TYPE)
    elseif(v STREQUAL "CMAKE_PREFIX_PATH" AND NOT "$ENV{CMAKE_PREFIX_PATH}" STREQUAL "")
      string(REPLACE ":" ";" value "$ENV{CMAKE_PREFIX_PATH}")
      set(have ON)
      set(t STRING)
    endif()
    if(NOT have)
      continue()
    endif()
    if(value MATCHES "-NOTFOUND$")
      continue()
    endif()
    # Optional settings that were never given stay out of the record (an empty launcher or
    # toolchain file would still be passed on); flags and DF_* options are kept even empty.
    if(value STREQUAL "" AND v MATCHES "^(CMAKE_TOOLCHAIN_FILE|CMAKE_C_COMPILER_LAUNCHER|CMAKE_CXX_COMPILER_LAUNCHER|CMAKE_PREFIX_PATH|Torch_DIR)$")
      continue()
    endif()
    if(NOT t MATCHES "^(BOOL|STRING|PATH|FILEPATH)$")
      set(t STRING)
    endif()
    # A compiler given with -D on a fresh configure is cached as STRING, else as FILEPATH: one
    # type, so that the record of a reconfigure equals the one it was made from.
    if(v MATCHES "^(CMAKE_C_COMPILER|CMAKE_CXX_COMPILER|CMAKE_TOOLCHAIN_FILE)$")
      set(t FILEPATH)
    endif()
    _df_json_str(jn "${v}")
    _df_json_str(jt "${t}")
    _df_json_str(jv "${value}")
    string(APPEND entries "    {\"name\": ${jn}, \"type\": ${jt}, \"value\": ${jv}},\n")
  endforeach()
  string(REGEX REPLACE ",\n$" "\n" entries "${entries}")

  _df_json_str(src "${CMAKE_SOURCE_DIR}")
  _df_json_str(bin "${CMAKE_BINARY_DIR}")
  _df_json_str(cmk "${CMAKE_COMMAND}")
  _df_json_str(gen "${CMAKE_GENERATOR}")
  _df_json_str(cc "${CMAKE_C_COMPILER_ID} ${CMAKE_C_COMPILER_VERSION}")
  set(path "${CMAKE_BINARY_DIR}/deltafin-build.json")
  file(WRITE "${path}.tmp"
    "{\n"
    "  \"deltafin_build_record\": 1,\n"
    "  \"source_dir\": ${src},\n"
    "  \"build_dir\": ${bin},\n"
    "  \"cmake\": ${cmk},\n"
    "  \"generator\": ${gen},\n"
    "  \"compiler\": ${cc},\n"
    "  \"cache\": [\n${entries}  ]\n"
    "}\n")
  file(RENAME "${path}.tmp" "${path}")
endfunction()
