# tools/packaging/package.cmake — what `cmake --install` puts where, and the Debian package that
# `cpack -G DEB` (or `make deb`) builds from it: deltafin_<version>_<arch>.deb.
#
# Installed (PREFIX: /usr in the .deb, CMAKE_INSTALL_PREFIX otherwise):
#   PREFIX/bin/deltafin, PREFIX/bin/df-node
#   PREFIX/share/deltafin/models/demo-moe, demo-draft, demo-dspark   the demo target and its
#       two drafters; `deltafin run` without
#       --model finds it there, next to its own folder (coordinator/cli/cli.c
#       df_cli_default_model), so an installed binary never reads the source tree
#   PREFIX/share/man/man1/deltafin.1.gz, df-node.1.gz   (tools/packaging/man/, gzip -9n)
#   PREFIX/share/doc/deltafin/   README, docs/, THIRD_PARTY, models/README, copyright
#   SYSCONF/deltafin/serve.conf, df-node.conf            (SYSCONF: /etc for PREFIX /usr)
#   UNITDIR/deltafin-serve.service, df-node.service      (/lib/systemd/system for PREFIX /usr)
# The units and configuration files name the binaries' and models' installed paths, so they
# are written at install time for the prefix being installed to (tools/packaging/install_units.cmake).
# The maintainer scripts (tools/packaging/debian/) create the `deltafin` system user and
# /var/lib/deltafin; the units are installed, not enabled (docs/CLUSTER.md, README.md).
#
# Runtime Depends come from dpkg-shlibdeps (dpkg-dev) over the two binaries. A libtorch (or
# CUDA runtime) that no Debian package owns, e.g. DF_TORCH_ROOT pointing at a PyTorch wheel,
# cannot be expressed as a dependency: cpack then stops with the library's name
# (tools/packaging/cpack_project.cmake) instead of building a package that would not run.
# Test: tests/package.cmake (label `package`).

# `make install` / cpack install what is built and never build first (`make deb` builds
# before it packages): a cpack run beside running tests, as tests/package_deb.py's, must not
# relink the binaries those tests execute.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)

set(DF_PKG_DIR ${PROJECT_SOURCE_DIR}/tools/packaging)
set(DF_PKG_MAINTAINER "Deltafin maintainers <maintainers@deltafin.invalid>")
set(DF_PKG_OUT ${PROJECT_BINARY_DIR}/packaging)

install(TARGETS deltafin df-node RUNTIME DESTINATION bin)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/models/demo-moe ${PROJECT_SOURCE_DIR}/models/demo-draft
  ${PROJECT_SOURCE_DIR}/models/demo-dspark
  DESTINATION share/deltafin/models
  FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ
  DIRECTORY_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                        WORLD_READ WORLD_EXECUTE)

