"""The networks' hyperparameters, shared by every algorithm's config (no JAX: the command line reads them)."""

from __future__ import annotations

import dataclasses
from typing import Literal


@dataclasses.dataclass(frozen=True)
class NetworkConfig:
    """Fields every algorithm's networks share (each algorithm sets its own defaults)."""

    hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden layer widths of every MLP."""
    activation: Literal["tanh", "relu", "elu", "silu"] = "relu"
    """Hidden-layer activation."""
    layer_norm: bool = False
    """LayerNorm after each hidden layer, before the activation (stateless: nothing to track)."""
    encoder: Literal["auto", "none", "nature", "impala"] = "auto"
    """Image encoder: 'nature' (Mnih et al. 2015) or 'impala' (Espeholt et al. 2018); 'auto': nature for images, none for vectors."""


ENCODERS = ("nature", "impala")
