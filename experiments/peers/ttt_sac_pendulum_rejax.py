"""Time-to-threshold: rejax SAC on gymnax Pendulum-v1, mean eval return >= -200.

Config: rejax repository configs/gymnax/pendulum.yaml, `sac` entry (swish,
num_envs 1, buffer 10k, fill_buffer 256, batch 256, lr 0.01, num_epochs 1,
total_timesteps 10k, gamma 0.99, polyak 0.98, target_entropy_ratio null,
normalize_observations true; net 64x64 default).
Eval every 1,000 env steps, 10 deterministic episodes; cap 15 min.
Also times a "oneshot" run (whole budget in one jitted train(), rejax's own
128-episode stochastic evals every eval_freq=100 steps) for reference.
Run: python experiments/peers/ttt_sac_pendulum_rejax.py [--seeds 0,1] [--no-oneshot]   (venv $PEERS_HOME/venv-rejax)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _ttt_rejax import main

CONFIG = dict(env="Pendulum-v1", agent_kwargs=dict(activation="swish"), num_envs=1,
              buffer_size=10_000, fill_buffer=256, batch_size=256, learning_rate=0.01,
              num_epochs=1, total_timesteps=10_000, eval_freq=100, gamma=0.99, polyak=0.98,
              target_entropy_ratio=None, normalize_observations=True)

if __name__ == "__main__":
    main(algo="sac", config=CONFIG, threshold=-200.0, eval_every=1_000, cap_s=900.0)
