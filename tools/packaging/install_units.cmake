# tools/packaging/install_units.cmake — run at install time (`cmake --install`, cpack), included by
# the install(CODE) of tools/packaging/package.cmake with DF_PKG_DIR (tools/packaging/) and DF_PKG_OUT (its
# build folder) set. Writes the systemd units and the /etc/deltafin configuration files for
# the prefix being installed to, so that they name the binaries and the demo model where
# this install puts them:
#   PREFIX /usr (the .deb):  /etc/deltafin/*.conf, /lib/systemd/system/*.service
#   any other PREFIX:        PREFIX/etc/deltafin/*.conf, PREFIX/lib/systemd/system/*.service
# (systemd reads units from /usr/local/lib/systemd/system too). State is always
# /var/lib/deltafin (the units' StateDirectory=).
set(DF_PREFIX "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/+$" "" DF_PREFIX "${DF_PREFIX}")
if(DF_PREFIX STREQUAL "/usr")
  set(DF_SYSCONFDIR /etc)
  set(DF_UNITDIR /lib/systemd/system)
else()
  set(DF_SYSCONFDIR ${DF_PREFIX}/etc)
  set(DF_UNITDIR ${DF_PREFIX}/lib/systemd/system)
endif()
set(DF_BINDIR ${DF_PREFIX}/bin)
set(DF_MODELDIR ${DF_PREFIX}/share/deltafin/models)
set(DF_DOCDIR ${DF_PREFIX}/share/doc/deltafin)
string(MAKE_C_IDENTIFIER "${DF_PREFIX}" tag)
set(out ${DF_PKG_OUT}/install-${tag})
foreach(f systemd/df-node.service systemd/deltafin-serve.service etc/df-node.conf etc/serve.conf)
  get_filename_component(name ${f} NAME)
  configure_file(${DF_PKG_DIR}/${f}.in ${out}/${name} @ONLY)
endforeach()
file(INSTALL ${out}/df-node.service ${out}/deltafin-serve.service DESTINATION ${DF_UNITDIR}
  FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
file(INSTALL ${out}/df-node.conf ${out}/serve.conf DESTINATION ${DF_SYSCONFDIR}/deltafin
  FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
