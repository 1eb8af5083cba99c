"""Time-to-threshold: sbx (JAX) SAC, Pendulum-v1, mean eval return >= -200.

Hyperparameters: rl-baselines3-zoo 2.9.2 hyperparams/sac.yml, Pendulum-v1 entry
(n_timesteps 20000, MlpPolicy, learning_rate 1e-3; everything else library
default: buffer 1e6, learning_starts 100, batch 256, tau 0.005, gamma 0.99,
train_freq 1, gradient_steps 1, ent_coef auto, net [256, 256]). One env.
Eval every 1,000 env steps, 10 deterministic episodes; cap 15 min.
Run: python experiments/peers/ttt_sac_pendulum_sbx.py [--seeds 0,1]   (venv $PEERS_HOME/venv-peers)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _ttt_sb3family import main

HYPER = dict(learning_rate=1e-3)

if __name__ == "__main__":
    main(lib="sbx", algo="SAC", env_id="Pendulum-v1", n_envs=1, n_timesteps=20_000,
         hyper=HYPER, threshold=-200.0, eval_every=1_000, cap_s=900.0)