# Man pages and documentation, gzipped as Debian policy asks (gzip -9n: no name, no time
# stamp, so the bytes depend on the text alone). Files of 4 kB or less stay as they are.
set(DF_PKG_DOCS README.md THIRD_PARTY.md)
file(GLOB DF_PKG_DOC_MD RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/docs/*.md)
list(APPEND DF_PKG_DOCS ${DF_PKG_DOC_MD} models/README.md)
set(DF_PKG_GZ "")
function(df_pkg_gzip src dst)
  add_custom_command(OUTPUT ${dst}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${DF_PKG_OUT}/doc/docs ${DF_PKG_OUT}/doc/models
            ${DF_PKG_OUT}/man
    COMMAND sh -c "gzip -9n -c \"$0\" > \"$1\"" ${src} ${dst}
    DEPENDS ${src} VERBATIM)
  set(DF_PKG_GZ ${DF_PKG_GZ} ${dst} PARENT_SCOPE)
endfunction()
foreach(page deltafin df-node)
  configure_file(${DF_PKG_DIR}/man/${page}.1 ${DF_PKG_OUT}/man/${page}.1 @ONLY)
  df_pkg_gzip(${DF_PKG_OUT}/man/${page}.1 ${DF_PKG_OUT}/man/${page}.1.gz)
  install(FILES ${DF_PKG_OUT}/man/${page}.1.gz DESTINATION share/man/man1)
endforeach()
foreach(doc ${DF_PKG_DOCS})
  get_filename_component(sub ${doc} DIRECTORY)
  get_filename_component(name ${doc} NAME)
  if(sub STREQUAL "docs" OR sub STREQUAL "models")
    set(dest share/doc/deltafin/${sub})
  else()
    set(dest share/doc/deltafin)
  endif()
  file(SIZE ${PROJECT_SOURCE_DIR}/${doc} size)
  if(size GREATER 4096)
    df_pkg_gzip(${PROJECT_SOURCE_DIR}/${doc} ${DF_PKG_OUT}/doc/${doc}.gz)
    install(FILES ${DF_PKG_OUT}/doc/${doc}.gz DESTINATION ${dest})
  else()
    install(FILES ${PROJECT_SOURCE_DIR}/${doc} DESTINATION ${dest})
  endif()
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/models/expert_load.png ${PROJECT_SOURCE_DIR}/models/loss_curves.png
  DESTINATION share/doc/deltafin/models)

# Debian's copyright file: the project's MIT licence, and the Apache-2.0 tokenizer files of the
# demo pair (THIRD_PARTY.md), in the machine-readable format.
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/LICENSE)
file(READ ${PROJECT_SOURCE_DIR}/LICENSE DF_PKG_MIT)
string(REGEX REPLACE "^MIT License\n\n" "" DF_PKG_MIT "${DF_PKG_MIT}")
string(REGEX MATCH "Copyright \\(c\\) [^\n]*" DF_PKG_COPYRIGHT "${DF_PKG_MIT}")
string(REGEX REPLACE "Copyright \\(c\\) [^\n]*\n\n" "" DF_PKG_MIT "${DF_PKG_MIT}")
string(REGEX REPLACE "\n\n" "\n.\n" DF_PKG_MIT "${DF_PKG_MIT}")
string(REGEX REPLACE "\n" "\n " DF_PKG_MIT "${DF_PKG_MIT}")
string(REGEX REPLACE "Copyright \\(c\\) " "" DF_PKG_COPYRIGHT "${DF_PKG_COPYRIGHT}")
string(STRIP "${DF_PKG_MIT}" DF_PKG_MIT)
file(WRITE ${DF_PKG_OUT}/copyright
"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: deltafin
Comment: Third-party artefacts shipped in this package, and their terms:
 /usr/share/doc/deltafin/THIRD_PARTY.md.gz

Files: *
Copyright: ${DF_PKG_COPYRIGHT}
License: MIT

Files: models/*/tokenizer.json
 models/*/tokenizer_config.json
Copyright: Qwen team, Alibaba Cloud
License: Apache-2.0
Comment: The Qwen3 tokenizer, byte for byte (THIRD_PARTY.md), installed in
 /usr/share/deltafin/models/demo-moe and demo-draft.

License: MIT
 ${DF_PKG_MIT}

License: Apache-2.0
 On Debian systems the full text of the Apache License 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
")
install(FILES ${DF_PKG_OUT}/copyright DESTINATION share/doc/deltafin)
# Debian's changelog of a native package (one entry: this version; SOURCE_DATE_EPOCH, when
# set, fixes its date), gzipped like the documents.
string(TIMESTAMP DF_PKG_DATE "%a, %d %b %Y 00:00:00 +0000" UTC)
file(CONFIGURE OUTPUT ${DF_PKG_OUT}/changelog CONTENT "deltafin (${PROJECT_VERSION}) unstable; urgency=medium

  * Deltafin ${PROJECT_VERSION}, built from its source tree (README.md.gz, docs/).

 -- ${DF_PKG_MAINTAINER}  ${DF_PKG_DATE}
")
df_pkg_gzip(${DF_PKG_OUT}/changelog ${DF_PKG_OUT}/doc/changelog.gz)
install(FILES ${DF_PKG_OUT}/doc/changelog.gz DESTINATION share/doc/deltafin)
add_custom_target(df_package_files ALL DEPENDS ${DF_PKG_GZ})

# systemd units and /etc/deltafin, written for the prefix being installed to.
install(CODE "set(DF_PKG_DIR \"${DF_PKG_DIR}\")
  set(DF_PKG_OUT \"${DF_PKG_OUT}\")
  include(\"${DF_PKG_DIR}/install_units.cmake\")")

# ---- CPack: the Debian package ----------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME deltafin)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "The Deltafin authors")
set(CPACK_PACKAGE_CONTACT "${DF_PKG_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "mixture-of-experts LLM inference, exactly as published, on your own machines")
# (cpack puts the summary above this text)
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "Deltafin runs large mixture-of-experts language models from Hugging
Face folders (config.json, safetensors, tokenizer.json) with every weight
used as stored and the target model deciding every token: qwen3_moe,
qwen3, deepseek_v3 / kimi_k2 (FP8), kimi_linear and Kimi K3 (MXFP4). It
decodes speculatively with a small draft model, spreads routed experts
over df-node agents on other machines of a LAN (CurveZMQ-encrypted, bit
for bit the output of one machine), and serves an OpenAI-compatible API.
.
This package holds the deltafin and df-node programs, a small demo model
pair, and systemd units for `deltafin serve` and a cluster node
(installed, not enabled: configure /etc/deltafin first).")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
if(DF_DISCOVERY_BUILT) # transport/CMakeLists.txt: finding the coordinator needs the daemon
  set(CPACK_DEBIAN_PACKAGE_SUGGESTS "avahi-daemon")
endif()
set(CPACK_DEBIAN_COMPRESSION_TYPE gzip)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${DF_PKG_DIR}/debian/postinst ${DF_PKG_DIR}/debian/prerm ${DF_PKG_DIR}/debian/postrm
  ${DF_PKG_DIR}/debian/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/package)
# Checks run by cpack itself before it packages (the libraries the binaries load).
set(DF_PKG_BINARIES "$<TARGET_FILE:deltafin>;$<TARGET_FILE:df-node>")
file(GENERATE OUTPUT ${DF_PKG_OUT}/cpack_vars.cmake CONTENT
  "set(DF_PKG_BINARIES \"${DF_PKG_BINARIES}\")\n")
set(CPACK_PROJECT_CONFIG_FILE ${DF_PKG_DIR}/cpack_project.cmake)
set(CPACK_DF_PKG_OUT ${DF_PKG_OUT})
include(CPack)
