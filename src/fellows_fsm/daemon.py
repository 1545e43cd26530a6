"""``python -m fellows_fsm.daemon JOURNAL``: the driver's old path, kept for the service units written with it.

The driver is ``fellows_fsm.driver.process`` (docs/usage.md); this module only starts it.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from fellows_fsm.driver.process import main

    sys.exit(main())
