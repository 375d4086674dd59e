# Cross build for 64-bit Arm Linux with Debian's cross compiler
# (gcc-aarch64-linux-gnu) and the arm64 -dev packages installed through
# multiarch (dpkg --add-architecture arm64; apt-get install libjansson-dev:arm64 ...).
# Usage: cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# The binaries run under qemu-aarch64-static -L /usr/aarch64-linux-gnu (scripts/test-aarch64.sh).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)

# Libraries and headers of the target: the cross compiler's own tree and the
# multiarch folders of the arm64 packages; never the build machine's x86 ones.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)

# pkg-config answers with the arm64 .pc files only.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

# ctest runs the test binaries through the emulator.
find_program(WICK_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64)
if(WICK_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${WICK_QEMU_AARCH64};-L;/)
endif()
