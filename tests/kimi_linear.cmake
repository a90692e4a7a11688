# kimi_linear (and the kimi_k3 wrapper of it): KDA linear attention with its recurrent state,
# NoPE MLA, DeepSeek-V3-style MoE against tests/reference/kimi_linear_ref.py: the golden
# fixtures (tiny-kl-*), further reference runs made here, the engine's invariants (prefill ==
# decode, batch invariance, ISA agreement, exact rollback), config errors, state bytes.

# Reference runs for prompts of 1, 5 and 80 tokens ((i * 37 + 11) % vocab, as the test makes
# them): 20 greedy ids (JSON) and the prompt logits, into ${PROJECT_BINARY_DIR}/kl-ref. All nine
# runs of `kimi_linear_ref.py ARGS > OUT.json` in one process (tests/reference/ref_runs.py:
# PyTorch is imported once, not nine times).
set(DF_KL_REF_DIR ${PROJECT_BINARY_DIR}/kl-ref)
set(DF_KL_REF_RUNS "")
foreach(preset tiny-kl-48b tiny-kl-k3gate tiny-kl-mixed)
  foreach(n 1 5 80)
    set(ids "")
    math(EXPR last "${n} - 1")
    foreach(i RANGE ${last})
      math(EXPR t "(${i} * 37 + 11) % 512")
      list(APPEND ids ${t})
    endforeach()
    string(REPLACE ";" "," ids "${ids}")
    set(out ${DF_KL_REF_DIR}/${preset}-${n})
    list(APPEND DF_KL_REF_RUNS --run ${out} --model ${DF_FIXTURES}/${preset} --prompt-ids ${ids}
         --max-new 20 --json --logits-out ${out}.f32)
  endforeach()
endforeach()
add_test(NAME kl_ref_runs COMMAND ${DF_PYTHON} ${DF_REFERENCE}/ref_runs.py kimi_linear_ref
  ${DF_KL_REF_RUNS})
set_tests_properties(kl_ref_runs PROPERTIES FIXTURES_SETUP kl_ref_runs TIMEOUT 600)

df_add_cmocka_test(test_kimi_linear SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kimi_linear.c
  LIBS dfengine PkgConfig::JANSSON)
set_tests_properties(test_kimi_linear PROPERTIES FIXTURES_REQUIRED kl_ref_runs)

# Speculative decoding over a kimi_linear target (coordinator/generate/spec.c): a random
# qwen3 draft and another kimi_linear model as drafts (mostly rejected: the target's and the
# draft's recurrent states are rolled back nearly every round) and the target as its own
# draft (all accepted) give exactly the greedy ids of the target alone; the serving scheduler
# (3 slots reused by 6 requests, prefill budgets of 7 next to decode steps, both drafts)
# answers exactly the text of those ids.
df_add_cmocka_test(test_kimi_linear_spec SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kimi_linear_spec.c
  LIBS dfcoord)

# deltafin inspect reports the MLA cache per token (2 layers x (32 + 8) x 4 B) and the KDA
# state per sequence.
add_test(NAME inspect_kimi_linear COMMAND deltafin inspect ${DF_FIXTURES}/tiny-kl-48b)
set_tests_properties(inspect_kimi_linear PROPERTIES PASS_REGULAR_EXPRESSION
  "KV cache per token +320 bytes .*state per sequence +[0-9]+ bytes")

# --device torch-cpu refuses kimi_linear by name.
add_test(NAME run_kimi_linear_torch_refused COMMAND deltafin run --model ${DF_FIXTURES}/tiny-kl-k3gate
  --prompt-ids 1,2,3 --max-new 2 --device torch-cpu)
set_tests_properties(run_kimi_linear_torch_refused PROPERTIES WILL_FAIL FALSE
  PASS_REGULAR_EXPRESSION "torch compute path does not run model type kimi_k3")

# deltafin inspect on the real Kimi-Linear-48B-A3B layout (config and 20,493 tensor headers
# from tests/reference/kimi_linear_ckpt.py --header-only, shards made sparse to their
# described size): every published name and shape binds, and the memory plan counts the MLA
# cache per token and the KDA state per sequence.
add_test(NAME inspect_kimi_linear_48b COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/kl_48b_inspect.py
  $<TARGET_FILE:deltafin> ${DF_PYTHON} ${DF_REFERENCE} ${PROJECT_BINARY_DIR}/kl-48b-inspect)
set_tests_properties(inspect_kimi_linear_48b PROPERTIES TIMEOUT 300)
