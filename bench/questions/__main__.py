"""``python -m bench.questions``: see :mod:`bench.questions.run`."""

import asyncio
import sys

from bench.questions.run import main, stopped_by_sigterm

sys.exit(asyncio.run(stopped_by_sigterm(main())))
