#!/usr/bin/env bash
# A project that embeds runstore with add_subdirectory and sets no C++ standard of its own (the
# compiler's default, C++17 for GCC 12): its program that includes runstore's headers and links
# runstore::runstore gets C++20 from runstore's targets (cxx_std_20, a usage requirement), builds,
# and writes and reads a store; nothing beyond the library is built or needed (no tests, GTest or
# nlohmann-json). Before, runstore set CMAKE_CXX_STANDARD for its own directory only, and such a
# program did not compile.
#
#   bash tests/embed_test.sh [BUILD_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
T=${1:-$(mktemp -d)}
mkdir -p "$T/app"
cat > "$T/app/CMakeLists.txt" << CMAKE
cmake_minimum_required(VERSION 3.22)
project(embedder LANGUAGES CXX)
add_subdirectory("$root" runstore EXCLUDE_FROM_ALL)
add_executable(user user.cc)
target_link_libraries(user PRIVATE runstore::runstore)
CMAKE
cat > "$T/app/user.cc" << 'CC'
#include <cstdio>
#include <string>

#include "runstore/store.h"

// Writes a value, then reads it back through a snapshot that sees the commit.
runstore::Status WriteAndRead(const std::string& dir) {
  RUNSTORE_ASSIGN_OR_RETURN(auto store, runstore::Store::Open(dir, {}));
  RUNSTORE_ASSIGN_OR_RETURN(auto writer, store->NewWriter({}));
  RUNSTORE_RETURN_IF_ERROR(writer->Append(42, "loss", 0, 0.25));
  RUNSTORE_RETURN_IF_ERROR(writer->Commit());
  RUNSTORE_ASSIGN_OR_RETURN(auto snap, store->Refresh());
  RUNSTORE_ASSIGN_OR_RETURN(runstore::Value v, snap->Get(42, "loss", 0));
  return v.as<double>()[0] == 0.25 ? runstore::Status::OK()
                                   : runstore::Status::Corruption("read back another value");
}

int main(int, char** argv) {
  const runstore::Status s = WriteAndRead(argv[1]);
  std::printf("%s\n", s.ToString().c_str());
  return s.ok() ? 0 : 1;
}
CC
cmake -S "$T/app" -B "$T/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER_LAUNCHER="$(command -v ccache || true)" > "$T/configure.log"
cmake --build "$T/build" -j 2 > "$T/build.log" || { tail -30 "$T/build.log"; exit 1; }
rm -rf "$T/store"
"$T/build/user" "$T/store"
echo "embed_test: a project of the compiler's default standard built runstore and a program that writes and reads a store"
