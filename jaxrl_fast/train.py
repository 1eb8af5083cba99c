"""`python -m jaxrl_fast.train`: train an agent (`--help` lists the flags). The command's code is
`jaxrl_fast.cli.train`; `jaxrl_fast.train(...)`, the library's function of the same name, is the
Python API, so this module is run, never imported (an import would shadow that function)."""

import sys

if __name__ != "__main__":
    raise ImportError("jaxrl_fast.train is the function jaxrl_fast.train(...); the command's code is jaxrl_fast.cli.train")

from jaxrl_fast.run.stopping import StopRequest

# Catch SIGINT and SIGTERM before the imports below (seconds, JAX among them), so that a Ctrl-C in
# the first second is a stop request like any later one, never lost.
early_stop = StopRequest(second="exit").__enter__()

from jaxrl_fast.cli.train import main  # noqa: E402

sys.exit(main(early_stop=early_stop))
