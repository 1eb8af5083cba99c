"""SAC (Haarnoja et al. 2018): `config` (its flags), `losses` (policy and temperature, pure), `learner`
(the bundle a schedule drives; its critics are `jaxrl_fast.algos.twin_critic`'s)."""
