"""Request ingestion: API request bodies → internal Conversation + GenerationParams."""
