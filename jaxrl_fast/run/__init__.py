"""One run: resolved once from its config (resolve.py), built (build.py), driven call by call
(loop.py), reported into its run directory (report.py, evaluation.py); api.py is `jaxrl_fast.train`."""
