// Finds librunstore_c (the C API, include/runstore/runstore.h) to link:
// $RUNSTORE_LIB_DIR (a build tree's directory, or an install's lib/), else
// pkg-config's `runstore` (an install of `cmake --install`). The library's
// directory is put in the binaries' run path, so that tests, examples and
// programs find it without LD_LIBRARY_PATH.
use std::env;
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=RUNSTORE_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    let dir = match env::var("RUNSTORE_LIB_DIR") {
        Ok(d) if !d.is_empty() => d,
        _ => match Command::new("pkg-config").args(["--variable=libdir", "runstore"]).output() {
            Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
            _ => panic!(
                "runstore: librunstore_c not found: set RUNSTORE_LIB_DIR to the directory that \
                 holds librunstore_c.so (a build tree such as build/release, or an install's lib/), \
                 or install runstore with `cmake --install` so that `pkg-config runstore` finds it"
            ),
        },
    };
    if !Path::new(&dir).join("librunstore_c.so").exists() {
        panic!(
            "runstore: {}/librunstore_c.so does not exist (RUNSTORE_LIB_DIR or pkg-config)",
            dir
        );
    }
    println!("cargo:rustc-link-search=native={}", dir);
    println!("cargo:rustc-link-lib=dylib=runstore_c");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
    println!("cargo:rerun-if-changed={}/librunstore_c.so", dir);
}
