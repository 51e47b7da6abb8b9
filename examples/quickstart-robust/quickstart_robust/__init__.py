"""quickstart-robust: a Flower app using fedcal's robust strategies."""
