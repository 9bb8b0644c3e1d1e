"""`python -m app_relay`: the `cujo` command (how `cujo relay serve` starts its workers)."""

import sys

from app_relay.cli.main import main

sys.exit(main())
