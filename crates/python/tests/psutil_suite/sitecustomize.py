"""Run at the start of every Python that psutil's tests start (their children, psutil's example
scripts: tests/test_psutil_suite.py puts this directory on their PYTHONPATH): with
TASKDIAG_PSUTIL_SWAP set, the psutil they import is swapped (taskdiag_swap) as soon as it is
imported, and after each reload; without it, nothing. psutil is not imported here: a child
that does not import it is left as it is."""

import os
import sys

if os.environ.get("TASKDIAG_PSUTIL_SWAP"):
    import importlib.util

    class _SwapOnImport:
        """A meta path finder that finds psutil as the others would, and swaps it once its
        module has run."""

        def find_spec(self, name, path=None, target=None):
            if name != "psutil":
                return None
            sys.meta_path.remove(self)
            try:
                spec = importlib.util.find_spec(name)
            finally:
                sys.meta_path.insert(0, self)
            if spec is None or spec.loader is None:
                return spec
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                import taskdiag_swap

                taskdiag_swap.swap(module)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _SwapOnImport())
