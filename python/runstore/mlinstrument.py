"""``runstore.mlinstrument`` is :mod:`runstore.integrations.mlinstrument`: this name imports
that module, and both names are the same module object (so that patching one patches the other)."""

import sys

from .integrations import mlinstrument as _module

sys.modules[__name__] = _module
