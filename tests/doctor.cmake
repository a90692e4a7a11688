# deltafin doctor (every check's line and --json, exit 0 / 1 / 2 on planted faults: a 0644
# key, a missing model folder, a manifest size mismatch, an unreachable coordinator),
# inspect --json against the text output and the safetensors header, and cluster status
# [--json] on an empty state directory, with a running serve --cluster and after it
# (tests/doctor_cli.py). Skipped (77) without the bundled demo model.
foreach(scenario doctor inspect cluster)
  add_test(NAME doctor_${scenario}
    COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/doctor_cli.py ${scenario}
            $<TARGET_FILE:deltafin> ${PROJECT_SOURCE_DIR}/models ${DF_FIXTURES}
            ${CMAKE_CURRENT_BINARY_DIR}/doctor_cli/${scenario})
  set_tests_properties(doctor_${scenario} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
