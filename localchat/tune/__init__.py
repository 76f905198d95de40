"""The auto-tune wizard: probe, plan, fetch, measure on the real runtime, keep the best, save a profile."""
