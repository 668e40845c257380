"""Where the package says the C API is (runstore.get_include(), runstore.get_library_dir()).

The wheel carries the C API; a build of the package without it (``RUNSTORE_BUILD_C_API=OFF``,
an editable source build) must say so by name, never hand back a folder a compiler then fails
on. A package without the C API is made here by pointing the module at a copy of the package's
folder from which the C API's files are left out, or replaced by what is not a file.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import runstore
from runstore import _capi

CALLS = {"get_include": "include", "get_library_dir": "lib"}


@pytest.fixture
def package_without_capi(tmp_path, monkeypatch):
    """The module looking at a package folder with no include/ and no lib/."""
    fake = tmp_path / "runstore"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    monkeypatch.setattr(_capi, "_PACKAGE", fake)
    return fake


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_package_without_the_c_api_says_so_naming_the_folder(package_without_capi, call):
    with pytest.raises(FileNotFoundError) as e:
        getattr(runstore, call)()
    message = str(e.value)
    assert str(package_without_capi / CALLS[call]) in message
    assert "RUNSTORE_BUILD_C_API=OFF" in message
    assert "build-wheel.sh" in message


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_folder_without_its_file_is_no_c_api(package_without_capi, call):
    # The folder is there but what marks it is not: empty, or a directory or a dangling link
    # where the header or the library should be.
    folder = package_without_capi / CALLS[call]
    marker = folder / ("runstore/runstore.h" if call == "get_include" else "librunstore_c.so.1")
    marker.parent.mkdir(parents=True)
    with pytest.raises(FileNotFoundError):
        getattr(runstore, call)()
    marker.mkdir()
    with pytest.raises(FileNotFoundError):
        getattr(runstore, call)()
    marker.rmdir()
    os.symlink(folder / "gone", marker)
    with pytest.raises(FileNotFoundError):
        getattr(runstore, call)()


def test_the_installed_c_api_is_where_the_calls_say(tmp_path, monkeypatch):
    """What the wheel installs, copied into a package folder: both calls find it."""
    fake = tmp_path / "runstore"
    (fake / "include" / "runstore").mkdir(parents=True)
    (fake / "lib").mkdir()
    root = Path(__file__).resolve().parents[2]
    shutil.copy(root / "include" / "runstore" / "runstore.h", fake / "include" / "runstore")
    (fake / "lib" / "librunstore_c.so.1").write_bytes(b"\x7fELF")
    monkeypatch.setattr(_capi, "_PACKAGE", fake)
    assert runstore.get_include() == str(fake / "include")
    assert runstore.get_library_dir() == str(fake / "lib")


def test_the_package_under_test_has_the_c_api_when_it_is_a_wheel():
    """The package the suite runs is the wheel's (scripts/test.sh installs it): it has both."""
    if not (Path(runstore.__file__).parent / "lib").is_dir():
        pytest.skip("this runstore is a build without the C API (an editable source build)")
    include = Path(runstore.get_include())
    assert (include / "runstore" / "runstore.h").is_file()
    assert (Path(runstore.get_library_dir()) / "librunstore_c.so.1").is_file()
