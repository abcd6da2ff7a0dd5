"""One reader per top-level section of the configuration file.

Each module holds what one section may contain (its element specs and allowed values) and
the function that turns the section's element into its part of the model. A reader checks
everything that concerns its section alone; contradictions *between* sections (the shared
address, authentication against users, message size against the client buffer) are
checked by :mod:`spool.server.config.build`, which is why some readers also return the elements
those checks report at. New sections (SOW, Replication, Bootstrap, Actions) land here as
new modules.
"""
