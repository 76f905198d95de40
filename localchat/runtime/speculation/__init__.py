"""Speculative decoding: the drafters (a draft model, prompt lookup), the check inside the batched step, and what an acceptance rate yields."""
