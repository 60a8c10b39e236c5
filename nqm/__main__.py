"""``python -m nqm`` is the ``nqm`` command."""

import sys

from nqm.cli import command

sys.exit(command())
