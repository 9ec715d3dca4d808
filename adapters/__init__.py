"""Backend adapters: one per inference server kind; Prompt → async stream of Chunks."""
