"""The runtime's shares: the prime field, vectorised modular arithmetic, Shamir sharing and reconstruction, exact
integer reductions, and the cryptographic generators every secret share is drawn from."""
