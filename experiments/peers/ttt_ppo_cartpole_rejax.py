"""Time-to-threshold: rejax PPO on gymnax CartPole-v1, mean eval return >= 475.

Config: rejax repository configs/gymnax/cartpole.yaml, `ppo` entry (tanh,
num_envs 5, num_steps 100, num_epochs 5, num_minibatches 5, lr 7.5e-4,
max_grad_norm 0.5, total_timesteps 100k, gamma 0.99, gae_lambda 0.95,
clip_eps 0.2, ent_coef 0.01, vf_coef 0.5; net 64x64 default).
Eval every 5,000 env steps, 10 deterministic episodes; cap 15 min.
Also times a "oneshot" run (whole budget in one jitted train(), rejax's own
128-episode stochastic evals every eval_freq=1000 steps) for reference.
Run: python experiments/peers/ttt_ppo_cartpole_rejax.py [--seeds 0,1] [--no-oneshot]   (venv $PEERS_HOME/venv-rejax)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _ttt_rejax import main

CONFIG = dict(env="CartPole-v1", agent_kwargs=dict(activation="tanh"), num_envs=5,
              num_steps=100, num_epochs=5, num_minibatches=5, learning_rate=0.00075,
              max_grad_norm=0.5, total_timesteps=100_000, eval_freq=1000, gamma=0.99,
              gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5)

if __name__ == "__main__":
    main(algo="ppo", config=CONFIG, threshold=475.0, eval_every=5_000, cap_s=900.0)
