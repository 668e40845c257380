# The libraries runstore builds against, found through pkg-config; where any is
# missing, one error that names the package to install on each platform users
# build on, instead of CMake's trace of the first one (tests/build_errors_test.sh).

# Package names: what runstore needs -> Debian/Ubuntu, RHEL/Fedora, conda-forge.
set(RUNSTORE_PACKAGES_pkg-config "pkg-config;pkgconf-pkg-config;pkg-config")
set(RUNSTORE_PACKAGES_libzstd "libzstd-dev;libzstd-devel;zstd")
set(RUNSTORE_PACKAGES_liblz4 "liblz4-dev;lz4-devel;lz4-c")
set(RUNSTORE_PACKAGES_libxxhash "libxxhash-dev;xxhash-devel;xxhash")
set(RUNSTORE_PACKAGES_libcrypto "libssl-dev;openssl-devel;openssl")

# Fails the configuration, naming the packages of each dependency in `missing`.
function(runstore_missing_dependencies missing)
  set(debian "")
  set(fedora "")
  set(conda "")
  foreach(dep ${missing})
    list(GET RUNSTORE_PACKAGES_${dep} 0 d)
    list(GET RUNSTORE_PACKAGES_${dep} 1 f)
    list(GET RUNSTORE_PACKAGES_${dep} 2 c)
    string(APPEND debian " ${d}")
    string(APPEND fedora " ${f}")
    string(APPEND conda " ${c}")
  endforeach()
  string(REPLACE ";" ", " names "${missing}")
  message(FATAL_ERROR
    "runstore cannot be built: the development files of ${names} were not found.\n"
    "Install them, then build again:\n"
    "  Debian/Ubuntu:  sudo apt-get install${debian}\n"
    "  RHEL/Fedora:    sudo dnf install${fedora}\n"
    "  conda:          conda install -c conda-forge${conda}\n"
    "(A library installed elsewhere is found through PKG_CONFIG_PATH, the directory of its "
    ".pc file.)")
endfunction()

# libzstd, liblz4 and libxxhash as PkgConfig::ZSTD, ::LZ4 and ::XXHASH; with
# `crypto` true (the Python extension), OpenSSL's libcrypto too.
macro(runstore_find_dependencies crypto)
  set(_runstore_missing "")
  find_package(PkgConfig QUIET)
  if(NOT PKG_CONFIG_FOUND)
    list(APPEND _runstore_missing pkg-config libzstd liblz4 libxxhash)
  else()
    pkg_check_modules(ZSTD QUIET IMPORTED_TARGET libzstd)
    pkg_check_modules(LZ4 QUIET IMPORTED_TARGET liblz4)
    pkg_check_modules(XXHASH QUIET IMPORTED_TARGET libxxhash)
    foreach(_runstore_dep ZSTD:libzstd LZ4:liblz4 XXHASH:libxxhash)
      string(REPLACE ":" ";" _runstore_pair ${_runstore_dep})
      list(GET _runstore_pair 0 _runstore_var)
      list(GET _runstore_pair 1 _runstore_name)
      if(NOT ${_runstore_var}_FOUND)
        list(APPEND _runstore_missing ${_runstore_name})
      endif()
    endforeach()
  endif()
  if(${crypto})
    find_package(OpenSSL QUIET COMPONENTS Crypto)
    if(NOT OpenSSL_FOUND)
      list(APPEND _runstore_missing libcrypto)
    endif()
  endif()
  if(_runstore_missing)
    runstore_missing_dependencies("${_runstore_missing}")
  endif()
endmacro()
