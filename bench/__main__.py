"""``python -m bench``: every performance target in one run, with the peers (bench.suite)."""

import sys

from bench.suite import main

sys.exit(main())
