"""Who is calling: bearer tokens, identities, and the interceptor that enforces them."""
