"""`python -m jaxrl_fast.benchmark`: train a suite's tasks over seeds and report them beside published returns. The command's code is `jaxrl_fast.cli.benchmark`."""

import sys

from jaxrl_fast.cli.benchmark import main

if __name__ == "__main__":
    sys.exit(main())
