import os
import sys

if getattr(sys.modules.get("iodl"), "__file__", None) is None:
    # `python -m iodl` run from the folder that holds a clone named iodl: that folder (first on
    # sys.path) made `iodl` an empty namespace package. Drop the working directory and import the
    # installed package instead.
    cwd = os.getcwd()
    sys.path[:] = [p for p in sys.path if p not in ("", ".", cwd)]
    for name in [m for m in sys.modules if m == "iodl" or m.startswith("iodl.")]:
        del sys.modules[name]

from iodl.cli import main  # noqa: E402

sys.exit(main())
