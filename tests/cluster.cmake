# Cluster: transport unit tests (codec, keys, tokens, placement), the message-codec fuzzer,
# and integration tests with real df-node processes on 127.0.0.x loopback
# (tests/cluster_test.py; each scenario is its own short ctest entry).
df_add_cmocka_test(test_transport
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_transport.c
          ${PROJECT_SOURCE_DIR}/coordinator/cluster/cluster_place.c
  LIBS dftransport)

add_executable(cluster_evil ${CMAKE_CURRENT_LIST_DIR}/cluster_evil.c)
target_link_libraries(cluster_evil PRIVATE dftransport)

# LD_PRELOAD shim for the shutdown scenario: zmq_close returns late (tests/slow_close.c)
add_library(df_slow_close MODULE ${CMAKE_CURRENT_LIST_DIR}/slow_close.c)
target_link_libraries(df_slow_close PRIVATE ${CMAKE_DL_LIBS})

foreach(scenario exact stream kill security idle wrongkey ds_fp8 ds_bf16 kl_48b device
         ds_fp8_device shutdown state_modes token_cli k3 k3_kill k3_badscale)
  add_test(NAME cluster_${scenario}
    COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/cluster_test.py ${scenario} ${PROJECT_BINARY_DIR}
            ${DF_FIXTURES} ${PROJECT_BINARY_DIR}/cluster-test/${scenario})
  set_tests_properties(cluster_${scenario} PROPERTIES LABELS cluster TIMEOUT 300)
endforeach()

# The codec needs only msgpack-c (found in transport/CMakeLists.txt; no pkg-config file), so
# its flags are handed to df_add_fuzzer as a PKGS-style prefix.
include(${CMAKE_CURRENT_LIST_DIR}/fuzz.cmake)
set(DFMSGPACK_CFLAGS -I${MSGPACK_INCLUDE_DIR})
set(DFMSGPACK_LDFLAGS ${MSGPACKC_LIBRARY})
df_add_fuzzer(fuzz_codec
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz/fuzz_codec.c ${PROJECT_SOURCE_DIR}/transport/codec.c
  DEPENDS ${PROJECT_SOURCE_DIR}/transport/codec.h
  PKGS DFMSGPACK
  CORPUS ${CMAKE_CURRENT_LIST_DIR}/fuzz/corpus_codec
  SECONDS 5)
