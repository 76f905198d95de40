"""The generation runtime: engine, scheduler, workers."""
