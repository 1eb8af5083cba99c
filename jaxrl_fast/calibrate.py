"""`python -m jaxrl_fast.calibrate`: measure this machine and pick a run's sizes. The command's code is `jaxrl_fast.cli.calibrate`."""

import sys

from jaxrl_fast.cli.calibrate import main

if __name__ == "__main__":
    sys.exit(main())
