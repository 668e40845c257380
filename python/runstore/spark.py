"""``runstore.spark`` is :mod:`runstore.integrations.spark`: this name imports that module, and
both names are the same module object (so that patching one patches the other)."""

import sys

from .integrations import spark as _module

sys.modules[__name__] = _module
