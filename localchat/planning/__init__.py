"""Planning, pure: one placement vocabulary (placements), one memory-fit model (fit), what a layout sees
(site), the cost model (cost), GPTQ checkpoints' options (gptq_options), the planner (planner) and the
launch's arrangement of workers (choose). Imports only models/, runtime/'s llama.cpp-free modules
(worker_types, acceptance), gptq/'s torch-free facts, hardware/ and errors: nothing of the wizard, the
settings or the applications above it, and nothing that loads llama.cpp (tests/test_layout.py checks).
Light to import: config reads its placements (submodules are imported where used)."""
