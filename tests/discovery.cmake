# Finding the coordinator over mDNS/DNS-SD (transport/dnssd.h, node/target.h): the daemon-free
# part as a unit test (TXT parsing, the choice of announcers by the pinned key, the node's
# pinned key and recorded address, no daemon reachable), and tests/cluster_discovery.py with
# real processes: `lan` on a private LAN of network namespaces with their own D-Bus buses and
# avahi-daemons, a forged and a copied announcement beside the real coordinator (root,
# iproute2, dbus-daemon, avahi-daemon, avahi-utils; skipped, 77, without them), and `nodaemon`
# (no avahi-daemon at all: one line, the cluster works by address).
df_add_cmocka_test(test_dnssd
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_dnssd.c ${PROJECT_SOURCE_DIR}/node/target.c
  LIBS dftransport)
if(DF_DISCOVERY_BUILT)
  set(DF_DISCOVERY_ARG 1)
else()
  set(DF_DISCOVERY_ARG 0)
endif()
foreach(scenario lan nodaemon)
  add_test(NAME discovery_${scenario}
    COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/cluster_discovery.py ${scenario}
            ${PROJECT_BINARY_DIR} ${DF_FIXTURES} ${PROJECT_BINARY_DIR}/discovery-test/${scenario}
            ${DF_DISCOVERY_ARG})
  set_tests_properties(discovery_${scenario} PROPERTIES LABELS cluster TIMEOUT 300
                       SKIP_RETURN_CODE 77)
endforeach()
