# A hostile coordinator probing df-node (tests/fake_coord.c): each probe starts a df-node in a
# sandbox under build/fake-coord/, sends it what a coordinator (or a man in the middle holding
# its key) could send — absurd assignments, tampered shard chunks, hostile tensor names,
# malformed FFNs and headers, silence — and checks the node's reaction, its memory, its log
# and that it wrote nothing outside its state directory. One ctest entry per probe
# (`fake_coord list` describes them); add a probe's name here when adding it to PROBES.
# The probes that wait out the node's 10 s timers (silence, an unanswered JOIN, the rejoin
# after a tampered stream) share one entry, fake_coord_timers, and run at once there, each
# with its own node: ~11 s of waiting instead of ~33 s spent one after the other.
add_executable(fake_coord ${CMAKE_CURRENT_LIST_DIR}/fake_coord.c)
target_link_libraries(fake_coord PRIVATE dftransport m)

foreach(probe baseline assign_dims assign_nbytes assign_zero assign_dtype assign_shape
        assign_huge assign_budget assign_scales assign_pairs assign_dup chunk_short
        chunk_long chunk_empty chunk_total chunk_gap chunk_offset chunk_frames chunk_nobytes
        chunk_index names ffn ffn_nan ops hdr_big hdr_nils hdr_values gone bye
        unauthorized timers)
  if(probe STREQUAL "timers")
    set(DF_FC_PROBE "silent,join_silent,chunk_sha")
  else()
    set(DF_FC_PROBE ${probe})
  endif()
  add_test(NAME fake_coord_${probe}
    COMMAND fake_coord ${DF_FC_PROBE} $<TARGET_FILE:df-node> ${PROJECT_BINARY_DIR}/fake-coord)
  set_tests_properties(fake_coord_${probe} PROPERTIES LABELS "cluster;fake_coord" TIMEOUT 180)
endforeach()
