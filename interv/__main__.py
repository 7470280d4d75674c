"""``python -m interv`` runs the ``interv`` command line."""

import sys

from interv.cli import main

sys.exit(main())
