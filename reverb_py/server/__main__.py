"""``python -m reverb_py.server``: the replay server daemon (see :mod:`reverb_py._daemon`)."""

import sys

from reverb_py._daemon import main

sys.exit(main())
