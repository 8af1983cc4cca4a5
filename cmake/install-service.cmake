# Run by `cmake --install` (and by cpack): the systemd unit, its sysusers.d entry and the
# commented options file, with the paths of the prefix installed to, decided now rather than
# at configure time (cpack installs with --prefix /usr whatever the build was configured with).
# /usr puts the options under /etc, as Debian does; any other prefix under PREFIX/etc.
# Set by the install(CODE) before: LG_SOURCE_DIR, LG_BINARY_DIR.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(LG_SYSCONFDIR /etc)
else()
  set(LG_SYSCONFDIR "${CMAKE_INSTALL_PREFIX}/etc")
endif()
set(LG_BINDIR "${CMAKE_INSTALL_PREFIX}/bin")
set(staged "${LG_BINARY_DIR}/install-staged")
configure_file("${LG_SOURCE_DIR}/packaging/leasegate.service.in" "${staged}/leasegate.service" @ONLY)
configure_file("${LG_SOURCE_DIR}/packaging/leasegate.default.in" "${staged}/default/leasegate" @ONLY)
configure_file("${LG_SOURCE_DIR}/packaging/leasegate.sysusers" "${staged}/leasegate.conf" COPYONLY)
# file(INSTALL) adds $DESTDIR itself and records every file in install_manifest.txt.
file(INSTALL "${staged}/leasegate.service" DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/systemd/system"
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
file(INSTALL "${staged}/leasegate.conf" DESTINATION "${CMAKE_INSTALL_PREFIX}/lib/sysusers.d"
     FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
# The options file is the administrator's once installed: never overwritten.
if(EXISTS "$ENV{DESTDIR}${LG_SYSCONFDIR}/default/leasegate")
  message(STATUS "Kept: $ENV{DESTDIR}${LG_SYSCONFDIR}/default/leasegate")
else()
  file(INSTALL "${staged}/default/leasegate" DESTINATION "${LG_SYSCONFDIR}/default"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
endif()
