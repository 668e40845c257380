"""``runstore.ray`` is :mod:`runstore.integrations.ray`: this name imports that module, and both
names are the same module object (so that patching one patches the other)."""

import sys

from .integrations import ray as _module

sys.modules[__name__] = _module
