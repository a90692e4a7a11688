# The DSpark block drafter (engine/draft/dspark.c) against tests/reference/dspark_ref.py, and
# speculative decoding with it (coordinator/generate/spec.c). Drafters are made here by
# tests/reference/dspark_ckpt.py for three targets — models/demo-moe (Qwen3-MoE, 151,936
# tokens), the tied tiny Qwen3-MoE and the BF16 DeepSeek-V3 fixtures — each with one
# reference round (context ids, anchor) written next to it (ctest fixture dspark).
set(DF_DSPARK_DIR ${PROJECT_BINARY_DIR}/dspark)
set(DF_DSPARK_TARGET_demo ${PROJECT_SOURCE_DIR}/models/demo-moe)
set(DF_DSPARK_IDS_demo 9707,11,1879,525,1052,13,576,3974,315,279,1156,2906)
set(DF_DSPARK_ANCHOR_demo 13)
set(DF_DSPARK_TARGET_ds ${DF_FIXTURES}/tiny-ds-bf16)
set(DF_DSPARK_IDS_ds 5,77,301,12,499,8,150,42,7,260)
set(DF_DSPARK_ANCHOR_ds 33)
set(DF_DSPARK_OPTS_ds --q-lora 0 --block 5)
set(DF_DSPARK_TARGET_tied ${DF_FIXTURES}/tiny-moe-tied)
set(DF_DSPARK_IDS_tied 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18)
set(DF_DSPARK_ANCHOR_tied 100)
set(DF_DSPARK_OPTS_tied --block 6 --yarn false)
foreach(name demo ds tied)
  set(d ${DF_DSPARK_DIR}/${name})
  string(REPLACE ";" " " opts "${DF_DSPARK_OPTS_${name}}")
  add_test(NAME dspark_ref_${name}
    COMMAND sh -c "rm -rf '${d}' && mkdir -p '${d}' && '${DF_PYTHON}' '${DF_REFERENCE}/dspark_ckpt.py' --target '${DF_DSPARK_TARGET_${name}}' --out '${d}/drafter' ${opts} >/dev/null && '${DF_PYTHON}' '${DF_REFERENCE}/dspark_ref.py' --target '${DF_DSPARK_TARGET_${name}}' --drafter '${d}/drafter' --context-ids ${DF_DSPARK_IDS_${name}} --anchor ${DF_DSPARK_ANCHOR_${name}} --json --out-bin '${d}/ref' > '${d}/ref.json.tmp' && mv '${d}/ref.json.tmp' '${d}/ref.json'")
  set_tests_properties(dspark_ref_${name} PROPERTIES FIXTURES_SETUP dspark TIMEOUT 180
    LABELS "reference" ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")
endforeach()
# the shipped drafter (models/demo-dspark, trained by tools/train/train_dspark.py; its folder
# has no duplicate embedding) against the same reference on the demo target's round
set(d ${DF_DSPARK_DIR}/shipped)
add_test(NAME dspark_ref_shipped
  COMMAND sh -c "rm -rf '${d}' && mkdir -p '${d}' && ln -s '${PROJECT_SOURCE_DIR}/models/demo-dspark' '${d}/drafter' && '${DF_PYTHON}' '${DF_REFERENCE}/dspark_ref.py' --target '${DF_DSPARK_TARGET_demo}' --drafter '${d}/drafter' --context-ids ${DF_DSPARK_IDS_demo} --anchor ${DF_DSPARK_ANCHOR_demo} --json --out-bin '${d}/ref' > '${d}/ref.json.tmp' && mv '${d}/ref.json.tmp' '${d}/ref.json'")
set_tests_properties(dspark_ref_shipped PROPERTIES FIXTURES_SETUP dspark TIMEOUT 180
  LABELS "reference" ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")
# a drafter over a Kimi Linear fixture (KDA + MLA target), for generation only
add_test(NAME dspark_kl
  COMMAND ${DF_PYTHON} ${DF_REFERENCE}/dspark_ckpt.py --target ${DF_FIXTURES}/tiny-kl-mixed
          --out ${DF_DSPARK_DIR}/kl --block 4)
set_tests_properties(dspark_kl PROPERTIES FIXTURES_SETUP dspark TIMEOUT 120 LABELS "reference"
  ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")
df_add_cmocka_test(test_dspark SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_dspark.c
  LIBS dfcoord PkgConfig::JANSSON)
set_tests_properties(test_dspark PROPERTIES FIXTURES_REQUIRED dspark TIMEOUT 600)

# The reference checks itself: no causal mask inside the block, fp32 against float64, RoPE on
# interleaved pairs equal to DeepSeek's permuted form, deterministic checkpoints, capture rows
# equal to the target reference's own layer outputs, the absorbed MLA form, the Markov chain.
add_test(NAME reference_dspark_selfcheck COMMAND ${DF_PYTHON} ${DF_REFERENCE}/dspark_selfcheck.py)
set_tests_properties(reference_dspark_selfcheck PROPERTIES TIMEOUT 300 LABELS "reference"
  ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")

# A block drafter over the 16-token target of tests/make_spec_drafts.py, for the chi-square
# law test of sampling with a block drafter (tests/test_spec_sampling.c).
add_test(NAME dspark_v16
  COMMAND ${DF_PYTHON} ${DF_REFERENCE}/dspark_ckpt.py --target ${PROJECT_BINARY_DIR}/spec-drafts/v16-target
          --out ${DF_DSPARK_DIR}/v16 --block 3 --yarn false)
set_tests_properties(dspark_v16 PROPERTIES FIXTURES_SETUP dspark_v16 FIXTURES_REQUIRED spec_drafts
  TIMEOUT 120 LABELS "reference" ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;OMP_NUM_THREADS=1")
