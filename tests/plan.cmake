# deltafin plan (coordinator/cluster/plan_model.h, coordinator/cli/cmd_plan.c; docs/K3.md
# "Planning a machine or a cluster"): the cost model on hand-computed numbers, and the command
# on the real Kimi K3 layout (tests/reference/kimi_k3_ckpt.py --header-only: sparse shards,
# real headers, no weight byte read) for one 512 GiB box, 4 x 128 GiB on 10 Gbit/s and
# 16 x 128 GiB on 2.5 Gbit/s (resident bytes exact, every expert placed, bytes per token), and
# a 64 GiB box without a disk refused with its shortfall.
df_add_cmocka_test(test_plan_model SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_plan_model.c
  LIBS dfcoord)
add_test(NAME plan_kimi_k3_real COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/plan_cli.py
  $<TARGET_FILE:deltafin> ${DF_PYTHON} ${DF_REFERENCE} ${PROJECT_BINARY_DIR}/k3-real)
set_tests_properties(plan_kimi_k3_real PROPERTIES TIMEOUT 600 FIXTURES_REQUIRED k3_real
  ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
