"""``python -m daemon.cli``: the `asyncai` command without its console script."""

import sys

from daemon.cli.main import main

sys.exit(main())
