"""Where the wheel put the C API (include/runstore/runstore.h, docs/c_api.md "From the wheel").

The wheel carries the C API for C, Rust and the other languages that call C: its headers in
``runstore/include`` and ``librunstore_c.so.1`` with a pkg-config file in ``runstore/lib``::

    lib=$(python -c "import runstore; print(runstore.get_library_dir())")
    export PKG_CONFIG_PATH=$lib/pkgconfig
    cc prog.c $(pkg-config --cflags --libs runstore)
    RUNSTORE_LIB_DIR=$lib cargo build
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _installed(folder: str, marker: str) -> str:
    where = _PACKAGE / folder
    if not (where / marker).is_file():
        raise FileNotFoundError(
            f"this runstore has no C API in {where} (built with RUNSTORE_BUILD_C_API=OFF); "
            "the wheel of scripts/build-wheel.sh carries it, and `cmake --install` of a source "
            "build installs it with a pkg-config file"
        )
    return str(where)


def get_include() -> str:
    """The folder to put on a C compiler's include path for ``#include "runstore/runstore.h"``.

    Raises FileNotFoundError when this build of the package lacks the C API.
    """
    return _installed("include", "runstore/runstore.h")


def get_library_dir() -> str:
    """The folder of ``librunstore_c.so.1`` (``-lrunstore_c`` finds it) and of ``pkgconfig/``.

    Raises FileNotFoundError when this build of the package lacks the C API.
    """
    return _installed("lib", "librunstore_c.so.1")
