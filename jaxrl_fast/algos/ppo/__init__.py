"""PPO (Schulman et al. 2017): `config` (its flags), `losses` (the clipped surrogate, pure), `learner`
(the bundle a schedule drives)."""
