# OpenMP waiting default of the executables (engine/omp_preinit.c): the kernel-running
# commands start libgomp with GOMP_SPINCOUNT=1000 unless the user set their own.
add_test(NAME omp_env COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/omp_env.py
  $<TARGET_FILE:deltafin> $<TARGET_FILE:df-node>)
set_tests_properties(omp_env PROPERTIES TIMEOUT 120)
