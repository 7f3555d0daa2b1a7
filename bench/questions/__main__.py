"""``python -m bench.questions``: see :mod:`bench.questions.run`."""

import asyncio
import sys

from bench.questions.run import main

sys.exit(asyncio.run(main()))
