"""The wire format: how each EnvPool field crosses the XLA custom call.

The 64-bit hazard: MuJoCo tasks declare float64 observations and actions. EnvPool's own
`env.xla()` canonicalizes those to float32 when JAX runs in its default 32-bit mode, so XLA hands
the C++ side buffers of half the size it writes into and the process aborts (`free(): invalid
size`). We build the XLA calls ourselves from EnvPool's native specs instead: every 64-bit
field travels as pairs of uint32 words of the same byte size ("wire" format), and is converted
to or from float32 / int32 with integer arithmetic inside the jitted program. Learners stay in
float32, nothing leaves XLA, and no buffer can ever be smaller than what EnvPool writes: each
wire shape is checked against the spec's byte size before the first call.

"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxrl_fast.env.ids import EnvError


def _is_wide(dtype: np.dtype) -> bool:
    """A dtype JAX cannot hold in the current mode (64-bit while x64 is off)."""
    return np.dtype(jax.dtypes.canonicalize_dtype(dtype)) != np.dtype(dtype)


def wire_struct(dtype: Any, shape: Any) -> jax.ShapeDtypeStruct:
    """The buffer XLA allocates for an EnvPool field: same byte size as the spec, always."""
    dtype, shape = np.dtype(dtype), tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise EnvError(f"EnvPool field has an unresolved shape {shape}")
    if _is_wide(dtype):
        if dtype.itemsize != 8 or dtype.kind not in "fiu":
            raise EnvError(f"EnvPool field dtype {dtype} is not supported by the adapter")
        struct = jax.ShapeDtypeStruct(shape + (2,), jnp.uint32)
    else:
        struct = jax.ShapeDtypeStruct(shape, dtype)
    wire_bytes = int(np.prod(struct.shape, dtype=np.int64)) * np.dtype(struct.dtype).itemsize
    spec_bytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if wire_bytes != spec_bytes:  # the invariant that makes the 64-bit crash impossible
        raise EnvError(f"wire buffer of {wire_bytes} bytes for a {spec_bytes}-byte {dtype}{list(shape)} field")
    return struct


def float64_words_to_float32(words: jax.Array) -> jax.Array:
    """IEEE-754 binary64 given as little-endian uint32 pairs `[..., 2]` -> float32 `[...]`.

    Exact round-to-nearest-even, as numpy's cast; beyond float32's range gives +-inf, and
    values below its smallest normal (1.2e-38) flush to 0.
    """
    lo, hi = words[..., 0], words[..., 1]
    exponent = (hi >> 20) & 0x7FF
    mantissa = ((hi & 0xFFFFF) << 3) | (lo >> 29)  # the 23 bits float32 keeps
    rest = lo & 0x1FFFFFFF  # the 29 bits it drops
    half = jnp.uint32(1 << 28)
    round_up = (rest > half) | ((rest == half) & ((mantissa & 1) == 1))
    exponent32 = exponent.astype(jnp.int32) - (1023 - 127)
    # a carry out of the mantissa bumps the exponent, and past the top lands exactly on inf
    bits = (jnp.clip(exponent32, 0, 255).astype(jnp.uint32) << 23) + mantissa + round_up.astype(jnp.uint32)
    bits = jnp.minimum(bits, jnp.uint32(0x7F800000))
    bits = jnp.where(exponent32 <= 0, jnp.uint32(0), bits)
    is_nan = ((hi & 0xFFFFF) | lo) != 0
    bits = jnp.where(exponent == 0x7FF, jnp.where(is_nan, jnp.uint32(0x7FC00000), jnp.uint32(0x7F800000)), bits)
    return lax.bitcast_convert_type((hi & jnp.uint32(0x80000000)) | bits, jnp.float32)


def float32_to_float64_words(x: jax.Array) -> jax.Array:
    """float32 `[...]` -> IEEE-754 binary64 as little-endian uint32 pairs `[..., 2]` (exact)."""
    bits = lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
    sign, exponent, mantissa = bits >> 31, (bits >> 23) & 0xFF, bits & 0x7FFFFF
    exponent64 = jnp.where(exponent == 0, 0, jnp.where(exponent == 0xFF, 0x7FF, exponent + (1023 - 127)))
    mantissa = jnp.where(exponent == 0, 0, mantissa)  # float32 subnormals -> 0
    hi = (sign << 31) | (exponent64.astype(jnp.uint32) << 20) | (mantissa >> 3)
    lo = (mantissa & 0x7) << 29
    return jnp.stack([lo, hi], axis=-1)


def int64_words_to_int32(words: jax.Array) -> jax.Array:
    """A little-endian int64 as uint32 pairs -> int32 (the low word; EnvPool ints here are small)."""
    return lax.bitcast_convert_type(words[..., 0], jnp.int32)


def int32_to_int64_words(x: jax.Array) -> jax.Array:
    x = x.astype(jnp.int32)
    return jnp.stack([lax.bitcast_convert_type(x, jnp.uint32), jnp.where(x < 0, jnp.uint32(0xFFFFFFFF), jnp.uint32(0))], -1)


def from_wire(value: jax.Array, dtype: Any) -> jax.Array:
    dtype = np.dtype(dtype)
    if not _is_wide(dtype):
        return value
    return float64_words_to_float32(value) if dtype.kind == "f" else int64_words_to_int32(value)


def to_wire(value: jax.Array, dtype: Any) -> jax.Array:
    dtype = np.dtype(dtype)
    if not _is_wide(dtype):
        return value.astype(dtype)
    return float32_to_float64_words(value) if dtype.kind == "f" else int32_to_int64_words(value)
