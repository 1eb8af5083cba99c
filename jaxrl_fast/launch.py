"""`python -m jaxrl_fast.launch`: one run of several processes on this host or a cluster. The command's code is `jaxrl_fast.cli.launch`."""

import sys

from jaxrl_fast.cli.launch import main

if __name__ == "__main__":
    sys.exit(main())
