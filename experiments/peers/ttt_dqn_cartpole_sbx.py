"""Time-to-threshold: sbx (JAX) DQN, CartPole-v1, mean eval return >= 475.

Hyperparameters: rl-baselines3-zoo 2.9.2 hyperparams/dqn.yml, CartPole-v1 entry
(n_timesteps 5e4, learning_rate 2.3e-3, batch_size 64, buffer_size 100000,
learning_starts 1000, gamma 0.99, target_update_interval 10, train_freq 256,
gradient_steps 128, exploration_fraction 0.16, exploration_final_eps 0.04,
net_arch [256, 256]). One env. Eval every 2,500 env steps, 10 deterministic
episodes; cap 10 min. If the zoo budget ends below threshold, training
continues past it (epsilon stays at its final 0.04) until threshold or cap.
Run: python experiments/peers/ttt_dqn_cartpole_sbx.py [--seeds 0,1]   (venv $PEERS_HOME/venv-peers)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _ttt_sb3family import main

HYPER = dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
             gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
             exploration_fraction=0.16, exploration_final_eps=0.04,
             policy_kwargs="dict(net_arch=[256, 256])")

if __name__ == "__main__":
    main(lib="sbx", algo="DQN", env_id="CartPole-v1", n_envs=1, n_timesteps=50_000,
         hyper=HYPER, threshold=475.0, eval_every=2_500, cap_s=600.0,
         continue_past_budget=True)
