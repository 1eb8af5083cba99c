import logging
import os

# Two XLA CPU devices, so that tests exercise the actor/critic split on a machine without GPUs.
# It must be set before JAX initialises its backends.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)  # "Unable to initialize backend 'tpu'"
