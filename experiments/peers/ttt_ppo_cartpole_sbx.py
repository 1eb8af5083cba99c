"""Time-to-threshold: sbx (JAX) PPO, CartPole-v1, mean eval return >= 475.

Hyperparameters: rl-baselines3-zoo 2.9.2 hyperparams/ppo.yml, CartPole-v1 entry
(n_envs 8, n_timesteps 1e5, n_steps 32, batch_size 256, gae_lambda 0.8,
gamma 0.98, n_epochs 20, ent_coef 0.0, learning_rate lin_0.001, clip_range lin_0.2).
Eval every 5,000 env steps, 10 deterministic episodes; cap 15 min.
Run: python experiments/peers/ttt_ppo_cartpole_sbx.py [--seeds 0,1]   (venv $PEERS_HOME/venv-peers)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _ttt_sb3family import main

HYPER = dict(n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
             ent_coef=0.0, learning_rate="lin_0.001", clip_range="lin_0.2")

if __name__ == "__main__":
    main(lib="sbx", algo="PPO", env_id="CartPole-v1", n_envs=8, n_timesteps=100_000,
         hyper=HYPER, threshold=475.0, eval_every=5_000, cap_s=900.0)
