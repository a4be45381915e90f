"""`python -m gantry` is the same as the `gantry` executable."""

import sys

from gantry.cli import main

sys.exit(main())
