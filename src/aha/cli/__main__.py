"""`python -m aha.cli`, as the `aha` command."""

import os
import sys

from aha.cli import main

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.exit(main())
