"""Epochs of shuffled minibatch steps over one flattened batch: how PPO and PQN consume a rollout."""

from __future__ import annotations

from typing import Any, Callable

import jax


def minibatch_epochs(
    step: Callable[[Any, Any], tuple[Any, dict[str, jax.Array]]],
    state: Any,
    batch: Any,
    key: jax.Array,
    epochs: int,
    num_minibatches: int,
) -> tuple[Any, dict[str, jax.Array]]:
    """`epochs` passes over `batch` (a pytree of `[N, ...]` arrays), each a fresh permutation cut
    into `num_minibatches` minibatches, `state, metrics = step(state, minibatch)` on each.

    Returns the final state and each metric `[epochs, num_minibatches]`.
    """
    size = jax.tree.leaves(batch)[0].shape[0]

    def epoch(state: Any, epoch_key: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
        order = jax.random.permutation(epoch_key, size)
        minibatches = jax.tree.map(
            lambda x: x[order].reshape((num_minibatches, size // num_minibatches, *x.shape[1:])), batch)
        return jax.lax.scan(step, state, minibatches)

    return jax.lax.scan(epoch, state, jax.random.split(key, epochs))
