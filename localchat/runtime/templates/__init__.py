"""What a model's chat template says: the prompt it renders in a bounded sandbox, and whether and how the model thinks."""
