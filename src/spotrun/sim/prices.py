"""The prices the simulator assumes when none are given: the paper's, an AWS p3.2xlarge's ($/h), apart from the
simulator so that `spotrun simulate --help` tells them without importing it."""

P3_2XLARGE_ON_DEMAND = 3.06
P3_2XLARGE_SPOT = 0.9731
