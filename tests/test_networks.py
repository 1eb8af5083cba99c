import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl_fast.engine.run_once import jit_once
from jaxrl_fast.networks.torso import orthogonal


@pytest.mark.parametrize("shape", [(17, 256), (256, 256), (256, 6), (4, 64)])
def test_orthogonal_init_is_flax_orthogonal_without_lapack_qr(shape):
    key = jax.random.key(3)
    ours = np.asarray(orthogonal(1.4)(key, shape))
    np.testing.assert_allclose(ours, np.asarray(nn.initializers.orthogonal(1.4)(key, shape)), atol=1e-5)
    small = min(shape)
    gram = ours.T @ ours if shape[0] >= shape[1] else ours @ ours.T
    np.testing.assert_allclose(gram, 1.4**2 * np.eye(small), atol=1e-4)
    # no QR custom call: jaxlib's CPU QR kernel can deadlock XLA's thread pool (see orthogonal)
    hlo = jax.jit(lambda k: orthogonal(1.4)(k, shape)).lower(key).as_text()
    assert "geqrf" not in hlo and "householder" not in hlo.lower()


@pytest.mark.parametrize("shape", [(17, 256), (256, 256), (256, 6)])
def test_orthogonal_init_compiled_to_run_once_is_the_same_matrix_to_rounding(shape):
    """Agents initialise under `jit_once` (XLA's optimisation level 0): the same orthonormal matrix
    as the default level's program, to float32 rounding."""
    key = jax.random.key(5)
    init = lambda k: orthogonal(1.4)(k, shape)  # noqa: E731
    once = np.asarray(jit_once(init)(key))
    np.testing.assert_allclose(once, np.asarray(jax.jit(init)(key)), atol=1e-5)
    small = min(shape)
    gram = once.T @ once if shape[0] >= shape[1] else once @ once.T
    np.testing.assert_allclose(gram, 1.4**2 * np.eye(small), atol=1e-4)


def test_layer_norm_is_an_option_of_every_network_config():
    from jaxrl_fast.env.envpool import probe_spec
    from jaxrl_fast.networks.config import NetworkConfig
    from jaxrl_fast.networks.heads import make_q_network, make_value_network

    spec = probe_spec("Pendulum-v1")
    plain = NetworkConfig(hidden_sizes=(8, 8), activation="relu")
    normed = NetworkConfig(hidden_sizes=(8, 8), activation="relu", layer_norm=True)
    params = make_value_network(spec, plain).init(jax.random.key(0))["params"]
    assert sorted(params) == ["Dense_0", "Dense_1", "Dense_2"]  # off: the same parameters as before the option
    value_net = make_value_network(spec, normed)
    params = value_net.init(jax.random.key(0))
    assert sorted(params["params"]) == ["Dense_0", "Dense_1", "Dense_2", "LayerNorm_0", "LayerNorm_1"]
    # each hidden layer's pre-activations are standardised: scaling the input leaves the value unchanged
    obs = jax.random.normal(jax.random.key(1), (5, 3))
    first = value_net.apply(params, obs)
    np.testing.assert_allclose(value_net.apply(params, 1000.0 * obs), first, rtol=1e-3, atol=1e-3)
    q_net = make_q_network(spec, normed, num_critics=2)
    assert q_net.apply(q_net.init(jax.random.key(2)), obs, jnp.zeros((5, 1))).shape == (2, 5)
