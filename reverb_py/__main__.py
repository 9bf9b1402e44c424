"""``python -m reverb_py``: the ``reverb-py`` command line (:mod:`reverb_py.cli`)."""

import sys

from reverb_py.cli import main

sys.exit(main())
