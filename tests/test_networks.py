import flax.linen as nn
import jax
import numpy as np
import pytest

from jaxrl_fast.networks import orthogonal


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
