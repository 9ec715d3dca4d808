"""Open Responses: ingest, the event encoder (the resource is its fold), the service (context,

storage, retrieve, cancel), routes.
"""
