# kimi_k3 (Kimi K3's text tower: Attention Residuals, latent MoE, SiTU, MXFP4 routed experts
# on top of kimi_linear's KDA + NoPE MLA) against tests/reference/kimi_k3_ref.py: the golden
# fixtures (tests/fixtures/tiny-k3*), further reference runs made here, the engine's
# invariants (prefill == decode, batch invariance, ISA agreement, rollback), the command
# line's greedy ids, and `deltafin inspect` on the real K3 folder's headers.

# Reference runs for prompts of 1, 5 and 72 tokens ((i * 37 + offset) % 512, the offset per
# preset chosen so every expert choice and greedy step keeps a margin: min router margin
# >= 2.2e-4 and min greedy top-2 gap >= 0.029 over the three prompts and 20 steps): 20 greedy
# ids, their top-5 logits (JSON) and the prompt logits, into ${PROJECT_BINARY_DIR}/k3-ref.
# All twelve runs of `kimi_k3_ref.py ARGS > OUT.json` in one process (tests/reference/
# ref_runs.py: PyTorch is imported once, not twelve times).
set(DF_K3_REF_DIR ${PROJECT_BINARY_DIR}/k3-ref)
set(DF_K3_PRESETS tiny-k3 tiny-k3-unpadded tiny-k3-deep tiny-k3-sharded)
set(DF_K3_OFFSET_tiny-k3 15)
set(DF_K3_OFFSET_tiny-k3-unpadded 5)
set(DF_K3_OFFSET_tiny-k3-deep 96)
set(DF_K3_OFFSET_tiny-k3-sharded 31)
set(DF_K3_REF_RUNS "")
foreach(preset ${DF_K3_PRESETS})
  foreach(n 1 5 72)
    set(ids "")
    math(EXPR last "${n} - 1")
    foreach(i RANGE ${last})
      math(EXPR t "(${i} * 37 + ${DF_K3_OFFSET_${preset}}) % 512")
      list(APPEND ids ${t})
    endforeach()
    string(REPLACE ";" "," ids "${ids}")
    set(out ${DF_K3_REF_DIR}/${preset}-${n})
    list(APPEND DF_K3_REF_RUNS --run ${out} --model ${DF_FIXTURES}/${preset} --prompt-ids ${ids}
         --max-new 20 --json --logits-out ${out}.f32)
  endforeach()
endforeach()
add_test(NAME k3_ref_runs COMMAND ${DF_PYTHON} ${DF_REFERENCE}/ref_runs.py kimi_k3_ref
  ${DF_K3_REF_RUNS})
set_tests_properties(k3_ref_runs PROPERTIES FIXTURES_SETUP k3_ref_runs
  TIMEOUT 600 LABELS "reference" ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")

df_add_cmocka_test(test_kimi_k3 SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kimi_k3.c
  LIBS dfengine PkgConfig::JANSSON)
set_tests_properties(test_kimi_k3 PROPERTIES FIXTURES_REQUIRED k3_ref_runs TIMEOUT 300)

# The K3 reference and generator check themselves (tests/reference/k3_selfcheck.py): MXFP4
# decoding (K3.md §4's real-weight vector), the fixtures' layout, the dead weights, SiTU's
# null betas, cached == recomputed, float32 arithmetic vs the float64-evaluated oracle, the
# header-only real folder's inventory (the fixture k3_real's folder, below, written once).
set(DF_K3_REAL_DIR ${PROJECT_BINARY_DIR}/k3-real)
add_test(NAME reference_kimi_k3_selfcheck
         COMMAND ${DF_PYTHON} ${DF_REFERENCE}/k3_selfcheck.py --fixtures ${DF_FIXTURES}
                 --header-only-dir ${DF_K3_REAL_DIR})
set_tests_properties(reference_kimi_k3_selfcheck PROPERTIES TIMEOUT 300 LABELS "reference"
  FIXTURES_REQUIRED k3_real ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")

# The command line on every K3 fixture: `deltafin run --prompt-ids` (greedy) prints the
# golden greedy ids of the fixture's reference prompt.
foreach(preset ${DF_K3_PRESETS})
  if(EXISTS ${DF_FIXTURES}/${preset}/golden.json)
    file(READ ${DF_FIXTURES}/${preset}/golden.json _k3_golden)
    string(REGEX MATCH "\"prompt_ids\": \\[([0-9, ]+)\\]" _m "${_k3_golden}")
    string(REPLACE " " "" _k3_prompt "${CMAKE_MATCH_1}")
    string(REGEX MATCH "\"greedy_ids\": \\[([0-9, ]+)\\]" _m "${_k3_golden}")
    string(REPLACE "," "" _k3_greedy "${CMAKE_MATCH_1}")
    add_test(NAME run_kimi_k3_${preset} COMMAND deltafin run --model ${DF_FIXTURES}/${preset}
      --prompt-ids ${_k3_prompt} --max-new 32 --temperature 0 --ignore-eos)
    set_tests_properties(run_kimi_k3_${preset} PROPERTIES PASS_REGULAR_EXPRESSION "${_k3_greedy}")
  endif()
endforeach()

# The header-only real Kimi K3 folder (config and 497,220 tensor headers from
# tests/reference/kimi_k3_ckpt.py --header-only, 96 shards sparse to their described
# 1,560,860,324,864 bytes), made once for the K3 self-check, inspect, plan and pull (ctest
# fixture k3_real) and removed after them.
add_test(NAME k3_real_folder COMMAND ${DF_PYTHON} ${DF_REFERENCE}/kimi_k3_ckpt.py --header-only
  --out ${DF_K3_REAL_DIR})
set_tests_properties(k3_real_folder PROPERTIES FIXTURES_SETUP k3_real TIMEOUT 300)
add_test(NAME k3_real_folder_cleanup COMMAND ${CMAKE_COMMAND} -E rm -rf ${DF_K3_REAL_DIR})
set_tests_properties(k3_real_folder_cleanup PROPERTIES FIXTURES_CLEANUP k3_real)

# deltafin inspect on that folder: every published name and shape binds (MXFP4 experts as
# weight_packed + weight_scale), 2779.48 B parameters, 104.19 B active, the exact resident and
# expert bytes; and `run` refused by the memory admission where the machine is smaller than
# the resident part (tests/k3_inspect.py).
add_test(NAME inspect_kimi_k3_real COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/k3_inspect.py
  $<TARGET_FILE:deltafin> ${DF_PYTHON} ${DF_REFERENCE} ${DF_K3_REAL_DIR})
set_tests_properties(inspect_kimi_k3_real PROPERTIES TIMEOUT 600 FIXTURES_REQUIRED k3_real
  ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")

# Speculative decoding over a K3 target: a mostly-rejected K3 draft (rollbacks of the KDA
# state nearly every round) and the target as its own draft give the target's greedy ids.
add_test(NAME spec_kimi_k3 COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/k3_spec_cli.py
  $<TARGET_FILE:deltafin> ${DF_FIXTURES})

# Damaged K3 folders (a NaN expert scale, a NaN output-mix weight, config switches that do not
# describe the checkpoint's tensors) refused with one line naming the cause.
add_test(NAME bad_kimi_k3 COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/k3_bad.py
  $<TARGET_FILE:deltafin> ${DF_FIXTURES} ${PROJECT_BINARY_DIR}/k3-bad)
