"""Planning, pure: one placement vocabulary (placements), one memory-fit model (fit), the cost model
(cost), GPTQ checkpoints' options (gptq_options), the planner (planner) and the launch's choice of
layout (choose). Imports only models/, the runtimes (runtime/, gptq/), hardware/ and errors: nothing
of the wizard, the settings or the applications above it. Light to import: config reads its
placements (submodules are imported where used)."""
