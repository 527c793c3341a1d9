#!/usr/bin/env bash
# Builds the C API (crate capi/, package rdma-pubsub-c) and installs it under PREFIX:
#   PREFIX/lib/librdma_pubsub.so, PREFIX/lib/librdma_pubsub.a
#   PREFIX/include/rdma_pubsub.h, PREFIX/include/rdma_pubsub.hpp
#   PREFIX/lib/pkgconfig/rdma_pubsub.pc          (pkg-config --cflags --libs rdma_pubsub)
#   PREFIX/lib/cmake/rdma_pubsub/*.cmake          (find_package(rdma_pubsub): targets
#                                                  rdma_pubsub::rdma_pubsub, rdma_pubsub::rdma_pubsub_static)
# Usage: scripts/install-c.sh PREFIX      (RPS_FEATURES=verbs for the verbs provider; the
# build honours CARGO_TARGET_DIR)
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 PREFIX" >&2; exit 2; }
cd "$(dirname "$0")/.."
mkdir -p "$1"
prefix="$(cd "$1" && pwd)"
features="${RPS_FEATURES:-}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' capi/Cargo.toml | head -1)"

cargo build --release -p rdma-pubsub-c ${features:+--features "$features"}
# What the static library needs from the system, as rustc reports it.
native="$(cargo rustc --release -p rdma-pubsub-c --crate-type staticlib ${features:+--features "$features"} \
  -- --print native-static-libs 2>&1 | sed -n 's/.*native-static-libs: //p' | tail -1)"
[ -n "$native" ] || native="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
if [[ " $features " == *" verbs "* ]]; then native="$native -libverbs -lrdmacm"; fi

install -d "$prefix/lib/pkgconfig" "$prefix/lib/cmake/rdma_pubsub" "$prefix/include"
install -m 755 "$target/release/librdma_pubsub.so" "$prefix/lib/"
install -m 644 "$target/release/librdma_pubsub.a" "$prefix/lib/"
install -m 644 capi/include/rdma_pubsub.h capi/include/rdma_pubsub.hpp "$prefix/include/"

cat > "$prefix/lib/pkgconfig/rdma_pubsub.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: rdma_pubsub
Description: Embedded publish/subscribe middleware over RDMA (C API; C++17 header rdma_pubsub.hpp)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -lrdma_pubsub
Libs.private: $native
PC

cat > "$prefix/lib/cmake/rdma_pubsub/rdma_pubsubConfig.cmake" <<CMAKE
# find_package(rdma_pubsub): the imported targets rdma_pubsub::rdma_pubsub (shared library)
# and rdma_pubsub::rdma_pubsub_static, with the headers rdma_pubsub.h and rdma_pubsub.hpp.
get_filename_component(_rdma_pubsub_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET rdma_pubsub::rdma_pubsub)
  add_library(rdma_pubsub::rdma_pubsub SHARED IMPORTED)
  set_target_properties(rdma_pubsub::rdma_pubsub PROPERTIES
    IMPORTED_LOCATION "\${_rdma_pubsub_prefix}/lib/librdma_pubsub.so"
    IMPORTED_NO_SONAME TRUE
    INTERFACE_INCLUDE_DIRECTORIES "\${_rdma_pubsub_prefix}/include")
  add_library(rdma_pubsub::rdma_pubsub_static STATIC IMPORTED)
  separate_arguments(_rdma_pubsub_native UNIX_COMMAND "$native")
  set_target_properties(rdma_pubsub::rdma_pubsub_static PROPERTIES
    IMPORTED_LOCATION "\${_rdma_pubsub_prefix}/lib/librdma_pubsub.a"
    INTERFACE_INCLUDE_DIRECTORIES "\${_rdma_pubsub_prefix}/include"
    INTERFACE_LINK_LIBRARIES "\${_rdma_pubsub_native}")
endif()
set(rdma_pubsub_FOUND TRUE)
CMAKE

cat > "$prefix/lib/cmake/rdma_pubsub/rdma_pubsubConfigVersion.cmake" <<CMAKE
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
CMAKE
echo "installed rdma_pubsub $version under $prefix"
