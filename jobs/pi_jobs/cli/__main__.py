"""`python -m pi_jobs.cli`: the same as the `pilake` command."""

import sys

from pi_jobs.cli import main

sys.exit(main())
