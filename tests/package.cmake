# The Debian package (tools/packaging/package.cmake, `make deb`): `cpack -G DEB` builds it, its
# control data and files are checked, and it is installed with apt into a clean Debian 12
# root (debootstrap, cached in BUILD/package-test/ with the downloaded .debs), where the
# installed `deltafin run` on the demo pair must print the build tree's text exactly, both
# units pass `systemd-analyze verify` and their ExecStart= lines run as the user deltafin;
# then reinstall and purge (tests/package_deb.py). Needs root (it re-runs itself with
# sudo -n when it can, else it is reported skipped) and, on its first run only, the Debian
# mirror. One to two minutes with a warm cache; the first run adds the bootstrap and the
# downloads (about six minutes in all). When it ran through sudo, BUILD/package-test/ is root's.
add_test(NAME package_deb COMMAND ${DF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/package_deb.py
  ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/package-test/work)
set_tests_properties(package_deb PROPERTIES LABELS package TIMEOUT 1200 SKIP_RETURN_CODE 77
  ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
