# Every instruction set the CPU has (DF_ISA=scalar, avx2, avx512) gives the same ids and logits
# bytes through `deltafin run`, on one fixture of each family.
add_test(NAME isa_cli COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/isa_cli.py
  $<TARGET_FILE:deltafin> ${DF_FIXTURES} ${CMAKE_CURRENT_BINARY_DIR}/isa_cli)
