"""`python -m bertkit` runs the CLI."""

import sys

from bertkit.cli import main

sys.exit(main())
