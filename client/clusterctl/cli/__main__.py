"""``python -m clusterctl.cli``: the same as the ``clusterctl`` console script."""

import sys

from clusterctl.cli.main import main

sys.exit(main())
