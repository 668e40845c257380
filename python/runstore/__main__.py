"""``python -m runstore``: the ``runstore`` command (the module ``_runstore_cli``)."""

import sys

from _runstore_cli import main

if __name__ == "__main__":
    sys.exit(main())
