"""The generation runtime: the engine's core here (engine, step, scheduler, sequences, sampling), its parts in
workers/, speculation/, constraints/, kv/, backends/ and templates/ (docs/architecture.md, "Inside runtime/ and ui/")."""
