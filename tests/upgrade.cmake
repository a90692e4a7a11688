# deltafin upgrade (coordinator/cli/cmd_upgrade.c, tools/cmake/build_record.cmake, docs/UPGRADE.md):
# on a tiny CMake project that includes the real build-record module, in a local bare
# repository and a clone (a Deltafin rebuild would take many minutes), pointed at with
# --record: up to date, --check, dirty / untracked / detached / no upstream / fetch failure /
# ahead / diverged refused with nothing changed, a fast-forward rebuilt with the recorded
# configuration under a hostile environment, a build failure reported and then finished by a
# rerun; plus this build folder's own record and the command's errors. Needs git.
add_test(NAME upgrade_cli COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/upgrade_cli.py
  $<TARGET_FILE:deltafin> ${CMAKE_COMMAND} ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}
  ${PROJECT_BINARY_DIR}/upgrade-test)
set_tests_properties(upgrade_cli PROPERTIES TIMEOUT 300 ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
