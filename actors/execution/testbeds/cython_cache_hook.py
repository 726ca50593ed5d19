"""Cython's own cache of the C it generates, for the installs no trace can follow.

Copied into a testbed's prefix (with a .pth line that imports it) only while its install steps
run, as the trace hook is (prefix.start_hooks). An install on a Python without audit hooks
(before 3.8) cannot be traced, so no testbed is ever made from its outputs and every testbed would
run Cython on every .pyx again (scikit-learn 0.2x: about 50 modules, minutes). Cython can keep
what it generates under a fingerprint of the .pyx, of everything it cimports or includes, of its
own version and of the options (cythonize's `cache`): a .pyx whose fingerprint is known is not
compiled, its C is taken from the cache, the same bytes Cython would write. This hook turns that
cache on, in the node's folder, for every cythonize that does not choose a cache of its own.

Traced installs are left alone: their reuse keeps Cython's outputs already, and Cython's pruning
of its cache runs `du`, a program whose reads a trace cannot follow.

Written for every interpreter an environment may have (no f-strings)."""
import sys

# Where Cython keeps default_options, which cythonize's options start from: Main before Cython 3,
# Options since.
OPTION_MODULES = ("Cython.Compiler.Main", "Cython.Compiler.Options")


def start(folder):
    if not folder or hasattr(sys, "addaudithook") or sys.version_info < (3, 4):
        return  # traced (3.8+), or an import system without find_spec (Python 2)
    sys.meta_path.insert(0, _CacheByDefault(folder))


class _CacheByDefault(object):
    """Finds nothing itself: when Cython's options module is imported, it lets the other finders
    find it and sets the cache in its defaults once the module has run."""

    def __init__(self, folder):
        self.folder = folder

    def find_spec(self, name, path=None, target=None):
        if name not in OPTION_MODULES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run, folder = loader.exec_module, self.folder

        def exec_module(module):
            run(module)
            defaults = getattr(module, "default_options", None)
            if isinstance(defaults, dict) and "cache" in defaults and defaults["cache"] is None:
                defaults["cache"] = folder

        loader.exec_module = exec_module
        return spec
