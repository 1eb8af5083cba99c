"""Time-to-threshold: rejax PQN on gymnax CartPole-v1, mean eval return >= 475.

Config: rejax repository configs/gymnax/cartpole.yaml, `pqn` entry (num_envs 16,
num_steps 128, num_minibatches 16, max_grad_norm 10, lr 3e-4, num_epochs 5,
total_timesteps 524,288, eps 1 -> 0.05 over 0.5 of the budget, gamma 0.99,
td_lambda 0.9; net 64x64 default).
Eval every 4,096 env steps (two of its 2,048-step iterations), 10 greedy episodes;
cap 15 min.
Also times a "oneshot" run (whole budget in one jitted train(), rejax's own
128-episode evaluations every eval_freq=16,384 steps) for reference.
Run: python experiments/peers/ttt_pqn_cartpole_rejax.py [--seeds 0,1] [--no-oneshot]   (venv $PEERS_HOME/venv-rejax)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _ttt_rejax import main

CONFIG = dict(env="CartPole-v1", num_envs=16, num_steps=128, num_minibatches=16, max_grad_norm=10,
              learning_rate=0.0003, num_epochs=5, total_timesteps=524_288, eval_freq=16_384, eps_start=1,
              eps_end=0.05, exploration_fraction=0.5, gamma=0.99, td_lambda=0.9, normalize_observations=False)

if __name__ == "__main__":
    main(algo="pqn", config=CONFIG, threshold=475.0, eval_every=4_096, cap_s=900.0)
