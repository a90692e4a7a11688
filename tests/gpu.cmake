# Devices (docs/GPU.md): the admission rule on synthetic numbers; the torch compute path on
# the CPU (torch-cpu) against the golden fixtures, mixed device/host expert placement, the
# CPU fallback; the DF_CUDA sources type-checked against a declaration-only stand-in of
# <cuda_runtime_api.h> where the real CUDA headers are absent (the real compile happens in
# DF_CUDA=ON builds and in tools/gpu/check.sh).
df_add_cmocka_test(test_admission SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_admission.c
  LIBS dfengine)
df_add_cmocka_test(test_device SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_device.c
  LIBS dfengine PkgConfig::JANSSON)
if(NOT DF_CUDA)
  add_test(NAME cuda_rt_typecheck COMMAND ${CMAKE_C_COMPILER} -std=c11 -Wall -Wextra -Werror
    -fsyntax-only -DDF_CUDA=1 -I${PROJECT_SOURCE_DIR} -I${CMAKE_CURRENT_SOURCE_DIR}/cuda_decl
    ${PROJECT_SOURCE_DIR}/engine/cuda_rt.c)
endif()
add_test(NAME device_cli COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/device_cli.py
  $<TARGET_FILE:deltafin> ${DF_FIXTURES})
