"""gymnax, imported without the plotting stack of its renderers.

Importing gymnax loads seaborn (and with it scipy.stats and pandas) and matplotlib.pyplot
for the `render` methods of a few envs: most of gymnax's import time, paid by every
process that makes an env. Training never renders, so until gymnax is imported those
two modules stand in `sys.modules` as placeholders that import the real module the first
time one of its attributes is read (and from then on forward to it). importlib's
LazyLoader cannot do this on Python 3.11: a second `import` of a lazy module reads its
`__spec__`, which loads it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

DEFERRED = ("seaborn", "matplotlib.pyplot")


def import_gymnax():
    """The gymnax module, its renderers' plotting modules deferred if not loaded yet."""
    if "gymnax" not in sys.modules:
        for name in DEFERRED:
            if name not in sys.modules:
                _defer(name)
    import gymnax

    return gymnax


class _Deferred(types.ModuleType):
    """Stands for a module not imported yet; the first attribute read imports it."""

    def __getattr__(self, attr):  # only for attributes the placeholder itself lacks
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        module = importlib.import_module(name)
        return getattr(module, attr)


def _defer(name: str) -> None:
    spec = importlib.util.find_spec(name)  # for a submodule this imports its parent
    if spec is None:
        return
    placeholder = _Deferred(name)
    placeholder.__spec__ = spec  # what `import` reads of a module already in sys.modules
    sys.modules[name] = placeholder
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, placeholder)
