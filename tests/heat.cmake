# Expert heat (coordinator/cluster/expert_heat.h, docs/GPU.md "Admission"): the file format's
# malformed-input table, files that are not regular (never blocking), saves under the lock
# (no lost update across processes); and through the CLI: an empty --state-dir is a usage
# error everywhere, a FIFO or corrupt heat file gives one line and the run goes on, 8
# concurrent `deltafin run`s add up exactly.
df_add_cmocka_test(test_expert_heat SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_expert_heat.c
  LIBS dfcoord)
add_test(NAME heat_cli COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/heat_cli.py files
  $<TARGET_FILE:deltafin> $<TARGET_FILE:df-node> ${PROJECT_SOURCE_DIR}/models/demo-moe)
add_test(NAME heat_concurrent COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/heat_cli.py
  concurrent $<TARGET_FILE:deltafin> $<TARGET_FILE:df-node> ${PROJECT_SOURCE_DIR}/models/demo-moe)
