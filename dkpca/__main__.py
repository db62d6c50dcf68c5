"""``python -m dkpca``: the ``dkpca`` command."""

import sys

from .cli import main

sys.exit(main())
