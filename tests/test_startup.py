"""Start-up: the CLI imports only what a run uses, EnvPool's light import path gives the same
envs as `envpool.make` after EnvPool's own import of every family, and gymnax comes in without
the modules it imports only to render (`jax_envs.imports_deferred`)."""

import json
import subprocess
import sys

import pytest


def fresh(code):
    """Run `code` in a fresh interpreter; its last stdout line, parsed as JSON."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_cli_modules_leave_checkpointing_plotting_and_other_env_families_unimported():
    loaded = fresh("import json, sys; import jaxrl_fast.cli.train, jaxrl_fast.run.loop, jaxrl_fast.run.api; "
                   "from jaxrl_fast.env.envpool import probe_spec; probe_spec('CartPole-v1'); print(json.dumps(sorted(sys.modules)))")
    for heavy in ("orbax", "matplotlib", "tensorboardX", "envpool.jumanji", "envpool.mujoco", "envpool.atari"):
        assert not [name for name in loaded if name == heavy or name.startswith(heavy + ".")], heavy
    assert "envpool.classic_control" in loaded


LIGHT_THEN_FULL = """
import dataclasses, json, sys
import numpy as np
from jaxrl_fast.env.envpool import make_pool, spec_of
pool = make_pool("CartPole-v1", 4, 1, 3)
light = dataclasses.asdict(spec_of(pool, "CartPole-v1"))
light_obs = pool.reset()[0].tolist()
light_steps = [pool.step(np.ones(4, np.int32))[0].tolist() for _ in range(3)]
families_before = sorted(m for m in sys.modules if m.endswith(".registration"))
import envpool, envpool.entry
ref = envpool.make("CartPole-v1", env_type="gymnasium", num_envs=4, batch_size=4, num_threads=1, seed=3)
print(json.dumps({"light": light, "ref": dataclasses.asdict(spec_of(ref, "CartPole-v1")),
                  "light_obs": light_obs, "ref_obs": ref.reset()[0].tolist(),
                  "light_steps": light_steps, "ref_steps": [ref.step(np.ones(4, np.int32))[0].tolist() for _ in range(3)],
                  "families_before": families_before, "ids": sorted(envpool.list_all_envs()),
                  "entry": repr(envpool.registration.registry.specs["CartPole-v1"])}))
"""
PLAIN = """
import json, envpool
print(json.dumps({"ids": sorted(envpool.list_all_envs()), "entry": repr(envpool.registration.registry.specs["CartPole-v1"])}))
"""


def test_the_light_envpool_import_gives_the_pool_envpool_make_gives():
    light, plain = fresh(LIGHT_THEN_FULL), fresh(PLAIN)
    assert light["light"] == light["ref"] and light["light"]["family"] == "classic_control"
    assert light["light_obs"] == light["ref_obs"] and light["light_steps"] == light["ref_steps"]
    assert not any("jumanji" in name or "mujoco" in name for name in light["families_before"])
    # after the full import the registry is EnvPool's own: every id, the same entries
    assert light["ids"] == plain["ids"] and light["entry"] == plain["entry"]


def test_an_id_outside_the_light_families_is_found_through_every_family():
    found = fresh("import json; from jaxrl_fast.env.ids import env_family; print(json.dumps(env_family('HalfCheetah-v4')))")
    assert found == "mujoco"


DEFERRED = """
import json, pathlib, sys
root = pathlib.Path(sys.argv[1])
(root / "slow_lib.py").write_text("LOADED = True\\nVALUE = 42\\n")
(root / "renderer.py").write_text("import slow_lib as lib\\ndef draw():\\n    return lib.VALUE\\n")
sys.path.insert(0, str(root))
from jaxrl_fast.env.jax_envs import imports_deferred
with imports_deferred(["slow_lib", "json"]):  # json is imported already: left as it is
    import renderer
after_block = "slow_lib" in sys.modules
drawn = renderer.draw()  # the first attribute read imports the module itself
import slow_lib
print(json.dumps({"after_block": after_block, "drawn": drawn, "stand_in": type(renderer.lib).__name__,
                  "later_import": type(slow_lib).__name__, "loaded": slow_lib.LOADED}))
"""


def test_a_deferred_import_loads_the_module_at_its_first_use_and_later_imports_get_the_module(tmp_path):
    proc = subprocess.run([sys.executable, "-c", DEFERRED, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"after_block": False, "drawn": 42, "stand_in": "DeferredModule", "later_import": "module",
                   "loaded": True}


def test_gymnax_comes_in_without_its_rendering_imports_which_still_resolve_when_used():
    pytest.importorskip("gymnax", reason="the jax-envs extra (tested on the 3.11 lane)")
    out = fresh("import json, sys; from jaxrl_fast.env.jax_envs import check_name; "
                "check_name('gymnax:CartPole-v1'); unloaded = [m for m in ('seaborn', 'pandas', 'scipy.stats', "
                "'matplotlib.pyplot') if m not in sys.modules]; import gymnax.environments.misc.pong as pong; "
                "palette = len(pong.sns.color_palette('pastel')); import seaborn; "
                "print(json.dumps({'unloaded': unloaded, 'palette': palette, 'seaborn': type(seaborn).__name__}))")
    assert out == {"unloaded": ["seaborn", "pandas", "scipy.stats", "matplotlib.pyplot"], "palette": 10,
                   "seaborn": "module"}
