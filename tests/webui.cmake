# The web UI (coordinator/server/webui/, served by `deltafin serve` at /) in headless Chromium:
# Debian's chromium driven by the playwright-core npm package (tools/package.json). serve runs
# the demo pair with an API key and three loopback df-nodes; the page's streamed chat answer
# must equal the API's text, and its dashboard must show the nodes, then one fewer after a
# kill -9 (tests/webui_test.js). Screenshots and logs: build/webui-test/. The test fails, never
# skips, when node, chromium or playwright-core is missing (tools/install-deps.sh installs
# them).
find_program(DF_NODE NAMES node nodejs)
if(DF_NODE)
  add_test(NAME webui COMMAND ${DF_NODE} ${CMAKE_CURRENT_LIST_DIR}/webui_test.js
    $<TARGET_FILE:deltafin> $<TARGET_FILE:df-node> ${PROJECT_SOURCE_DIR}/models/demo-moe
    ${PROJECT_SOURCE_DIR}/models/demo-draft ${PROJECT_SOURCE_DIR}/tools
    ${PROJECT_BINARY_DIR}/webui-test)
else()
  add_test(NAME webui COMMAND sh -c "echo 'FAIL  node (Node.js) not found: run tools/install-deps.sh'; exit 1")
endif()
set_tests_properties(webui PROPERTIES LABELS "server;webui" TIMEOUT 150)
