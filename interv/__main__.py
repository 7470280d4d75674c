"""``python -m interv`` runs the ``interv`` command line.

Python puts the working directory first on ``sys.path`` for ``-m``: it is taken off before
anything else is imported, so that no file there (a ``json.py``, a ``typing.py``) can stand
in for a module interv imports. The package's ``__init__`` runs before this file and
imports only modules Python has already loaded and interv's own bottom modules.
"""

import os
import sys

if (
    not sys.flags.safe_path
    and sys.path
    and os.path.realpath(sys.path[0] or os.curdir) == os.path.realpath(os.getcwd())
):
    del sys.path[0]

# after the working directory left sys.path
from interv.cli import main

sys.exit(main())
