"""HTTP layer: FastAPI app, routes, error rendering, lifespan."""
