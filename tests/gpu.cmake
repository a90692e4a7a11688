# Devices (docs/GPU.md): the admission rule on synthetic numbers; the torch compute path on
# the CPU (torch-cpu) against the golden fixtures, mixed device/host expert placement, the
# CPU fallback; the DF_CUDA sources type-checked against the CUDA toolkit's headers where
# one is installed, else against a declaration-only stand-in of <cuda_runtime_api.h> (the
# full compile and link happen in DF_CUDA=ON builds: tools/gpu/check.sh, and without a GPU
# tools/gpu/debian13-check.sh).
df_add_cmocka_test(test_admission SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_admission.c
  LIBS dfengine)
df_add_cmocka_test(test_device SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_device.c
  LIBS dfengine PkgConfig::JANSSON)
if(NOT DF_CUDA)
  # the real CUDA headers where a toolkit is installed (nvcc found), the stand-in elsewhere
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(DF_CUDA_DECL_DIRS ${CUDAToolkit_INCLUDE_DIRS})
  else()
    set(DF_CUDA_DECL_DIRS ${CMAKE_CURRENT_SOURCE_DIR}/cuda_decl)
  endif()
  list(TRANSFORM DF_CUDA_DECL_DIRS PREPEND -I)
  add_test(NAME cuda_rt_typecheck COMMAND ${CMAKE_C_COMPILER} -std=c11 -Wall -Wextra -Werror
    -fsyntax-only -DDF_CUDA=1 -I${PROJECT_SOURCE_DIR} ${DF_CUDA_DECL_DIRS}
    ${PROJECT_SOURCE_DIR}/engine/device/cuda_rt.c)
endif()
add_test(NAME device_cli COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/device_cli.py
  $<TARGET_FILE:deltafin> ${DF_FIXTURES})
