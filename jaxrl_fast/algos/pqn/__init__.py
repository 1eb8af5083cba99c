"""PQN (Gallici et al. 2024): `config` (its flags), `losses` (the Q regression, pure), `learner` (the
bundle a schedule drives)."""
