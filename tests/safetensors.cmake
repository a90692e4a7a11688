# Safetensors loader (dfst) and model config parser (dfconfig, with the families' own keys
# from engine/models/ in dfengine): unit tests, plus the libFuzzer target for the
# safetensors header parser (helper in fuzz.cmake, gated by DF_FUZZ), which links only dfst.
df_add_cmocka_test(test_safetensors SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_safetensors.c LIBS dfst)
df_add_cmocka_test(test_config SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_config.c LIBS dfengine)

include(${CMAKE_CURRENT_LIST_DIR}/fuzz.cmake)
df_add_fuzzer(fuzz_st_header
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz/fuzz_st_header.c ${PROJECT_SOURCE_DIR}/engine/safetensors.c
  DEPENDS ${PROJECT_SOURCE_DIR}/engine/safetensors.h
  PKGS JANSSON
  CORPUS ${CMAKE_CURRENT_LIST_DIR}/fuzz/corpus_st
  DICT ${CMAKE_CURRENT_LIST_DIR}/fuzz/st_header.dict
  SECONDS 5)
