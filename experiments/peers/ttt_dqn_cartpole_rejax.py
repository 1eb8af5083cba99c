"""Time-to-threshold: rejax DQN on gymnax CartPole-v1, mean eval return >= 475.

Config: rejax repository configs/gymnax/cartpole.yaml, `dqn` entry (DuelingQNetwork,
swish, num_envs 10, buffer 50k, fill_buffer 5,000, batch 100, max_grad_norm 10,
lr 1e-3, num_epochs 5, total_timesteps 100k, polyak 0.98, eps 1 -> 0.05 over 0.5
of the budget, gamma 0.99, ddqn; net 64x64 default).
Eval every 2,500 env steps, 10 greedy episodes; cap 15 min.
Also times a "oneshot" run (whole budget in one jitted train(), rejax's own
128-episode evaluations every eval_freq=2,500 steps) for reference.
Run: python experiments/peers/ttt_dqn_cartpole_rejax.py [--seeds 0,1] [--no-oneshot]   (venv $PEERS_HOME/venv-rejax)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _ttt_rejax import main

CONFIG = dict(env="CartPole-v1", agent="DuelingQNetwork", agent_kwargs=dict(activation="swish"), num_envs=10,
              buffer_size=50_000, fill_buffer=5_000, batch_size=100, max_grad_norm=10, learning_rate=0.001,
              num_epochs=5, total_timesteps=100_000, eval_freq=2_500, polyak=0.98, eps_start=1, eps_end=0.05,
              exploration_fraction=0.5, gamma=0.99, ddqn=True, normalize_observations=False)

if __name__ == "__main__":
    main(algo="dqn", config=CONFIG, threshold=475.0, eval_every=2_500, cap_s=900.0)
