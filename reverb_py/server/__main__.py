"""``python -m reverb_py.server``: the replay server daemon (:mod:`reverb_py.server._daemon`)."""

import sys

from reverb_py.server._daemon import main

sys.exit(main())
