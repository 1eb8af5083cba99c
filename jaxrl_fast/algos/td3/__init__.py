"""TD3 (Fujimoto et al. 2018): `config` (its flags), `losses` (the deterministic policy's, pure),
`learner` (the bundle a schedule drives; its critics are `jaxrl_fast.algos.twin_critic`'s)."""
