"""``python -m runstore``: the ``runstore`` command (:mod:`runstore._cli`)."""

import sys

from ._cli import main

sys.exit(main())
